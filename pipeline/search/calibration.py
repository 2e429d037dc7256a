"""Keyword scores that mean the same whatever the chunk sizes around them (issue 36 item 2).

The weighted merge scores a keyword hit as its BM25 magnitude over a reference magnitude. The
plain share of the best (:func:`pipeline.search.fusion.share_of_best`) takes the best hit's
as the reference for every hit, and BM25's length term ``k1·(1 − b + b·|D|/avgdl)`` makes a
one-line row (a ``MEMORY.md`` entry) that holds the query's words outscore any paragraph:
every paragraph was measured against the entry, and answering notes fell under ``minScore``.

Here a row's shortness may raise its own rank but not lower a longer row's score: each hit is
measured against the best BM25 any hit would have **at its length or longer**,
``r_i / max_j bm25_j(max(|D_j|, |D_i|))``. A shorter hit is put at the longer one's length
(same IDF, same term counts, FTS5's formula), a longer hit keeps its own score; the hit itself
is among them, so a score is at most 1 and the best hit scores 1. A paragraph that holds the
query's words as often as a one-line entry scores as the entry does; a note that holds one of
three words stays under the entry holding all three (at the note's length the entry still has
three). No row kind is special; in a memory where every hit no longer than another scores
lower, it is exactly the share of the best. The statistics come from FTS5's own tables (row
lengths, ``fts5vocab``) for the hits only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.search import fusion
from pipeline.search.fts import match_terms
from pipeline.store.engine import Database
from pipeline.store.postings import IDF_FLOOR, K1, B, TextStats, _varints, fts_tokenizer, tokenize


def _average_length(db: Database) -> tuple[int, float]:
    """The store's row count and average row length in tokens (FTS5's own totals)."""
    found = db.conn.execute("SELECT block FROM chunks_fts_data WHERE id = 1").fetchone()
    rows, *totals = _varints(found[0]) if found else (0,)
    return rows, (float(sum(totals)) / rows if rows else 1.0)


def _lengths(db: Database, rowids: Sequence[int]) -> dict[int, int]:
    """Each row's length in tokens, as FTS5's ``bm25()`` counts it."""
    marks = ",".join("?" * len(rowids))
    out = {}
    for rowid, size in db.conn.execute(
            f"SELECT id, sz FROM chunks_fts_docsize WHERE id IN ({marks})", list(rowids)):
        out[int(rowid)] = size[0] if len(size) == 1 else sum(_varints(size))
    return out


@dataclass
class _Hits:
    """What BM25 made of each hit: its magnitude, its length term ``k1·(1 − b + b·|D|/avgdl)``
    (``norm``, growing with its length) and its count of each of the query's tokens (``tf``;
    rows missing from it are counted on first use by ``count``)."""

    idf: list[float]
    magnitude: dict[int, float]
    norm: dict[int, float]
    tf: dict[int, list[float]]
    count: Callable[[int], list[float]] | None = None

    def bm25_at(self, rowid: int, norm: float) -> float:
        """Row ``rowid``'s BM25 with the length term ``norm`` (FTS5's formula and constants)."""
        if rowid not in self.tf and self.count is not None:
            self.tf[rowid] = self.count(rowid)
        return sum(idf * (tf * (K1 + 1.0)) / (tf + norm)
                   for idf, tf in zip(self.idf, self.tf.get(rowid, ()), strict=False) if tf)


def _idf(rows: int, hits: int) -> float:
    idf = math.log((rows - hits + 0.5) / (hits + 0.5))
    return idf if idf > 0.0 else IDF_FLOOR


def _held(stats: TextStats, db: Database, tokens: list[str], ranks: dict[int, float]
          ) -> _Hits | None:
    """:func:`_hits` from the statistics held in memory (None: the copy cannot answer)."""
    postings = stats._postings_for(db, tokens)
    if postings is None:
        return None
    rowids = np.fromiter(ranks, dtype=np.int64, count=len(ranks))
    at = np.searchsorted(stats.ids, rowids)
    if np.any(at >= len(stats.ids)) or np.any(stats.ids[np.minimum(at, len(stats.ids) - 1)]
                                               != rowids):
        return None  # a hit this copy does not hold
    tf = np.zeros((len(rowids), len(postings)))
    for n, posting in enumerate(postings):
        if posting.size:
            where = np.minimum(np.searchsorted(posting.at, at), posting.size - 1)
            found = posting.at[where] == at
            tf[found, n] = posting.tf[where[found]]
    keys = rowids.tolist()
    return _Hits([_idf(stats.rows, p.size) if p.size else 0.0 for p in postings],
                 {r: -ranks[r] for r in keys},
                 dict(zip(keys, stats.norm[at].tolist(), strict=True)),
                 dict(zip(keys, tf.tolist(), strict=True)))


def _hits(db: Database, query: str, ranks: dict[int, float],
          stats: TextStats | None = None) -> _Hits | None:
    """The statistics of ``ranks``' rows for ``query``: from ``stats`` (held in memory) when
    given and current, else from FTS5's own tables (row counts from ``fts5vocab``, the rows'
    lengths, a row's token counts when first needed); None when a phrase of the query is not
    one token (no per-token counts)."""
    phrases = match_terms(query)
    tokens = tokenize(db, stats.tokenizer if stats else fts_tokenizer(db), phrases)
    if tokens is None:
        return None
    if stats is not None and (held := _held(stats, db, tokens, ranks)) is not None:
        return held
    conn = db.conn
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.memq_fts_row "
                 "USING fts5vocab(main, 'chunks_fts', 'row')")
    rows, avgdl = _average_length(db)
    idfs = []
    for token in tokens:
        found = conn.execute("SELECT doc FROM temp.memq_fts_row WHERE term = ?",
                             (token,)).fetchone()
        idfs.append(_idf(rows, int(found[0])) if found else 0.0)
    norm = {r: K1 * ((1.0 - B) + B * n / avgdl) for r, n in _lengths(db, list(ranks)).items()}
    tokenizer = stats.tokenizer if stats else fts_tokenizer(db)
    return _Hits(idfs, {r: -v for r, v in ranks.items()}, norm, {},
                 lambda rowid: _counts(db, tokenizer, rowid, tokens))


def _counts(db: Database, tokenizer: str, rowid: int, tokens: list[str]) -> list[float]:
    """How often row ``rowid``'s indexed text holds each token: the text run through the
    store's tokenizer in a scratch table (as :func:`pipeline.store.postings.tokenize` does),
    which for the short rows asked about is cheaper than reading the tokens' postings."""
    conn = db.conn
    quoted = tokenizer.replace("'", "''")
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.memq_row_text "
                 f"USING fts5(text, tokenize='{quoted}')")
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.memq_row_tokens "
                 "USING fts5vocab(temp, 'memq_row_text', 'instance')")
    conn.execute("DELETE FROM temp.memq_row_text")
    try:
        conn.execute("INSERT INTO temp.memq_row_text(rowid, text) "
                     "SELECT 1, memq_fts_text(text) FROM chunks WHERE rowid = ?", (rowid,))
        marks = ",".join("?" * len(tokens))
        found = dict(conn.execute("SELECT term, count(*) FROM temp.memq_row_tokens "
                                  f"WHERE term IN ({marks}) GROUP BY term", tokens).fetchall())
    finally:
        conn.execute("DELETE FROM temp.memq_row_text")
    return [float(found.get(t, 0)) for t in tokens]


def keyword_scores(db: Database, query: str, ranks: dict[int, float],
                   stats: TextStats | None = None) -> dict[int, float]:
    """The weighted merge's keyword score of each hit (FTS5 ranks, negative): its BM25 as a
    share of the best any hit would have at its length or longer (see the module); the share
    of the best when the query has a phrase that is not one token (no per-token counts) or
    ``ranks`` are not BM25 magnitudes."""
    if not ranks or min(ranks.values()) >= 0:
        return fusion.share_of_best(ranks)
    seen = _hits(db, query, ranks, stats)
    if seen is None:
        return fusion.share_of_best(ranks)
    order = sorted(ranks, key=lambda r: (ranks[r], r))
    out = {}
    for i in order:
        mine, norm = seen.magnitude[i], seen.norm.get(i, 0.0)
        ref = mine
        for j in order:  # best first: stop at the first that cannot raise ``ref``
            other = seen.magnitude[j]
            if other <= ref:
                break
            if seen.norm.get(j, 0.0) >= norm:  # as long as i or longer
                ref = other  # its own score, the largest of the rest
                break
            ref = max(ref, seen.bm25_at(j, norm))
        out[i] = mine / ref if ref > 0 else 0.0
    return out
