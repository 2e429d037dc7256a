"""The index-job log: one row per producer pass, written on the store's host.

An index job enqueued from anywhere (``memq index --remote``) is a Celery task whose id is
the job id. The broker forgets a task once it ran and memq keeps no result backend, so the
host that runs the job records here when it started and finished, what it did, and the error
if it failed. ``memq jobs`` / ``memq status`` read it back. Local runs of ``memq index`` are
logged the same way, so every producer pass shows up in one place.

The log lives in its own SQLite file beside the store's path (``memq.sqlite.jobs``), not in
the store: a rebuild swaps a new store generation in while a job runs, and the job's finish
must land where ``memq jobs`` reads afterwards, whichever generation is live by then. The
first time the file is created, rows an older memq kept inside the store are copied over.
The table is pruned to the newest ``KEEP_JOBS`` rows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pipeline.store import schema
from pipeline.store.engine import Database, connect

KEEP_JOBS = 200
T = TypeVar("T")

DDL = """
CREATE TABLE IF NOT EXISTS index_jobs (
    id           TEXT PRIMARY KEY,
    kind         TEXT NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('running', 'done', 'failed')),
    host         TEXT,
    started_at   REAL NOT NULL,
    finished_at  REAL,
    files        INTEGER,
    changed      INTEGER,
    deleted      INTEGER,
    chunks_queued INTEGER,
    chunks_cached INTEGER,
    embed_jobs   INTEGER,
    error        TEXT
);
CREATE INDEX IF NOT EXISTS idx_index_jobs_started ON index_jobs(started_at);
"""

COUNT_COLUMNS = ("files", "changed", "deleted", "chunks_queued", "chunks_cached", "embed_jobs")


def ensure_table(db: Database) -> None:
    db.conn.executescript(DDL)


def log_path(store_path: Path) -> Path:
    """The job log's file: named after the store's path, so no generation owns it."""
    return store_path.with_name(f"{store_path.name}.jobs")


@contextmanager
def opened(store_path: Path, store: Database | None = None) -> Iterator[Database]:
    """The job log of the store at ``store_path``, created (and seeded) on first use.

    ``store``: the store's connection when the caller holds one open (an index pass), so a
    new log learns whether the store has older rows to carry over without opening it again.
    """
    path = log_path(store_path)
    fresh = not path.exists()
    db = connect(path, want_vectors=False)
    try:
        ensure_table(db)
        if fresh and store_path.exists() and (store is None or _has_old_rows(store)):
            _import_from_store(db, store_path)
        yield db
    finally:
        db.close()


def _has_old_rows(store: Database) -> bool:
    """Whether the store kept an ``index_jobs`` table itself (an older memq did)."""
    return store.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                              "name = 'index_jobs'").fetchone() is not None


def _import_from_store(db: Database, store_path: Path) -> None:
    """Copy the rows an older memq logged inside the store itself (nothing is lost)."""
    db.conn.execute("ATTACH DATABASE ? AS store", (os.path.realpath(store_path),))
    try:
        found = db.conn.execute("SELECT 1 FROM store.sqlite_master WHERE type = 'table' "
                                "AND name = 'index_jobs'").fetchone()
        if found:
            with schema.transaction(db) as conn:
                conn.execute("INSERT OR IGNORE INTO main.index_jobs SELECT * FROM "
                             "store.index_jobs")
    finally:
        db.conn.execute("DETACH DATABASE store")


def _with_table(db: Database, work: Callable[[], T]) -> T:
    """Run ``work``; on a log without its table yet (a connection that did not come from
    :func:`opened`), create the table and run it again. A log from :func:`opened` has it, so
    a pass does its schema work once, not for every record."""
    try:
        return work()
    except db.operational_error as exc:
        if "no such table" not in str(exc):
            raise
    ensure_table(db)
    return work()


def record_start(db: Database, job_id: str, kind: str, host: str | None) -> None:
    """Mark ``job_id`` running (again, if a redelivery runs it a second time)."""
    _with_table(db, lambda: _start(db, job_id, kind, host))


def _start(db: Database, job_id: str, kind: str, host: str | None) -> None:
    with schema.transaction(db) as conn:
        conn.execute(
            "INSERT INTO index_jobs(id, kind, state, host, started_at) VALUES (?, ?, 'running', "
            "?, ?) ON CONFLICT(id) DO UPDATE SET state = 'running', host = excluded.host, "
            "started_at = excluded.started_at, finished_at = NULL, error = NULL",
            (job_id, kind, host, time.time()))
        conn.execute(
            "DELETE FROM index_jobs WHERE id NOT IN "
            "(SELECT id FROM index_jobs ORDER BY started_at DESC LIMIT ?)", (KEEP_JOBS,))


def record_finish(db: Database, job_id: str, counts: dict[str, int] | None = None,
                  error: str | None = None) -> None:
    """Mark ``job_id`` done with its counts, or failed with ``error``."""
    counts = counts or {}
    _with_table(db, lambda: _finish(db, job_id, counts, error))


def _finish(db: Database, job_id: str, counts: dict[str, int], error: str | None) -> None:
    with schema.transaction(db) as conn:
        conn.execute(
            f"UPDATE index_jobs SET state = ?, finished_at = ?, error = ?, "
            f"{', '.join(f'{c} = ?' for c in COUNT_COLUMNS)} WHERE id = ?",
            ("failed" if error else "done", time.time(), error,
             *(counts.get(c) for c in COUNT_COLUMNS), job_id))


@contextmanager
def logged(db: Database, job_id: str, kind: str, host: str | None) -> Iterator[dict[str, int]]:
    """Log one job around a ``with`` block; the block fills the yielded dict with counts.

    An exception marks the job failed with its message (and propagates); a process that dies
    leaves it ``running`` until a redelivery runs it again.
    """
    record_start(db, job_id, kind, host)
    counts: dict[str, int] = {}
    try:
        yield counts
    except BaseException as exc:
        record_finish(db, job_id, counts, error=f"{type(exc).__name__}: {exc}"[:1000])
        raise
    record_finish(db, job_id, counts)


def _dicts(db: Database, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
    cursor = _with_table(db, lambda: db.conn.execute(sql, params))
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def recent_jobs(db: Database, limit: int = 10) -> list[dict[str, Any]]:
    """The newest jobs first, as JSON-able dicts."""
    return _dicts(db, "SELECT * FROM index_jobs ORDER BY started_at DESC LIMIT ?", (limit,))


def get_job(db: Database, job_id: str) -> dict[str, Any] | None:
    rows = _dicts(db, "SELECT * FROM index_jobs WHERE id = ?", (job_id,))
    return rows[0] if rows else None


def last_error(db: Database) -> dict[str, Any] | None:
    """The most recent failed job (id, when, error), or None."""
    rows = _dicts(db, "SELECT id, finished_at, error FROM index_jobs WHERE state = 'failed' "
                      "ORDER BY started_at DESC LIMIT 1", ())
    return rows[0] if rows else None
