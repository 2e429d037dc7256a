"""The two retrievers: FTS5 BM25 over the segmented text, and cosine k-NN over the vectors.

Both honour the configured ``sources`` (``memory``, ``sessions``). When every chunk in the
store belongs to a wanted source no filter is applied and vec0 answers the k-NN itself; when
some do not, the vector side scans only the allowed vectors exactly (or, for a large allowed
set, filters an over-fetched vec0 top k and scans only if that comes up short), so a small
source is never starved by a larger one filling vec0's top k.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipeline.fts import bm25_to_score, build_match_query
from pipeline.store.engine import Database
from pipeline.store.vectors import get_vectors, knn, knn_among

EXACT_SCAN_MAX = 20_000  # wanted chunks scanned exactly; above this, vec0 over-fetches first
OVERFETCH = 8


def allowed_rowids(db: Database, sources: Sequence[str]) -> list[int] | None:
    """Chunk rowids of the wanted sources, or None when no chunk needs filtering out."""
    present = {s for (s,) in db.conn.execute("SELECT DISTINCT source FROM chunks")}
    if present <= set(sources):
        return None
    marks = ",".join("?" * len(sources))
    return [r for (r,) in db.conn.execute(
        f"SELECT rowid FROM chunks WHERE source IN ({marks}) ORDER BY rowid", list(sources))]


def keyword_hits(db: Database, query: str, limit: int, sources: Sequence[str]
                 ) -> dict[int, float]:
    """BM25 hits as rowid -> score in (0, 1), best first (see :func:`bm25_to_score`)."""
    match = build_match_query(query)
    if match is None or limit <= 0:
        return {}
    if allowed_rowids(db, sources) is None:
        rows = db.conn.execute(
            "SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ? "
            "ORDER BY rank LIMIT ?", (match, limit)).fetchall()
    else:
        marks = ",".join("?" * len(sources))
        rows = db.conn.execute(
            "SELECT f.rowid, bm25(chunks_fts) AS r FROM chunks_fts f JOIN chunks c "
            f"ON c.rowid = f.rowid WHERE chunks_fts MATCH ? AND c.source IN ({marks}) "
            "ORDER BY r LIMIT ?", (match, *sources, limit)).fetchall()
    return {int(r): bm25_to_score(rank) for r, rank in rows}


def vector_hits(db: Database, query_vector: np.ndarray, limit: int, sources: Sequence[str]
                ) -> dict[int, float]:
    """Nearest chunks as rowid -> cosine similarity, nearest first."""
    allowed = allowed_rowids(db, sources)
    if allowed is None:
        found = knn(db, query_vector, limit)
    elif len(allowed) <= EXACT_SCAN_MAX:
        found = knn_among(db, query_vector, limit, allowed)
    else:
        # A large wanted source: over-fetch from the index and filter; scan only if that
        # still leaves fewer than ``limit`` (the unwanted chunks crowd the top).
        wanted = set(allowed)
        found = [hit for hit in knn(db, query_vector, limit * OVERFETCH) if hit[0] in wanted]
        if len(found) < limit:
            found = knn_among(db, query_vector, limit, allowed)
    return {rowid: 1.0 - distance for rowid, distance in found[:limit]}


def cosine_for(db: Database, rowids: Sequence[int], query_vector: np.ndarray
               ) -> dict[int, float]:
    """Cosine similarity of stored vectors to the (unit) query; chunks without one are absent."""
    return {r: float(np.dot(v, query_vector)) for r, v in get_vectors(db, rowids).items()}
