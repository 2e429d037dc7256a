"""Mistral embeddings: the OpenAI request and answer shape at ``api.mistral.ai/v1``."""

from __future__ import annotations

from typing import ClassVar

from pipeline.embeddings.openai import OpenAIProvider

__all__ = ["MistralProvider"]


class MistralProvider(OpenAIProvider):
    """``POST /v1/embeddings {model, input}`` with Bearer auth (mistral-embed, 1024-d)."""

    name = "mistral"
    default_model = "mistral-embed"
    default_base_url = "https://api.mistral.ai/v1"
    env_keys = ("MISTRAL_API_KEY",)
    known_dims: ClassVar[dict[str, int]] = {"mistral-embed": 1024, "codestral-embed": 1536}
