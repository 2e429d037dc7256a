"""Superseded recency (``query.hybrid.temporalDecay.mode: "superseded"``, memq's own, issue 36).

OpenClaw's temporal decay lowers every dated note by its age, so an old note that alone answers
falls under unrelated notes of this week (LoCoMo R@6 0.86 → 0.36). Recency is there for one
case: a newer note says the same thing differently (a fact changed) and should come first.
This rule demotes an older candidate only in that case: when a candidate of the same result set
written later (strictly: a later note date, or modification time for an undated file) has a
chunk vector whose cosine with the older chunk's is at least ``similarity``, a score of at least
``minScore`` (the configured one: it would be shown) and at least ``band`` of the older one's.
The older candidate then scores one millionth under the best such newer candidate (and under
any newer one already placed there), so the newer one comes first and the older one stays next
to it. Every other candidate keeps its whole score: evergreen files (``MEMORY.md``, ``USER.md``,
undated files under ``memory/``) are neither demoted nor demote, and a chunk without a vector
(still pending) resembles nothing.

Measured variants not kept (docs/search.md): placing it under the weakest such newer candidate
(the same changed facts, LoCoMo conv-26 R@6 0.778 instead of 0.844), multiplying by the decay
of the time between the two (old unique answers cut under ``minScore``), and no ``minScore``
condition (a recent note that only names the subject buries the old answer).

Candidates are visited newest first, so a newer candidate's own demotion is settled before
older ones are placed under it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from pipeline.search.fusion import Candidate

#: How far under the newer candidate an older one is placed (scores are shown with 6 decimals).
STEP = 1e-6


def similarities(rows: Mapping[int, np.ndarray], columns: Mapping[int, np.ndarray]
                 ) -> dict[int, dict[int, float]]:
    """Cosine of each chunk vector of ``rows`` with each of ``columns`` (rowid -> rowid ->
    cosine). Computed with ``np.einsum``, not BLAS: OpenBLAS wakes a thread per core for so
    small a product, which cost 13 ms a search on a busy machine against 0.5 ms."""
    def unit(vectors: Mapping[int, np.ndarray]) -> np.ndarray:
        stacked = np.stack([np.asarray(v, dtype=np.float32) for v in vectors.values()])
        norms = np.linalg.norm(stacked, axis=1, keepdims=True)
        return stacked / np.where(norms > 0, norms, 1.0)

    sims = np.einsum("id,jd->ij", unit(rows), unit(columns)).tolist()
    return {a: dict(zip(columns, row, strict=True)) for a, row in zip(rows, sims, strict=True)}


def supersede(candidates: Sequence[Candidate], written: Mapping[int, float | None],
              vectors: Mapping[int, np.ndarray], *, similarity: float, band: float,
              shown: float) -> dict[int, float]:
    """Demote, in place, each candidate that a newer look-alike supersedes (see the module
    doc); ``written``: each candidate's note time (None: evergreen); ``vectors``: the chunk
    vectors (absent: none); ``shown``: the score a superseding candidate needs (``minScore``).
    Returns the factor each demoted candidate's score was multiplied by (rowid -> new / old)."""
    dated = [c for c in candidates
             if written.get(c.rowid) is not None and c.rowid in vectors]
    dated.sort(key=lambda c: (-(written[c.rowid] or 0.0), -c.score, c.rowid))
    # Only a candidate shown can supersede, and a demotion only lowers a score: those shown now.
    able = [c for c in dated[:-1] if c.score >= shown]
    if not able:
        return {}
    sims = similarities({c.rowid: vectors[c.rowid] for c in dated},
                        {c.rowid: vectors[c.rowid] for c in able})
    factors: dict[int, float] = {}
    for old in dated[1:]:
        when, mine = written[old.rowid] or 0.0, sims[old.rowid]
        over = [n.score for n in able if (written[n.rowid] or 0.0) > when
                and n.score >= max(shown, band * old.score) and mine[n.rowid] >= similarity]
        if not over or old.score <= 0:
            continue
        score = round(max(over) - STEP, 6)
        while any(abs(x - score) < STEP / 2 for x in over):  # a newer one already placed there
            score = round(score - STEP, 6)
        score = max(0.0, score)
        if score < old.score:
            factors[old.rowid] = score / old.score
            old.score = score
    return factors
