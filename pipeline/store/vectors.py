"""Where vectors live: a sqlite-vec ``vec0`` table, or a plain BLOB table when vec0 is missing.

Both keep one float32 vector per chunk rowid and answer k-nearest-neighbour queries by cosine
distance; the BLOB variant answers them in-process with NumPy. Dimensions are fixed per index
(``meta.vector_dims``); a vector of other dimensions is refused, never mixed in.

Every change to the vectors writes a new random ``meta.vectors_version`` in the same
transaction, so a reader holding a copy of the vectors in memory
(:mod:`pipeline.store.matrix`) can tell with one point query whether its copy is current. The
value is random rather than a counter so that a store swapped in by a rebuild never repeats
the version of the store it replaced.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pipeline.errors import DimensionMismatch
from pipeline.store.engine import Database
from pipeline.store.schema import get_meta, set_meta

# NumPy is imported by the functions that encode, decode or rank vectors, not here: the
# store's writer imports this module for its bookkeeping (dimensions, deletions), and an index
# pass with no vector to write (keyword-only, or nothing changed) then never loads NumPy.
if TYPE_CHECKING:
    import numpy as np

MAX_KNN_K = 4096  # sqlite-vec's hard limit on k
_BATCH = 500  # rowids per IN (...) list
VERSION_KEY = "vectors_version"


def to_blob(vector: np.ndarray) -> bytes:
    import numpy as np

    return np.asarray(vector, dtype="<f4").tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    import numpy as np

    return np.frombuffer(blob, dtype="<f4")


def vector_dims(db: Database) -> int | None:
    return get_meta(db, "vector_dims")


def vectors_version(db: Database) -> str | None:
    """The version of the store's vectors: changes in every transaction that changes them."""
    return get_meta(db, VERSION_KEY)


def _bump_version(db: Database) -> None:
    set_meta(db, VERSION_KEY, uuid.uuid4().hex)


def table_name(db: Database) -> str:
    return "chunks_vec" if db.vector_ok else "chunks_vec_blob"


def ensure_vector_table(db: Database, dims: int) -> None:
    """Create the vector table for ``dims`` on first use; refuse a different width later.

    Call inside a write transaction.
    """
    current = vector_dims(db)
    if current is not None and current != dims:
        raise DimensionMismatch(f"index holds {current}-dimensional vectors, got {dims}")
    if current is None:
        set_meta(db, "vector_dims", dims)
    if db.vector_ok:
        db.conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vec USING "
            f"vec0(embedding float[{int(dims)}] distance_metric=cosine)"
        )
    else:
        db.conn.execute(
            "CREATE TABLE IF NOT EXISTS chunks_vec_blob (rowid INTEGER PRIMARY KEY, embedding BLOB)"
        )


def vector_table_exists(db: Database) -> bool:
    name = table_name(db)
    row = db.conn.execute(
        "SELECT 1 FROM sqlite_master WHERE name = ?", (name,)
    ).fetchone()
    return row is not None


def put_vectors(db: Database, rowids: Sequence[int], vectors: np.ndarray) -> None:
    """Store vectors for chunk rowids, replacing any old ones. Call inside a transaction."""
    import numpy as np

    if not len(rowids):
        return
    vectors = np.asarray(vectors, dtype=np.float32)
    ensure_vector_table(db, vectors.shape[1])
    table = table_name(db)
    # sqlite-vec 0.1.9 rejects INSERT OR REPLACE on vec0: delete, then insert.
    db.conn.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(int(r),) for r in rowids])
    db.conn.executemany(
        f"INSERT INTO {table}(rowid, embedding) VALUES (?, ?)",
        [(int(r), to_blob(v)) for r, v in zip(rowids, vectors, strict=True)],
    )
    _bump_version(db)


def delete_vectors(db: Database, rowids: Sequence[int]) -> None:
    if not rowids or vector_dims(db) is None or not vector_table_exists(db):
        return
    db.conn.executemany(f"DELETE FROM {table_name(db)} WHERE rowid = ?",
                        [(int(r),) for r in rowids])
    _bump_version(db)


def count_vectors(db: Database) -> int:
    if vector_dims(db) is None or not vector_table_exists(db):
        return 0
    return db.conn.execute(f"SELECT count(*) FROM {table_name(db)}").fetchone()[0]


def drop_vectors(db: Database) -> None:
    """Forget every vector and the index's width (used when the embedding model changes)."""
    if vector_table_exists(db):
        db.conn.execute(f"DROP TABLE {table_name(db)}")
    db.conn.execute("DELETE FROM meta WHERE key = 'vector_dims'")
    _bump_version(db)


def knn(db: Database, query: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The ``k`` nearest chunk rowids to ``query`` as (rowid, cosine distance), nearest first."""
    import numpy as np

    dims = vector_dims(db)
    if dims is None or k <= 0 or not vector_table_exists(db):
        return []
    query = np.asarray(query, dtype=np.float32)
    if query.shape != (dims,):
        raise DimensionMismatch(f"query has {query.shape[-1]} dimensions, index has {dims}")
    k = min(int(k), MAX_KNN_K)
    if db.vector_ok:
        rows = db.conn.execute(
            "SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?",
            (to_blob(query), k),
        ).fetchall()
        return [(int(r), float(d)) for r, d in rows]
    return _knn_numpy(db, query, k)


def _knn_numpy(db: Database, query: np.ndarray, k: int) -> list[tuple[int, float]]:
    rows = db.conn.execute("SELECT rowid, embedding FROM chunks_vec_blob").fetchall()
    return _nearest(rows, query, k)


def _nearest(rows: Sequence[tuple[int, bytes]], query: np.ndarray, k: int
             ) -> list[tuple[int, float]]:
    """Exact cosine k-NN over (rowid, blob) rows, nearest first, ties by row order."""
    import numpy as np

    if not rows:
        return []
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), -1)
    return nearest_unit(ids, unit_rows(matrix), query, k)


def unit_rows(matrix: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``matrix`` with every row scaled to length 1 (all-zero rows stay zero), as float32;
    ``out=matrix`` scales it in place."""
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    if out is None:
        out = np.zeros(matrix.shape, np.float32)
    return np.divide(matrix, norms, out=out, where=norms > 0)


#: Up to this many rows, a scan's matrix-vector product runs on the caller's thread alone
#: (``np.einsum``, no BLAS): OpenBLAS wakes a thread per core for it, which costs more than
#: such a product takes, and on a busy machine those threads wait for a core. Measured on 2
#: cores at load 5.7 (docs/BENCHMARKS.md, 2026-12-06): 10,000 x 384 rows 0.63 ms this way,
#: 14.8 ms through OpenBLAS's threads; at 100,000 rows the threads win (23 ms vs 47 ms).
SINGLE_THREAD_ROWS = 32_768


def cosines(unit: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row of ``unit`` (unit-length rows) to ``query``."""
    import numpy as np

    query = np.asarray(query, dtype=np.float32)
    query = query / (float(np.linalg.norm(query)) or 1.0)
    if len(unit) <= SINGLE_THREAD_ROWS:
        return np.einsum("ij,j->i", unit, query)
    return unit @ query


def exact_cosines(unit: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row of ``unit`` (unit-length rows) to ``query``, the one
    way memq reports it: in float64, each row summed on its own. A row's score never depends
    on which other rows were scored with it, nor on who found it (vec0, or the matrix held in
    memory), so a query gives the same scores on every path and every host."""
    import numpy as np

    q = np.asarray(query, dtype=np.float64)
    q = q / (float(np.linalg.norm(q)) or 1.0)
    return (np.asarray(unit, dtype=np.float64) * q).sum(axis=1)


def nearest_unit(ids: np.ndarray, unit: np.ndarray, query: np.ndarray, k: int
                 ) -> list[tuple[int, float]]:
    """The ``k`` rows of ``unit`` (unit-length rows, ``ids`` parallel) nearest ``query`` by
    cosine, as (id, cosine distance), nearest first, ties by row order.

    One matrix-vector product and a partial sort: the cost of a brute-force scan of the
    vectors in memory, nothing more.
    """
    import numpy as np

    from pipeline.store.topk import kth_largest

    if not len(ids) or k <= 0:
        return []
    sims = cosines(unit, query)
    if k < len(sims):
        # Everything tied with the k-th best is kept, so the stable sort below (not the
        # partition's arbitrary order) decides which of equal scores make the cut.
        kth = kth_largest(sims, k)
        picked = np.flatnonzero(sims >= kth)
    else:
        picked = np.arange(len(sims))
    top = picked[np.argsort(-sims[picked], kind="stable")][:k]
    return list(zip(ids[top].tolist(), (1.0 - sims[top]).tolist(), strict=True))


def knn_among(db: Database, query: np.ndarray, k: int, rowids: Sequence[int]
              ) -> list[tuple[int, float]]:
    """Exact k-NN restricted to ``rowids`` (a source filter), with either vector table.

    vec0 cannot filter on chunk columns inside its KNN, and filtering its top k afterwards
    starves the results when the wanted source is small; scanning the allowed vectors is exact.
    """
    import numpy as np

    dims = vector_dims(db)
    if dims is None or k <= 0 or not rowids or not vector_table_exists(db):
        return []
    query = np.asarray(query, dtype=np.float32)
    if query.shape != (dims,):
        raise DimensionMismatch(f"query has {query.shape[-1]} dimensions, index has {dims}")
    rows: list[tuple[int, bytes]] = []
    for start in range(0, len(rowids), _BATCH):
        batch = [int(r) for r in rowids[start : start + _BATCH]]
        rows += db.conn.execute(
            f"SELECT rowid, embedding FROM {table_name(db)} WHERE rowid IN "
            f"({','.join('?' * len(batch))}) ORDER BY rowid", batch,
        ).fetchall()
    return _nearest(rows, query, min(int(k), MAX_KNN_K))


def get_vectors(db: Database, rowids: Sequence[int]) -> dict[int, np.ndarray]:
    """Stored vectors for the given chunk rowids (chunks without a vector are absent).

    One point lookup per rowid: vec0 answers ``rowid = ?`` directly but scans the whole table
    for ``rowid IN (…)`` (20-50 ms at 100k vectors against microseconds for 24 lookups).
    """
    if not rowids or vector_dims(db) is None or not vector_table_exists(db):
        return {}
    sql = f"SELECT embedding FROM {table_name(db)} WHERE rowid = ?"
    found: dict[int, np.ndarray] = {}
    for rowid in dict.fromkeys(int(r) for r in rowids):
        row = db.conn.execute(sql, (rowid,)).fetchone()
        if row is not None:
            found[rowid] = from_blob(row[0])
    return found
