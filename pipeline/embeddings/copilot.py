"""GitHub Copilot embeddings, as OpenClaw 2026.9.6's github-copilot plugin makes them.

1. **Token check** (OpenClaw's ``resolveCopilotRuntimeAuth``): ``GET
   https://api.<domain>/copilot_internal/user`` with ``Authorization: Bearer <GitHub token>``
   and ``Accept: application/json``. A refusal fails with "Copilot authentication failed: HTTP
   <status>". The answer's ``endpoints.api`` is the Copilot API base (it must be ``https`` on
   ``*.githubcopilot.com``, ``copilot-proxy.githubusercontent.com`` or, for a GHE tenant, the
   tenant's domain); without one, ``https://api.individual.githubcopilot.com`` (``github.com``)
   or ``https://copilot-api.<domain>``. 2026.9.6 then uses the GitHub token itself as the
   Copilot bearer (the older ``/copilot_internal/v2/token`` exchange is no longer called).
2. **Model discovery**: ``GET <api>/models``; the embedding models are those whose
   ``supported_endpoints`` name embeddings or whose id says "embedding". A configured model
   must be one of them; else text-embedding-3-small, -3-large, ada-002, the first found.
3. **Embeddings**: ``POST <api>/embeddings {model, input}``, answered OpenAI's way.

Steps 2 and 3 send OpenClaw's Copilot headers: ``Editor-Version``, ``Editor-Plugin-Version``,
``User-Agent``, ``Accept-Encoding: identity``, ``Openai-Organization: github-copilot``,
``Copilot-Integration-Id`` (``copilot-developer-cli`` unless ``remote.headers`` names one),
``Content-Type`` and the user's ``remote.headers``.

The GitHub token: ``remote.apiKey``, else ``COPILOT_GITHUB_TOKEN``. ``remote.baseUrl`` skips
step 1 and needs ``remote.apiKey`` (OpenClaw's rule). The domain: ``COPILOT_GITHUB_DOMAIN``
(``github.com`` or a ``*.ghe.com`` tenant; anything else means ``github.com``).

Steps 1 and 2 run at the first embedding (memq builds providers without network calls) and
their outcome is kept for the provider's life; a 401 from the embeddings endpoint (a revoked
token) drops it, so the next attempt checks the token again. The model is fixed when the
provider is built (it is part of every job's spec): with none configured it is
text-embedding-3-small, and an account that does not serve it is told to name one.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlsplit

import httpx

from pipeline.embeddings.http import (
    MAX_MESSAGE_CHARS,
    HttpClient,
    Scrubber,
    error_for_response,
    shown_url,
)
from pipeline.embeddings.openai import parse_openai_data
from pipeline.embeddings.remote import RemoteProvider
from pipeline.errors import (
    EmbeddingError,
    MissingApiKey,
    ProviderRefused,
    ProviderRetryable,
    ProviderUnavailable,
)

__all__ = ["CopilotProvider", "copilot_domain"]

TOKEN_ENV = "COPILOT_GITHUB_TOKEN"
DOMAIN_ENV = "COPILOT_GITHUB_DOMAIN"
PUBLIC_DOMAIN = "github.com"
DEFAULT_API_BASE = "https://api.individual.githubcopilot.com"
#: Where the GitHub token is checked (``{domain}`` filled in).
GITHUB_API_TEMPLATE = "https://api.{domain}"
PREFERRED_MODELS = ("text-embedding-3-small", "text-embedding-3-large", "text-embedding-ada-002")
INTEGRATION_ID = "copilot-developer-cli"
#: OpenClaw's ``buildCopilotIdeHeaders`` (copilot-dynamic-headers.ts).
IDE_HEADERS = {"Accept-Encoding": "identity", "Editor-Version": "vscode/1.107.0",
               "Editor-Plugin-Version": "copilot-chat/0.35.0",
               "User-Agent": "GitHubCopilotChat/0.35.0"}
AUTH_TIMEOUT_S = 30.0
MODELS_TIMEOUT_S = 10.0
_GHE_RE = re.compile(r"^[a-z0-9-]+\.ghe\.com$")
_PREFIX = "github-copilot/"


def copilot_domain(env: Mapping[str, str]) -> str:
    """``COPILOT_GITHUB_DOMAIN`` when it is ``github.com`` or a ``*.ghe.com`` tenant, else
    ``github.com``."""
    raw = (env.get(DOMAIN_ENV) or "").strip().lower()
    return raw if raw and re.fullmatch(r"[a-z0-9.-]+", raw) and _GHE_RE.match(raw) else \
        PUBLIC_DOMAIN


def _api_fallback(domain: str) -> str:
    return DEFAULT_API_BASE if domain == PUBLIC_DOMAIN else f"https://copilot-api.{domain}"


def normalise_copilot_model(model: str | None) -> str:
    """The model without a ``github-copilot/`` prefix; text-embedding-3-small when empty."""
    text = (model or "").strip()
    return (text.removeprefix(_PREFIX) or text) if text else PREFERRED_MODELS[0]


@dataclass(frozen=True, repr=False)
class _Session:
    """What the token check found: the Copilot API base and a client for it."""

    base_url: str
    http: HttpClient


class CopilotProvider(RemoteProvider):
    """The Copilot API's OpenAI-shaped ``/embeddings``, after the GitHub token check."""

    name = "github-copilot"
    default_model = PREFERRED_MODELS[0]
    default_base_url = DEFAULT_API_BASE
    env_keys = (TOKEN_ENV,)
    known_dims: ClassVar[dict[str, int]] = {"text-embedding-3-small": 1536,
                                            "text-embedding-3-large": 3072,
                                            "text-embedding-ada-002": 1536}

    def __init__(self, model: str | None = None, *, github_token: str | None,
                 base_url: str | None = None, explicit_token: bool = False,
                 headers: Mapping[str, str] | None = None, domain: str = PUBLIC_DOMAIN,
                 model_configured: bool | None = None, timeout: float | None = None,
                 github_api: str | None = None) -> None:
        if not github_token:
            raise MissingApiKey(f"{self.name}: No GitHub token available for Copilot embedding "
                                f"provider (set remote.apiKey or {TOKEN_ENV})")
        if base_url and not explicit_token:
            raise ProviderUnavailable("GitHub Copilot memory custom baseUrl requires an explicit "
                                      "memory.search.remote.apiKey")
        self.domain = domain
        self._custom_base = bool(base_url)
        self.default_base_url = _api_fallback(domain)  # type: ignore[misc]
        super().__init__(normalise_copilot_model(model),
                         base_url=base_url or self.default_base_url, headers=headers,
                         timeout=timeout, key_required=False)
        integration = next((v for k, v in self._headers.items()
                            if k.lower() == "copilot-integration-id"), INTEGRATION_ID)
        user_headers = {k: v for k, v in self._headers.items()
                        if k.lower() != "copilot-integration-id"}
        self.has_key = True
        self._token = github_token
        self._model_configured = bool(model and model.strip()) if model_configured is None \
            else model_configured
        self._api_headers = {**IDE_HEADERS, "Openai-Organization": "github-copilot",
                             "Content-Type": "application/json", **user_headers,
                             "Copilot-Integration-Id": integration}
        self._scrub = Scrubber([github_token])
        self._lock = threading.Lock()
        self._session: _Session | None = None
        #: Where the GitHub token is checked (``github_api``: a stand-in, for tests).
        self.github_api = (github_api or GITHUB_API_TEMPLATE.format(domain=domain)).rstrip("/")

    def _key_extra(self) -> dict[str, Any]:
        return {"domain": self.domain} if self.domain != PUBLIC_DOMAIN else {}

    def close(self) -> None:
        super().close()
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            session.http.close()

    # -- the token check and model discovery ------------------------------------------------

    def _get(self, client: httpx.Client, url: str, headers: Mapping[str, str], what: str,
             timeout: float, *, token_check: bool = False) -> Any:
        """GET ``url``'s JSON; a refusal of the token check says so as OpenClaw does."""
        where = f"{self.name}: {what} (GET {shown_url(url)})"
        try:
            response = client.get(url, headers=dict(headers), timeout=timeout)
        except httpx.TimeoutException:
            raise ProviderRetryable(f"{where}: timed out after {timeout:g} s") from None
        except httpx.TransportError as exc:
            raise ProviderRetryable(f"{where}: connection error: "
                                    f"{self._scrub(str(exc))[:MAX_MESSAGE_CHARS]}") from None
        if response.status_code >= 300:
            error = error_for_response(where, response, self._scrub)
            if response.status_code in (401, 403) and token_check:
                advice = (" Run `openclaw models auth login-github-copilot` to authenticate "
                          "again, and check that the account has Copilot access"
                          if response.status_code == 403 else "")
                raise ProviderRefused(f"Copilot authentication failed: HTTP "
                                      f"{response.status_code}.{advice} ({error})")
            raise error
        try:
            return response.json()
        except ValueError:
            raise ProviderRetryable(f"{where}: the answer is not valid JSON") from None

    def _api_base(self, user: Any) -> str:
        """``endpoints.api`` of the token check's answer, when it is trusted."""
        if not isinstance(user, dict):
            raise EmbeddingError("Unexpected response from GitHub Copilot user endpoint")
        endpoints = user.get("endpoints")
        api = endpoints.get("api") if isinstance(endpoints, dict) else None
        if api in (None, ""):
            return _api_fallback(self.domain)
        try:
            parts = urlsplit(api) if isinstance(api, str) else None
            host = (parts.hostname or "").lower() if parts else ""
        except ValueError:
            parts, host = None, ""
        if parts is None or not host:
            raise EmbeddingError("GitHub Copilot user response has an invalid endpoints.api URL")
        if (parts.scheme != self._trusted_scheme() or parts.username or parts.password
                or parts.query or parts.fragment or not self._trusted_host(host)):
            raise ProviderRefused("GitHub Copilot user response has an untrusted endpoints.api "
                                  f"URL ({shown_url(api)})")
        return api.rstrip("/")

    def _trusted_scheme(self) -> str:
        return urlsplit(self.github_api).scheme if self._checking_elsewhere() else "https"

    def _checking_elsewhere(self) -> bool:
        return self.github_api != GITHUB_API_TEMPLATE.format(domain=self.domain)

    def _trusted_host(self, host: str) -> bool:
        if host == "copilot-proxy.githubusercontent.com" or host.endswith(".githubcopilot.com"):
            return True
        if self._checking_elsewhere():  # a stand-in GitHub API vouches for its own host
            return host == (urlsplit(self.github_api).hostname or "").lower()
        return self.domain != PUBLIC_DOMAIN and (host == self.domain
                                                 or host.endswith(f".{self.domain}"))

    def _open(self) -> _Session:
        """Check the token, find the API base, check the model: the session for this life."""
        with httpx.Client(follow_redirects=False) as client:
            if self._custom_base:
                base = self.base_url
            else:
                user = self._get(client, f"{self.github_api}/copilot_internal/user",
                                 {"Accept": "application/json",
                                  "Authorization": f"Bearer {self._token}"},
                                 "GitHub token check", AUTH_TIMEOUT_S, token_check=True)
                base = self._api_base(user)
            headers = {**self._api_headers, "Authorization": f"Bearer {self._token}"}
            listing = self._get(client, f"{base}/models", headers, "model discovery",
                                MODELS_TIMEOUT_S)
        self._check_model(_embedding_models(listing))
        return _Session(base, HttpClient(self.name, base, headers, timeout=self._batch_timeout,
                                         secrets=[self._token]))

    def _check_model(self, available: list[str]) -> None:
        if not available:
            raise ProviderRefused(f"{self.name}: No embedding models available from GitHub "
                                  "Copilot")
        if self.model in available:
            return
        if self._model_configured:
            raise ProviderRefused(f'{self.name}: GitHub Copilot embedding model "{self.model}" '
                                  f"is not available. Available: {', '.join(available)}")
        raise ProviderRefused(f"{self.name}: this account does not serve {self.model}; set "
                              f"model to one of: {', '.join(available)}")

    def _current(self) -> _Session:
        with self._lock:
            if self._session is None:
                self._session = self._open()
            return self._session

    def _forget(self, session: _Session) -> None:
        with self._lock:
            if self._session is session:
                self._session = None
        session.http.close()

    # -- requests ---------------------------------------------------------------------------

    def _embed_request(self, texts: Sequence[Any], kind: str, timeout: float) -> list[Any]:
        session = self._current()
        try:
            body = session.http.post_json("/embeddings", {"model": self.model,
                                                          "input": list(texts)},
                                          timeout=timeout)
        except ProviderRefused:
            self._forget(session)  # the token may have been revoked: check it again next time
            raise
        return parse_openai_data(self.name, body)

    def __repr__(self) -> str:
        return f"CopilotProvider(model={self.model!r}, domain={self.domain!r})"


def _embedding_models(payload: Any) -> list[str]:
    """The ids of ``GET /models``'s ``data[]`` that serve embeddings."""
    data = payload.get("data") if isinstance(payload, dict) else None
    found = []
    for entry in data if isinstance(data, list) else ():
        ident = entry.get("id").strip() if isinstance(entry, dict) and isinstance(
            entry.get("id"), str) else ""
        if not ident:
            continue
        endpoints = entry.get("supported_endpoints")
        names = [e for e in endpoints if isinstance(e, str)] if isinstance(endpoints, list) else []
        if any("embeddings" in e for e in names) or re.search(r"\bembedding", ident, re.I):
            found.append(ident)
    return found
