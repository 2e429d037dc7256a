"""The one interface every embedding provider implements.

Providers are small plugins (in the spirit of Simon Willison's ``llm``): each module exposes a
class with this shape, and the registry picks one by name. Workers only ever call
``embed_documents``; the query module only ever calls ``embed_query``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

# NumPy is only in this interface's annotations: a pass that embeds nothing (keyword-only)
# imports the interface without it.
if TYPE_CHECKING:
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
    import numpy as np

    v = np.nan_to_num(np.asarray(vectors, dtype=np.float32), nan=0.0, posinf=0.0, neginf=0.0)
    norms = np.linalg.norm(v, axis=-1, keepdims=True)
    return np.divide(v, norms, out=np.zeros_like(v), where=norms > 0)


def provider_key(name: str, model: str, **vector_options: Any) -> str:
    """OpenClaw's cache key for providers without endpoint options: sha256 of provider+model
    (and of memq's options that change the vectors, such as the local model's window)."""
    blob = json.dumps({"provider": name, "model": model, **vector_options}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()
