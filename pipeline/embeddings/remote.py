"""What every remote provider shares: keys, endpoint, request packing, vector checks.

A provider module only says how one request looks on the wire (``_embed_request``); this base
class packs documents into requests of at most 8000 UTF-8 bytes (OpenClaw's budget; an
oversize text goes alone), checks that every answer has one vector per text and the model's
width, and L2-normalises every vector. OpenClaw stores OpenAI, Voyage and Mistral vectors raw;
memq normalises all of them because its vector index ranks by cosine distance and a zero or
odd-length vector must never rank above a real one.

The API key lives only inside the HTTP client's headers: never in a repr, a
:class:`~pipeline.embeddings.registry.ProviderSpec`, the provider key or an error message.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from pipeline.config import PROVIDER_IDS, ProviderEntry, is_sensitive_header
from pipeline.embeddings.base import DocumentInput, MediaInput, l2_normalise
from pipeline.embeddings.http import BATCH_TIMEOUT_S, QUERY_TIMEOUT_S, HttpClient, shown_url
from pipeline.embeddings.limits import HARD_MAX_INPUT_BYTES, max_input_bytes, normalise_model
from pipeline.errors import EmbeddingError, MissingApiKey

__all__ = ["RemoteProvider", "pack_requests", "remote_provider_key", "resolve_api_key"]

_ENV_NAME_RE = re.compile(r"^[A-Z][A-Z0-9_]*_(?:API_)?KEY$")
#: ``${VAR}`` in a configured key: OpenClaw's config substitution (upper-case names only).
_TEMPLATE_RE = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)\}")
#: Tokens a media part is counted as by the fleet rate limiter (Gemini bills an image 258
#: tokens per 768x768 tile and audio 32 tokens a second: a 4-tile image, a 32 s clip).
MEDIA_TOKEN_ESTIMATE = 1032


def input_tokens(item: DocumentInput) -> int:
    """A document's estimated tokens: UTF-8 bytes of its text (OpenClaw's estimate), plus
    :data:`MEDIA_TOKEN_ESTIMATE` for a media file (its bytes say little about its tokens)."""
    text = item.text if isinstance(item, MediaInput) else item
    return len(text.encode("utf-8")) + (MEDIA_TOKEN_ESTIMATE if isinstance(item, MediaInput)
                                         else 0)


def resolve_api_key(env_vars: Sequence[str], *, configured: str | None = None,
                    configured_env: str | None = None,
                    env: Mapping[str, str] | None = None,
                    entry: ProviderEntry | None = None,
                    where: str = "remote.apiKey") -> str | None:
    """The API key, in OpenClaw's order (2026.9.6, ``resolveApiKeyForProvider``):

    1. ``remote.apiKey`` (``configured``, or the variable of its SecretRef ``configured_env``);
    2. the ``models.providers.<id>.apiKey`` of ``entry`` when the entry says ``auth: "api-key"``;
    3. the provider's environment variables (``env_vars``);
    4. ``models.providers.<id>.apiKey`` otherwise.

    A configured key may be the key itself, ``${VAR}`` text (substituted from ``env``, as
    OpenClaw substitutes its config), the *name* of a variable (``"GEMINI_API_KEY"``), or a
    SecretRef ``{source: "env", id}``. A key that names an unset variable, or a SecretRef
    memq cannot read, raises :class:`MissingApiKey` saying which (never the key); ``where``
    names the configured key in that message (``rerank.apiKey`` for the reranker).
    """
    env = os.environ if env is None else env
    if configured:
        return _configured_key(configured, env, where)
    if configured_env:
        return (env.get(configured_env) or "").strip() or None
    if entry is not None and entry.auth == "api-key" and entry.has_key:
        return _entry_key(entry, env)
    for name in env_vars:
        value = (env.get(name) or "").strip()
        if value:
            return value
    if entry is not None and entry.has_key:
        return _entry_key(entry, env)
    return None


def _configured_key(text: str, env: Mapping[str, str], where: str) -> str:
    if _ENV_NAME_RE.match(text) and env.get(text):
        return env[text].strip()
    missing = [name for name in _TEMPLATE_RE.findall(text) if not env.get(name)]
    if missing:
        raise MissingApiKey(f"{where} uses ${{{missing[0]}}}, which is not set in the environment")
    return _TEMPLATE_RE.sub(lambda m: env[m.group(1)], text).strip()


def _entry_key(entry: ProviderEntry, env: Mapping[str, str]) -> str:
    where = f"{entry.path}.apiKey"
    if entry.api_key_source:
        raise MissingApiKey(f"{where} is a {entry.api_key_source!r} SecretRef, which memq cannot "
                            'read: use {source: "env", id: "VARIABLE"}, ${VARIABLE} or a key')
    if entry.api_key_env:
        value = (env.get(entry.api_key_env) or "").strip()
        if not value:
            raise MissingApiKey(f"{where} names the variable {entry.api_key_env}, which is not "
                                "set in the environment")
        return value
    assert entry.api_key is not None
    if _ENV_NAME_RE.match(entry.api_key) and not (env.get(entry.api_key) or "").strip():
        raise MissingApiKey(f"{where} names the variable {entry.api_key}, which is not set in "
                            "the environment")  # OpenClaw: an env-name marker, no key
    return _configured_key(entry.api_key, env, where)


def remote_provider_key(name: str, base_url: str, model: str, headers: Mapping[str, str],
                        extra: Mapping[str, Any] | None = None) -> str:
    """sha256 of endpoint, model and non-secret headers: the cache and index identity.

    Two API keys for the same endpoint and model share vectors, by design (OpenClaw does the
    same); the key itself is never part of it.
    """
    blob = {
        "provider": name,
        "baseUrl": shown_url(base_url),
        "model": model,
        "headers": {k.lower(): v for k, v in sorted(headers.items())
                    if not is_sensitive_header(k)},
        **dict(extra or {}),
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()


def pack_requests(texts: Sequence[DocumentInput], max_bytes: int = HARD_MAX_INPUT_BYTES,
                  max_items: int = 2048) -> list[tuple[int, int]]:
    """Split ``texts`` into consecutive (start, end) runs of at most ``max_bytes`` UTF-8 bytes
    and ``max_items`` texts; a text larger than ``max_bytes`` travels alone, and so does a
    media file (a 10 MiB file is 13 MiB of base64: two would pass Gemini's 20 MB request cap)."""
    runs: list[tuple[int, int]] = []
    start, size = 0, 0
    for i, text in enumerate(texts):
        weight = max_bytes + 1 if isinstance(text, MediaInput) else len(text.encode("utf-8"))
        if i > start and (size + weight > max_bytes or i - start >= max_items):
            runs.append((start, i))
            start, size = i, 0
        size += weight
    if start < len(texts):
        runs.append((start, len(texts)))
    return runs


class RemoteProvider:
    """Base of the HTTP providers. Subclasses set the class constants and ``_embed_request``."""

    name: ClassVar[str]
    default_model: ClassVar[str]
    default_base_url: ClassVar[str]
    env_keys: ClassVar[tuple[str, ...]] = ()
    #: Model id -> vector width, to catch an endpoint answering with the wrong model.
    known_dims: ClassVar[dict[str, int]] = {}
    max_items: ClassVar[int] = 2048
    #: Whether ``embed_documents`` takes :class:`MediaInput` (image/audio bytes inline).
    accepts_media: bool = False

    def __init__(self, model: str | None = None, *, base_url: str | None = None,
                 api_key: str | None = None, headers: Mapping[str, str] | None = None,
                 timeout: float | None = None, key_required: bool | None = None,
                 provider_id: str | None = None) -> None:
        if provider_id:  # a custom models.providers id this adapter serves under: its key is
            self.name = provider_id  # type: ignore[misc]  # the entry's, no variable's
            self.env_keys = ()  # type: ignore[misc]
        self.model = normalise_model(self.name, model or self.default_model)
        self.base_url = self._clean_base_url(base_url or self.default_base_url)
        if key_required is None:
            key_required = self.base_url == self.default_base_url
        if key_required and not api_key:
            sources = ["remote.apiKey", f"models.providers."
                       f"{PROVIDER_IDS.get(self.name, self.name)}.apiKey in an openclaw.json",
                       *self.env_keys]
            raise MissingApiKey(f"{self.name}: no API key (set {', '.join(sources[:-1])} or "
                                f"{sources[-1]})")
        self.has_key = bool(api_key)
        user_headers = dict(headers or {})
        self._headers = user_headers
        all_headers = {"Content-Type": "application/json",
                       **(self._auth_headers(api_key) if api_key else {}), **user_headers}
        secrets = [api_key, *(v for k, v in all_headers.items() if is_sensitive_header(k))]
        self._query_timeout = timeout or QUERY_TIMEOUT_S
        self._batch_timeout = timeout or BATCH_TIMEOUT_S
        self.http = HttpClient(self.name, self.base_url, all_headers,
                               timeout=self._batch_timeout, secrets=secrets)
        self.max_input_bytes = max_input_bytes(self.name, self.model)
        self._dims: int | None = self._expected_dims()
        #: Called with a request's estimated tokens (UTF-8 bytes) before it is sent; embed
        #: workers hang the fleet-wide rate limiter here.
        self.before_request: Callable[[int], None] | None = None

    # -- what subclasses provide ------------------------------------------------------------

    def _auth_headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"}

    def _clean_base_url(self, url: str) -> str:
        return url.rstrip("/")

    def _expected_dims(self) -> int | None:
        return self.known_dims.get(self.model)

    def _key_extra(self) -> dict[str, Any]:
        return {}

    def _embed_request(self, texts: Sequence[DocumentInput], kind: str, timeout: float
                       ) -> list[Any]:
        """One HTTP request for ``texts``; ``kind`` is "query" or "document"."""
        raise NotImplementedError

    # -- the EmbeddingProvider interface ----------------------------------------------------

    @property
    def public_headers(self) -> dict[str, str]:
        """The user's extra headers that are not credentials (safe for messages and keys)."""
        return {k: v for k, v in self._headers.items() if not is_sensitive_header(k)}

    @property
    def provider_key(self) -> str:
        return remote_provider_key(self.name, self.base_url, self.model, self.public_headers,
                                   self._key_extra())

    @property
    def dims(self) -> int:
        if self._dims is None:
            self.embed_query("dimension probe")
        assert self._dims is not None
        return self._dims

    def embed_documents(self, texts: Sequence[DocumentInput]) -> np.ndarray:
        rows: list[Any] = []
        for start, end in pack_requests(texts, HARD_MAX_INPUT_BYTES, self.max_items):
            part = texts[start:end]
            self._throttle(part)
            rows.extend(self._checked(self._embed_request(part, "document", self._batch_timeout),
                                      len(part)))
        if not rows:
            return np.zeros((0, self._dims or 0), dtype=np.float32)
        return l2_normalise(np.asarray(rows, dtype=np.float32))

    def embed_query(self, text: str) -> np.ndarray:
        self._throttle([text])
        rows = self._checked(self._embed_request([text], "query", self._query_timeout), 1)
        return l2_normalise(np.asarray(rows, dtype=np.float32))[0]

    def close(self) -> None:
        self.http.close()

    def _throttle(self, texts: Sequence[DocumentInput]) -> None:
        if self.before_request is not None:
            self.before_request(sum(input_tokens(t) for t in texts))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={shown_url(self.base_url)!r})"

    # -- checks -----------------------------------------------------------------------------

    def _checked(self, rows: list[Any], expected: int) -> list[Any]:
        """Every answer must hold one finite-length numeric vector per text, of one width."""
        where = f"{self.name}: model {self.model!r}"
        if len(rows) != expected:
            raise EmbeddingError(f"{where} returned {len(rows)} vectors for {expected} texts")
        widths = set()
        for row in rows:
            if not isinstance(row, list | np.ndarray) or not all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in row
            ):
                raise EmbeddingError(f"{where} returned a vector that is not a list of numbers")
            widths.add(len(row))
        if len(widths) != 1 or 0 in widths:
            raise EmbeddingError(f"{where} returned vectors of widths {sorted(widths)}")
        width = widths.pop()
        if self._dims is not None and width != self._dims:
            raise EmbeddingError(f"{where} returned {width}-dimensional vectors, expected "
                                 f"{self._dims} (is the endpoint serving another model?)")
        self._dims = width
        return rows


def decode_embedding(value: Any) -> Any:
    """A vector as a list of floats: OpenAI-style APIs may send base64 little-endian float32."""
    if isinstance(value, str):
        import base64
        import binascii

        try:
            return np.frombuffer(base64.b64decode(value, validate=True), dtype="<f4").tolist()
        except (binascii.Error, ValueError):
            return None
    return value
