"""The store's chunk rows in memory, for processes that search many times.

After ranking, a search reads what it weighs its candidates by and shows of them: each
candidate's path, its file's modification time, its entry values, lines, text and source
(:func:`pipeline.store.reads.chunk_weights`), and which sources the store holds
(:func:`~pipeline.store.reads.present_sources`). A long-running reader holds them all per
store, beside its vectors (:mod:`pipeline.store.matrix`) and BM25 statistics
(:mod:`pipeline.store.postings`), so a search that finds them current touches no chunk row
in SQLite. With them it keeps what the rows give that does not depend on the query: each
file's decay date (:func:`pipeline.search.decay.note_time`) and each chunk's word set for MMR
(:func:`pipeline.store.tokens.word_set`), worked out on first use.

Never stale. A copy keeps the connection it was read on (one read transaction), and the value
of SQLite's ``PRAGMA data_version`` on it at that moment: that value changes whenever any
other connection, in this process or another, commits to the store, and this connection never
writes. A search uses the copy only when its connection's ``data_version`` is still that one
and the store's text and vectors versions, as the search's own connection sees them, are the
copy's (a store file replaced at its path is another generation with other versions; the
copy's connection would still see the old file). Otherwise SQLite answers while a fresh copy
loads in the background (:class:`~pipeline.store.snapshots.SnapshotCache`).

Memory: a held row is a tuple of the row's values, sharing its path and source strings with
the other rows of its file; about 0.6 KB per chunk of the benchmark's 4-line notes beyond its
text (bench/query_latency.py prints it). A store with more than :data:`MAX_ROWS` chunks is
not held: SQLite answers as before.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.store import reads
from pipeline.store.engine import Database, connect
from pipeline.store.reads import WeightRow
from pipeline.store.schema import TEXT_VERSION_KEY, get_metas
from pipeline.store.snapshots import MAX_STORES, SnapshotCache
from pipeline.store.vectors import VERSION_KEY as VECTORS_VERSION_KEY

#: The meta keys whose values name the store generation a copy was read from.
VERSION_KEYS = (TEXT_VERSION_KEY, VECTORS_VERSION_KEY)
#: Chunks above which a store's rows are not held (about 1 GB of rows at the benchmark's size).
MAX_ROWS = 1_000_000
#: MMR word sets kept per store; past this many they are dropped and worked out again.
MAX_WORD_SETS = 20_000

Versions = tuple[Any, Any]


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
    #: Per chunk rowid: its MMR word set, filled on first use (at most MAX_WORD_SETS).
    word_sets: dict[int, frozenset[bytes]] = field(default_factory=dict)
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

    def weights(self, rowids: list[int]) -> list[WeightRow]:
        """As :func:`~pipeline.store.reads.chunk_weights`: the rows of those chunks held
        (every chunk of the store is), in the order asked."""
        rows = self.rows
        return [rows[r] for r in rowids if r in rows]

    def allowed(self, sources: list[str]) -> list[int]:
        """As :func:`~pipeline.store.reads.allowed_rowids`: the chunks of ``sources``,
        ascending."""
        wanted = set(sources)
        return sorted(r for r, row in self.rows.items() if row[9] in wanted)

    def word_set(self, rowid: int, text: str) -> frozenset[bytes]:
        """Chunk ``rowid``'s MMR word set (of its ``text``), worked out once."""
        found = self.word_sets.get(rowid)
        if found is None:
            from pipeline.store.tokens import word_set

            if len(self.word_sets) >= MAX_WORD_SETS:
                self.word_sets.clear()
            found = self.word_sets[rowid] = word_set(text)
        return found

    def close(self) -> None:
        """Close the copy's connection (it is then never current)."""
        with self._lock:
            if self.db is not None:
                self.db.close()
                self.db = None


def load(path: Path) -> ChunkRows | None:
    """Read every chunk row of the store at ``path`` on a connection of its own, kept by the
    copy (one read transaction; its ``data_version`` read first, so a commit during the read
    only makes the copy look changed). None for a store without a text version or with more
    than :data:`MAX_ROWS` chunks."""
    db = connect(path, want_vectors=False)
    kept = False
    try:
        conn = db.conn
        conn.execute("BEGIN")
        try:
            data_version = int(conn.execute("PRAGMA data_version").fetchone()[0])
            version = versions_of(get_metas(db, VERSION_KEYS))
            count = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
            if version is None or count > MAX_ROWS:
                return None
            shared: dict[str, str] = {}
            rows: dict[int, WeightRow] = {}
            for row in reads.all_chunk_weights(db):
                path_, source = row[1], row[9]
                rows[row[0]] = (row[0], shared.setdefault(path_, path_), *row[2:9],
                                shared.setdefault(source, source))
        finally:
            conn.execute("COMMIT")
        sources = frozenset(row[9] for row in rows.values())
        kept = True
        return ChunkRows(version, rows, sources, db, data_version)
    finally:
        if not kept:
            db.close()


class RowsCache(SnapshotCache[ChunkRows]):
    """The current :class:`ChunkRows` of each store a process searches (thread-safe; see
    :mod:`pipeline.store.snapshots`); :meth:`current_at` takes the store's
    :func:`versions_of`."""

    def __init__(self, max_stores: int = MAX_STORES) -> None:
        super().__init__("chunk rows", lambda db: versions_of(get_metas(db, VERSION_KEYS)),
                         lambda db: load(db.path), max_stores)

    def _current(self, key: str, version: Any) -> ChunkRows | None:
        held = super()._current(key, version)
        return held if held is not None and held.unchanged() else None

    def _fresh(self, path: Path, want_vectors: bool | str) -> ChunkRows | None:
        return load(path)  # the rows need no vector library

    def dropped(self, copy: ChunkRows) -> None:
        copy.close()
