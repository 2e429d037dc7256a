"""The ranking after the scan, in one pass, for a reader that holds the store in memory.

A held hybrid search (:class:`~pipeline.search.hybrid.HeldCopies` current: vectors, BM25
statistics and chunk rows) fuses a few dozen candidates. The general path
(:mod:`pipeline.search.fusion`, :mod:`pipeline.search.entries`) builds an object per
candidate, then a dict look-up or two per candidate per stage (the exact cosines, the merge,
each file's decay, the entry values). Here one gather reads the candidates' exact cosines from
the held matrix and one their query-independent weights, worked out once per copy as it loads
(:class:`RowArrays`: the file's decay date, the importance multiplier, the project flags);
the merge, decay (one :func:`~pipeline.search.decay.multiplier` per distinct file date),
the multipliers, the rounding and the (score, rowid) order are then a few float operations
per candidate in one loop.

The numbers are the general path's, operation for operation (the same float64 products and
sums in the same order, :func:`math.exp` for decay, Python's :func:`round`), so the hits and
scores are the same (``tests/test_fused_ranking.py`` compares the two on random stores).
Superseded recency (the default, :mod:`pipeline.search.superseded`) runs after, over the
fused scores and note times (:func:`rescored`). Exact-path matches (a query that
names a file), reciprocal rank fusion, a reranker, and vector-only or keyword-only searches
take the general path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.search import decay, weights
from pipeline.store.matrix import VectorMatrix
from pipeline.store.reads import WeightRow
from pipeline.store.rows import ChunkRows

#: The name of a held copy's :class:`RowArrays` in :attr:`ChunkRows.derived`.
ARRAYS = "fused-ranking"


#: The columns of :attr:`RowArrays.table`, and the flags of its last column.
WRITTEN, IMPORTANCE, FLAGS = 0, 1, 2
KEYED, INELIGIBLE = 1.0, 2.0


@dataclass(frozen=True)
class RowArrays:
    """What a search weighs a chunk by that does not depend on the query, a row of
    ``table`` per chunk (``ids`` ascending): its file's decay date
    (:func:`~pipeline.search.decay.note_time`; NaN: evergreen), its importance multiplier and
    a flag: :data:`INELIGIBLE` (an unreadable project annotation: never returned),
    :data:`KEYED` (project keys, whose multiplier depends on the active keys) or 0."""

    ids: np.ndarray
    table: np.ndarray

    @classmethod
    def of(cls, rows: Mapping[int, WeightRow],
           written: dict[tuple[str, int | None], float | None]) -> RowArrays:
        """The arrays of ``rows``; ``written``: each file's decay date, filled here."""
        ids = np.sort(np.fromiter(rows, dtype=np.int64, count=len(rows)))
        table = []
        for rowid in ids.tolist():
            _, path, mtime_ns, importance, _, project = rows[rowid][:6]
            when = written.get((path, mtime_ns), math.inf)
            if when == math.inf:
                when = written[path, mtime_ns] = decay.note_time(path, mtime_ns)
            table.append((math.nan if when is None else when,
                          1.0 if importance is None
                          else weights.importance_multiplier(importance),
                          0.0 if not project else KEYED if weights.project_eligible(project)
                          else INELIGIBLE))
        return cls(ids, np.array(table, dtype=np.float64).reshape(len(ids), 3))

    def positions(self, rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where ``rowids`` are in :attr:`ids`, and which of them are there at all."""
        if not len(self.ids):
            return np.zeros(len(rowids), dtype=np.int64), np.zeros(len(rowids), dtype=bool)
        at = np.minimum(np.searchsorted(self.ids, rowids), len(self.ids) - 1)
        return at, self.ids[at] == rowids


def prepare(copy: ChunkRows) -> None:
    """Work out ``copy``'s :class:`RowArrays` (a :class:`~pipeline.store.rows.RowsCache`'s
    ``prepare``: in the background, as the copy loads)."""
    copy.derived[ARRAYS] = RowArrays.of(copy.rows, copy.written)


def arrays_of(copy: ChunkRows) -> RowArrays:
    """``copy``'s :class:`RowArrays`, worked out now if it has none yet."""
    found = copy.derived.get(ARRAYS)
    if found is None:
        prepare(copy)
        found = copy.derived[ARRAYS]
    return found


@dataclass(frozen=True)
class Fused:
    """The candidates after fusion, decay and entry weights, best first (shown score
    descending, then rowid); lists parallel. ``held``: whether the held rows have the chunk
    (one they lack was deleted since it was ranked: dropped after the selection, as on the
    general path). ``written``: each one's note time (:func:`~pipeline.search.decay.
    note_time`; None: evergreen, or not held), for superseded recency."""

    rowids: list[int]
    scores: list[float]
    vector: list[float]
    text: list[float]
    held: list[bool]
    written: list[float | None]


def rank(rows: ChunkRows, matrix: VectorMatrix, query_vector: np.ndarray,
         vector_hits: Sequence[int], text: Mapping[int, float],
         merge_weights: tuple[float, float], *, decay_days: float | None, decay_floor: float,
         now: float, projects: Sequence[str] | None, decimals: int) -> Fused:
    """The weighted merge of the vector side's ``vector_hits`` and the keyword scores
    ``text`` (each candidate with a vector scored by its exact cosine), then decay
    (``decay_days``: the half-life, None when off), importance and project multipliers, the
    scores rounded to ``decimals`` and ordered; as :func:`pipeline.search.fusion.weighted`
    and :func:`pipeline.search.entries.weigh` without exact-path matches.

    The arrays are read in one gather each (cosines, weights); the arithmetic per candidate
    is a few float operations in Python, cheaper than a NumPy call each over a few dozen."""
    order = list(dict.fromkeys([*vector_hits, *text]))
    ids = np.fromiter(order, dtype=np.int64, count=len(order))
    has, sims = matrix.cosine_array(ids, query_vector)
    arrays = arrays_of(rows)
    at, held = arrays.positions(ids)
    cosine = iter(sims.tolist())
    wv, wt = merge_weights
    active = weights.active_keys(projects)
    decayed: dict[float, float] = {}  # per file date
    out = []
    for rowid, vector_found, known, (written, importance, flags) in zip(
            order, has.tolist(), held.tolist(), arrays.table[at].tolist(), strict=True):
        t = text.get(rowid, 0.0)
        if vector_found:
            v = next(cosine)
            score = wv * v + wt * t
        else:
            v, score = 0.0, (t if wt > 0 else 0.0)
        factor = 1.0
        if known:  # else deleted since it was ranked: dropped after the selection
            if flags == INELIGIBLE:
                continue
            if decay_days is not None and written == written:  # NaN: evergreen
                factor = decayed.get(written, -1.0)
                if factor < 0:
                    factor = decayed[written] = decay.multiplier(written, now, decay_days,
                                                                 decay_floor)
            factor *= importance
            if flags == KEYED and active is not None:
                factor *= weights.project_multiplier(rows.rows[rowid][5], active)
        out.append((round(score * factor, decimals), rowid, v, t, known,
                    written if known and written == written else None))  # NaN: evergreen
    out.sort(key=lambda c: (-c[0], c[1]))
    return Fused(*([c[n] for c in out] for n in (1, 0, 2, 3, 4, 5)))


def rescored(ranked: Fused, scores: Sequence[float]) -> Fused:
    """``ranked`` with new ``scores`` (parallel to its lists), in order again (score
    descending, then rowid)."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], ranked.rowids[i]))
    return Fused(*([column[i] for i in order] for column in (
        ranked.rowids, scores, ranked.vector, ranked.text, ranked.held, ranked.written)))
