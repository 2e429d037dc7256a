"""The store's BM25 statistics in memory, for processes that search many times.

FTS5 computes ``bm25()`` for every row a query matches before ``LIMIT`` applies, decoding each
row's position lists: a query whose words appear in half of 100,000 chunks costs it tens of
milliseconds (bench/query_latency.py). A long-running reader (the MCP server, a library
caller) keeps instead, per store, every row's token count and the postings (rows and term
frequencies) of each term it has searched for, read once from FTS5's own index through
``fts5vocab``, and computes the same ``bm25()`` for every match with a few NumPy operations:
the same scores, bit for bit (FTS5's formula and operation order, constants k1 1.2, b 0.75,
negative IDF floored at 1e-6), and the same order (equal scores by rowid).

Never stale, as the vector matrix (:mod:`pipeline.store.matrix`): every change to a chunk's
text writes a new random ``meta.text_version`` (triggers on ``chunks``,
:mod:`pipeline.store.schema`), read per search, and a copy of another version is not used. The
row lengths load in the background on a connection of their own, FTS5 answering meanwhile;
a term's postings load on its first search, in a read transaction that checks the version, so
they always come from the snapshot the copy stands for. Queries the copy cannot answer exactly
(a multi-word phrase, a Chinese/Japanese/Korean prefix, a word the tokenizer splits, as the
trigram tokenizer does) go to FTS5.
"""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.store import porter
from pipeline.store.engine import Database
from pipeline.store.schema import TEXT_VERSION_KEY, get_meta
from pipeline.store.snapshots import MAX_STORES, SnapshotCache
from pipeline.store.topk import kth_largest

K1, B = 1.2, 0.75  # FTS5's bm25() constants
IDF_FLOOR = 1e-6  # FTS5 floors a term's IDF here when it is in half the rows or more
MAX_POSTINGS = 16_000_000  # postings held per store (12 bytes each); least recently used go first
MAX_TOKENIZED = 50_000  # query phrases whose tokens are remembered
_FETCH = 8192
_QUOTED = re.compile(r'^"((?:[^"]|"")*)"$')


def text_version(db: Database) -> str | None:
    """The version of the store's chunk text: changes in every transaction that changes it."""
    return get_meta(db, TEXT_VERSION_KEY)


def _varints(blob: bytes) -> list[int]:
    """Decode SQLite's varints (FTS5's record format): 7 bits per byte, the 9th byte whole."""
    out, value, used = [], 0, 0
    for byte in blob:
        used += 1
        if used == 9:
            out.append((value << 8) | byte)
            value, used = 0, 0
        elif byte & 0x80:
            value = (value << 7) | (byte & 0x7F)
        else:
            out.append((value << 7) | byte)
            value, used = 0, 0
    return out


def idf(rows: int, hits: int) -> float:
    """FTS5's IDF of a phrase ``hits`` of ``rows`` rows hold (floored at :data:`IDF_FLOOR`)."""
    value = math.log((rows - hits + 0.5) / (hits + 0.5))
    return value if value > 0.0 else IDF_FLOOR


def length_norm(length: np.ndarray, avgdl: float) -> np.ndarray:
    """FTS5's length term ``k1·(1 − b + b·D/avgdl)`` of rows ``length`` tokens long."""
    return K1 * ((1.0 - B) + (B * length) / avgdl)


def _totals(db: Database) -> tuple[int, float]:
    """The store's row count and average row length in tokens (FTS5's own totals)."""
    averages = db.conn.execute("SELECT block FROM chunks_fts_data WHERE id = 1").fetchone()
    rows, *totals = _varints(averages[0]) if averages else (0,)
    return rows, (float(sum(totals)) / float(rows) if rows else 1.0)


def _row_length(size: bytes) -> int:
    return size[0] if len(size) == 1 else sum(_varints(size))


def row_norms(db: Database, rowids: Sequence[int]) -> tuple[int, dict[int, float]]:
    """The store's row count and the length term of each of rows ``rowids``, from FTS5's own
    tables (as :func:`load` computes them for every row)."""
    rows, avgdl = _totals(db)
    marks = ",".join("?" * len(rowids))
    found = db.conn.execute(f"SELECT id, sz FROM chunks_fts_docsize WHERE id IN ({marks})",
                            list(rowids)).fetchall()
    norm = length_norm(np.array([_row_length(sz) for _, sz in found], dtype=np.float64), avgdl)
    return rows, dict(zip((int(r) for r, _ in found), norm.tolist(), strict=True))


def document_counts(db: Database, tokens: list[str]) -> dict[str, int]:
    """How many rows hold each token (FTS5's ``fts5vocab`` row table, as ``bm25()`` counts)."""
    db.conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.memq_fts_row "
                    "USING fts5vocab(main, 'chunks_fts', 'row')")
    unique = list(dict.fromkeys(tokens))
    marks = ",".join("?" * len(unique))
    return dict(db.conn.execute(
        f"SELECT term, doc FROM temp.memq_fts_row WHERE term IN ({marks})", unique).fetchall())


def _scratch_tokens(conn: Any, tokenizer: str, text_table: str, tokens_table: str) -> None:
    """An empty scratch FTS5 table ``temp.<text_table>`` that tokenizes as the store does, and
    its ``instance`` vocabulary ``temp.<tokens_table>`` (each token of each row, in order)."""
    quoted = tokenizer.replace("'", "''")
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{text_table} "
                 f"USING fts5(text, tokenize='{quoted}')")
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{tokens_table} "
                 f"USING fts5vocab(temp, '{text_table}', 'instance')")
    conn.execute(f"DELETE FROM temp.{text_table}")  # rows an interrupted call left


def row_counts(db: Database, tokenizer: str, rowids: list[int], tokens: list[str]
                ) -> dict[tuple[int, str], int]:
    """How often each of rows ``rowids``' indexed text holds each token: the texts run through
    the store's tokenizer in a scratch table (as :func:`tokenize` does), cheaper for a few
    rows than reading the tokens' whole postings."""
    conn = db.conn
    _scratch_tokens(conn, tokenizer, "memq_row_text", "memq_row_tokens")
    try:
        rows = ",".join("?" * len(rowids))
        conn.execute("INSERT INTO temp.memq_row_text(rowid, text) SELECT rowid, "
                     f"memq_fts_text(text) FROM chunks WHERE rowid IN ({rows})", rowids)
        unique = list(dict.fromkeys(tokens))
        marks = ",".join("?" * len(unique))
        found = conn.execute("SELECT doc, term, count(*) FROM temp.memq_row_tokens "
                             f"WHERE term IN ({marks}) GROUP BY doc, term", unique).fetchall()
    finally:
        conn.execute("DELETE FROM temp.memq_row_text")
    return {(int(doc), term): int(n) for doc, term, n in found}


def fts_tokenizer(db: Database) -> str:
    """The ``tokenize=`` argument the store's ``chunks_fts`` table was created with."""
    row = db.conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'chunks_fts'").fetchone()
    found = re.search(r"tokenize\s*=\s*'((?:[^']|'')*)'", row[0] if row else "")
    return found.group(1).replace("''", "'") if found else "unicode61"


@dataclass(frozen=True)
class Posting:
    """One term's rows, as positions into :attr:`TextStats.ids`, and the term's part of each
    row's ``bm25()`` (:meth:`TextStats.weights`): a search only adds them up."""

    at: np.ndarray
    weight: np.ndarray

    @property
    def size(self) -> int:
        return len(self.at)


@dataclass
class TextStats:
    """One snapshot of a store's full-text statistics: ``ids`` ascending, ``norm`` parallel.

    ``norm`` is FTS5's length term ``k1·(1 − b + b·D/avgdl)`` per row, computed once.
    """

    version: str
    tokenizer: str
    rows: int
    ids: np.ndarray
    norm: np.ndarray
    #: The hashes (Python's, of this process) of every term the index holds, sorted: a term
    #: whose hash is not among them has no rows, and its posting is known empty without a
    #: read. None: not known (every posting is read).
    terms: np.ndarray | None = None
    _postings: OrderedDict[str, Posting] = field(default_factory=OrderedDict)
    _held: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def idf(self, hits: int) -> float:
        return idf(self.rows, hits)

    def absent(self, tokens: list[str]) -> set[str]:
        """Those of ``tokens`` the index surely does not hold (their hash is not among
        :attr:`terms`; a hash collision only makes a term look present)."""
        if self.terms is None or not len(self.terms):
            return set(tokens) if self.terms is not None else set()
        hashes = np.fromiter((hash(t) for t in tokens), dtype=np.int64, count=len(tokens))
        at = np.minimum(np.searchsorted(self.terms, hashes), len(self.terms) - 1)
        return {t for t, found in zip(tokens, (self.terms[at] == hashes).tolist(),
                                      strict=True) if not found}

    def weights(self, at: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """A term's part of the ``bm25()`` of each row it is in (rows ``at``, ``counts`` times
        each): ``idf·tf·(k1 + 1) / (tf + norm)``, as FTS5 computes it."""
        tf = counts.astype(np.float64)
        return self.idf(len(at)) * ((tf * (K1 + 1.0)) / (tf + self.norm[at]))

    def top(self, db: Database, phrases: Sequence[str], k: int,
            among: Sequence[int] | None = None) -> list[tuple[int, float]] | None:
        """The ``k`` best rows for the OR of the quoted ``phrases`` as (rowid, −bm25), best
        first; None when this copy cannot answer (FTS5 must): a phrase that is not one token,
        or the store moved past this version while its postings were being read."""
        tokens = tokenize(db, self.tokenizer, phrases)
        if tokens is None:
            return None
        postings = self._postings_for(db, tokens)
        if postings is None:
            return None
        if k <= 0:
            return []
        # Every term's part of a row's score is positive (IDF floored above 0, tf at least 1),
        # so the rows matched are those scoring above 0.
        scores = _summed([p for p in postings if p.size], len(self.ids))
        if among is not None:
            scores[~np.isin(self.ids, np.asarray(among, dtype=np.int64))] = 0.0
        n = len(scores)
        kth = kth_largest(scores, k) if k < n else 0.0
        # every row tied with the k-th stays for the rowid order
        at = np.flatnonzero(scores >= kth) if kth > 0.0 else np.flatnonzero(scores)
        best = at[np.lexsort((self.ids[at], -scores[at]))[:k]]
        return list(zip(self.ids[best].tolist(), scores[best].tolist(), strict=True))

    def postings(self, db: Database, tokens: list[str]) -> list[Posting] | None:
        """Each token's posting, loaded on first use (None: the store moved past this copy)."""
        return self._postings_for(db, tokens)

    def _postings_for(self, db: Database, tokens: list[str]) -> list[Posting] | None:
        with self._lock:
            found = {t: self._postings[t] for t in tokens if t in self._postings}
            for t in found:
                self._postings.move_to_end(t)
        missing = [t for t in dict.fromkeys(tokens) if t not in found]
        if missing:
            for term in self.absent(missing):  # in no row: nothing to read
                found[term] = _EMPTY
            missing = [t for t in missing if t not in found]
        if missing:
            loaded = self._load(db, missing)
            if loaded is None:
                return None
            found.update(loaded)
        return [found[t] for t in tokens]

    def _load(self, db: Database, terms: list[str]) -> dict[str, Posting] | None:
        """Read ``terms``' postings from FTS5's index, in one read transaction of the version
        this copy stands for (None if the store is at another one now)."""
        conn = db.conn
        conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.memq_fts_instance "
                     "USING fts5vocab(main, 'chunks_fts', 'instance')")
        own = not conn.in_transaction
        if own:
            conn.execute("BEGIN")
        try:
            if text_version(db) != self.version:
                return None
            loaded = {}
            for term in terms:
                rows = conn.execute("SELECT doc, count(*) FROM temp.memq_fts_instance "
                                    "WHERE term = ? GROUP BY doc", (term,)).fetchall()
                docs = np.fromiter((d for d, _ in rows), dtype=np.int64, count=len(rows))
                counts = np.fromiter((c for _, c in rows), dtype=np.int32, count=len(rows))
                at = np.searchsorted(self.ids, docs).astype(np.int32)
                loaded[term] = Posting(at, self.weights(at, counts))
        finally:
            if own:
                conn.execute("COMMIT")
        with self._lock:
            for term, posting in loaded.items():
                if term not in self._postings:
                    self._postings[term] = posting
                    self._held += posting.size
            while self._held > MAX_POSTINGS and len(self._postings) > 1:
                self._held -= self._postings.popitem(last=False)[1].size
        return loaded


def _summed(postings: list[Posting], rows: int) -> np.ndarray:
    """Each of ``rows`` rows' sum of the ``postings``' weights in it, added in the postings'
    order (FTS5's order of phrases, so the sums round the same way): ``bincount`` adds its
    weights in the order given, one pass in C."""
    if len(postings) == 1:
        scores = np.zeros(rows)
        scores[postings[0].at] = postings[0].weight
        return scores
    if not postings:
        return np.zeros(rows)
    return np.bincount(np.concatenate([p.at for p in postings]),
                       np.concatenate([p.weight for p in postings]), minlength=rows)


_EMPTY = Posting(np.zeros(0, dtype=np.int32), np.zeros(0))
_TOKENIZED: dict[tuple[str, str], tuple[str, ...] | None] = {}
_TOKENIZED_LOCK = threading.Lock()


def tokenize(db: Database, tokenizer: str, phrases: Sequence[str]) -> list[str] | None:
    """The one token each quoted phrase stands for under ``tokenizer``, as FTS5 cuts it; None
    when a phrase is not exactly one token (a multi-word phrase, a prefix query ``"x"*``, a
    word the tokenizer splits or drops). Tokens are remembered per phrase: tokenizers are pure.
    """
    with _TOKENIZED_LOCK:
        known = {p: _TOKENIZED[(tokenizer, p)] for p in phrases if (tokenizer, p) in _TOKENIZED}
    fresh = [p for p in dict.fromkeys(phrases) if p not in known]
    if fresh:
        cut = _cut(db, tokenizer, fresh)
        with _TOKENIZED_LOCK:
            if len(_TOKENIZED) + len(cut) > MAX_TOKENIZED:
                _TOKENIZED.clear()
            _TOKENIZED.update(((tokenizer, p), t) for p, t in cut.items())
        known.update(cut)
    out = []
    for phrase in phrases:
        tokens = known[phrase]
        if tokens is None or len(tokens) != 1:
            return None
        out.append(tokens[0])
    return out


class _Scratch:
    """A private in-memory connection of the store's SQLite library with an empty FTS5 table
    per tokenizer, which cuts query phrases as the store's index does (one per tokenizer and
    process; a search's connection, often opened for that search alone, then creates no
    scratch tables of its own)."""

    def __init__(self, db: Database, tokenizer: str) -> None:
        self.conn = db.open_memory()
        _scratch_tokens(self.conn, tokenizer, "memq_query_text", "memq_query_tokens")
        self.lock = threading.Lock()

    @classmethod
    def of(cls, db: Database, tokenizer: str) -> _Scratch:
        with _SCRATCH_LOCK:
            found = _SCRATCHES.get(tokenizer)
            if found is None:
                found = _SCRATCHES[tokenizer] = cls(db, tokenizer)
            return found

    def cut(self, rows: list[tuple[int, str]]) -> dict[int, list[str]]:
        """The tokens of each (n, text) of ``rows``, in order, by n: written in a transaction
        that is rolled back (cheaper than deleting them from FTS5 again)."""
        cut: dict[int, list[str]] = {n: [] for n, _ in rows}
        with self.lock:
            conn = self.conn
            if conn.in_transaction:  # an interrupted call's
                conn.execute("ROLLBACK")
            conn.execute("DELETE FROM temp.memq_query_text")  # rows an interrupted call left
            conn.execute("BEGIN")
            try:
                conn.executemany("INSERT INTO temp.memq_query_text(rowid, text) VALUES (?, ?)",
                                 rows)
                for term, doc in conn.execute("SELECT term, doc FROM temp.memq_query_tokens "
                                              "ORDER BY doc, offset"):
                    cut[doc].append(term)
            finally:
                conn.execute("ROLLBACK")
        return cut


_SCRATCHES: dict[str, _Scratch] = {}
_SCRATCH_LOCK = threading.Lock()


def _cut(db: Database, tokenizer: str, phrases: list[str]) -> dict[str, tuple[str, ...] | None]:
    """Run FTS5's tokenizer over each phrase's words (:class:`_Scratch`); a plain ASCII word
    under the store's ``porter unicode61`` is cut in Python (:mod:`pipeline.store.porter`)."""
    words: dict[str, tuple[str, ...] | None] = {}
    rows = []
    for n, phrase in enumerate(phrases):
        inner = _QUOTED.match(phrase)
        if inner is None:  # a prefix query, or not a quoted phrase at all
            words[phrase] = None
            continue
        text = inner.group(1).replace('""', '"')
        token = porter.ascii_token(text) if tokenizer == porter.TOKENIZER else None
        if token is not None:  # plain ASCII: cut as FTS5 cuts it, without a round trip
            words[phrase] = (token,)
        else:
            rows.append((n, text))
    if rows:
        cut = _Scratch.of(db, tokenizer).cut(rows)
        words.update((phrases[n], tuple(tokens)) for n, tokens in cut.items())
    return words


def load(db: Database) -> TextStats | None:
    """Read every row's token count (one read transaction); None for a store without a text
    version (nothing would tell when the copy goes stale)."""
    own = not db.conn.in_transaction
    if own:
        db.conn.execute("BEGIN")
    try:
        version = text_version(db)
        if version is None:
            return None
        rows, avgdl = _totals(db)
        cursor = db.conn.execute("SELECT id, sz FROM chunks_fts_docsize ORDER BY id")
        ids, lengths = [], []
        while batch := cursor.fetchmany(_FETCH):
            for rowid, size in batch:
                ids.append(rowid)
                lengths.append(_row_length(size))
        tokenizer = fts_tokenizer(db)
        terms = term_hashes(db)
    finally:
        if own:
            db.conn.execute("COMMIT")
    norm = length_norm(np.asarray(lengths, dtype=np.float64), avgdl)
    return TextStats(version, tokenizer, rows, np.asarray(ids, dtype=np.int64), norm, terms)


def term_hashes(db: Database) -> np.ndarray:
    """The sorted hashes of every term in the store's full-text index (``fts5vocab``), 8
    bytes a term."""
    db.conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.memq_fts_row "
                    "USING fts5vocab(main, 'chunks_fts', 'row')")
    cursor = db.conn.execute("SELECT term FROM temp.memq_fts_row")
    hashes: list[int] = []
    while batch := cursor.fetchmany(_FETCH):
        hashes += [hash(term) for (term,) in batch]
    return np.sort(np.asarray(hashes, dtype=np.int64))


class TextStatsCache(SnapshotCache[TextStats]):
    """The current :class:`TextStats` of each store a process searches (thread-safe; see
    :mod:`pipeline.store.snapshots`)."""

    def __init__(self, max_stores: int = MAX_STORES) -> None:
        super().__init__("BM25 statistics", text_version, load, max_stores)


TEXT_STATS = TextStatsCache()
