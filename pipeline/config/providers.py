"""``models.providers.<id>`` of an openclaw.json: the credentials, endpoint and headers OpenClaw's
memory embeddings inherit from the model provider entries (OpenClaw 2026.9.6,
``resolveApiKeyForProvider`` and the embedding adapters).

memq reads the entries of the providers it embeds with: ``openai``, ``google`` (for gemini),
``voyage``, ``mistral`` and ``ollama`` (ids match case-insensitively, as OpenClaw's do), and
only ``apiKey``, ``baseUrl``, ``headers`` and ``auth`` of them. Everything else in ``models``
is ignored. An ``apiKey`` is kept as written (``"sk-…"``, ``"${VAR}"``, a variable name or a
SecretRef): the providers module resolves it against each process's own environment, so a
worker resolves it from its own, and nothing secret travels in a message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.config.errors import Invalid, show
from pipeline.config.redact import REDACTED, Headers, redact_url

#: memq's provider name -> the ``models.providers`` id OpenClaw reads for it.
PROVIDER_IDS: dict[str, str] = {"openai": "openai", "gemini": "google", "voyage": "voyage",
                                "mistral": "mistral", "ollama": "ollama"}
#: SecretRef sources OpenClaw knows; memq reads ``env`` ones (the others need OpenClaw's
#: secrets runtime, and a provider whose key is one says so when it is used).
SECRET_SOURCES = ("env", "file", "exec")


@dataclass(frozen=True, repr=False)
class ProviderEntry:
    """What memq uses of one ``models.providers.<id>`` entry.

    ``api_key`` is the literal text (a key, ``${VAR}`` or a variable name), ``api_key_env`` the
    variable of an ``{source: "env", id}`` SecretRef, ``api_key_source`` the source of a
    SecretRef memq cannot read (``file``, ``exec``). ``auth = "api-key"`` makes the entry's
    key win over the environment, as in OpenClaw. The repr never shows the key.
    """

    path: str  # "models.providers.openai", for messages
    api_key: str | None = None
    api_key_env: str | None = None
    api_key_source: str | None = None
    base_url: str | None = None
    headers: Headers = field(default_factory=Headers)
    auth: str | None = None

    @property
    def has_key(self) -> bool:
        return bool(self.api_key or self.api_key_env or self.api_key_source)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, with the key as ``***`` and auth-like header values hidden."""
        return {"apiKey": REDACTED if self.has_key else None, "baseUrl": redact_url(self.base_url),
                "headers": self.headers.redacted(), "auth": self.auth}

    def __repr__(self) -> str:
        return f"ProviderEntry({self.path}, {self.to_json()!r})"


def parse_model_providers(raw: Any, check_url: Any, check_headers: Any
                          ) -> dict[str, ProviderEntry]:
    """The entries memq uses from ``models.providers``, by memq provider name.

    ``check_url`` and ``check_headers`` are the key checks of :mod:`pipeline.config.keys`
    (passed in to keep this module below it). Raises :class:`Invalid` naming the key.
    """
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise Invalid("models.providers", "must be an object of provider entries", show(raw))
    by_id = {str(k).lower(): (str(k), v) for k, v in raw.items()}
    out: dict[str, ProviderEntry] = {}
    for name, ident in PROVIDER_IDS.items():
        if ident not in by_id:
            continue
        written, value = by_id[ident]
        path = f"models.providers.{written}"
        if not isinstance(value, Mapping):
            raise Invalid(path, "must be an object", show(value))
        kwargs: dict[str, Any] = {"path": path}
        kwargs.update(_api_key(path, value.get("apiKey")))
        if value.get("baseUrl") not in (None, ""):
            kwargs["base_url"] = check_url(f"{path}.baseUrl", value["baseUrl"])
        if value.get("headers") is not None:
            kwargs["headers"] = check_headers(f"{path}.headers", value["headers"])
        auth = value.get("auth")
        if auth is not None and not isinstance(auth, str):
            raise Invalid(f"{path}.auth", "must be a string", show(auth))
        kwargs["auth"] = auth
        out[name] = ProviderEntry(**kwargs)
    return out


def _api_key(path: str, value: Any) -> dict[str, Any]:
    """A string (kept as written) or a SecretRef ``{source, provider?, id}``; never echoed."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, str):
        return {"api_key": value.strip()}
    if isinstance(value, Mapping):
        source, ident = value.get("source"), value.get("id")
        if source in SECRET_SOURCES and isinstance(ident, str) and ident.strip():
            if source == "env":
                return {"api_key_env": ident.strip()}
            return {"api_key_source": source}
        raise Invalid(f"{path}.apiKey", 'must be a string or a SecretRef {source: "env", id: '
                                        '"VARIABLE"}', None)
    raise Invalid(f"{path}.apiKey", "must be a string", None)
