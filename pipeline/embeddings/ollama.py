"""Ollama embeddings: ``/api/embed`` (many texts per call), or the legacy ``/api/embeddings``
(one ``prompt`` per call) on servers older than 0.3 that answer 404 to the new endpoint.

Never auto-selected (as in OpenClaw): ``provider: ollama`` names it. The base URL defaults to
``http://127.0.0.1:11434`` (a trailing ``/v1`` is dropped); ``OLLAMA_API_KEY``, when set, is
sent as a Bearer token for hosted or proxied servers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from pipeline.embeddings.remote import RemoteProvider
from pipeline.errors import EmbeddingError

__all__ = ["OllamaProvider"]


class OllamaProvider(RemoteProvider):
    """A local or remote Ollama server (nomic-embed-text by default)."""

    name = "ollama"
    default_model = "nomic-embed-text"
    default_base_url = "http://127.0.0.1:11434"
    env_keys = ("OLLAMA_API_KEY",)
    known_dims: ClassVar[dict[str, int]] = {"nomic-embed-text": 768}

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("key_required", False)
        super().__init__(model, **kwargs)
        self.legacy = False

    def _clean_base_url(self, url: str) -> str:
        return url.rstrip("/").removesuffix("/v1")

    def _embed_request(self, texts: Sequence[str], kind: str, timeout: float) -> list[Any]:
        if not self.legacy:
            body = self.http.post_json("/api/embed", {"model": self.model, "input": list(texts)},
                                       timeout=timeout, ok_missing=True)
            if body is not None:
                rows = body.get("embeddings") if isinstance(body, dict) else None
                if not isinstance(rows, list):
                    raise EmbeddingError(f"{self.name}: the answer has no embeddings[] list")
                return rows
            self.legacy = True  # an old server: /api/embed does not exist there
        rows = []
        for text in texts:
            body = self.http.post_json("/api/embeddings", {"model": self.model, "prompt": text},
                                       timeout=timeout)
            row = body.get("embedding") if isinstance(body, dict) else None
            if not isinstance(row, list):
                raise EmbeddingError(f"{self.name}: the answer has no embedding[] list")
            rows.append(row)
        return rows
