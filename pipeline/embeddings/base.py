"""The one interface every embedding provider implements.

Providers are small plugins (in the spirit of Simon Willison's ``llm``): each module exposes a
class with this shape, and the registry picks one by name. Workers only ever call
``embed_documents``; the query module only ever calls ``embed_query``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class MediaInput:
    """A document that is a file, not text: its label plus its bytes inline (base64).

    Only a provider whose ``accepts_media`` is true takes one (Gemini's multimodal model);
    see :mod:`pipeline.ingest.multimodal`.
    """

    text: str
    mime_type: str
    data: str  # base64


#: What ``embed_documents`` takes: text, or a media file with its label.
DocumentInput = str | MediaInput


class EmbeddingError(RuntimeError):
    """A provider could not embed. ``retryable`` says whether trying again may help.

    ``retry_after`` is the wait in seconds the provider asked for (``Retry-After``, Gemini's
    ``RetryInfo.retryDelay``), if any. ``context_length`` marks an input the model found too
    long: a request of several texts may succeed when split. ``needs_config`` marks a refusal
    only a configuration fix can cure (a rejected key): the chunks wait, pending, for the next
    pass after the fix. ``disables_batch`` marks a provider whose batch API is not there (HTTP
    404 on create, Gemini's "asyncBatchEmbedContent not available"): the batch workflow turns
    that provider's batch mode off at once instead of counting failures. ``throttled`` marks a
    rate limit (HTTP 429 that is not an exhausted quota): the provider is fine and asks the
    client to slow down, so the fleet pauses (:class:`pipeline.embeddings.ratelimit.FleetPause`)
    rather than backing off job by job. The message never holds a secret.
    """

    def __init__(self, message: str, *, retryable: bool = False,
                 retry_after: float | None = None, context_length: bool = False,
                 needs_config: bool = False, disables_batch: bool = False,
                 throttled: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.throttled = throttled
        self.retry_after = retry_after
        self.context_length = context_length
        self.needs_config = needs_config
        self.disables_batch = disables_batch


class ProviderUnavailable(EmbeddingError):
    """The provider cannot be built here (no model file, no API key): skip it, do not crash."""


class MissingApiKey(ProviderUnavailable):
    """No API key for a remote provider: ``provider: auto`` skips it silently, like OpenClaw."""


@runtime_checkable
class EmbeddingProvider(Protocol):
    """What the pipeline needs from a provider.

    ``model`` is the id stored with every vector, so vectors of two models never mix.
    ``max_input_bytes`` is the per-chunk input limit in UTF-8 bytes (at most 8000), used by the
    producer to re-split over-long chunks before they are queued.
    """

    name: str
    model: str
    max_input_bytes: int

    @property
    def dims(self) -> int:
        """Vector dimensions (may load the model to find out)."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed chunks for indexing: float32 array of shape (len(texts), dims), L2-normalised."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one search query: float32 array of shape (dims,), L2-normalised."""
        ...


def l2_normalise(vectors: np.ndarray) -> np.ndarray:
    """NaN/Inf to 0, then unit length per row (zero rows stay zero), as float32."""
    v = np.nan_to_num(np.asarray(vectors, dtype=np.float32), nan=0.0, posinf=0.0, neginf=0.0)
    norms = np.linalg.norm(v, axis=-1, keepdims=True)
    return np.divide(v, norms, out=np.zeros_like(v), where=norms > 0)
