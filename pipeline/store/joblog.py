"""The job log memq kept before jobs moved to Celery's result backend: read once, then gone.

Up to this version a store's index jobs were logged in a SQLite file beside it
(``<store>.jobs``), and before that in an ``index_jobs`` table inside the store itself. The job
log is now Celery's database result backend (:mod:`pipeline.fleet.job_log`); the first index
pass of a store that still has old rows hands them over (:func:`old_rows`) and, once they are
recorded there, removes the old log (:func:`forget_old`), so no row is lost and none is read
twice.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from pipeline.store import schema
from pipeline.store.engine import Database, connect

TABLE = "index_jobs"


def log_path(store_path: Path) -> Path:
    """The old job log's file beside the store (``memq.sqlite.jobs``)."""
    return store_path.with_name(f"{store_path.name}.jobs")


def _has_table(db: Database) -> bool:
    return db.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                           (TABLE,)).fetchone() is not None


def _rows(db: Database) -> list[dict[str, Any]]:
    if not _has_table(db):
        return []
    cursor = db.conn.execute(f"SELECT * FROM {TABLE} ORDER BY started_at")
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def old_rows(store_path: Path, store: Database) -> list[dict[str, Any]]:
    """Every row of the old job logs of the store at ``store_path`` (open as ``store``),
    oldest first: those inside the store, then those of the file beside it."""
    rows = _rows(store)
    path = log_path(store_path)
    if path.exists():
        log = connect(path, want_vectors=False)
        try:
            rows += _rows(log)
        finally:
            log.close()
    seen: set[str] = set()
    return [r for r in rows if not (r["id"] in seen or seen.add(r["id"]))]


def forget_old(store_path: Path, store: Database) -> None:
    """Remove the old job logs (after their rows were recorded in the new one)."""
    if _has_table(store):
        with schema.transaction(store) as conn:
            conn.execute(f"DROP TABLE {TABLE}")
    path = log_path(store_path)
    for leftover in (path, path.with_name(path.name + "-wal"),
                     path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leftover)
