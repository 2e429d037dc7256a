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

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.store.engine import Database, connect
from pipeline.store.vectors import (
    MAX_KNN_K,
    DimensionMismatch,
    cosines,
    nearest_unit,
    table_name,
    unit_rows,
    vector_dims,
    vector_table_exists,
    vectors_version,
)

log = logging.getLogger(__name__)
_FETCH = 4096  # rows per fetch while loading
MAX_STORES = 4  # stores whose matrix one process keeps; the least recently used goes first


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
        query = self._check(query)
        wanted = np.fromiter(dict.fromkeys(int(r) for r in rowids), dtype=np.int64)
        at = np.minimum(np.searchsorted(self.ids, wanted), len(self.ids) - 1)
        found = self.ids[at] == wanted
        sims = cosines(self.unit[at[found]], query)
        return {int(r): float(s) for r, s in zip(wanted[found], sims, strict=True)}


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


class MatrixCache:
    """The current :class:`VectorMatrix` of each store a process searches (thread-safe)."""

    def __init__(self, max_stores: int = MAX_STORES) -> None:
        self.max_stores = max_stores
        self._lock = threading.Lock()
        self._held: OrderedDict[str, VectorMatrix] = OrderedDict()
        self._loading: dict[str, threading.Thread] = {}

    def _current(self, key: str, version: str | None) -> VectorMatrix | None:
        with self._lock:
            held = self._held.get(key)
            if held is None or held.version != version:
                return None
            self._held.move_to_end(key)
            return held

    def _keep(self, key: str, matrix: VectorMatrix) -> None:
        with self._lock:
            self._held[key] = matrix
            self._held.move_to_end(key)
            while len(self._held) > self.max_stores:
                self._held.popitem(last=False)

    def get(self, db: Database) -> VectorMatrix:
        """The store's vectors as of now: the held copy if its version is current, else a
        fresh load (waited for)."""
        key = str(db.path.resolve())
        held = self._current(key, vectors_version(db))
        if held is not None:
            return held
        fresh = load(db)
        self._keep(key, fresh)
        return fresh

    def current(self, db: Database) -> VectorMatrix | None:
        """The held copy if its version is current; else None at once, and a fresh copy is
        loaded in the background on its own connection.

        A search uses vec0 while the copy is missing or behind (correct, just slower), so no
        search waits seconds for a load after the writer stored a vector. A store with no
        version (no vectors yet, or vectors written by a memq that did not keep one) is never
        held: nothing would tell when its copy goes stale.
        """
        version = vectors_version(db)
        if version is None:  # no vectors, or written before versions existed: vec0 is sure
            return None
        key = str(db.path.resolve())
        held = self._current(key, version)
        if held is None:
            with self._lock:
                if key not in self._loading:
                    loader = threading.Thread(target=self._load_apart, daemon=True,
                                              args=(key, db.path, db.vector_ok),
                                              name="memq-vector-load")
                    self._loading[key] = loader
                    loader.start()
        return held

    def _load_apart(self, key: str, path: Path, want_vectors: bool) -> None:
        try:
            db = connect(path, want_vectors=want_vectors)
            try:
                self._keep(key, load(db))
            finally:
                db.close()
        except Exception:  # the search goes on with vec0, and the next one tries again
            log.exception("loading the vectors of %s into memory failed", path)
        finally:
            with self._lock:
                self._loading.pop(key, None)

    def wait(self, timeout: float | None = None) -> None:
        """Wait for background loads started so far (tests and benchmarks)."""
        with self._lock:
            loaders = list(self._loading.values())
        for loader in loaders:
            loader.join(timeout)

    def clear(self) -> None:
        with self._lock:
            self._held.clear()


MATRICES = MatrixCache()
