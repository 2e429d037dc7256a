"""Maximal marginal relevance: trade a little relevance for less repetition.

Greedy, as OpenClaw: each step takes the item maximising λ·relevance − (1−λ)·max similarity to
the items already taken, relevance min-max normalised over the pool. Similarity is Jaccard over
Unicode word tokens (CJK as bigrams, :func:`pipeline.store.tokens.words`), and two texts with
no tokens are not similar (OpenClaw's ASCII-only tokens made every CJK snippet identical).
Scores are not changed, only the order.

A step looks at the items by relevance, best first, and stops at the first whose λ·relevance
(what it would score with no similarity at all) is below the best value found: no later item
can win. An item's tokens and its similarities to the items taken are computed only when it
is looked at, so a step costs a few Jaccard comparisons, not one per item left; ``limit``
stops after the first items taken (a search shows ``maxResults``). The order is the one the
plain greedy loop gives (``tests/test_mmr_order.py`` pins it).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

from pipeline.store.tokens import word_set

T = TypeVar("T")


def jaccard(a: frozenset[Hashable], b: frozenset[Hashable]) -> float:
    """|a ∩ b| / |a ∪ b|; 0 when either set is empty."""
    if not a or not b:
        return 0.0
    common = len(a & b)
    return common / (len(a) + len(b) - common)


class _Pool:
    """The items' relevance, tokens (read on first use) and nearest similarity to the taken."""

    def __init__(self, scores: Sequence[float], texts: Sequence[str],
                 word_sets: Callable[[int], frozenset[Hashable]] | None) -> None:
        lo, hi = min(scores), max(scores)
        self.rel = [(s - lo) / (hi - lo) if hi > lo else 1.0 for s in scores]
        self.texts = texts
        self.sets = word_sets or (lambda i: word_set(self.texts[i]))
        self.tokens: list[frozenset[Hashable] | None] = [None] * len(texts)
        self.nearest = [0.0] * len(texts)  # max similarity to the taken items folded in
        self.folded = [0] * len(texts)  # how many of the taken items that covers

    def words_of(self, i: int) -> frozenset[Hashable]:
        found = self.tokens[i]
        if found is None:
            found = self.tokens[i] = self.sets(i)
        return found

    def nearest_to(self, i: int, taken: list[int]) -> float:
        """Item ``i``'s max similarity to everything ``taken`` (folding in the new ones)."""
        folded = self.folded[i]
        if folded < len(taken):
            mine = self.words_of(i)
            near = self.nearest[i]
            if mine:  # jaccard, inline (a few dozen per search): 0 with an empty set
                size = len(mine)
                for j in taken[folded:]:
                    other = self.words_of(j)
                    if other:
                        common = len(mine & other)
                        similarity = common / (size + len(other) - common)
                        if similarity > near:
                            near = similarity
            self.nearest[i], self.folded[i] = near, len(taken)
        return self.nearest[i]


def mmr_order(items: Sequence[T], scores: Sequence[float], texts: Sequence[str],
              lambda_: float, limit: int | None = None,
              word_sets: Callable[[int], frozenset[Hashable]] | None = None) -> list[T]:
    """``items`` re-ordered by MMR; ``scores`` and ``texts`` are parallel to ``items``.
    ``limit``: only the first ``limit`` of that order (None: all of it). ``word_sets``: item
    ``i``'s word set, standing for :func:`~pipeline.store.tokens.word_set` of its text (any
    set whose sizes and overlaps are those: a held copy's word numbers,
    :mod:`pipeline.store.rows`); None: cut from ``texts``."""
    count = len(items) if limit is None else max(0, min(limit, len(items)))
    if len(items) < 2:
        return list(items)[:count]
    pool = _Pool(scores, texts, word_sets)
    rel = pool.rel
    left = sorted(range(len(items)), key=lambda i: (-rel[i], i))  # bounds non-increasing
    taken: list[int] = []
    while len(taken) < count:
        best, best_value = left[0], lambda_ * rel[left[0]] - (1 - lambda_) * pool.nearest_to(
            left[0], taken)
        for i in left[1:]:
            if lambda_ * rel[i] < best_value:  # similarity only lowers a value: none can win
                break
            value = lambda_ * rel[i] - (1 - lambda_) * pool.nearest_to(i, taken)
            if value > best_value or (value == best_value and i < best):
                best, best_value = i, value
        taken.append(best)
        left.remove(best)
    return [items[i] for i in taken]
