"""The local embedding provider: a GGUF model run in-process by llama-cpp-python.

Facts this module is built around (measured with llama-cpp-python 0.3.36 on CPU):

* Documents are packed: the sequences of several texts (and the windows of a long one), in
  order, go into one llama.cpp call of at most one context (``PACK_TOKENS`` can make it up to
  2,048 tokens), each its own sequence id (positions from 0, at most the trained context each),
  pooled per sequence
  (``llama_get_embeddings_seq``). A BERT has no KV cache: llama.cpp encodes the batch as one
  graph with the other sequences masked out, so a text gets the vector it gets alone, to float
  noise (MiniLM: 1 - cosine at most 6e-7, elements within 1.5e-4). What it buys depends on the
  load: with the two cores busy, fewer calls mean fewer thread rendezvous (ggml's threads meet
  after every graph node): 8 sequences in a 4,096-token call ran 2x faster, 2 in 1,024 1.4x,
  packing within one context about 1.15x less CPU; on a quieter machine the work itself
  dominates (bench/embed_batching.py, docs/BENCHMARKS.md "Index throughput, local model").
  A larger call costs memory with the square of its tokens (the attention scores are
  materialised, flash attention or not), hence one context by default; a larger one is
  allocated only with flash attention. (``Llama.embed`` with many texts had measured far
  slower than one text per call, about 13 vs 81 texts/s; that is not what is done here.) A
  query is still decoded one sequence per call.
* No sequence is longer than the model's trained positions: windows are cut to the trained
  context (``{arch}.context_length``, 512 for MiniLM, capped at ``MAX_CONTEXT``). Several
  sequences in one call with a context larger than the trained positions had aborted the
  whole process with a GGML_ASSERT; what is known to abort (llama.cpp as llama-cpp-python
  0.3.36 ships it): a context whose ubatch is not a multiple of ``n_seq_max`` (3 sequences of
  512: ``ggml_can_mul_mat`` in the pooling graph, at context creation). A 2,048-token context
  with llama-cpp-python's ``n_seq_max`` (256) and sequences of at most 512 positions runs
  (tests/test_local_embeddings.py). (Not ``Llama.n_ctx()`` for the sequence length: llama.cpp
  pads the context up to a multiple of 256, e.g. 64 -> 256, more positions than a small model
  has.)
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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from pipeline.embeddings.base import l2_normalise
from pipeline.embeddings.default_model import DEFAULT_MODEL_ID, default_model_path
from pipeline.embeddings.llama_import import import_llama_cpp
from pipeline.embeddings.llama_model import MAX_CONTEXT, ModelFile, decode_sequences, load_llama
from pipeline.errors import EmbeddingError, ProviderUnavailable

__all__ = ["MAX_CONTEXT", "LocalProvider", "pack", "split_windows"]

# Queries of at most this many tokens are decoded on one thread (see the module docstring).
QUERY_ONE_THREAD_TOKENS = 64
#: Tokens one call may hold when documents are packed (several sequences, each at most the
#: trained context); 0: one trained context. A larger batch costs memory with the square of
#: its tokens (MiniLM, peak RSS of a process embedding 32 chunks: 180 MiB at 512, 247 at
#: 1,024, 393 at 2,048) and was faster only on a loaded machine (see the module docstring).
PACK_TOKENS = 0
_T = TypeVar("_T")


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


@dataclass(frozen=True)
class _Piece:
    """One sequence to decode (a whole text, or one window of a long one) and its weight: the
    text's own tokens in it (a long text's windows are averaged by it)."""

    ids: list[int]
    weight: int


def pack(items: Iterable[_T], budget: int, most: int, size: Callable[[_T], int]
         ) -> Iterator[list[_T]]:
    """``items`` in order, in groups of at most ``most`` items and ``budget`` tokens
    (``size``; an item alone may be larger, and is then a group of its own)."""
    group: list[_T] = []
    used = 0
    for item in items:
        n = size(item)
        if group and (len(group) >= most or used + n > budget):
            yield group
            group, used = [], 0
        group.append(item)
        used += n
    if group:
        yield group


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
        self._max_seqs = 1
        self._budget = 0
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
        llm, n_ctx = load_llama(path, self._threads, batch_tokens=PACK_TOKENS)
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
        self._max_seqs = max(1, int(llama_cpp.llama_n_seq_max(llm._ctx.ctx)))
        self._budget = max(n_ctx, int(llm.n_batch))
        return llm

    # -- embedding ---------------------------------------------------------------------------

    def _decode(self, seqs: list[list[int]]) -> list[np.ndarray]:
        """Run sequences (each at most the trained context, together at most the context
        allocated) in one llama.cpp call and return their pooled, unnormalised vectors."""
        import llama_cpp

        pooled = decode_sequences(self._llm, seqs, self._dims)
        if pooled is not None:
            return pooled
        ptr = llama_cpp.llama_get_embeddings(self._llm._ctx.ctx)
        if not ptr:
            raise EmbeddingError("llama.cpp returned no token embeddings")
        tokens = np.ctypeslib.as_array(ptr, shape=(sum(len(s) for s in seqs), self._dims))
        out, start = [], 0
        for seq in seqs:
            out.append(tokens[start:start + len(seq)].mean(axis=0, dtype=np.float64)
                       .astype(np.float32))
            start += len(seq)
        return out

    def _use_threads(self, n: int) -> None:
        if n != self._ctx_threads:
            self._llm._ctx.set_n_threads(n, n)
            self._ctx_threads = n

    def _pieces(self, text: str) -> list[_Piece]:
        """The sequences ``text`` is decoded as: one, or one per window when it is longer than
        the context (none only for empty text and a model that adds no special tokens)."""
        data = text.encode("utf-8", errors="replace")  # lone surrogates cannot crash us
        ids = list(self._llm.tokenize(data, add_bos=False, special=False)) \
            if data.strip() else []
        room = self._n_ctx - len(self._prefix) - len(self._suffix)
        if len(ids) <= room:
            seq = self._prefix + ids + self._suffix
            return [_Piece(seq, max(len(ids), 1))] if seq else []
        return [_Piece(self._prefix + ids[start:end] + self._suffix, end - start)
                for start, end in split_windows(len(ids), room)]

    def _embed(self, texts: Sequence[str], *, query: bool = False) -> np.ndarray:
        """Unit vectors for ``texts``, float32 (len(texts), dims). Documents are packed, in
        order, several sequences to a call up to the context allocated (``PACK_TOKENS``, else
        one trained context); a query is decoded one sequence per call (on one thread when
        short)."""
        self._check_fork()
        with self._lock:
            self._ensure_loaded()
            pieces = [(i, piece) for i, text in enumerate(texts) for piece in self._pieces(text)]
            short_query = query and sum(len(p.ids) for _, p in pieces) <= \
                QUERY_ONE_THREAD_TOKENS + len(self._prefix) + len(self._suffix)
            self._use_threads(1 if short_query else self._threads)
            total = np.zeros((len(texts), self._dims), dtype=np.float64)
            weight = np.zeros(len(texts), dtype=np.float64)
            most = 1 if query else self._max_seqs
            for group in pack(pieces, self._budget, most, lambda item: len(item[1].ids)):
                for (i, piece), vec in zip(group, self._decode([p.ids for _, p in group]),
                                           strict=True):
                    total[i] += piece.weight * vec.astype(np.float64)
                    weight[i] += piece.weight
            return l2_normalise(total / np.maximum(weight, 1.0)[:, None])

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
        """The longest sequence one llama.cpp call decodes (the model's trained context,
        capped); longer texts are windowed. Loads the model."""
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
        """Float32 (len(texts), dims), L2-normalised. The texts (and the windows of a long
        one) are packed in order into llama.cpp calls of at most the context's length."""
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a sequence of strings, not a string")
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        return self._embed(texts)

    def embed_query(self, text: str) -> np.ndarray:
        """Float32 (dims,), L2-normalised. Long queries are windowed, never truncated, one
        window per call; short ones are decoded on one thread (``QUERY_ONE_THREAD_TOKENS``)."""
        return self._embed([text], query=True)[0]

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
