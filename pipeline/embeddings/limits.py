"""Per-model embedding input limits, ported from OpenClaw's ``embedding-model-limits.ts``.

OpenClaw does not run a tokenizer to enforce input limits: it estimates a text's token count as
its **UTF-8 byte length** (every token holds at least one byte, so bytes are an upper bound) and
compares that with the model's max input tokens, capped at 8000 (``EMBEDDING_BATCH_MAX_TOKENS``).
``max_input_bytes`` returns that cap; ``pipeline.ingest.chunking.enforce_input_limit``
re-splits chunks that exceed it. Queries are never truncated.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_MAX_INPUT_TOKENS",
    "HARD_MAX_INPUT_BYTES",
    "KNOWN_MAX_INPUT_TOKENS",
    "LOCAL_MAX_INPUT_TOKENS",
    "max_input_bytes",
    "max_input_tokens",
    "normalise_model",
]

#: OpenClaw's ``EMBEDDING_BATCH_MAX_TOKENS``: no chunk sent for embedding exceeds this many bytes.
HARD_MAX_INPUT_BYTES = 8000
#: Fallback for any provider/model not listed (OpenAI's default; also voyage-4-large, mistral,
#: ollama).
DEFAULT_MAX_INPUT_TOKENS = 8192
#: Fallback for the in-process ``local`` provider (node-llama-cpp GGUF models).
LOCAL_MAX_INPUT_TOKENS = 2048
#: Fallback for Gemini models not listed.
GEMINI_MAX_INPUT_TOKENS = 2048

#: ``KNOWN_EMBEDDING_MAX_INPUT_TOKENS``, keyed by lower-case ``"provider:model"``.
KNOWN_MAX_INPUT_TOKENS: dict[str, int] = {
    "openai:text-embedding-3-small": 8192,
    "openai:text-embedding-3-large": 8192,
    "openai:text-embedding-ada-002": 8191,
    "gemini:text-embedding-004": 2048,
    "gemini:gemini-embedding-001": 2048,
    "gemini:gemini-embedding-2": 8192,
    "gemini:gemini-embedding-2-preview": 8192,
    "voyage:voyage-3": 32000,
    "voyage:voyage-3-lite": 16000,
    "voyage:voyage-code-3": 32000,
}

# Model-name prefixes OpenClaw's config resolver strips before a model reaches the provider
# (agents/memory-search.ts), so "openai/text-embedding-3-small" means the same model.
_MODEL_PREFIXES: dict[str, tuple[str, ...]] = {
    "openai": ("openai/",),
    "voyage": ("voyage/",),
    "mistral": ("mistral/",),
    "ollama": ("ollama/",),
    "gemini": ("models/", "gemini/", "google/"),
}


def normalise_model(provider: str, model: str) -> str:
    """The model id without the provider prefix OpenClaw strips ("openai/x" -> "x")."""
    model = model.strip()
    for prefix in _MODEL_PREFIXES.get(provider, ()):
        if model.lower().startswith(prefix):
            return model[len(prefix) :]
    return model


def max_input_tokens(provider: str, model: str) -> int:
    """OpenClaw's ``resolveEmbeddingMaxInputTokens`` for ``provider`` / ``model``.

    Known models come from the table; otherwise gemini falls back to 2048, ``local`` to 2048 and
    every other provider to 8192. Matching is case-insensitive.
    """
    pid = provider.strip().lower()
    key = f"{pid}:{normalise_model(pid, model)}".lower()
    known = KNOWN_MAX_INPUT_TOKENS.get(key)
    if known is not None:
        return known
    if pid == "gemini":
        return GEMINI_MAX_INPUT_TOKENS
    if pid == "local":
        return LOCAL_MAX_INPUT_TOKENS
    return DEFAULT_MAX_INPUT_TOKENS


def max_input_bytes(provider: str, model: str) -> int:
    """Per-chunk input limit in UTF-8 bytes: ``min(max_input_tokens(provider, model), 8000)``.

    Tokens are estimated as UTF-8 bytes, like OpenClaw does, so this number is both the token
    limit and the byte budget handed to ``pipeline.ingest.chunking.enforce_input_limit``.
    """
    return min(max_input_tokens(provider, model), HARD_MAX_INPUT_BYTES)
