"""The ranking after the scan, over arrays, for a reader that holds the store in memory.

A held hybrid search (:class:`~pipeline.search.hybrid.HeldCopies` current: vectors, BM25
statistics and chunk rows) fuses a few dozen candidates. The general path
(:mod:`pipeline.search.fusion`, :mod:`pipeline.search.entries`) does it one Python object
and a few dict look-ups per candidate per stage; here the same arithmetic runs once over
arrays: the candidates' exact cosines from the held matrix, the weighted merge, temporal decay
(one :func:`~pipeline.search.decay.multiplier` per distinct file date among the candidates),
the importance and project multipliers from per-chunk arrays worked out once per copy
(:class:`RowArrays`), the rounding and the (score, rowid) order.

The numbers are the general path's, operation for operation (the same float64 products and
sums in the same order, :func:`math.exp` for decay, Python's :func:`round`), so the hits and
scores are the same (``tests/test_fused_ranking.py`` compares the two on random stores).
Exact-path matches (a query that names a file), the reciprocal rank fusion and a reranker
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


@dataclass(frozen=True)
class RowArrays:
    """What a search weighs a chunk by that does not depend on the query, per chunk (``ids``
    ascending, the rest parallel): its file's decay date (:func:`~pipeline.search.decay.
    note_time`; NaN: evergreen), its importance multiplier, whether its project annotation is
    unreadable (never returned), and whether it has project keys (whose multiplier depends on
    the active keys)."""

    ids: np.ndarray
    written: np.ndarray
    importance: np.ndarray
    ineligible: np.ndarray
    keyed: np.ndarray

    @classmethod
    def of(cls, rows: Mapping[int, WeightRow],
           written: dict[tuple[str, int | None], float | None]) -> RowArrays:
        """The arrays of ``rows``; ``written``: each file's decay date, filled here."""
        ids = np.sort(np.fromiter(rows, dtype=np.int64, count=len(rows)))
        dates, multipliers, bad, keyed = [], [], [], []
        for rowid in ids.tolist():
            row = rows[rowid]
            file = row[1], row[2]
            if file not in written:
                written[file] = decay.note_time(row[1], row[2])
            when = written[file]
            dates.append(math.nan if when is None else when)
            multipliers.append(weights.importance_multiplier(row[3]))
            bad.append(not weights.project_eligible(row[5]))
            keyed.append(bool(row[5]))
        return cls(ids, np.array(dates, dtype=np.float64),
                   np.array(multipliers, dtype=np.float64), np.array(bad, dtype=bool),
                   np.array(keyed, dtype=bool))

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
    general path)."""

    rowids: list[int]
    scores: list[float]
    vector: list[float]
    text: list[float]
    held: list[bool]


def _decay(written: np.ndarray, now: float, half_life_days: float, floor: float
           ) -> np.ndarray:
    """Each candidate's decay factor (NaN date: evergreen, 1): one
    :func:`~pipeline.search.decay.multiplier` per distinct date, the very same numbers."""
    factor = np.ones(len(written))
    dated = ~np.isnan(written)
    if np.any(dated):
        dates, back = np.unique(written[dated], return_inverse=True)
        factor[dated] = np.array([decay.multiplier(w, now, half_life_days, floor)
                                  for w in dates.tolist()])[back]
    return factor


def rank(rows: ChunkRows, matrix: VectorMatrix, query_vector: np.ndarray,
         vector_hits: Sequence[int], text: Mapping[int, float],
         merge_weights: tuple[float, float], *, decay_days: float | None, decay_floor: float,
         now: float, projects: Sequence[str] | None, decimals: int) -> Fused:
    """The weighted merge of the vector side's ``vector_hits`` and the keyword scores
    ``text`` (each candidate with a vector scored by its exact cosine), then decay
    (``decay_days``: the half-life, None when off), importance and project multipliers, the
    scores rounded to ``decimals`` and ordered; as :func:`pipeline.search.fusion.weighted`
    and :func:`pipeline.search.entries.weigh` without exact-path matches."""
    ids = np.fromiter(dict.fromkeys([*vector_hits, *text]), dtype=np.int64)
    has, sims = matrix.cosine_array(ids, query_vector)
    wv, wt = merge_weights
    vector = np.zeros(len(ids))
    vector[has] = sims
    keyword = np.fromiter((text.get(r, 0.0) for r in ids.tolist()), dtype=np.float64,
                          count=len(ids))
    score = np.where(has, wv * vector + wt * keyword, keyword if wt > 0 else 0.0)
    arrays = arrays_of(rows)
    at, held = arrays.positions(ids)
    factor = np.ones(len(ids))
    if decay_days is not None:
        factor[held] = _decay(arrays.written[at[held]], now, decay_days, decay_floor)
    factor[held] *= arrays.importance[at[held]]
    active = weights.active_keys(projects)
    keep = ~(held & arrays.ineligible[at])
    if active is not None and np.any(held & arrays.keyed[at]):
        project = np.ones(len(ids))
        for n in np.flatnonzero(held & arrays.keyed[at]).tolist():
            project[n] = weights.project_multiplier(rows.rows[int(ids[n])][5], active)
        factor *= project
    shown = [round(s, decimals) for s in (score * factor)[keep].tolist()]
    ids, vector, keyword, held = ids[keep], vector[keep], keyword[keep], held[keep]
    order = np.lexsort((ids, -np.array(shown, dtype=np.float64))).tolist()
    return Fused(ids[order].tolist(), [shown[i] for i in order], vector[order].tolist(),
                 keyword[order].tolist(), held[order].tolist())
