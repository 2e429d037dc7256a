"""The two retrievers: BM25 over the segmented text, and cosine k-NN over the vectors.

Each has a path for long-running readers that hold the store in memory (the vector matrix,
:mod:`pipeline.store.matrix`; the BM25 statistics, :mod:`pipeline.store.postings`) and gives
the same results as the SQLite path (vec0, FTS5) it stands in for.

Both honour the configured ``sources`` (``memory``, ``sessions``). When every chunk in the
store belongs to a wanted source no filter is applied and vec0 answers the k-NN itself (or the
in-memory matrix of a long-running reader, :mod:`pipeline.store.matrix`); when
some do not, the vector side scans only the allowed vectors exactly (or, for a large allowed
set, filters an over-fetched vec0 top k and scans only if that comes up short), so a small
source is never starved by a larger one filling vec0's top k.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence, Set

import numpy as np

from pipeline.search.fts import build_match_query, match_terms
from pipeline.store import reads
from pipeline.store.engine import Database
from pipeline.store.matrix import VectorMatrix
from pipeline.store.postings import TextStats
from pipeline.store.vectors import exact_cosines, get_vectors, knn, knn_among, unit_rows

log = logging.getLogger(__name__)
EXACT_SCAN_MAX = 20_000  # wanted chunks scanned exactly; above this, vec0 over-fetches first
OVERFETCH = 8


def source_filter(db: Database, sources: Sequence[str],
                  present: Set[str] | None = None) -> list[str] | None:
    """The sources to filter on, or None when every chunk belongs to a wanted source;
    ``present``: the sources the store holds, when known (read from it when None)."""
    if present is None:
        present = reads.present_sources(db)
    return None if present <= set(sources) else list(sources)


def keyword_hits(db: Database, query: str, limit: int, sources: Sequence[str] | None,
                 stats: TextStats | None = None, among: Sequence[int] | None = None
                 ) -> dict[int, float]:
    """BM25 hits as rowid -> FTS5's rank (``bm25()``: negative, lower is better), best first.

    ``sources`` None: no filter (see :func:`source_filter`); ``among``: their
    :func:`allowed_rowids`, when the caller has read them already. ``stats``: the store's
    full-text statistics held in memory (:mod:`pipeline.store.postings`), which give FTS5's own
    scores without FTS5 ranking every match; FTS5 answers what they cannot. In FTS5, sorting by
    ``bm25()`` with a ``LIMIT`` lets SQLite keep only the best ``limit`` rows while ranking
    (``ORDER BY rank`` made it sort every match first). Equal ranks go by rowid either way, so
    the cut is the same on every run and on both paths.
    """
    terms = match_terms(query)
    if not terms or limit <= 0 or not db.fts_ok:  # no FTS5 in this SQLite: no keyword side
        return {}
    if stats is not None:
        if sources is not None and among is None:
            among = reads.allowed_rowids(db, sources)
        try:
            found = stats.top(db, terms, limit, among)
        except db.database_error as exc:  # the copy is a shortcut: FTS5 still answers
            log.warning("in-memory BM25 failed, FTS5 answers instead: %s", exc)
            found = None
        if found is not None:
            return {rowid: -score for rowid, score in found}
    return reads.bm25_ranks(db, build_match_query(query), limit, sources)


def _similarities(found: list[tuple[int, float]], limit: int) -> dict[int, float]:
    return {rowid: 1.0 - distance for rowid, distance in found[:limit]}


def matrix_hits(matrix: VectorMatrix, query_vector: np.ndarray, limit: int,
                among: Sequence[int] | None) -> dict[int, float]:
    """As :func:`vector_hits`, from the store's vectors held in memory
    (:mod:`pipeline.store.matrix`); ``among``: the allowed rowids, None for all."""
    return _similarities(matrix.knn(query_vector, limit, among), limit)


def vector_hits(db: Database, query_vector: np.ndarray, limit: int,
                sources: Sequence[str] | None) -> dict[int, float]:
    """Nearest chunks as rowid -> cosine similarity, nearest first, from vec0."""
    if sources is None:
        found = knn(db, query_vector, limit)
    else:
        allowed = reads.allowed_rowids(db, sources)
        if len(allowed) <= EXACT_SCAN_MAX:
            found = knn_among(db, query_vector, limit, allowed)
        else:
            # A large wanted source: over-fetch from the index and filter; scan only if that
            # still leaves fewer than ``limit`` (the unwanted chunks crowd the top).
            wanted = set(allowed)
            found = [hit for hit in knn(db, query_vector, limit * OVERFETCH) if hit[0] in wanted]
            if len(found) < limit:
                found = knn_among(db, query_vector, limit, allowed)
    return _similarities(found, limit)


def cosine_for(db: Database, rowids: Sequence[int], query_vector: np.ndarray,
               matrix: VectorMatrix | None = None) -> dict[int, float]:
    """Cosine similarity of stored vectors to the query (:func:`exact_cosines`, from the
    matrix held in memory or from the store: the same numbers); chunks without one are
    absent."""
    if matrix is not None:
        return matrix.cosines(rowids, query_vector)
    found = get_vectors(db, rowids)
    if not found:
        return {}
    sims = exact_cosines(unit_rows(np.stack(list(found.values()))), query_vector)
    return {r: float(s) for r, s in zip(found, sims, strict=True)}


def chunk_vectors(db: Database, rowids: Sequence[int],
                  matrix: VectorMatrix | None = None) -> dict[int, np.ndarray]:
    """The stored vectors of the given chunks (from the matrix held in memory when current, else
    the store); chunks without one are absent."""
    return matrix.vectors(rowids) if matrix is not None else get_vectors(db, rowids)


def rescored(db: Database, hits: dict[int, float], query_vector: np.ndarray,
             matrix: VectorMatrix | None = None) -> dict[int, float]:
    """The vector side's hits with their exact scores (:func:`cosine_for`), best first, ties
    by rowid. vec0 and the in-memory scan pick the same nearest chunks but compute their
    distances in float32 each their own way: the last digits, and so the order of near ties,
    would otherwise depend on which one answered."""
    return best_first(cosine_for(db, list(hits), query_vector, matrix))


def best_first(scores: dict[int, float]) -> dict[int, float]:
    """``scores`` highest first, equal ones by rowid."""
    return dict(sorted(scores.items(), key=lambda item: (-item[1], item[0])))
