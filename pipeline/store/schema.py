"""Tables of the store, and small helpers for transactions and the ``meta`` table.

Chunk rows carry an integer ``rowid`` that is also the rowid of their FTS5 row and of their
vector, so the hot search paths join on integers. ``chunks.id`` is the stable text identity
(sha256 of source, path, line range and content hash): a result computed for an older version
of a file can never attach to newer text, because the newer text has another id.

``chunks_fts`` reads its content from ``chunks.text`` but indexes ``memq_fts_text(text)``: the
text with Chinese/Japanese/Korean runs cut into bigrams (:mod:`pipeline.store.tokens`), with
the Porter stemmer over ``unicode61``. The function is registered on every connection
(:func:`pipeline.store.engine.connect`); the triggers call it, so every write path stays in step.
Version 2 changed the FTS table; opening an older store rebuilds it from ``chunks``. Version 3
added ``idx_chunks_source`` (a search asks which sources are present with a few index seeks
instead of reading every chunk) and the provider batch jobs (``batch_jobs``, ``batch_chunks``):
a version 2 store gains them in place, nothing else changes. Version 4 added the triggers that
keep ``meta.text_version`` (below); an older store gains them in place. Version 5 added
``embedding_cache.last_used`` (set on every write and every cache hit, so pruning to
``cache.maxEntries`` drops the least recently *used* rows, as OpenClaw's docs say); an older
store gains the column in place, filled from ``updated_at``. Version 6 added each chunk's entry
annotation values (``chunks.importance``, ``triggers``, ``project_key``: OpenClaw 2026.9.6's
recall metadata, :mod:`pipeline.ingest.entry_metadata`); an older store gains the columns in
place, and its ``memory`` Markdown files are marked changed (``files.hash`` and ``size``
cleared; not ``mtime_ns``, which dates extra-path notes for decay) so the next index pass
reads them again and fills the values. Their chunks keep their rows and vectors (same text,
same id): nothing is embedded again. Version 6 also keys
every file by its name and stem (``files.name_key``, ``stem_key``, indexed:
:mod:`pipeline.store.path_keys`), so a query naming a file finds it with an index seek; an
older store's files get their keys when it is opened. Version 7 added ``file_texts``: the
text of each memory file that a producer on another host sent (:mod:`pipeline.ingest.safety`),
so the store's host answers ``memory_get`` without the files; its rows go with their file's
row. An older store gains the table, and its memory Markdown files are marked changed as in
version 6, so the next pass (on the host of the files) sends them again (no re-embedding).
Version 8 added the path index ``paths_fts`` (OpenClaw 2026.9.6's ``memory_index_paths_fts``):
an FTS5 table over every file's path (``unicode61``, no stemmer, as OpenClaw's), one row per
``files`` row with its rowid, kept in step by triggers on ``files``, so a query finds a file by
words of its name (:mod:`pipeline.search.paths`). An older store gains it when opened, filled
from ``files`` in the same transaction: nothing is read or embedded again. Like the keyword
index it exists only where SQLite has FTS5.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pipeline.message_fields import ProviderSpec
from pipeline.store.engine import Database, connect
from pipeline.store.path_keys import name_keys

SCHEMA_VERSION = 8
#: The last version whose full-text table differs from today's (older stores rebuild it).
FTS_VERSION = 2
FTS_TOKENIZER = "porter unicode61"
#: The path index's tokenizer: OpenClaw's default (``memory.search.store.fts.tokenizer``).
PATH_TOKENIZER = "unicode61"
#: Every change to a chunk's text gives the store a new random ``meta.text_version`` in the same
#: transaction, so a reader holding BM25 postings in memory (:mod:`pipeline.store.postings`)
#: can tell with one point query whether they are current. Random, as ``vectors_version``: a
#: store swapped in by a rebuild never repeats the version of the one it replaced.
TEXT_VERSION_KEY = "text_version"
_NEW_TEXT_VERSION = (f"UPDATE meta SET value = json_quote(hex(randomblob(8))) "
                     f"WHERE key = '{TEXT_VERSION_KEY}';")

BASE_DDL = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS files (
    path       TEXT PRIMARY KEY,
    source     TEXT NOT NULL,
    hash       TEXT NOT NULL,
    mtime_ns   INTEGER NOT NULL,
    size       INTEGER NOT NULL,
    error      TEXT,
    indexed_at REAL NOT NULL,
    name_key   TEXT,
    stem_key   TEXT
);
CREATE INDEX IF NOT EXISTS idx_files_name_key ON files(name_key);
CREATE TABLE IF NOT EXISTS file_texts (
    path TEXT PRIMARY KEY,
    text TEXT NOT NULL
);
CREATE TRIGGER IF NOT EXISTS file_texts_gone AFTER DELETE ON files BEGIN
    DELETE FROM file_texts WHERE path = old.path;
END;
CREATE INDEX IF NOT EXISTS idx_files_stem_key ON files(stem_key);
CREATE TABLE IF NOT EXISTS chunks (
    rowid      INTEGER PRIMARY KEY,
    id         TEXT NOT NULL UNIQUE,
    path       TEXT NOT NULL,
    source     TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line   INTEGER NOT NULL,
    hash       TEXT NOT NULL,
    text       TEXT NOT NULL,
    state      TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'ready', 'failed')),
    error      TEXT,
    queued_at  REAL,
    updated_at REAL NOT NULL,
    importance INTEGER,
    triggers   TEXT,
    project_key TEXT
);
CREATE INDEX IF NOT EXISTS idx_chunks_path ON chunks(path);
CREATE INDEX IF NOT EXISTS idx_chunks_state ON chunks(state);
CREATE INDEX IF NOT EXISTS idx_chunks_source ON chunks(source);
CREATE TABLE IF NOT EXISTS embedding_cache (
    provider     TEXT NOT NULL,
    model        TEXT NOT NULL,
    provider_key TEXT NOT NULL,
    hash         TEXT NOT NULL,
    embedding    BLOB NOT NULL,
    dims         INTEGER NOT NULL,
    updated_at   REAL NOT NULL,
    last_used    REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (provider, model, provider_key, hash)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idx_embedding_cache_last_used ON embedding_cache(last_used);
CREATE TABLE IF NOT EXISTS batch_jobs (
    id          TEXT PRIMARY KEY,
    provider    TEXT NOT NULL,
    spec        TEXT NOT NULL,
    options     TEXT NOT NULL,
    state       TEXT NOT NULL,
    raw_state   TEXT,
    remote_id   TEXT,
    remote      TEXT,
    chunks      INTEGER NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    created_at  REAL NOT NULL,
    deadline    REAL NOT NULL,
    updated_at  REAL NOT NULL,
    finished_at REAL,
    embedded    INTEGER,
    to_sync     INTEGER,
    last_error  TEXT
);
CREATE INDEX IF NOT EXISTS idx_batch_jobs_state ON batch_jobs(state);
CREATE TABLE IF NOT EXISTS batch_chunks (
    job_id   TEXT NOT NULL,
    chunk_id TEXT NOT NULL,
    PRIMARY KEY (job_id, chunk_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idx_batch_chunks_chunk ON batch_chunks(chunk_id);
INSERT OR IGNORE INTO meta(key, value)
VALUES ('{text_version_key}', json_quote(hex(randomblob(8))));
CREATE TRIGGER IF NOT EXISTS chunks_text_version_insert AFTER INSERT ON chunks BEGIN
    {new_text_version}
END;
CREATE TRIGGER IF NOT EXISTS chunks_text_version_delete AFTER DELETE ON chunks BEGIN
    {new_text_version}
END;
CREATE TRIGGER IF NOT EXISTS chunks_text_version_update AFTER UPDATE OF text ON chunks BEGIN
    {new_text_version}
END;
""".replace("{new_text_version}", _NEW_TEXT_VERSION).replace(
    "{text_version_key}", TEXT_VERSION_KEY)
#: The keyword index (FTS5 over ``chunks.text``), the path index (FTS5 over ``files.path``;
#: filled from ``files`` when it is new) and the triggers that keep them in step; left out on
#: a SQLite without FTS5 (search is then vector-only), added when FTS5 is there again.
FTS_DDL = ("""
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    text, content='chunks', content_rowid='rowid', tokenize='{tokenizer}'
);
CREATE TRIGGER IF NOT EXISTS chunks_fts_insert AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, text) VALUES (new.rowid, memq_fts_text(new.text));
END;
CREATE TRIGGER IF NOT EXISTS chunks_fts_delete AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, text)
    VALUES ('delete', old.rowid, memq_fts_text(old.text));
END;
CREATE TRIGGER IF NOT EXISTS chunks_fts_update AFTER UPDATE OF text ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, text)
    VALUES ('delete', old.rowid, memq_fts_text(old.text));
    INSERT INTO chunks_fts(rowid, text) VALUES (new.rowid, memq_fts_text(new.text));
END;
CREATE VIRTUAL TABLE IF NOT EXISTS paths_fts USING fts5(
    path, source UNINDEXED, tokenize='{path_tokenizer}'
);
CREATE TRIGGER IF NOT EXISTS paths_fts_insert AFTER INSERT ON files BEGIN
    INSERT INTO paths_fts(rowid, path, source) VALUES (new.rowid, new.path, new.source);
END;
CREATE TRIGGER IF NOT EXISTS paths_fts_update AFTER UPDATE OF path, source ON files
WHEN old.path IS NOT new.path OR old.source IS NOT new.source BEGIN
    DELETE FROM paths_fts WHERE rowid = old.rowid;
    INSERT INTO paths_fts(rowid, path, source) VALUES (new.rowid, new.path, new.source);
END;
CREATE TRIGGER IF NOT EXISTS paths_fts_delete AFTER DELETE ON files BEGIN
    DELETE FROM paths_fts WHERE rowid = old.rowid;
END;
INSERT INTO paths_fts(rowid, path, source) SELECT rowid, path, source FROM files
 WHERE NOT EXISTS (SELECT 1 FROM paths_fts LIMIT 1);
""").replace("{tokenizer}", FTS_TOKENIZER).replace("{path_tokenizer}", PATH_TOKENIZER)
DDL = BASE_DDL + FTS_DDL

# Drop the full-text table of an older schema; DDL recreates it and _REFILL_FTS indexes chunks.
_DROP_FTS = """
DROP TRIGGER IF EXISTS chunks_fts_insert;
DROP TRIGGER IF EXISTS chunks_fts_delete;
DROP TRIGGER IF EXISTS chunks_fts_update;
DROP TABLE IF EXISTS chunks_fts;
"""
# Version 5: the cache's last use (a version < 5 store has the table without the column).
_ADD_LAST_USED = """
ALTER TABLE embedding_cache ADD COLUMN last_used REAL NOT NULL DEFAULT 0;
UPDATE embedding_cache SET last_used = updated_at;
DROP INDEX IF EXISTS idx_embedding_cache_updated_at;
"""
LAST_USED_VERSION = 5
# Version 6: entry annotation values per chunk; memory Markdown files read again to fill them.
_ADD_ENTRY_VALUES = """
ALTER TABLE chunks ADD COLUMN importance INTEGER;
ALTER TABLE chunks ADD COLUMN triggers TEXT;
ALTER TABLE chunks ADD COLUMN project_key TEXT;
ALTER TABLE files ADD COLUMN name_key TEXT;
ALTER TABLE files ADD COLUMN stem_key TEXT;
UPDATE files SET hash = '', size = -1
 WHERE source = 'memory' AND lower(path) LIKE '%.md' AND error IS NULL;
"""
ENTRY_VALUES_VERSION = 6
# Version 7: the texts a producer on another host sent; memory Markdown files sent again.
_RESEND_MEMORY_FILES = """
UPDATE files SET hash = '', size = -1
 WHERE source = 'memory' AND lower(path) LIKE '%.md' AND error IS NULL;
"""
FILE_TEXTS_VERSION = 7
_REFILL_FTS = (
    "INSERT INTO chunks_fts(rowid, text) SELECT rowid, memq_fts_text(text) FROM chunks;"
)


_REFILL_PATHS = ("DELETE FROM paths_fts;\nINSERT INTO paths_fts(rowid, path, source) "
                 "SELECT rowid, path, source FROM files;")


def has_keyword_index(db: Database) -> bool:
    """Whether the store has its FTS5 keyword index (absent when made without FTS5)."""
    return db.conn.execute(
        "SELECT 1 FROM sqlite_master WHERE name = 'chunks_fts'").fetchone() is not None


def has_path_index(db: Database) -> bool:
    """Whether the store has its FTS5 path index (absent when made without FTS5)."""
    return db.conn.execute(
        "SELECT 1 FROM sqlite_master WHERE name = 'paths_fts'").fetchone() is not None


_FTS_TRIGGERS = ("chunks_fts_insert", "chunks_fts_delete", "chunks_fts_update",
                 "paths_fts_insert", "paths_fts_update", "paths_fts_delete")


def ensure_schema(db: Database) -> None:
    """Create every table that does not exist yet, and rebuild the full-text index of a store
    written before :data:`FTS_VERSION` (idempotent, cheap when already current).

    On a SQLite without FTS5 (``db.fts_ok`` False) the keyword index is left out, and the
    triggers that feed an existing one are dropped (they would fail every write there); the
    next time FTS5 is available the index is created or emptied, filled from ``chunks``, and
    its triggers come back.
    """
    version = get_meta(db, "schema_version", None)
    if version != SCHEMA_VERSION:
        if not db.fts_ok:
            upgrade = BASE_DDL
        else:
            old_fts = version is not None and int(version) < FTS_VERSION
            upgrade = f"{_DROP_FTS}\n{DDL}\n{_REFILL_FTS}" if old_fts else DDL
        if (version is not None and int(version) < LAST_USED_VERSION
                and _lacks_column(db, "embedding_cache", "last_used")):
            upgrade = f"{_ADD_LAST_USED}\n{upgrade}"
        fill_keys = (version is not None and int(version) < ENTRY_VALUES_VERSION
                     and _lacks_column(db, "chunks", "importance"))
        if fill_keys:
            upgrade = f"{_ADD_ENTRY_VALUES}\n{upgrade}"
        elif version is not None and int(version) < FILE_TEXTS_VERSION:
            upgrade = f"{_RESEND_MEMORY_FILES}\n{upgrade}"
        db.conn.executescript(
            f"BEGIN IMMEDIATE;\n{upgrade}\nINSERT INTO meta(key, value) VALUES "
            f"('schema_version', '{SCHEMA_VERSION}') ON CONFLICT(key) DO UPDATE SET "
            "value = excluded.value;\nCOMMIT;")
        if fill_keys:
            with transaction(db) as conn:
                conn.executemany("UPDATE files SET name_key = ?, stem_key = ? WHERE path = ?",
                                 [(*name_keys(p), p) for (p,) in
                                  conn.execute("SELECT path FROM files").fetchall()])
    _match_keyword_index(db)


def _lacks_column(db: Database, table: str, column: str) -> bool:
    """An older store whose ``table`` has no ``column`` yet."""
    columns = {row[1] for row in db.conn.execute(f"PRAGMA table_info({table})")}
    return bool(columns) and column not in columns


def _match_keyword_index(db: Database) -> None:
    """Keep the keyword index in step with what this SQLite can do (see ensure_schema)."""
    marks = ", ".join("?" * len(_FTS_TRIGGERS))
    triggers = db.conn.execute(f"SELECT count(*) FROM sqlite_master WHERE type = 'trigger' "
                               f"AND name IN ({marks})", _FTS_TRIGGERS).fetchone()[0]
    has_table = has_keyword_index(db) and has_path_index(db)
    if not db.fts_ok:
        if triggers:
            drops = "\n".join(f"DROP TRIGGER IF EXISTS {name};" for name in _FTS_TRIGGERS)
            db.conn.executescript(f"BEGIN IMMEDIATE;\n{drops}\nCOMMIT;")
        return
    if has_table and triggers == len(_FTS_TRIGGERS):
        return
    empty = ("INSERT INTO chunks_fts(chunks_fts) VALUES ('delete-all');"
             if has_keyword_index(db) else "")
    db.conn.executescript(f"BEGIN IMMEDIATE;\n{FTS_DDL}\n{empty}\n{_REFILL_FTS}\n"
                          f"{_REFILL_PATHS}\nCOMMIT;")


@contextmanager
def transaction(db: Database) -> Iterator[Any]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``: take the write lock up front so writers queue politely.

    Inside an open transaction (a :class:`WriteBatch`) it is a savepoint instead: the unit of
    work stays all-or-nothing, and the batch decides when to commit.
    """
    conn = db.conn
    if conn.in_transaction:
        conn.execute("SAVEPOINT unit")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK TO unit")
            conn.execute("RELEASE unit")
            raise
        conn.execute("RELEASE unit")
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class WriteBatch:
    """Many small units of work (one file each) in few transactions.

    A commit costs more than writing one small file's rows, so 10,000 files in 10,000
    transactions spend most of their time committing. A batch opens a transaction at its first
    write and commits after ``max_units`` units or ``max_seconds``, whichever comes first, so
    the write lock is never held long enough to starve the single writer (busy timeout 5 s).
    On an exception the open transaction rolls back (units committed earlier stay).
    """

    def __init__(self, db: Database, max_units: int = 1000, max_seconds: float = 0.25) -> None:
        self.db = db
        self.max_units = max_units
        self.max_seconds = max_seconds
        self._units = 0
        self._opened = 0.0

    @contextmanager
    def unit(self) -> Iterator[Any]:
        """One all-or-nothing unit of work inside the batch's current transaction."""
        conn = self.db.conn
        if not conn.in_transaction:
            conn.execute("BEGIN IMMEDIATE")
            self._units, self._opened = 0, time.monotonic()
        with transaction(self.db):
            yield conn
        self._units += 1
        if (self._units >= self.max_units
                or time.monotonic() - self._opened >= self.max_seconds):
            conn.execute("COMMIT")

    def __enter__(self) -> WriteBatch:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if self.db.conn.in_transaction:
            self.db.conn.execute("ROLLBACK" if exc_type is not None else "COMMIT")


def get_meta(db: Database, key: str, default: Any = None) -> Any:
    try:
        row = db.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    except db.operational_error:  # a brand-new file with no tables yet
        return default
    return default if row is None else json.loads(row[0])


def get_metas(db: Database, keys: Sequence[str]) -> dict[str, Any]:
    """The values of those ``keys`` that ``meta`` holds (as :func:`get_meta`), in one read."""
    try:
        rows = db.conn.execute(f"SELECT key, value FROM meta WHERE key IN "
                               f"({','.join('?' * len(keys))})", list(keys)).fetchall()
    except db.operational_error:  # a brand-new file with no tables yet
        return {}
    return {key: json.loads(value) for key, value in rows}


def delete_meta(db: Database, key: str) -> None:
    db.conn.execute("DELETE FROM meta WHERE key = ?", (key,))


def set_meta(db: Database, key: str, value: Any) -> None:
    db.conn.execute(
        "INSERT INTO meta(key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, json.dumps(value, sort_keys=True)),
    )


def open_store(path: Path, *, want_vectors: bool | str = True) -> Database | None:
    """The store at ``path`` with its schema up to date, or None when nothing was indexed
    there yet (the file does not exist)."""
    if not path.exists():
        return None
    db = connect(path, want_vectors=want_vectors)
    try:
        ensure_schema(db)
    except BaseException:
        db.close()
        raise
    return db


def index_spec(db: Database) -> ProviderSpec | None:
    """The embedding model the store's index was built with (None: keyword-only, or never
    indexed)."""
    index = get_meta(db, "index") or {}
    if not index.get("provider"):
        return None
    return ProviderSpec(index["provider"], index["model"], index["provider_key"],
                        index.get("options") or {})


def checkpoint(db: Database) -> None:
    """Move the WAL's pages into the database file (best effort: a busy reader only delays
    it; the data is safe either way)."""
    with contextlib.suppress(Exception):
        db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
