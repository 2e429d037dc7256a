"""Merging the two result lists into one ranking.

``weighted`` is OpenClaw's merge: score = wV·vector + wT·text with the weights normalised to
sum 1. Two differences, both fixing reported failures: a keyword candidate the vector side did
not return is scored with its real cosine (the caller looks its vector up) rather than 0, and a
candidate that has no vector at all (still pending, or failed) is scored by its text score
alone, so a strong keyword hit is not capped at wT (0.3, under minScore 0.35: OpenClaw #25183).

``rrf`` is weighted reciprocal rank fusion: Σ wᵢ / (k + rankᵢ), scaled by (k + 1) so a chunk
ranked first by every retriever scores 1.0 and minScore keeps a meaning.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Candidate:
    rowid: int
    vector_score: float = 0.0
    text_score: float = 0.0
    score: float = 0.0


def _ordered(merged: dict[int, Candidate]) -> list[Candidate]:
    return sorted(merged.values(), key=lambda c: (-c.score, c.rowid))


def weighted(vector: dict[int, float], text: dict[int, float],
             weights: tuple[float, float]) -> list[Candidate]:
    """OpenClaw's weighted merge; ``vector`` holds every candidate that has a vector."""
    wv, wt = weights
    merged: dict[int, Candidate] = {}
    for rowid in vector.keys() | text.keys():
        t = text.get(rowid, 0.0)
        if rowid in vector:
            v = vector[rowid]
            score = wv * v + wt * t
        else:
            v, score = 0.0, (t if wt > 0 else 0.0)
        merged[rowid] = Candidate(rowid, v, t, score)
    return _ordered(merged)


def rrf(vector: dict[int, float], text: dict[int, float], weights: tuple[float, float],
        k: int) -> list[Candidate]:
    """Weighted reciprocal rank fusion of two best-first rankings (dict order is rank order)."""
    merged: dict[int, Candidate] = {}
    for ranking, weight, side in ((vector, weights[0], "v"), (text, weights[1], "t")):
        for rank, (rowid, value) in enumerate(ranking.items(), 1):
            c = merged.setdefault(rowid, Candidate(rowid))
            c.score += (k + 1) * weight / (k + rank)
            if side == "v":
                c.vector_score = value
            else:
                c.text_score = value
    return _ordered(merged)


def relative(scores: dict[int, float]) -> dict[int, float]:
    """Scores divided by the best one (BM25 magnitudes depend on corpus size), order kept."""
    best = max(scores.values(), default=0.0)
    return {r: s / best for r, s in scores.items()} if best > 0 else dict(scores)
