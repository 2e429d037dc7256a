"""A configured GGUF file, loaded into llama-cpp-python: what the local embedding provider
(:mod:`pipeline.embeddings.local`) and the local reranker (:mod:`pipeline.search.rerank_local`)
share.

* :class:`ModelFile`: a ``modelPath`` as configured (a file on disk, or an ``hf:``/http(s)
  source, downloaded into the cache on first use: :mod:`pipeline.embeddings.model_source`,
  :mod:`pipeline.embeddings.download`) and the stable model id it gives.
* :func:`load_llama`: the model in an embedding context of the model's trained size (capped),
  flash attention when the build can use it, ``threads`` set explicitly, a vocabulary that
  would abort the process refused first (see :mod:`pipeline.embeddings.local` for why).
* :func:`decode_pooled`: one sequence through the context, its pooled output (an embedding, or
  with rank pooling the rank head's scores).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pipeline.embeddings.gguf_header import trained_context_length
from pipeline.embeddings.llama_import import import_llama_cpp
from pipeline.embeddings.model_source import ModelSource, is_downloadable, model_source
from pipeline.errors import EmbeddingError, ProviderUnavailable

__all__ = ["FALLBACK_CONTEXT", "MAX_CONTEXT", "ModelFile", "decode_pooled", "load_llama",
           "tokenizer_problem"]

# Largest context ever allocated. Non-causal attention over n tokens costs O(n^2) memory per
# head, and memq's chunks are at most 2048 bytes anyway; longer inputs are windowed.
MAX_CONTEXT = 2048
# Used when a GGUF does not state its trained context.
FALLBACK_CONTEXT = 512


class ModelFile:
    """A configured ``modelPath``: a ``.gguf`` path, an ``hf:<owner>/<repo>/<file>`` URI or an
    http(s) URL. A missing path or a malformed source raises ProviderUnavailable here; a
    download happens in :meth:`file`. ``what`` names the setting in messages."""

    def __init__(self, spec: str | Path, cache_dir: Path | str | None = None, *,
                 what: str = "local model") -> None:
        text = str(spec)
        self.source: ModelSource | None = None
        self.path: Path | None = None
        if is_downloadable(text):
            self.source = model_source(text, cache_dir)
            name = self.source.file_name
        else:
            self.path = Path(text).expanduser()
            if not self.path.is_file():
                raise ProviderUnavailable(f"{what} file not found: {self.path}")
            name = self.path.name
        #: The stable id: the file name without ".gguf" (the cached default model by path has
        #: the same id as no path at all).
        self.model = name[: -len(".gguf")] if name.lower().endswith(".gguf") else name

    def file(self) -> Path:
        """The GGUF on disk: the configured file, or the downloaded one (downloaded now if it
        is not in the cache yet). Raises ProviderUnavailable when it cannot be had."""
        if self.source is None:
            assert self.path is not None
            return self.path
        found = self.source.present()
        if found is not None:
            return found
        from pipeline.embeddings.download import fetch_model

        return fetch_model(self.source)


def load_llama(path: Path, threads: int, *, pooling_type: int | None = None) -> tuple[Any, int]:
    """``path`` loaded by llama.cpp in an embedding context, and the context's usable length
    (the trained context capped at ``MAX_CONTEXT``; not ``Llama.n_ctx()``, which llama.cpp pads
    up past the position-embedding table). ``pooling_type`` forces a pooling (e.g.
    ``LLAMA_POOLING_TYPE_RANK``); None keeps the GGUF's. Raises ProviderUnavailable."""
    try:
        llama_cpp = import_llama_cpp()
    except ImportError as exc:
        raise ProviderUnavailable(f"llama-cpp-python is not installed: {exc}") from exc
    try:
        n_ctx_train = trained_context_length(path)
    except Exception as exc:
        raise ProviderUnavailable(f"{path} is not a readable GGUF file: {exc}") from exc
    n_ctx = min(n_ctx_train or FALLBACK_CONTEXT, MAX_CONTEXT)
    extra = {} if pooling_type is None else {"pooling_type": pooling_type}
    llm = None
    errors: list[str] = []
    # Flash attention measured ~1.7x faster for 200-token chunks on CPU (same vectors to
    # cosine > 0.999); if this llama.cpp build or model cannot use it, load without.
    for flash in (True, False):
        try:
            llm = llama_cpp.Llama(
                model_path=str(path),
                embedding=True,
                n_ctx=n_ctx,
                n_batch=n_ctx,
                n_ubatch=n_ctx,
                n_threads=threads,
                n_threads_batch=threads,
                flash_attn=flash,
                verbose=False,
                **extra,
            )
            break
        except Exception as exc:
            errors.append(f"{exc}")
    if llm is None:
        raise ProviderUnavailable(f"llama.cpp could not load {path}: {'; '.join(errors)}")
    if problem := tokenizer_problem(llama_cpp, llm):
        llm.close()
        raise ProviderUnavailable(f"{path}: {problem}")
    return llm, min(n_ctx, llm.n_ctx())


def decode_pooled(llm: Any, ids: list[int], width: int) -> np.ndarray | None:
    """Run one sequence (at most the context's length) through ``llm`` and return the first
    ``width`` floats of its pooled output (float32), or None when the context does not pool
    (the token vectors are then at ``llama_get_embeddings``). Raises EmbeddingError."""
    import llama_cpp

    ctx, batch = llm._ctx, llm._batch  # the same objects Llama.embed() drives
    ctx.kv_cache_clear()
    batch.reset()
    batch.add_sequence(ids, 0, True)
    try:
        ctx.decode(batch)
    except RuntimeError as exc:
        raise EmbeddingError(f"llama.cpp failed to decode {len(ids)} tokens: {exc}") from exc
    finally:
        batch.reset()
    if int(llm.pooling_type()) == llama_cpp.LLAMA_POOLING_TYPE_NONE:
        return None
    ptr = llama_cpp.llama_get_embeddings_seq(ctx.ctx, 0)
    if not ptr:
        raise EmbeddingError("llama.cpp returned no pooled output")
    return np.ctypeslib.as_array(ptr, shape=(width,)).astype(np.float32)


def tokenizer_problem(llama_cpp: Any, llm: Any) -> str | None:
    """Why tokenising with special tokens would GGML_ASSERT (abort the process), if it would.

    llama.cpp asserts that [CLS]/[SEP] exist for a WordPiece vocabulary, and that BOS/EOS exist
    when the vocabulary asks for them to be added; a hand-made GGUF can lack them.
    """
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    null = llama_cpp.LLAMA_TOKEN_NULL
    if llama_cpp.llama_vocab_type(vocab) == llama_cpp.LLAMA_VOCAB_TYPE_NONE:
        return "the GGUF has no tokenizer vocabulary"
    bos, eos = llama_cpp.llama_vocab_bos(vocab), llama_cpp.llama_vocab_eos(vocab)
    if llama_cpp.llama_vocab_type(vocab) == llama_cpp.LLAMA_VOCAB_TYPE_WPM:
        if bos == null or llama_cpp.llama_vocab_sep(vocab) == null:
            return "WordPiece vocabulary without valid [CLS]/[SEP] token ids"
        return None
    if llama_cpp.llama_vocab_get_add_bos(vocab) and bos == null:
        return "the vocabulary adds a BOS token but has none"
    if llama_cpp.llama_vocab_get_add_eos(vocab) and eos == null:
        return "the vocabulary adds an EOS token but has none"
    return None
