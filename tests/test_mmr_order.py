"""MMR's pruned greedy loop (:func:`pipeline.search.mmr.mmr_order`) gives exactly the order of
the plain greedy loop it replaced (every item scored against everything taken at every step),
on random pools with tied scores, repeated and empty texts, CJK, and every ``limit``."""

from __future__ import annotations

import random
import string
from collections.abc import Sequence

import pytest

from pipeline.search.mmr import mmr_order
from pipeline.store.tokens import word_set, words

VOCAB = ["postgres", "migration", "berlin", "latency", "outage", "alice", "kafka", "budget",
         "会议", "纪要", "the", "a", "runbook", "osaka", "disk", "spike"]


def plain_mmr(items: Sequence[str], scores: Sequence[float], texts: Sequence[str],
              lambda_: float) -> list[str]:
    """The straightforward greedy MMR (memq's before the pruning, OpenClaw's loop)."""
    if len(items) < 2:
        return list(items)
    lo, hi = min(scores), max(scores)
    rel = [(s - lo) / (hi - lo) if hi > lo else 1.0 for s in scores]
    tokens = [frozenset(words(t)) for t in texts]

    def similarity(a: frozenset[str], b: frozenset[str]) -> float:
        return len(a & b) / len(a | b) if a and b else 0.0

    left = list(range(len(items)))
    nearest = [0.0] * len(items)
    order: list[int] = []
    while left:
        best = max(left, key=lambda i: (lambda_ * rel[i] - (1 - lambda_) * nearest[i], -i))
        order.append(best)
        left.remove(best)
        for i in left:
            nearest[i] = max(nearest[i], similarity(tokens[i], tokens[best]))
    return [items[i] for i in order]


def random_pool(rng: random.Random) -> tuple[list[str], list[float], list[str]]:
    n = rng.randint(0, 30)
    levels = [round(rng.random(), 2) for _ in range(rng.randint(1, 6))]  # tied scores
    scores = [rng.choice(levels) if rng.random() < 0.5 else round(rng.random(), 6)
              for _ in range(n)]
    texts: list[str] = []
    for _ in range(n):
        if texts and rng.random() < 0.15:
            texts.append(rng.choice(texts))  # a repeated text
        elif rng.random() < 0.05:
            texts.append("")  # no tokens
        else:
            texts.append(" ".join(rng.choices(VOCAB, k=rng.randint(1, 8))))
    return [f"item{i}" for i in range(n)], scores, texts


@pytest.mark.parametrize("lambda_", [0.0, 0.3, 0.5, 0.7, 0.9, 1.0])
def test_pruned_mmr_is_the_plain_greedy_order(lambda_: float) -> None:
    rng = random.Random(f"mmr-{lambda_}")
    for _ in range(400):
        items, scores, texts = random_pool(rng)
        expected = plain_mmr(items, scores, texts, lambda_)
        assert mmr_order(items, scores, texts, lambda_) == expected
        for limit in range(len(items) + 2):
            assert mmr_order(items, scores, texts, lambda_, limit=limit) == expected[:limit]


def test_limit_zero_and_tiny_pools() -> None:
    assert mmr_order([], [], [], 0.7) == []
    assert mmr_order(["a"], [0.5], ["x"], 0.7, limit=0) == []
    assert mmr_order(["a"], [0.5], ["x"], 0.7, limit=3) == ["a"]
    assert mmr_order(["a", "b"], [0.5, 0.9], ["x", "x"], 0.7, limit=1) == ["b"]


def test_word_sets_are_the_words_of_any_text() -> None:
    """MMR's token sets (an ASCII text cut by a byte table) hold exactly :func:`words`."""
    rng = random.Random(5)
    mixed = string.printable + "éÉß中文会议İ\u00a0\u2003_"
    for n in range(5000):
        chars = mixed if n % 3 == 0 else string.printable
        text = "".join(rng.choice(chars) for _ in range(rng.randint(0, 80)))
        assert word_set(text) == frozenset(w.encode() for w in words(text)), text
    assert word_set("Kafka_lag, KAFKA-lag!") == {b"kafka_lag", b"kafka", b"lag"}
