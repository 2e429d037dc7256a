"""The local embedding provider: a GGUF model run in-process by llama-cpp-python.

Facts this module is built around (measured with llama-cpp-python 0.3.36 on CPU):

* One text per llama.cpp call is far faster than many texts in one call (about 81 vs 13
  texts/s for MiniLM), so texts are embedded one at a time.
* Several sequences in one call with a context larger than the model's trained positions abort
  the whole process with a GGML_ASSERT. So the context is the model's trained context
  (``{arch}.context_length``, 512 for MiniLM, capped at ``MAX_CONTEXT``) and no call ever holds
  more tokens than that. (Not ``Llama.n_ctx()``: llama.cpp pads the context up to a multiple of
  256, e.g. 64 -> 256, which is more positions than a small model has.)
* Flash attention makes 200-token chunks about 1.7x faster on CPU (MiniLM, 2 threads: ~25/s
  instead of ~15/s for 1,000-character texts) with the same vectors (cosine > 0.999 to a NumPy
  reference); a model or build that cannot use it is loaded without it.
* Texts go through llama.cpp's tokenizer once; the token ids are decoded directly (the same
  batch/context calls ``Llama.embed`` makes), and pooling comes from the GGUF (MEAN for
  MiniLM). A model without pooling gets its token vectors mean-pooled here.
* A chunk can tokenise to more tokens than the context (1,600 characters of dense text can
  exceed 512 WordPiece tokens). Such a text is split into token windows that fit, leaving room
  for the model's own leading/trailing special tokens ([CLS] ... [SEP]); each window is embedded
  and the (pooled, unnormalised) window vectors are averaged weighted by their token counts,
  then L2-normalised. It never raises and never truncates.
* A short query is decoded on one thread. ggml's threads meet at a barrier after every graph
  node, so on a busy machine a descheduled thread stalls the others: a 10-token MiniLM query
  took a median 42 ms on one thread and 349 ms on two (2 cores, load 12), while the work is
  only a few milliseconds. Documents (throughput, often long) use all ``threads``.
* Empty or whitespace-only text is embedded as the empty input (for BERT: just [CLS] [SEP]),
  which gives a valid unit vector, so every stored vector has unit length and cosine distances
  are always defined. Only a model that adds no special tokens at all yields a zero vector.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.embeddings.base import l2_normalise
from pipeline.embeddings.default_model import DEFAULT_MODEL_ID, default_model_path
from pipeline.embeddings.llama_import import import_llama_cpp
from pipeline.embeddings.llama_model import MAX_CONTEXT, ModelFile, decode_pooled, load_llama
from pipeline.errors import EmbeddingError, ProviderUnavailable

__all__ = ["MAX_CONTEXT", "LocalProvider", "split_windows"]

# Queries of at most this many tokens are decoded on one thread (see the module docstring).
QUERY_ONE_THREAD_TOKENS = 64


def split_windows(n_tokens: int, max_len: int) -> list[tuple[int, int]]:
    """Split ``range(n_tokens)`` into the fewest contiguous windows of at most ``max_len``,
    of near-equal sizes (no tiny last window). Returns (start, end) pairs."""
    if max_len < 1:
        raise ValueError("max_len must be >= 1")
    if n_tokens <= 0:
        return []
    k = -(-n_tokens // max_len)
    base, extra = divmod(n_tokens, k)
    windows: list[tuple[int, int]] = []
    start = 0
    for i in range(k):
        end = start + base + (1 if i < extra else 0)
        windows.append((start, end))
        start = end
    return windows


class LocalProvider:
    """Embeddings from a local GGUF model (default: all-MiniLM-L6-v2, converted on first use).

    ``model_path``: None for memq's default model; a path to a ``.gguf`` file; or an
    ``hf:<owner>/<repo>/<file>`` URI or http(s) URL, downloaded into the cache on first use
    (:mod:`pipeline.embeddings.model_source`, :mod:`pipeline.embeddings.download`).
    ``threads``: llama.cpp threads (default ``os.cpu_count()``).

    The model loads lazily on the first embedding (or ``dims``). One llama.cpp model per
    instance, used by one thread at a time. A process forked after loading reloads its own copy.
    """

    name = "local"
    # OpenClaw's local limit: min(2048 tokens, 8000), with tokens counted as UTF-8 bytes.
    max_input_bytes = 2048

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        threads: int | None = None,
        cache_dir: Path | str | None = None,
    ) -> None:
        if threads is not None and threads < 1:
            raise ValueError("threads must be >= 1")
        self._threads = threads or os.cpu_count() or 1
        self._cache_dir = cache_dir
        # The stable id is the file name without ".gguf", so pointing at the cached default
        # model by path gives the same id ("all-MiniLM-L6-v2-f16") as model_path=None.
        self._file = None if model_path is None else ModelFile(model_path, cache_dir)
        self.model = DEFAULT_MODEL_ID if self._file is None else self._file.model
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._llm: Any = None
        self._ctx_threads = 0
        self._dims = 0
        self._n_ctx = 0
        self._prefix: list[int] = []
        self._suffix: list[int] = []

    # -- loading ---------------------------------------------------------------------------

    def model_file(self) -> Path:
        """The GGUF this provider loads: the configured file, the downloaded one (downloaded
        now if it is not in the cache yet) or memq's default model (converted on first use).
        Raises ProviderUnavailable when it cannot be had."""
        if self._file is not None:
            return self._file.file()
        return default_model_path(self._cache_dir)

    def _check_fork(self) -> None:
        if self._pid != os.getpid():
            # Inherited native state (thread pools, a possibly held lock) is not safe to use in
            # a forked child: start afresh and let the child load its own model.
            self._lock = threading.Lock()
            self._llm = None
            self._pid = os.getpid()

    def _ensure_loaded(self) -> Any:
        """Load the model if needed. The caller holds ``self._lock``."""
        if self._llm is not None:
            return self._llm
        path = self.model_file()
        llm, n_ctx = load_llama(path, self._threads)
        import llama_cpp  # load_llama has checked it is installed

        pooling = int(llm.pooling_type())
        if pooling == llama_cpp.LLAMA_POOLING_TYPE_RANK:
            llm.close()
            raise ProviderUnavailable(f"{path} is a reranker (rank pooling), not an embedder")
        self._n_ctx = n_ctx
        self._dims = llm.n_embd()
        self._prefix, self._suffix = _special_affixes(llm)
        if self._n_ctx - len(self._prefix) - len(self._suffix) < 1:
            llm.close()
            raise ProviderUnavailable(f"{path}: context of {self._n_ctx} tokens is too small")
        self._llm = llm
        self._ctx_threads = self._threads
        return llm

    # -- embedding ---------------------------------------------------------------------------

    def _decode(self, ids: list[int]) -> np.ndarray:
        """Run one sequence (at most n_ctx tokens) and return its pooled, unnormalised vector."""
        import llama_cpp

        pooled = decode_pooled(self._llm, ids, self._dims)
        if pooled is not None:
            return pooled
        ptr = llama_cpp.llama_get_embeddings(self._llm._ctx.ctx)
        if not ptr:
            raise EmbeddingError("llama.cpp returned no token embeddings")
        tokens = np.ctypeslib.as_array(ptr, shape=(len(ids), self._dims))
        return tokens.mean(axis=0, dtype=np.float64).astype(np.float32)

    def _use_threads(self, n: int) -> None:
        if n != self._ctx_threads:
            self._llm._ctx.set_n_threads(n, n)
            self._ctx_threads = n

    def _embed_one(self, text: str, *, query: bool = False) -> np.ndarray:
        self._check_fork()
        with self._lock:
            llm = self._ensure_loaded()
            data = text.encode("utf-8", errors="replace")  # lone surrogates cannot crash us
            ids = list(llm.tokenize(data, add_bos=False, special=False)) if data.strip() else []
            short_query = query and len(ids) <= QUERY_ONE_THREAD_TOKENS
            self._use_threads(1 if short_query else self._threads)
            room = self._n_ctx - len(self._prefix) - len(self._suffix)
            if len(ids) <= room:
                seq = self._prefix + ids + self._suffix
                if not seq:
                    return np.zeros(self._dims, dtype=np.float32)
                return l2_normalise(self._decode(seq))
            total = np.zeros(self._dims, dtype=np.float64)
            for start, end in split_windows(len(ids), room):
                vec = self._decode(self._prefix + ids[start:end] + self._suffix)
                total += (end - start) * vec.astype(np.float64)
            return l2_normalise(total / len(ids))

    def warm(self) -> None:
        """Start loading the model on another thread; the first embedding waits for it.

        Returns once that thread has imported llama-cpp-python: the import needs the GIL and
        the model read does not, so a caller that goes on with its own imports meanwhile would
        slow the import and start the read late; after it, the read overlaps the caller's work
        (a one-shot ``memq search``: 15% sooner). A load that fails is tried again, and raises,
        where the model is needed."""
        imported = threading.Event()
        threading.Thread(target=self._warm, args=(imported,), name="memq-model-load").start()
        imported.wait()

    def _warm(self, imported: threading.Event) -> None:
        self._check_fork()
        # A failure is not lost: the embedding that needs the model loads it again, and raises.
        with self._lock, contextlib.suppress(Exception):
            try:
                import_llama_cpp()
            finally:
                imported.set()
            self._ensure_loaded()

    @property
    def dims(self) -> int:
        """Vector dimensions (loads the model)."""
        self._check_fork()
        with self._lock:
            self._ensure_loaded()
            return self._dims

    @property
    def context_tokens(self) -> int:
        """Tokens per llama.cpp call (the model's trained context, capped); loads the model."""
        self._check_fork()
        with self._lock:
            self._ensure_loaded()
            return self._n_ctx

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` becomes, without special tokens (loads the model)."""
        self._check_fork()
        with self._lock:
            llm = self._ensure_loaded()
            data = text.encode("utf-8", errors="replace")
            return len(llm.tokenize(data, add_bos=False, special=False)) if data.strip() else 0

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 (len(texts), dims), L2-normalised; one llama.cpp call per text or window."""
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a sequence of strings, not a string")
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        return np.stack([self._embed_one(t) for t in texts]).astype(np.float32, copy=False)

    def embed_query(self, text: str) -> np.ndarray:
        """Float32 (dims,), L2-normalised. Long queries are windowed, never truncated; short
        ones are decoded on one thread (``QUERY_ONE_THREAD_TOKENS``)."""
        return self._embed_one(text, query=True)

    def close(self) -> None:
        """Free the llama.cpp model; the next embedding loads it again."""
        with self._lock:
            if self._llm is not None and self._pid == os.getpid():
                self._llm.close()
            self._llm = None

    def __repr__(self) -> str:
        return f"LocalProvider(model={self.model!r}, threads={self._threads})"


def _special_affixes(llm: Any) -> tuple[list[int], list[int]]:
    """The special tokens the model adds before and after a text (BERT: [CLS] / [SEP])."""
    bare = list(llm.tokenize(b"a", add_bos=False, special=False))
    full = list(llm.tokenize(b"a", add_bos=True, special=False))
    n = len(bare)
    if n:
        for i in range(len(full) - n + 1):
            if full[i : i + n] == bare:
                return full[:i], full[i + n :]
    return list(llm.tokenize(b"", add_bos=True, special=False)), []
