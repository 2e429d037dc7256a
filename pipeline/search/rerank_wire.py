"""What a ``/rerank`` answer means, and why a reranker could not give one: shared by the stage
(:mod:`pipeline.search.rerank`) and its scorers (:mod:`pipeline.search.rerank_http`,
:mod:`pipeline.search.rerank_local`), without the HTTP stack or llama.cpp."""

from __future__ import annotations

import math
from typing import Any

from pipeline.errors import RerankFailed

#: Why a reranker could not answer ("model": the local model file is missing, unreadable, not
#: a reranker, or llama.cpp failed on it).
KINDS = ("timeout", "connection", "http", "refused", "json", "key", "model")


def scores_from_answer(data: Any, count: int) -> list[float]:
    """The scores of a ``/rerank`` answer (Jina/Cohere ``results``, Voyage ``data``: a list of
    ``{index, relevance_score}``), one per document sent, in the order they were sent.

    Every document must be scored exactly once with a finite number, else
    :class:`RerankFailed` ("json"). Scores outside 0..1 mean logits: all go through the
    logistic function (the order is kept).
    """
    items = data.get("results", data.get("data")) if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise RerankFailed("json", "the answer has no results list")
    scores: dict[int, float] = {}
    for item in items:
        index = item.get("index") if isinstance(item, dict) else None
        score = item.get("relevance_score", item.get("score")) if isinstance(item, dict) else None
        if (not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count
                or index in scores):
            raise RerankFailed("json", f"the answer has a bad or repeated index: {index!r:.40}")
        if (not isinstance(score, int | float) or isinstance(score, bool)
                or not math.isfinite(score)):
            raise RerankFailed("json", f"document {index} has no numeric relevance_score")
        scores[index] = float(score)
    if len(scores) != count:
        raise RerankFailed("json", f"the answer scores {len(scores)} of {count} documents")
    ordered = [scores[i] for i in range(count)]
    if any(not 0.0 <= s <= 1.0 for s in ordered):
        ordered = [logistic(s) for s in ordered]
    return ordered


def logistic(x: float) -> float:
    """1 / (1 + e^-x), without overflow: a relevance logit as a probability."""
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))
