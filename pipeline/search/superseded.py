"""Superseded recency (``query.hybrid.temporalDecay.mode: "superseded"``, memq's own, issue 36).

OpenClaw's temporal decay lowers every dated note by its age, so an old note that alone answers
falls under unrelated notes of this week (LoCoMo R@6 0.86 → 0.36). Recency is there for one
case: a newer note says the same thing differently (a fact changed) and should come first.
This rule demotes an older candidate only in that case: when a candidate of the same result set
written later (strictly: a later note date, or modification time for an undated file) has a
chunk vector whose cosine with the older chunk's is at least ``similarity``, and a score at
least ``band`` of the older one's. The older candidate then scores just under the lowest such
newer candidate (``demote="below"``, one millionth under: the newer one comes first, the older
one stays next to it), or is multiplied by the decay factor of the time between them
(``demote="decay"``). Every other candidate keeps its score: evergreen files
(``MEMORY.md``, ``USER.md``, undated files under ``memory/``) are neither demoted nor demote,
and a chunk without a vector (still pending) is never similar to anything.

Candidates are visited newest first, so a newer candidate's own demotion is settled before
older ones are placed under it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from pipeline.search import decay
from pipeline.search.fusion import Candidate

#: How far under the newer candidate an older one is placed (scores are shown with 6 decimals).
STEP = 1e-6
DEMOTIONS = ("below", "decay")


def similarities(vectors: Mapping[int, np.ndarray]) -> dict[tuple[int, int], float]:
    """Cosine of every pair of the given chunk vectors, keyed (smaller rowid, larger)."""
    ids = sorted(vectors)
    if len(ids) < 2:
        return {}
    unit = np.stack([np.asarray(vectors[r], dtype=np.float32) for r in ids])
    norms = np.linalg.norm(unit, axis=1, keepdims=True)
    unit = unit / np.where(norms > 0, norms, 1.0)
    sims = unit @ unit.T
    return {(a, b): float(sims[i, j]) for i, a in enumerate(ids) for j, b in enumerate(ids)
            if i < j}


def supersede(candidates: Sequence[Candidate], written: Mapping[int, float | None],
              vectors: Mapping[int, np.ndarray], *, similarity: float, band: float,
              half_life_days: float, demote: str = "below", shown: float = 0.0,
              pick: str = "min") -> dict[int, float]:
    """Demote, in place, each candidate that a newer look-alike supersedes (see the module
    doc); ``written``: each candidate's note time (None: evergreen); ``vectors``: the chunk
    vectors (absent: none). Returns the factor each demoted candidate's score was multiplied
    by (rowid -> new / old score)."""
    if demote not in DEMOTIONS:
        raise ValueError(f"demote must be one of {', '.join(DEMOTIONS)}, not {demote!r}")
    dated = [c for c in candidates
             if written.get(c.rowid) is not None and c.rowid in vectors]
    if len(dated) < 2:
        return {}
    sims = similarities({c.rowid: vectors[c.rowid] for c in dated})
    dated.sort(key=lambda c: (-(written[c.rowid] or 0.0), -c.score, c.rowid))
    factors: dict[int, float] = {}
    for i, old in enumerate(dated):
        when = written[old.rowid] or 0.0
        newer = [n for n in dated[:i] if (written[n.rowid] or 0.0) > when
                 and n.score >= band * old.score and n.score >= shown
                 and sims[min(n.rowid, old.rowid), max(n.rowid, old.rowid)] >= similarity]
        if not newer or old.score <= 0:
            continue
        if demote == "below":
            under = (min if pick == "min" else max)(n.score for n in newer)
            score = min(old.score, max(0.0, under - STEP))
        else:
            latest = max(written[n.rowid] or 0.0 for n in newer)
            score = old.score * decay.multiplier(when, latest, half_life_days)
        if score < old.score:
            factors[old.rowid] = score / old.score
            old.score = round(score, 6)
    return factors
