"""Which credentials apply to an embedding destination, as OpenClaw 2026.9.6 decides it.

OpenClaw's ``resolveRemoteEmbeddingBearerClient`` (openai, and custom ``models.providers`` ids
it serves) and ``resolveGeminiEmbeddingClient`` (gemini): the destination is
``remote.baseUrl``, else the entry's ``baseUrl``, else the provider's default. The provider
*owns* the destination when it is the entry's endpoint (or the default), compared as
``scheme://host:port/path?query`` with the host in lower case, the scheme's default port
filled in and a trailing slash dropped (``normalizeEmbeddingDestinationKey``). Then:

- an ``Authorization`` header (``remote.headers``, or the entry's headers where it owns the
  destination) is the credential, and no key is sent (openai only);
- else ``remote.apiKey`` applies anywhere;
- else, where the provider owns the destination, its usual key (the environment, the entry);
- else nothing applies: :class:`~pipeline.errors.CredentialsNotConfigured`, before any request.

The other adapters (openai-compatible, lmstudio, ollama: a key is optional) are not refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from pipeline.errors import CredentialsNotConfigured

#: The adapters OpenClaw refuses a destination without credentials for: the label its message
#: names (None: the provider's id) and its advice.
REFUSING: dict[str, tuple[str | None, str]] = {
    "openai": (None, "Set memory.search.remote.apiKey or an Authorization header for this "
                     "destination."),
    "gemini": ("Google", "Set memory.search.remote.apiKey for this destination."),
}
#: The adapters whose Authorization header counts as the credential.
HEADER_AUTH = ("openai",)


def destination_key(url: str) -> str | None:
    """``url`` as OpenClaw compares destinations, or None when it is no URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    port = port or (443 if parts.scheme == "https" else 80)
    path = "" if parts.path == "/" else parts.path.removesuffix("/")
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme}://{parts.hostname.lower()}:{port}{path}{query}"


def owns_destination(base_url: str, provider_base_url: str) -> bool:
    """Whether the provider's own endpoint (``provider_base_url``: its entry's or the default)
    is ``base_url``, where its environment key and entry belong."""
    key = destination_key(base_url)
    return key is not None and key == destination_key(provider_base_url)


def has_authorization(headers: Mapping[str, str]) -> bool:
    """An ``Authorization`` header with a value, in any case."""
    return any(name.lower() == "authorization" and value.strip()
               for name, value in headers.items())


def check_credentials(adapter: str, provider_id: str, base_url: str, *, api_key: str | None,
                      headers: Mapping[str, str]) -> None:
    """Raise :class:`CredentialsNotConfigured` when ``adapter`` refuses ``base_url`` without
    ``api_key`` (already resolved for this destination) or an Authorization header."""
    if adapter not in REFUSING or api_key:
        return
    if adapter in HEADER_AUTH and has_authorization(headers):
        return
    from pipeline.embeddings.http import shown_url  # httpx: only when refusing

    label, advice = REFUSING[adapter]
    raise CredentialsNotConfigured(f"{label or provider_id} embedding credentials are not "
                                   f"configured for {shown_url(base_url)}. {advice}")
