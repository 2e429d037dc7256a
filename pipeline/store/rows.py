"""The store's chunk rows in memory, for processes that search many times.

After ranking, a search reads what it weighs its candidates by and shows of them: each
candidate's path, its file's modification time, its entry values, lines, text and source
(:func:`pipeline.store.reads.chunk_weights`), and which sources the store holds
(:func:`~pipeline.store.reads.present_sources`). A long-running reader holds them all per
store, beside its vectors (:mod:`pipeline.store.matrix`) and BM25 statistics
(:mod:`pipeline.store.postings`), so a search that finds them current touches no chunk row
in SQLite. With them it keeps what the rows give that does not depend on the query: each
file's decay date (:func:`pipeline.search.decay.note_time`, worked out on first use) and each
chunk's word set for MMR (:func:`pipeline.store.tokens.word_set`), as numbers standing for
the words (4 bytes a distinct word of the chunk), worked out when the copy loads; a reload
keeps those of the chunks whose text did not change.

Never stale. A copy keeps the connection it was read on (one read transaction), and the value
of SQLite's ``PRAGMA data_version`` on it at that moment: that value changes whenever any
other connection, in this process or another, commits to the store, and this connection never
writes. A search uses the copy only when its connection's ``data_version`` is still that one
and the store's text and vectors versions, as the search's own connection sees them, are the
copy's (a store file replaced at its path is another generation with other versions; the
copy's connection would still see the old file). Otherwise SQLite answers while a fresh copy
loads in the background (:class:`~pipeline.store.snapshots.SnapshotCache`).

Memory: a held row is a tuple of the row's values, sharing its path and source strings with
the other rows of its file, plus its word numbers (bench/query_latency.py prints what a copy
costs: 5.1-6.0 MiB at 10,000 chunks, 96-98 MiB at 100,000), and each distinct word once (about
100 bytes; the benchmark's notes have few). A store whose rows would take more than
:data:`MAX_BYTES` is not held: SQLite answers as before.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.store import reads
from pipeline.store.engine import Database, connect
from pipeline.store.reads import WeightRow
from pipeline.store.schema import TEXT_VERSION_KEY, get_metas, has_path_index
from pipeline.store.snapshots import MAX_STORES, SnapshotCache
from pipeline.store.vectors import VERSION_KEY as VECTORS_VERSION_KEY

#: The meta keys whose values name the store generation a copy was read from.
VERSION_KEYS = (TEXT_VERSION_KEY, VECTORS_VERSION_KEY)
#: What a held row costs beyond its text's bytes (tuple, numbers, word numbers, dict slots):
#: measured 595 bytes on bench/query_latency.py's store (RSS +95.9 MiB for 100,000 chunks
#: of 413 characters on average).
ROW_BYTES = 600
#: A store whose rows would take more than this (ROW_BYTES a chunk plus its text) is not
#: held: SQLite answers as before. About 200,000 chunks of the benchmark's size.
MAX_BYTES = 192 * 2**20
#: A background reload starts no sooner than this many times the last load's duration after
#: it ended.
RELOAD_SPACING = 4.0
#: Distinct words numbered per store (about 100 bytes each, beyond ROW_BYTES); past this many
#: a reload numbers them afresh, forgetting words no chunk holds any more.
MAX_WORDS = 1_000_000

Versions = tuple[Any, Any]


@dataclass(frozen=True)
class FileNames:
    """What a copy knows of the store's file names: every name and stem key (``files``), and
    every token of the path index (``paths_fts``; None when the store has none)."""

    keys: frozenset[str]
    tokens: frozenset[str] | None


def connection_mark(db: Database) -> tuple[int, int]:
    """``db``'s ``PRAGMA data_version`` (changed by any other connection's commit, in any
    process) and its ``total_changes`` (its own writes): while both stay the same, nothing was
    committed to the store ``db`` sees."""
    return int(db.conn.execute("PRAGMA data_version").fetchone()[0]), db.conn.total_changes


def versions_of(metas: dict[str, Any]) -> Versions | None:
    """The generation ``metas`` (:func:`~pipeline.store.schema.get_metas` of
    :data:`VERSION_KEYS`) names; None for a store without a text version (nothing would tell
    when a copy of it goes stale)."""
    text = metas.get(TEXT_VERSION_KEY)
    return None if text is None else (text, metas.get(VECTORS_VERSION_KEY))


@dataclass
class ChunkRows:
    """One snapshot of a store's chunk rows: :data:`~pipeline.store.reads.WeightRow` per chunk
    rowid, the sources present, and the connection and ``data_version`` it was read at."""

    version: Versions
    rows: dict[int, WeightRow]
    sources: frozenset[str]
    db: Database | None = field(default=None, repr=False)
    data_version: int = 0
    #: Per file (path, mtime_ns): its decay date (None: evergreen), filled on first use.
    written: dict[tuple[str, int | None], float | None] = field(default_factory=dict)
    #: Per chunk rowid: its MMR word set as the numbers of its words (native int32s).
    word_ids: dict[int, bytes] = field(default_factory=dict, repr=False)
    #: The number of each word (shared with the next copy of the store).
    words: dict[bytes, int] = field(default_factory=dict, repr=False)
    #: The store's file names (:mod:`pipeline.search.paths` asks them first).
    names: FileNames | None = None
    #: Per source present: its chunks' rowids, ascending.
    by_source: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    #: What a search works out from the rows once per copy (its ``prepare``,
    #: :class:`RowsCache`), by name: :mod:`pipeline.search.fused`'s arrays.
    derived: dict[str, Any] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def unchanged(self) -> bool:
        """Whether no connection has committed to the store since the copy was read."""
        with self._lock:
            if self.db is None:
                return False
            try:
                now = self.db.conn.execute("PRAGMA data_version").fetchone()[0]
            except self.db.database_error:
                return False
        return int(now) == self.data_version

    def allowed(self, sources: list[str]) -> np.ndarray:
        """As :func:`~pipeline.store.reads.allowed_rowids`: the chunks of ``sources``,
        ascending (an int64 array)."""
        parts = [self.by_source[s] for s in dict.fromkeys(sources) if s in self.by_source]
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))

    def word_set(self, rowid: int) -> frozenset[int]:
        """Chunk ``rowid``'s MMR word set, its words as numbers: as many, and as many in
        common with another chunk's, as :func:`~pipeline.store.tokens.word_set` gives."""
        return frozenset(memoryview(self.word_ids[rowid]).cast("i"))

    def close(self) -> None:
        """Close the copy's connection (it is then never current)."""
        with self._lock:
            if self.db is not None:
                self.db.close()
                self.db = None


def _numbered(rows: dict[int, WeightRow], before: ChunkRows | None
              ) -> tuple[dict[int, bytes], dict[bytes, int]]:
    """Each row's MMR word set as word numbers; a row whose text ``before`` held (same
    chunk, same text) keeps its numbers."""
    from array import array

    from pipeline.store.tokens import word_set

    words = before.words if before is not None and len(before.words) < MAX_WORDS else {}
    kept = before.word_ids if before is not None and words is before.words else {}
    old = before.rows if kept else {}
    out: dict[int, bytes] = {}
    for rowid, row in rows.items():
        was = old.get(rowid)
        if was is not None and was[8] == row[8]:
            out[rowid] = kept[rowid]
            continue
        out[rowid] = array("i", [words.setdefault(w, len(words))
                                 for w in word_set(row[8])]).tobytes()
    return out, words


def _file_names(db: Database) -> FileNames:
    """The store's :class:`FileNames` (in the caller's read transaction)."""
    keys = frozenset(k for pair in db.conn.execute("SELECT name_key, stem_key FROM files")
                     for k in pair if k is not None)
    if not has_path_index(db):
        return FileNames(keys, None)
    db.conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.memq_paths_row "
                    "USING fts5vocab(main, 'paths_fts', 'row')")
    return FileNames(keys, frozenset(t for (t,) in db.conn.execute(
        "SELECT term FROM temp.memq_paths_row")))


def held_bytes(db: Database) -> int:
    """About what holding the store's rows would take: :data:`ROW_BYTES` a chunk plus its
    text's UTF-8 bytes."""
    count, text = db.conn.execute(
        "SELECT count(*), coalesce(sum(length(CAST(text AS BLOB))), 0) FROM chunks").fetchone()
    return int(count) * ROW_BYTES + int(text)


def load(path: Path, before: ChunkRows | None = None) -> ChunkRows | None:
    """Read every chunk row of the store at ``path`` on a connection of its own, kept by the
    copy (one read transaction; its ``data_version`` read first, so a commit during the read
    only makes the copy look changed); ``before``: the copy it replaces, whose word numbers
    of unchanged chunks are kept. None for a store without a text version or whose rows
    would take more than :data:`MAX_BYTES`."""
    db = connect(path, want_vectors=False)
    kept = False
    try:
        conn = db.conn
        conn.execute("BEGIN")
        try:
            data_version = int(conn.execute("PRAGMA data_version").fetchone()[0])
            version = versions_of(get_metas(db, VERSION_KEYS))
            if version is None or held_bytes(db) > MAX_BYTES:
                return None
            shared: dict[str, str] = {}
            rows: dict[int, WeightRow] = {}
            for row in reads.all_chunk_weights(db):
                path_, source = row[1], row[9]
                rows[row[0]] = (row[0], shared.setdefault(path_, path_), *row[2:9],
                                shared.setdefault(source, source))
            names = _file_names(db)
        finally:
            conn.execute("COMMIT")
        by_source: dict[str, list[int]] = {}
        for rowid, row in rows.items():
            by_source.setdefault(row[9], []).append(rowid)
        word_ids, words = _numbered(rows, before)
        kept = True
        return ChunkRows(version, rows, frozenset(by_source), db, data_version,
                         word_ids=word_ids, words=words, names=names,
                         by_source={s: np.sort(np.asarray(r, dtype=np.int64))
                                    for s, r in by_source.items()})
    finally:
        if not kept:
            db.close()


class RowsCache(SnapshotCache[ChunkRows]):
    """The current :class:`ChunkRows` of each store a process searches (thread-safe; see
    :mod:`pipeline.store.snapshots`); :meth:`current_at` takes the store's
    :func:`versions_of`; ``prepare``: run on each copy loaded in the background, before
    a search may use it (what the search layer works out once per copy)."""

    def __init__(self, max_stores: int = MAX_STORES,
                 prepare: Callable[[ChunkRows], None] | None = None) -> None:
        super().__init__("chunk rows", lambda db: versions_of(get_metas(db, VERSION_KEYS)),
                         lambda db: self._prepared(load(db.path, self.held(db.key))),
                         max_stores)
        self._prepare = prepare
        #: Per store: when its last background load ended and how long it took.
        self._loads: dict[str, tuple[float, float]] = {}

    def _may_load(self, key: str) -> bool:
        """Every commit to a store makes its rows stale (not only those that change text or
        vectors): while a writer commits often, a reload starts at most every
        :data:`RELOAD_SPACING` times the last load's duration (SQLite answers meanwhile),
        so reloading takes at most about a fifth of one core."""
        with self._lock:
            ended, took = self._loads.get(key, (0.0, 0.0))
        return time.monotonic() >= ended + RELOAD_SPACING * took

    def _prepared(self, copy: ChunkRows | None) -> ChunkRows | None:
        if copy is not None and self._prepare is not None:
            self._prepare(copy)
        return copy

    def _fresh(self, key: str, path: Path, want_vectors: bool | str) -> ChunkRows | None:
        started = time.monotonic()
        try:
            return self._prepared(load(path, self.held(key)))  # no vector library needed
        finally:
            ended = time.monotonic()
            with self._lock:
                self._loads[key] = (ended, ended - started)

    def _current(self, key: str, version: Any) -> ChunkRows | None:
        held = super()._current(key, version)
        return held if held is not None and held.unchanged() else None

    def _keep(self, key: str, copy: ChunkRows) -> None:
        super()._keep(key, copy)
        # A rebuild swaps a new generation in and deletes the old one's file, whose copy would
        # otherwise keep it open (its space not freed) until evicted: dropped at the next load.
        with self._lock:
            gone = [k for k in self._held if not os.path.exists(k)]
            stale = [self._held.pop(k) for k in gone]
        for old in stale:
            self.dropped(old)

    def dropped(self, copy: ChunkRows) -> None:
        copy.close()
