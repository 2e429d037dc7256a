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
* A chunk can tokenise to more tokens than the model embeds at once (``window_tokens``: the
  context by default; 1,600 characters of dense text can exceed 512 WordPiece tokens). Such a
  text is split into the fewest near-equal token windows that fit, leaving room for the
  model's own leading/trailing special tokens ([CLS] ... [SEP]); each window is embedded and
  the (pooled, unnormalised) window vectors are averaged weighted by their token counts, then
  L2-normalised. It never raises and never truncates. With ``window_tokens`` 256 (MiniLM's
  trained length) a 400-token chunk is two windows of 200: LoCoMo's vector-only recall rises
  from 0.585 to 0.655 (docs/search.md, "Windows of the model's trained length").
* A short query is decoded on one thread. ggml's threads meet at a barrier after every graph
  node, so on a busy machine a descheduled thread stalls the others: a 10-token MiniLM query
  took a median 42 ms on one thread and 349 ms on two (2 cores, load 12), while the work is
  only a few milliseconds. A long query uses all ``threads``; documents, the streams below.
* Documents are decoded by several one-thread streams side by side (``streams``, default one
  per thread): each a llama.cpp context of its own on the one model (the weights are loaded
  once), in a Python thread of its own (ctypes releases the GIL while llama.cpp decodes), each
  taking the next sequence (longest first) when it is done. One sequence on two threads pays a
  rendezvous of the threads after every graph node (OpenMP's barrier spins while it waits), so
  a thread the machine descheduled stalls the other: bench/embed_batching.py, 2 cores, load
  6-10, SciFact chunks: one stream of two threads 569-786 tokens/s, two streams of one thread
  2,446-3,591 (the same vectors, 1 - cosine <= 1.5e-7 against one stream). A stream's vectors
  do not depend on the stream: every sequence is decoded alone, as before.
* Empty or whitespace-only text is embedded as the empty input (for BERT: just [CLS] [SEP]),
  which gives a valid unit vector, so every stored vector has unit length and cosine distances
  are always defined. Only a model that adds no special tokens at all yields a zero vector.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.embeddings.base import l2_normalise, provider_key
from pipeline.embeddings.default_model import DEFAULT_MODEL_ID, default_model_path
from pipeline.embeddings.llama_import import import_llama_cpp
from pipeline.embeddings.llama_model import MAX_CONTEXT, ModelFile, decode_pooled, load_llama
from pipeline.errors import EmbeddingError, ProviderUnavailable

__all__ = ["MAX_CONTEXT", "LocalProvider", "split_windows"]

# Queries of at most this many tokens are decoded on one thread (see the module docstring).
QUERY_ONE_THREAD_TOKENS = 64
# Texts embedded per hold of the model's lock with several streams: a query waiting for the
# model waits for about this many texts per stream (an embed worker's slice of a bulk job:
# pipeline.embeddings.runner.YIELD_SLICE_LOCAL_CHUNKS per stream).
TEXTS_PER_HOLD_PER_STREAM = 8


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
    ``threads``: llama.cpp threads in all (default ``os.cpu_count()``). ``streams``: how many
    sequences of documents are decoded side by side, each on ``threads // streams`` threads
    (default ``threads``: one thread each; 1 decodes one sequence at a time on every thread).
    ``window_tokens``: the longest token sequence embedded in one call, longer texts being the
    token-weighted mean of their windows; 0: the model's context (``local.windowTokens``;
    memq's default model was trained at
    :data:`~pipeline.embeddings.default_model.DEFAULT_MODEL_WINDOW`). An index records it
    (:attr:`spec_options`), and a provider rebuilt for that index uses the same.

    The model loads lazily on the first embedding (or ``dims``); the other streams' contexts
    with the first call that has more than one sequence to decode. One llama.cpp model per
    instance, used by one call at a time. A process forked after loading reloads its own copy.
    """

    name = "local"
    # OpenClaw's local limit: min(2048 tokens, 8000), with tokens counted as UTF-8 bytes.
    max_input_bytes = 2048

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        threads: int | None = None,
        streams: int | None = None,
        cache_dir: Path | str | None = None,
        window_tokens: int = 0,
    ) -> None:
        if window_tokens < 0:
            raise ValueError("window_tokens must be >= 0")
        if threads is not None and threads < 1:
            raise ValueError("threads must be >= 1")
        if streams is not None and streams < 1:
            raise ValueError("streams must be >= 1")
        self._threads = threads or os.cpu_count() or 1
        self._streams = min(streams or self._threads, self._threads)
        self._stream_threads = self._threads // self._streams
        self._cache_dir = cache_dir
        # The stable id is the file name without ".gguf", so pointing at the cached default
        # model by path gives the same id ("all-MiniLM-L6-v2-f16") as model_path=None.
        self._file = None if model_path is None else ModelFile(model_path, cache_dir)
        self.model = DEFAULT_MODEL_ID if self._file is None else self._file.model
        self.window_tokens = window_tokens
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._llm: Any = None
        self._others: list[_Stream] = []  # the streams beside the Llama object's own context
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
            self._others = []
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

    def _decode(self, stream: Any, ids: list[int]) -> np.ndarray:
        """Run one sequence (at most n_ctx tokens) through ``stream`` (the ``Llama`` object or
        a :class:`_Stream`) and return its pooled, unnormalised vector."""
        import llama_cpp

        pooled = decode_pooled(stream, ids, self._dims)
        if pooled is not None:
            return pooled
        ptr = llama_cpp.llama_get_embeddings(stream._ctx.ctx)
        if not ptr:
            raise EmbeddingError("llama.cpp returned no token embeddings")
        tokens = np.ctypeslib.as_array(ptr, shape=(len(ids), self._dims))
        return tokens.mean(axis=0, dtype=np.float64).astype(np.float32)

    def _use_threads(self, n: int) -> None:
        if n != self._ctx_threads:
            self._llm._ctx.set_n_threads(n, n)
            self._ctx_threads = n

    def _pieces(self, texts: Sequence[str]) -> list[_Piece]:
        """The sequences ``texts`` are decoded as: one per text (``window`` 0), or one per
        window of a text longer than the context or ``window_tokens`` (``window``: its
        tokens). The caller holds ``self._lock``."""
        room = self._n_ctx - len(self._prefix) - len(self._suffix)
        if self.window_tokens:
            room = min(room, self.window_tokens)
        out: list[_Piece] = []
        for i, text in enumerate(texts):
            data = text.encode("utf-8", errors="replace")  # lone surrogates cannot crash us
            ids = (list(self._llm.tokenize(data, add_bos=False, special=False))
                   if data.strip() else [])
            if len(ids) <= room:
                seq = self._prefix + ids + self._suffix
                if seq:  # a model without special tokens embeds empty text as the zero vector
                    out.append(_Piece(i, seq, 0))
            else:
                out.extend(_Piece(i, self._prefix + ids[s:e] + self._suffix, e - s)
                           for s, e in split_windows(len(ids), room))
        return out

    def _embed(self, texts: Sequence[str], *, query: bool = False) -> np.ndarray:
        """Float32 (len(texts), dims), L2-normalised; a window's vector weighs its tokens."""
        self._check_fork()
        with self._lock:
            self._ensure_loaded()
            pieces = self._pieces(texts)
            if query:
                affixes = len(self._prefix) + len(self._suffix)
                short = len(pieces) == 1 and len(pieces[0].ids) - affixes <= (
                    QUERY_ONE_THREAD_TOKENS)
                self._use_threads(1 if short else self._threads)
                vectors = [self._decode(self._llm, p.ids) for p in pieces]
            else:
                vectors = self._decode_streams(pieces)
        out = np.zeros((len(texts), self._dims), dtype=np.float32)
        totals: dict[int, tuple[np.ndarray, list[int]]] = {}
        for piece, vec in zip(pieces, vectors, strict=True):
            if piece.window == 0:
                out[piece.text] = l2_normalise(vec)
            else:
                total, tokens = totals.setdefault(
                    piece.text, (np.zeros(self._dims, dtype=np.float64), [0]))
                total += piece.window * vec.astype(np.float64)
                tokens[0] += piece.window
        for i, (total, tokens) in totals.items():
            out[i] = l2_normalise(total / tokens[0])
        return out

    def _decode_streams(self, pieces: list[_Piece]) -> list[np.ndarray]:
        """Every piece's pooled vector, in order, decoded by the streams side by side (each
        takes the next piece, longest first, when it is done). An error in one stream stops
        the others after their current piece and is raised as an EmbeddingError naming the
        stream. The caller holds ``self._lock``."""
        self._use_threads(self._stream_threads)
        if self._streams == 1 or len(pieces) < 2:
            return [self._decode(self._llm, p.ids) for p in pieces]
        streams = [self._llm, *self._other_streams()]
        vectors: list[np.ndarray | None] = [None] * len(pieces)
        # longest first, so that the pieces left when one stream is done are the short ones
        order = sorted(range(len(pieces)), key=lambda i: -len(pieces[i].ids))
        taken = itertools.count()
        stop = threading.Event()

        def run(stream: Any) -> None:
            try:
                while not stop.is_set() and (n := next(taken)) < len(order):
                    vectors[order[n]] = self._decode(stream, pieces[order[n]].ids)
            except BaseException:
                stop.set()
                raise

        errors: list[tuple[int, BaseException]] = []
        with ThreadPoolExecutor(len(streams) - 1, thread_name_prefix="memq-embed") as pool:
            futures = [pool.submit(run, stream) for stream in streams[1:]]
            try:
                run(streams[0])
            except Exception as exc:
                errors.append((1, exc))
        errors += [(k, exc) for k, f in enumerate(futures, 2) if (exc := f.exception())]
        if errors:
            k, exc = errors[0]
            raise EmbeddingError(f"local model, decode stream {k} of {len(streams)}: {exc}"
                                 ) from exc
        return vectors  # type: ignore[return-value]  # every slot is filled when none failed

    def _other_streams(self) -> list[_Stream]:
        """The streams beside the ``Llama`` object's own context, opened on first use. The
        caller holds ``self._lock``."""
        while len(self._others) < self._streams - 1:
            try:
                self._others.append(_Stream(self._llm, self._stream_threads))
            except Exception as exc:
                raise EmbeddingError(f"local model: could not open decode stream "
                                     f"{len(self._others) + 2} of {self._streams}: {exc}"
                                     ) from exc
        return self._others

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
        """Float32 (len(texts), dims), L2-normalised, in the order of ``texts``; one llama.cpp
        call per text or window, ``streams`` of them side by side. The model is held for a
        few texts per stream at a time, so a query waits for those only."""
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a sequence of strings, not a string")
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        hold = 1 if self._streams == 1 else TEXTS_PER_HOLD_PER_STREAM * self._streams
        return np.concatenate([self._embed(texts[i:i + hold])
                               for i in range(0, len(texts), hold)])

    def embed_query(self, text: str) -> np.ndarray:
        """Float32 (dims,), L2-normalised. Long queries are windowed, never truncated; short
        ones are decoded on one thread (``QUERY_ONE_THREAD_TOKENS``)."""
        return self._embed([text], query=True)[0]

    def close(self) -> None:
        """Free the llama.cpp model and its streams; the next embedding loads it again."""
        with self._lock:
            if self._pid == os.getpid():
                for stream in self._others:
                    stream.close()
                if self._llm is not None:
                    self._llm.close()
            self._others = []
            self._llm = None

    @property
    def provider_key(self) -> str:
        """The embedding cache's key for this provider's vectors: OpenClaw's (provider and
        model) when texts are embedded whole up to the context, and the window besides when
        they are windowed, so vectors made one way are never served for the other."""
        return provider_key(self.name, self.model, **self.spec_options)

    @property
    def spec_options(self) -> dict[str, Any]:
        """What an index records about how these vectors are made, beside the model path."""
        return {"window_tokens": self.window_tokens} if self.window_tokens else {}

    @property
    def streams(self) -> int:
        """How many texts :meth:`embed_documents` decodes side by side."""
        return self._streams

    def __repr__(self) -> str:
        return (f"LocalProvider(model={self.model!r}, threads={self._threads}, "
                f"streams={self._streams}, window_tokens={self.window_tokens})")


@dataclass(frozen=True)
class _Piece:
    """One sequence to decode: text ``text`` whole (``window`` 0), or one window of it
    (``window``: the text's own tokens in it, the weight of its vector)."""

    text: int
    ids: list[int]
    window: int


class _Stream:
    """A decode stream beside a ``Llama`` object's own context: a llama.cpp context of its own
    on the same model (the weights are shared), with the same parameters but ``threads``
    threads, and a batch of its own. It has the attributes :func:`decode_pooled` drives."""

    def __init__(self, llm: Any, threads: int) -> None:
        import llama_cpp
        from llama_cpp import _internals as internals

        params = llama_cpp.llama_context_params.from_buffer_copy(llm.context_params)
        params.n_threads = params.n_threads_batch = threads
        with contextlib.ExitStack() as stack:
            self._ctx = stack.enter_context(contextlib.closing(
                internals.LlamaContext(model=llm._model, params=params, verbose=False)))
            self._batch = stack.enter_context(contextlib.closing(
                internals.LlamaBatch(n_tokens=llm.n_batch, embd=0, n_seq_max=1, verbose=False)))
            self._stack = stack.pop_all()

    def pooling_type(self) -> int:
        return self._ctx.pooling_type()

    def close(self) -> None:
        self._stack.close()


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
