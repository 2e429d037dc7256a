"""Merging the two result lists into one ranking.

``weighted`` is OpenClaw's merge: score = wV·vector + wT·text with the weights normalised to
sum 1. Two differences fix reported failures: a keyword candidate the vector side did not
return is scored with its real cosine (the caller looks its vector up) rather than 0, and a
candidate that has no vector at all (still pending, or failed) is scored by its text score
alone, so a strong keyword hit is not capped at wT (0.3, under minScore 0.35: OpenClaw #25183).
A third fixes the ranking: the text score is the hit's BM25 as a share of the query's best
(:func:`share_of_best`), not OpenClaw's saturating r/(1+r), which gave every hit nearly the
same text score (nDCG@10 on SciFact train: 0.746 against 0.702; docs/search.md).

``rrf`` is weighted reciprocal rank fusion: Σ wᵢ / (k + rankᵢ), scaled by (k + 1) so a chunk
ranked first by every retriever scores 1.0 and minScore keeps a meaning.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.search.fts import bm25_to_score


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


def text_scores(ranks: dict[int, float]) -> dict[int, float]:
    """OpenClaw's keyword score of each hit, r/(1+r) of its BM25 magnitude r (in (0, 1))."""
    return {rowid: bm25_to_score(rank) for rowid, rank in ranks.items()}


def share_of_best(ranks: dict[int, float]) -> dict[int, float]:
    """Each hit's BM25 magnitude as a share of the query's best hit's (the best scores 1.0).

    The weighted merge's keyword score. r/(1+r) saturates: on a real corpus BM25 magnitudes
    run from about 5 to 30, so the tenth hit kept 0.97 of the best's score and BM25's order
    barely moved the fused ranking (hybrid under keyword-only on SciFact). A share of the best
    keeps BM25's proportions, and, being relative, does not depend on the corpus's size.
    """
    best = min(ranks.values(), default=0.0)  # FTS5 ranks: the most negative is the best
    if best >= 0:  # not a BM25 magnitude (a rank function other than bm25): fall back
        return relative(text_scores(ranks))
    return {rowid: rank / best for rowid, rank in ranks.items()}
