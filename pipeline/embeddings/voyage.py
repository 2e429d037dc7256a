"""Voyage AI embeddings: OpenAI-shaped, plus ``input_type`` so Voyage adds its retrieval prompt.

Queries are sent as ``input_type: "query"`` and chunks as ``"document"`` (OpenClaw's choice);
``queryInputType`` / ``documentInputType`` override them. At most 1000 texts per request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from pipeline.embeddings.openai import OpenAIProvider

__all__ = ["VoyageProvider"]


class VoyageProvider(OpenAIProvider):
    """``POST /v1/embeddings {model, input, input_type}`` (voyage-4-large by default)."""

    name = "voyage"
    default_model = "voyage-4-large"
    default_base_url = "https://api.voyageai.com/v1"
    env_keys = ("VOYAGE_API_KEY",)
    known_dims: ClassVar[dict[str, int]] = {
        "voyage-4-large": 1024, "voyage-3": 1024, "voyage-3-large": 1024,
        "voyage-3-lite": 512, "voyage-code-3": 1024,
    }
    max_items = 1000

    def __init__(self, model: str | None = None, *, query_input_type: str | None = None,
                 document_input_type: str | None = None, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.input_types = {"query": query_input_type or "query",
                            "document": document_input_type or "document"}

    def _key_extra(self) -> dict[str, Any]:
        """Other input types give other vectors; the defaults keep OpenClaw's provider key."""
        default = {"query": "query", "document": "document"}
        return {} if self.input_types == default else {"inputTypes": self.input_types}

    def _body(self, texts: Sequence[str], kind: str) -> dict[str, Any]:
        return {"model": self.model, "input": list(texts), "input_type": self.input_types[kind]}
