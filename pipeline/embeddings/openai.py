"""OpenAI embeddings, and any OpenAI-compatible endpoint (``remote.baseUrl``).

``POST {base}/embeddings {model, input: [...], encoding_format: "float"}`` with Bearer auth;
the vectors come back in ``data[].embedding`` ordered by ``data[].index``. A key is required
for api.openai.com; a custom endpoint (a local llama.cpp or vLLM server) may need none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from pipeline.embeddings.remote import RemoteProvider, decode_embedding
from pipeline.errors import EmbeddingError

__all__ = ["OpenAIProvider", "parse_openai_data"]


def parse_openai_data(label: str, body: Any) -> list[Any]:
    """The vectors of an OpenAI-shaped answer, in input order (``data`` may come unordered)."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise EmbeddingError(f"{label}: the answer has no data[] list of embeddings")
    ordered = sorted(data, key=lambda d: d.get("index", 0) if isinstance(d.get("index"), int)
                     else 0)
    return [decode_embedding(d.get("embedding")) for d in ordered]


class OpenAIProvider(RemoteProvider):
    """OpenAI's ``/v1/embeddings`` (text-embedding-3-small by default)."""

    name = "openai"
    default_model = "text-embedding-3-small"
    default_base_url = "https://api.openai.com/v1"
    env_keys = ("OPENAI_API_KEY",)
    known_dims: ClassVar[dict[str, int]] = {
        "text-embedding-3-small": 1536,
        "text-embedding-3-large": 3072,
        "text-embedding-ada-002": 1536,
    }

    def _body(self, texts: Sequence[str], kind: str) -> dict[str, Any]:
        return {"model": self.model, "input": list(texts), "encoding_format": "float"}

    def _embed_request(self, texts: Sequence[str], kind: str, timeout: float) -> list[Any]:
        body = self.http.post_json("/embeddings", self._body(texts, kind), timeout=timeout)
        return parse_openai_data(self.name, body)
