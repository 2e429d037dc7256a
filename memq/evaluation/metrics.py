"""Ranking metrics with trec_eval's conventions: relevance is a grade > 0, gains are graded.

``ranked`` is a best-first list of document ids; ``rel`` maps document id to its grade.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def ndcg_at(ranked: Sequence[str], rel: dict[str, int], k: int = 10) -> float:
    """nDCG@k with the exponential gain 2^grade − 1 (BEIR's and MTEB's choice)."""
    dcg = sum((2 ** rel.get(d, 0) - 1) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in rel.values() if g > 0), reverse=True)[:k]
    idcg = sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: Sequence[str], rel: dict[str, int], k: int) -> float:
    """Share of the relevant documents found in the first ``k``."""
    relevant = {d for d, g in rel.items() if g > 0}
    return len(relevant & set(ranked[:k])) / len(relevant) if relevant else 0.0


def mrr_at(ranked: Sequence[str], rel: dict[str, int], k: int = 10) -> float:
    """Reciprocal rank of the first relevant document within the first ``k``, else 0."""
    for i, d in enumerate(ranked[:k]):
        if rel.get(d, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def beir_metrics(ranked: Sequence[str], rel: dict[str, int]) -> dict[str, float]:
    """The four figures ``memq eval`` reports for one query of a BEIR collection."""
    return {"nDCG@10": ndcg_at(ranked, rel), "R@10": recall_at(ranked, rel, 10),
            "R@100": recall_at(ranked, rel, 100), "MRR@10": mrr_at(ranked, rel)}


def mean(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    """Per-key mean of per-query figures (an empty list gives an empty dict)."""
    if not rows:
        return {}
    return {key: sum(r[key] for r in rows) / len(rows) for key in rows[0]}
