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
three). No row kind is special; where no hit is both shorter and better than another, it is
exactly the share of the best.

The statistics are those of the final keyword hits only, computed with NumPy as one
hits × hits × terms array (:func:`at_their_length`). A long-running reader's held BM25 copy
(:class:`~pipeline.store.postings.TextStats`) keeps each term's weight per row, from which the
term count is recovered exactly (``tf = norm·x / (k1 + 1 − x)``, ``x = weight / idf``, an
integer); without one, FTS5's own tables answer (row lengths, ``fts5vocab`` row counts, and the
few rows whose counts matter tokenized in a scratch table). Both give the same scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.search import fusion
from pipeline.search.fts import match_terms
from pipeline.store import postings as bm25
from pipeline.store.engine import Database
from pipeline.store.postings import K1, TextStats, fts_tokenizer, tokenize


@dataclass
class HitStats:
    """What BM25 made of ``n`` hits for a query of ``t`` one-token phrases: each hit's
    magnitude (−rank), its length term ``norm``, each phrase's IDF and each hit's count of each
    phrase (``tf``, n × t; rows whose counts cannot matter may be left 0, see
    :func:`needs_counts`)."""

    magnitude: np.ndarray
    norm: np.ndarray
    idf: np.ndarray
    tf: np.ndarray


def needs_counts(magnitude: np.ndarray, norm: np.ndarray) -> np.ndarray:
    """Which hits' term counts matter: those shorter than some hit they outscore (put at its
    length they may still beat it). A hit no shorter than every hit it outscores is compared at
    its own length only, which its magnitude already is."""
    shorter = norm[:, None] < norm[None, :]
    better = magnitude[:, None] > magnitude[None, :]
    return np.any(shorter & better, axis=1)


def at_their_length(hits: HitStats) -> np.ndarray:
    """Each hit's score ``r_i / max_j bm25_j(max(norm_j, norm_i))`` (in (0, 1], the best 1)."""
    top = (hits.idf * (K1 + 1.0)) * hits.tf  # hit j, phrase
    moved = (top[:, None, :] / (hits.tf[:, None, :] + hits.norm[None, :, None])).sum(axis=2)
    keeps = hits.norm[:, None] >= hits.norm[None, :]  # j as long as i or longer: its own score
    reference = np.where(keeps, hits.magnitude[:, None], moved).max(axis=0)
    return hits.magnitude / reference


def _held(stats: TextStats, db: Database, tokens: list[str], rowids: np.ndarray,
          magnitude: np.ndarray) -> HitStats | None:
    """The hits' statistics from a held copy (None: it does not hold them all). Each count is
    recovered from the term's weight in the row, ``idf·tf·(k1 + 1) / (tf + norm)``; counts are
    whole numbers, so rounding makes the recovery exact."""
    held = stats.postings(db, tokens)
    if held is None or not len(stats.ids):
        return None
    at = np.minimum(np.searchsorted(stats.ids, rowids), len(stats.ids) - 1)
    if np.any(stats.ids[at] != rowids):
        return None  # a hit this copy does not hold
    norm = stats.norm[at]
    idf = np.array([stats.idf(p.size) if p.size else 1.0 for p in held])
    weight = np.zeros((len(held), len(rowids)))
    for n, posting in enumerate(held):
        if posting.size:
            where = np.minimum(np.searchsorted(posting.at, at), posting.size - 1)
            weight[n] = np.where(posting.at[where] == at, posting.weight[where], 0.0)
    x = weight.T / idf
    tf = np.rint(norm[:, None] * x / ((K1 + 1.0) - x))
    return HitStats(magnitude, norm, idf, tf)


def _from_fts(db: Database, tokens: list[str], rowids: np.ndarray, magnitude: np.ndarray
              ) -> HitStats:
    """The hits' statistics from FTS5's own tables."""
    rows, norms = bm25.row_norms(db, rowids.tolist())
    norm = np.array([norms.get(int(r), 0.0) for r in rowids])
    documents = bm25.document_counts(db, tokens)
    idf = np.array([bm25.idf(rows, documents[t]) if documents.get(t) else 0.0
                    for t in tokens])
    tf = np.zeros((len(rowids), len(tokens)))
    wanted = needs_counts(magnitude, norm)
    if np.any(wanted):
        counts = bm25.row_counts(db, fts_tokenizer(db), rowids[wanted].tolist(), tokens)
        tf[wanted] = [[counts.get((int(r), t), 0) for t in tokens] for r in rowids[wanted]]
    return HitStats(magnitude, norm, idf, tf)


def keyword_scores(db: Database, query: str, ranks: dict[int, float],
                   stats: TextStats | None = None, *, rule: str) -> dict[int, float]:
    """The weighted merge's keyword score of each hit (FTS5 ranks, negative): with ``rule``
    "length" (``query.hybrid.keywordScore``), its BM25 as a share of the best any hit would
    have at its length or longer (see the module), ``stats`` being the held copy when current;
    with "best", a phrase of the query that is not one token (no per-token counts) or ``ranks``
    that are not BM25 magnitudes, the share of the best."""
    if rule == "best" or not ranks or min(ranks.values()) >= 0 or len(ranks) == 1:
        return fusion.share_of_best(ranks)
    tokens = tokenize(db, stats.tokenizer if stats else fts_tokenizer(db), match_terms(query))
    if tokens is None:
        return fusion.share_of_best(ranks)
    rowids = np.fromiter(ranks, dtype=np.int64, count=len(ranks))
    magnitude = -np.fromiter(ranks.values(), dtype=np.float64, count=len(ranks))
    hits = _held(stats, db, tokens, rowids, magnitude) if stats is not None else None
    if hits is None:
        hits = _from_fts(db, tokens, rowids, magnitude)
    return dict(zip(ranks, at_their_length(hits).tolist(), strict=True))

