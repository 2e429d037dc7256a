"""The reranker stage: a cross-encoder re-orders the best fused candidates (``rerank.*``).

Off by default. When on, :func:`pipeline.search.hybrid.search` hands it the candidates
that survived fusion, temporal decay and ``minScore``, best first; the first ``topN`` of them
go to the cross-encoder with the query, and come back in its order, each scored by its
relevance (a probability in 0..1: an answer holding any score outside 0..1 is read as logits,
as llama.cpp's server gives, and passed through the logistic function) times the note's
temporal-decay multiplier, so an old note still counts less. The candidates beyond ``topN``
follow in the fused order; MMR and ``maxResults`` come after. ``minScore`` and decay are
calibrated on fused scores, so the reranker never changes which candidates are eligible,
only their order and shown scores.

A reranker that cannot answer (timeout, connection, HTTP error, an answer that is not the
``{results: [{index, relevance_score}]}`` shape) changes nothing: the fused order stands, the
answer says why in its ``rerank`` note, a warning is logged once per outage (never the key),
and for ``RETRY_S`` seconds the endpoint is not asked again. The HTTP client lives in
:mod:`pipeline.search.rerank_http` (imported only when a reranker is configured: a one-shot
search without one imports no httpx); ``rerank.provider: "local"``, a GGUF cross-encoder in
llama.cpp, in :mod:`pipeline.search.rerank_local` (a missing, unreadable or wrong model file is
an outage like any other: the fused order stands and the note says why).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from pipeline.config import LocalSettings, RerankSettings
from pipeline.errors import RerankFailed
from pipeline.search.fusion import Candidate

log = logging.getLogger(__name__)

#: How long a failed reranker is left alone before it is asked again.
RETRY_S = 30.0
SCORE_DECIMALS = 6


class Scorer(Protocol):
    """A cross-encoder: one relevance score per document, in the documents' order."""

    provider: str
    model: str

    def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        """Relevance of each document to ``query``; raises :class:`RerankFailed`."""
        ...

    def close(self) -> None:
        """Release the connection pool or the model."""
        ...


class Reranker:
    """The stage, with its scorer (built on first use by ``build``) and the outage it is in.

    Thread-safe: a long-running server searches from several threads. ``retry_s`` is how long
    a failed scorer is left alone; ``clock`` gives epoch seconds (tests).
    """

    def __init__(self, build: Callable[[], Scorer], *, provider: str, model: str, top_n: int,
                 retry_s: float = RETRY_S, clock: Callable[[], float] = time.time) -> None:
        self._build = build
        self._scorer: Scorer | None = None
        self.provider, self.model, self.top_n = provider, model, top_n
        self.retry_s = retry_s
        self._clock = clock
        self._lock = threading.Lock()
        self._outage: dict[str, Any] | None = None  # {kind, reason, since, retryAt}

    def apply(self, query: str, ranked: list[Candidate], texts: Sequence[str],
              factors: dict[int, float]) -> tuple[list[Candidate], int, dict[str, Any]]:
        """``ranked`` (best first; ``texts`` parallel) with its first ``top_n`` re-ordered by
        relevance × decay ``factors``; also how many were reranked (0 when it fell back) and
        the answer's ``rerank`` note."""
        head = min(self.top_n, len(ranked))
        note: dict[str, Any] = {"provider": self.provider, "model": self.model or None}
        if head == 0 or not query.strip():
            return ranked, 0, {**note, "reranked": 0}
        try:
            scores = self._scores(query, list(texts[:head]))
        except RerankFailed as exc:
            return ranked, 0, {**note, "reranked": 0, "fallback": "fused", **self._failed(exc)}
        scored = [dataclasses.replace(c, score=round(s * factors.get(c.rowid, 1.0),
                                                     SCORE_DECIMALS))
                  for c, s in zip(ranked[:head], scores, strict=True)]
        scored.sort(key=lambda c: -c.score)  # stable: equal relevance keeps the fused order
        return scored + ranked[head:], head, {**note, "reranked": head}

    def _scores(self, query: str, documents: list[str]) -> list[float]:
        with self._lock:
            outage = self._outage
            if outage is not None and self._clock() < outage["retryAt"]:
                raise RerankFailed(outage["kind"], outage["reason"])
            if self._scorer is None:
                self._scorer = self._build()
            scorer = self._scorer
        scores = scorer.scores(query, documents)
        with self._lock:
            if self._outage is not None:
                log.warning("reranker %s is back after %.0f s", self.provider,
                            self._clock() - self._outage["since"])
                self._outage = None
        return scores

    def _failed(self, exc: RerankFailed) -> dict[str, Any]:
        """Start (or extend) the outage; the note's ``kind, reason, since, retryAt``."""
        now = self._clock()
        with self._lock:
            if self._outage is None:
                log.warning("reranker %s unavailable (%s): %s; answering in the fused order "
                            "until it recovers", self.provider, exc.kind, exc.reason)
                self._outage = {"kind": exc.kind, "reason": exc.reason, "since": now}
            if now >= self._outage.get("retryAt", 0.0):
                self._outage["retryAt"] = now + self.retry_s
            return dict(self._outage)

    def close(self) -> None:
        """Close the scorer, if it was built."""
        with self._lock:
            scorer, self._scorer = self._scorer, None
        if scorer is not None:
            scorer.close()


def build_reranker(settings: RerankSettings, env: Mapping[str, str] | None = None, *,
                   local: LocalSettings | None = None) -> Reranker | None:
    """The configured reranker (None when ``rerank.enabled`` is false). Its scorer (the HTTP
    client, or the local model, loaded with ``local.threads`` from ``local.modelCacheDir``) is
    built on first use."""
    if not settings.enabled:
        return None
    model = settings.model
    if settings.provider == "local":
        local = local or LocalSettings()

        def build() -> Scorer:
            from pipeline.search.rerank_local import LocalScorer  # llama.cpp: only when used

            assert settings.model_path is not None  # RerankSettings requires it
            return LocalScorer(settings.model_path, threads=local.threads,
                               cache_dir=local.model_cache_dir)

        model = model or _local_model_id(settings.model_path, local)
    else:

        def build() -> Scorer:
            from pipeline.search.rerank_http import HttpScorer  # httpx: only with a reranker

            return HttpScorer(settings, env)

    return Reranker(build, provider=settings.provider, model=model, top_n=settings.top_n)


def _local_model_id(model_path: str | None, local: LocalSettings) -> str:
    """The local reranker's id for the note (its file name without ``.gguf``), or "" when
    the configured file cannot be named (the note then has none; the search says why)."""
    from pipeline.embeddings.llama_model import ModelFile
    from pipeline.errors import ProviderUnavailable

    try:
        return ModelFile(model_path or "", local.model_cache_dir).model
    except ProviderUnavailable:
        return ""
