"""The store's vectors as one in-memory matrix, for processes that search many times.

vec0's exact k-NN scans the vectors in C at several times the cost of one NumPy
matrix-vector product over the same vectors in RAM (bench/query_latency.py). A long-running
reader (the MCP server, a library caller) therefore loads the vectors once, unit-normalised
float32 rows (1.5 KB per 384-dim chunk: about 150 MB for 100,000 chunks), and answers k-NN
with :func:`pipeline.store.vectors.nearest_unit`. One-shot callers (``memq search``) keep
using vec0: loading the matrix costs more than one query.

Never stale: every search first reads ``meta.vectors_version``, which every transaction that
changes a vector rewrites (:mod:`pipeline.store.vectors`), and uses the held copy only when
its version is that one. Otherwise the search asks vec0 (correct, slower) while a fresh copy
loads in the background (a full load: about 0.5 s per 10,000 chunks on a busy machine), so no
search waits for a load. The version and the vectors are read in one read transaction, so a
copy is one consistent snapshot of the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.store.engine import Database
from pipeline.store.snapshots import MAX_STORES, SnapshotCache
from pipeline.store.vectors import (
    MAX_KNN_K,
    DimensionMismatch,
    exact_cosines,
    nearest_unit,
    table_name,
    unit_rows,
    vector_dims,
    vector_table_exists,
    vectors_version,
)

_FETCH = 4096  # rows per fetch while loading


@dataclass(frozen=True)
class VectorMatrix:
    """One snapshot of a store's vectors: ``ids`` ascending, ``unit`` rows parallel to them."""

    version: str | None
    ids: np.ndarray
    unit: np.ndarray

    @property
    def dims(self) -> int:
        return int(self.unit.shape[1])

    def _check(self, query: np.ndarray) -> np.ndarray:
        query = np.asarray(query, dtype=np.float32)
        if query.shape != (self.dims,):
            raise DimensionMismatch(f"query has {query.shape[-1]} dimensions, index has "
                                    f"{self.dims}")
        return query

    def knn(self, query: np.ndarray, k: int, among: Sequence[int] | None = None
            ) -> list[tuple[int, float]]:
        """As :func:`pipeline.store.vectors.knn` (``among``: as ``knn_among``)."""
        if not len(self.ids) or k <= 0:
            return []
        query = self._check(query)
        ids, unit = self.ids, self.unit
        if among is not None:
            keep = np.isin(ids, np.asarray(among, dtype=np.int64))
            ids, unit = ids[keep], unit[keep]
        return nearest_unit(ids, unit, query, min(int(k), MAX_KNN_K))

    def cosines(self, rowids: Sequence[int], query: np.ndarray) -> dict[int, float]:
        """Cosine similarity of the given chunks' vectors to ``query``; absent ones are left
        out (as :func:`pipeline.search.retrievers.cosine_for`)."""
        if not len(self.ids) or not len(rowids):
            return {}
        wanted = np.fromiter(dict.fromkeys(int(r) for r in rowids), dtype=np.int64)
        found, sims = self.cosine_array(wanted, query)
        return dict(zip(wanted[found].tolist(), sims.tolist(), strict=True))

    def vectors(self, rowids: Sequence[int]) -> dict[int, np.ndarray]:
        """The given chunks' unit vectors; absent ones are left out."""
        if not len(self.ids) or not len(rowids):
            return {}
        wanted = np.fromiter(dict.fromkeys(int(r) for r in rowids), dtype=np.int64)
        at, found = self._positions(wanted)
        return dict(zip(wanted[found].tolist(), self.unit[at[found]], strict=True))

    def cosine_array(self, rowids: np.ndarray, query: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Which of ``rowids`` (an int64 array) have a vector here, and the cosine similarity
        of those to ``query`` (the numbers :meth:`cosines` gives)."""
        if not len(self.ids):
            return np.zeros(len(rowids), dtype=bool), np.zeros(0)
        query = self._check(query)
        at, found = self._positions(rowids)
        return found, exact_cosines(self.unit[at[found]], query)

    def _positions(self, rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each of ``rowids`` would sit in :attr:`ids`, and whether it is there."""
        at = np.minimum(np.searchsorted(self.ids, rowids), len(self.ids) - 1)
        return at, self.ids[at] == rowids


def load(db: Database) -> VectorMatrix:
    """Read every vector of the store into a :class:`VectorMatrix` (one read transaction).

    Rows are copied into one preallocated array batch by batch and normalised in place, so a
    load peaks at about the matrix's own size, not three copies of it.
    """
    own = not db.conn.in_transaction
    if own:
        db.conn.execute("BEGIN")
    try:
        version = vectors_version(db)
        dims = vector_dims(db) or 0
        table = table_name(db) if dims and vector_table_exists(db) else None
        count = db.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] if table else 0
        ids = np.empty(count, dtype=np.int64)
        unit = np.empty((count, dims), dtype=np.float32)
        if table:
            cursor = db.conn.execute(f"SELECT rowid, embedding FROM {table} ORDER BY rowid")
            n = 0
            while batch := cursor.fetchmany(_FETCH):
                end = n + len(batch)
                ids[n:end] = [rowid for rowid, _ in batch]
                unit[n:end] = np.frombuffer(b"".join(blob for _, blob in batch),
                                            dtype="<f4").reshape(len(batch), dims)
                n = end
    finally:
        if own:
            db.conn.execute("COMMIT")
    return VectorMatrix(version, ids, unit_rows(unit, out=unit))


class MatrixCache(SnapshotCache[VectorMatrix]):
    """The current :class:`VectorMatrix` of each store a process searches (thread-safe; see
    :mod:`pipeline.store.snapshots`)."""

    def __init__(self, max_stores: int = MAX_STORES) -> None:
        super().__init__("vectors", vectors_version, load, max_stores)


MATRICES = MatrixCache()
