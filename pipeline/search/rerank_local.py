"""``rerank.provider: "local"``: a GGUF cross-encoder run in process by llama-cpp-python.

``rerank.modelPath`` is a ``.gguf`` file, an ``hf:<owner>/<repo>/<file.gguf>`` URI or an http(s)
URL, found or downloaded as ``local.modelPath`` is (:class:`~pipeline.embeddings.llama_model.
ModelFile`), and loaded once, with rank pooling (``LLAMA_POOLING_TYPE_RANK``: llama.cpp runs the
model's classification head on the [CLS] state), ``local.threads`` threads, and a context of the
model's trained length. A GGUF whose own pooling is not RANK (an embedding model) is refused.

Each (query, document) pair is one sequence, decoded alone (several sequences in one call with
a context over the trained positions abort the process; see :mod:`pipeline.embeddings.local`).
Its tokens are what llama.cpp's server builds (``format_prompt_rerank``): the model's ``rerank``
chat template with ``{query}`` and ``{document}`` filled in when it has one, else
``[BOS] query [EOS] [SEP] document [EOS]``, each special token only where the vocabulary asks
for it (for a BERT cross-encoder converted by memq: ``[CLS] query [SEP] document [SEP]``). A
pair longer than the context is cut longest-first (the longer of query and document loses its
last token, again and again), as HF's cross-encoders truncate; nothing raises for length.

A single-output head gives a logit, returned through the logistic function (the probability
sentence-transformers' ``CrossEncoder`` reports); a head with several outputs (llama.cpp already
normalised them, e.g. Qwen3's yes/no softmax) gives its first output as is. Every failure is a
:class:`~pipeline.search.rerank_wire.RerankFailed` of kind "model", whose reason names the file
and never the query or a document.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline.embeddings.llama_import import import_llama_cpp
from pipeline.embeddings.llama_model import ModelFile, decode_pooled, load_llama
from pipeline.errors import EmbeddingError, ProviderUnavailable, RerankFailed
from pipeline.search.rerank_wire import logistic

__all__ = ["LocalScorer", "fit_pair"]

MAX_REASON_CHARS = 300


def fit_pair(query: list[int], document: list[int], room: int) -> tuple[list[int], list[int]]:
    """``query`` and ``document`` cut longest-first to ``room`` tokens together."""
    q, d = len(query), len(document)
    while q + d > room:
        if d >= q:
            d -= 1
        else:
            q -= 1
    return query[:q], document[:d]


class LocalScorer:
    """One reranker GGUF in llama.cpp, loaded when built and kept; one pair at a time.

    Thread-safe (a lock around the model). A process forked after loading loads its own copy.
    """

    provider = "local"

    def __init__(self, model_path: str, *, threads: int | None = None,
                 cache_dir: Path | str | None = None) -> None:
        if threads is not None and threads < 1:
            raise ValueError("threads must be >= 1")
        self._threads = threads or os.cpu_count() or 1
        try:
            self._file = ModelFile(model_path, cache_dir, what="rerank.modelPath: model")
        except ProviderUnavailable as exc:
            raise RerankFailed("model", _short(str(exc))) from None
        self.model = self._file.model
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._llm: Any = None
        with self._lock:
            self._load()

    def __repr__(self) -> str:
        return f"LocalScorer(model={self.model!r}, threads={self._threads})"

    # -- loading ---------------------------------------------------------------------------

    def _check_fork(self) -> None:
        """In a process forked after loading, start afresh: the inherited native state (and a
        lock another thread may have held) is not safe to use; the child loads its own copy."""
        if self._pid != os.getpid():
            self._lock = threading.Lock()
            self._llm, self._pid = None, os.getpid()

    def _load(self) -> Any:
        """The model, loaded if needed. The caller holds ``self._lock``."""
        if self._llm is not None:
            return self._llm
        try:
            llama_cpp = import_llama_cpp()
            path = self._file.file()
            llm, n_ctx = load_llama(path, self._threads,
                                    pooling_type=llama_cpp.LLAMA_POOLING_TYPE_RANK)
        except (ProviderUnavailable, ImportError) as exc:
            raise RerankFailed("model", _short(str(exc))) from None
        if (problem := _not_a_reranker(llm)) is not None:
            llm.close()
            raise RerankFailed("model", _short(f"{path} is not a reranker: {problem}"))
        self._configure(llm, n_ctx)
        self._llm = llm
        return llm

    def _configure(self, llm: Any, n_ctx: int) -> None:
        """Read what building a pair needs from the model's vocabulary."""
        import llama_cpp

        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        null = llama_cpp.LLAMA_TOKEN_NULL
        eos = llama_cpp.llama_vocab_eos(vocab)
        eos = llama_cpp.llama_vocab_sep(vocab) if eos == null else eos
        bos, sep = llama_cpp.llama_vocab_bos(vocab), llama_cpp.llama_vocab_sep(vocab)
        self._bos = [bos] if llama_cpp.llama_vocab_get_add_bos(vocab) and bos != null else []
        self._eos = [eos] if llama_cpp.llama_vocab_get_add_eos(vocab) and eos != null else []
        self._sep = [sep] if llama_cpp.llama_vocab_get_add_sep(vocab) and sep != null else []
        template = llama_cpp.llama_model_chat_template(llm.model, b"rerank")
        self._template = template.decode("utf-8", errors="replace") if template else None
        self._n_ctx = n_ctx
        self._outputs = max(1, int(llama_cpp.llama_model_n_cls_out(llm.model)))

    # -- scoring ---------------------------------------------------------------------------

    def pair_tokens(self, query: str, document: str) -> list[int]:
        """The tokens llama.cpp sees for one pair (see the module docstring)."""
        self._check_fork()
        with self._lock:
            return self._pair(self._load(), query, document)

    def _tokens(self, llm: Any, text: str, *, special: bool = False) -> list[int]:
        data = text.encode("utf-8", errors="replace")  # lone surrogates cannot crash us
        return list(llm.tokenize(data, add_bos=False, special=special)) if data else []

    def _pair(self, llm: Any, query: str, document: str) -> list[int]:
        if self._template is not None:
            return self._templated(llm, query, document)
        room = self._n_ctx - len(self._bos) - 2 * len(self._eos) - len(self._sep)
        q, d = fit_pair(self._tokens(llm, query), self._tokens(llm, document), max(room, 2))
        return self._bos + q + self._eos + self._sep + d + self._eos

    def _templated(self, llm: Any, query: str, document: str) -> list[int]:
        """The ``rerank`` template filled in; a pair too long loses the document's tail."""
        assert self._template is not None

        def fill(doc: str) -> list[int]:
            prompt = self._template.replace("{query}", query).replace("{document}", doc)
            return self._tokens(llm, prompt, special=True)

        ids = fill(document)
        over = len(ids) - self._n_ctx
        if over > 0:
            doc_ids = self._tokens(llm, document)
            keep = doc_ids[: max(0, len(doc_ids) - over)]
            ids = fill(llm.detokenize(keep).decode("utf-8", errors="ignore"))[: self._n_ctx]
        return ids

    def logits(self, query: str, documents: Sequence[str]) -> list[float]:
        """The rank head's first output for each document, as llama.cpp gives it."""
        out: list[float] = []
        self._check_fork()
        with self._lock:
            llm = self._load()
            for document in documents:
                ids = self._pair(llm, query, document)
                try:
                    pooled = decode_pooled(llm, ids, self._outputs)
                except EmbeddingError as exc:
                    raise RerankFailed("model", _short(f"{self.model}: {exc}")) from None
                value = float(pooled[0]) if pooled is not None else math.nan
                if not math.isfinite(value):
                    raise RerankFailed("model", f"{self.model}: llama.cpp gave no finite score "
                                                f"for a pair of {len(ids)} tokens")
                out.append(value)
        return out

    def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        """Relevance of each document in 0..1: the logistic of a single logit, or the first
        of several outputs llama.cpp has normalised."""
        raw = self.logits(query, documents)
        return [logistic(x) for x in raw] if self._outputs == 1 else raw

    def close(self) -> None:
        """Free the model."""
        with self._lock:
            if self._llm is not None and self._pid == os.getpid():
                self._llm.close()
            self._llm = None


def _not_a_reranker(llm: Any) -> str | None:
    """Why the loaded GGUF is not a reranker (its own pooling is not RANK), if it is not."""
    import llama_cpp

    meta = getattr(llm, "metadata", None) or {}
    arch = meta.get("general.architecture", "")
    pooling = meta.get(f"{arch}.pooling_type")
    if pooling is None:
        return "the GGUF states no pooling type (a cross-encoder's is rank)"
    if str(pooling) != str(llama_cpp.LLAMA_POOLING_TYPE_RANK):
        names = {0: "none", 1: "mean", 2: "cls", 3: "last"}
        shown = names.get(int(pooling), str(pooling)) if str(pooling).isdigit() else pooling
        return f"its pooling is {shown}, not rank (an embedding model?)"
    return None


def _short(text: str) -> str:
    return " ".join(text.split())[:MAX_REASON_CHARS]
