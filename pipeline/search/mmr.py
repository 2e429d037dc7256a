"""Maximal marginal relevance: trade a little relevance for less repetition.

Greedy, as OpenClaw: each step takes the item maximising λ·relevance − (1−λ)·max similarity to
the items already taken, relevance min-max normalised over the pool. Similarity is Jaccard over
Unicode word tokens (CJK as bigrams, :func:`pipeline.store.tokens.words`), and two texts with
no tokens are not similar (OpenClaw's ASCII-only tokens made every CJK snippet identical).
Scores are not changed, only the order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from pipeline.store.tokens import words

T = TypeVar("T")


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def mmr_order(items: Sequence[T], scores: Sequence[float], texts: Sequence[str],
              lambda_: float) -> list[T]:
    """``items`` re-ordered by MMR; ``scores`` and ``texts`` are parallel to ``items``."""
    if len(items) < 2:
        return list(items)
    lo, hi = min(scores), max(scores)
    rel = [(s - lo) / (hi - lo) if hi > lo else 1.0 for s in scores]
    tokens = [frozenset(words(t)) for t in texts]
    left = list(range(len(items)))
    nearest = [0.0] * len(items)  # max similarity to anything taken so far
    order: list[int] = []
    while left:
        best = max(left, key=lambda i: (lambda_ * rel[i] - (1 - lambda_) * nearest[i], -i))
        order.append(best)
        left.remove(best)
        for i in left:
            nearest[i] = max(nearest[i], jaccard(tokens[i], tokens[best]))
    return [items[i] for i in order]
