"""``rerank.provider: "http"``: a Jina/Cohere-style ``/rerank`` endpoint.

``POST <rerank.baseUrl>/rerank`` (the URL as given when it already ends in ``/rerank``) with
``{model, query, documents, top_n}`` and ``Authorization: Bearer <rerank.apiKey>``; the answer
is ``{results: [{index, relevance_score}]}`` (Jina, Cohere, llama.cpp's ``llama-server
--reranking``; :func:`~pipeline.search.rerank_wire.scores_from_answer`). ``model`` is sent
only when set (llama.cpp's server has one model).

The key lives only in the client's headers. Every failure becomes a
:class:`~pipeline.search.rerank_wire.RerankFailed` whose reason names the endpoint without its
user-info or query string, and never the key: a refused key (401/403) says so without the
server's text, and other error text is scrubbed of the key and of key-looking strings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import httpx

from pipeline.config import RerankSettings
from pipeline.embeddings.http import Scrubber, shown_url
from pipeline.embeddings.remote import resolve_api_key
from pipeline.errors import MissingApiKey, RerankFailed
from pipeline.search.rerank_wire import scores_from_answer

MAX_REASON_CHARS = 200


def endpoint(base_url: str) -> str:
    """The URL to post to: ``base_url`` + ``/rerank``, unless it already ends so."""
    base = base_url.rstrip("/")
    return base if base.endswith("/rerank") else base + "/rerank"


def rerank_key(settings: RerankSettings, env: Mapping[str, str] | None = None) -> str | None:
    """``rerank.apiKey`` resolved as ``remote.apiKey`` is (a key, ``${VAR}``, a variable name,
    or a SecretRef's variable); None when none is configured. Raises :class:`RerankFailed`
    ("key") naming the unset variable, never a key."""
    env = os.environ if env is None else env
    try:
        key = resolve_api_key((), configured=settings.api_key, configured_env=settings.api_key_env,
                              env=env, where="rerank.apiKey")
    except MissingApiKey as exc:
        raise RerankFailed("key", str(exc)) from None
    if settings.api_key_env and not key:
        raise RerankFailed("key", f"rerank.apiKey names the variable {settings.api_key_env}, "
                                  "which is not set in the environment")
    return key


class HttpScorer:
    """One ``/rerank`` endpoint: a pooled client with the key in its headers."""

    provider = "http"

    def __init__(self, settings: RerankSettings, env: Mapping[str, str] | None = None) -> None:
        if not settings.base_url:
            raise RerankFailed("key", "rerank.baseUrl is not set")
        key = rerank_key(settings, env)
        self.model = settings.model
        self.url = endpoint(settings.base_url)
        self.timeout_s = settings.timeout_ms / 1000
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._scrub = Scrubber([key])
        self._client = httpx.Client(headers=headers, timeout=self.timeout_s,
                                    follow_redirects=False)

    def __repr__(self) -> str:
        return f"HttpScorer({shown_url(self.url)!r}, model={self.model!r})"

    def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        """One relevance score per document (see :func:`scores_from_answer`)."""
        body: dict[str, object] = {"query": query, "documents": list(documents),
                                   "top_n": len(documents)}
        if self.model:
            body["model"] = self.model
        where = f"POST {shown_url(self.url)}"
        try:
            response = self._client.post(self.url, json=body)
        except httpx.TimeoutException:
            raise RerankFailed("timeout", f"{where}: no answer within "
                                          f"{self.timeout_s * 1000:g} ms") from None
        except httpx.TransportError as exc:
            raise RerankFailed("connection", self._short(f"{where}: {exc}")) from None
        status = response.status_code
        if status in (401, 403):
            raise RerankFailed("refused", f"{where}: HTTP {status}: the endpoint refused the "
                                          "credentials (check rerank.apiKey)")
        if status >= 300:
            raise RerankFailed("http", self._short(f"{where}: HTTP {status}: {response.text}"))
        try:
            data = response.json()
        except ValueError:
            raise RerankFailed("json", f"{where}: the answer is not JSON "
                                       f"({len(response.content)} bytes)") from None
        return scores_from_answer(data, len(documents))

    def _short(self, text: str) -> str:
        return self._scrub(" ".join(text.split()))[:MAX_REASON_CHARS]

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()
