"""Provider batch jobs in the store: one row per job, the chunks it holds, and its state.

A batch job lives for minutes to hours, longer than any message or worker, so the store is
where it is remembered: a worker restart, a Redis flush or a redeploy finds every job that has
not finished here and resumes polling it (:func:`pipeline.batch.workflow.reconcile`). Only the
store's host writes these rows (the producer creates them, the writer updates them from the
batch workers' messages); every update is idempotent and a finished job never changes again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pipeline.store.engine import Database
from pipeline.store.schema import transaction

if TYPE_CHECKING:
    from pipeline.store.writer import PendingChunk

#: Local states of a job that has not finished (``queued``: the row exists, the submit task has
#: not yet created the remote job).
LIVE_STATES = ("queued", "submitted", "running", "unknown")
#: How a job ended; ``timeout`` is memq's own (the job outlived ``timeoutMinutes``).
FINISHED_STATES = ("completed", "failed", "expired", "cancelled", "timeout", "disabled", "held")

_LIVE = f"({', '.join(repr(s) for s in LIVE_STATES)})"
#: SQL: chunk ids held by a live batch job (never queued again while it runs).
LIVE_CHUNK_IDS = (f"SELECT chunk_id FROM batch_chunks JOIN batch_jobs ON batch_jobs.id = "
                  f"batch_chunks.job_id WHERE batch_jobs.state IN {_LIVE}")
_COLUMNS = ("id, provider, spec, options, state, raw_state, remote_id, remote, chunks, attempts, "
            "created_at, deadline, updated_at, finished_at, embedded, to_sync, last_error")


def create_job(db: Database, job_id: str, spec: dict[str, Any], options: dict[str, Any],
               chunk_ids: Sequence[str], deadline: float) -> None:
    """Record a new job (state ``queued``) holding ``chunk_ids``; ``options`` are the batch
    settings it runs with (poll interval, concurrency), so a resumed job keeps them."""
    now = time.time()
    with transaction(db) as conn:
        conn.execute(
            "INSERT INTO batch_jobs(id, provider, spec, options, state, chunks, created_at, "
            "deadline, updated_at) VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?)",
            (job_id, spec["name"], json.dumps(spec, sort_keys=True),
             json.dumps(options, sort_keys=True), len(chunk_ids), now, deadline, now))
        conn.executemany("INSERT OR IGNORE INTO batch_chunks(job_id, chunk_id) VALUES (?, ?)",
                         [(job_id, cid) for cid in chunk_ids])


def _row(cursor: Any, row: tuple[Any, ...]) -> dict[str, Any]:
    out = dict(zip([d[0] for d in cursor.description], row, strict=True))
    out["spec"] = json.loads(out["spec"])
    out["options"] = json.loads(out["options"])
    out["remote"] = json.loads(out["remote"]) if out["remote"] else None
    return out


def _select(db: Database, where: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
    cursor = db.conn.execute(f"SELECT {_COLUMNS} FROM batch_jobs {where}", params)
    return [_row(cursor, row) for row in cursor.fetchall()]


def get_job(db: Database, job_id: str) -> dict[str, Any] | None:
    rows = _select(db, "WHERE id = ?", (job_id,))
    return rows[0] if rows else None


def live_jobs(db: Database, provider: str | None = None) -> list[dict[str, Any]]:
    """Jobs that have not finished, oldest first (of one provider, if named)."""
    if provider is None:
        return _select(db, f"WHERE state IN {_LIVE} ORDER BY created_at", ())
    return _select(db, f"WHERE state IN {_LIVE} AND provider = ? ORDER BY created_at",
                   (provider,))


def recent_jobs(db: Database, limit: int = 20) -> list[dict[str, Any]]:
    """Live jobs first, then the newest finished ones, up to ``limit``."""
    return _select(db, f"ORDER BY state IN {_LIVE} DESC, created_at DESC LIMIT ?", (limit,))


def job_chunks(db: Database, job_id: str) -> list[PendingChunk]:
    """The job's chunks that still exist and still wait for a vector."""
    rows = db.conn.execute(
        "SELECT chunks.rowid, chunks.id, chunks.hash, chunks.text FROM batch_chunks JOIN chunks "
        "ON chunks.id = batch_chunks.chunk_id WHERE batch_chunks.job_id = ? "
        "AND chunks.state = 'pending' ORDER BY chunks.rowid", (job_id,)).fetchall()
    from pipeline.store.writer import PendingChunk  # an index pass's, not a search's

    return [PendingChunk(*row) for row in rows]


def chunk_hashes(db: Database, chunk_ids: Sequence[str]) -> dict[str, str]:
    """chunk id -> hash of its text, for the ids still in the store."""
    if not chunk_ids:
        return {}
    marks = ",".join("?" * len(chunk_ids))
    return dict(db.conn.execute(f"SELECT id, hash FROM chunks WHERE id IN ({marks})",
                                list(chunk_ids)).fetchall())


def job_chunk_ids(db: Database, job_id: str) -> list[str]:
    """Every chunk id the job was submitted with (the custom ids of its requests)."""
    return [cid for (cid,) in db.conn.execute(
        "SELECT chunk_id FROM batch_chunks WHERE job_id = ? ORDER BY chunk_id", (job_id,))]


def record_state(db: Database, job_id: str, state: str, raw_state: str | None,
                 remote: dict[str, Any] | None) -> bool:
    """Move a live job to another live state; False (nothing written) if it has finished."""
    with transaction(db) as conn:
        cur = conn.execute(
            f"UPDATE batch_jobs SET state = ?, raw_state = ?, remote_id = coalesce(?, remote_id),"
            f" remote = coalesce(?, remote), attempts = attempts + 1, updated_at = ? "
            f"WHERE id = ? AND state IN {_LIVE}",
            (state, raw_state, remote and remote.get("remote_id"),
             json.dumps(remote, sort_keys=True) if remote else None, time.time(), job_id))
    return cur.rowcount == 1


def finish_job(db: Database, job_id: str, state: str, *, raw_state: str | None,
               remote: dict[str, Any] | None, embedded: int, to_sync: int,
               error: str | None) -> bool:
    """Mark a live job finished (once: False when it already was, so a duplicate message of
    a redelivered poll changes nothing)."""
    if state not in FINISHED_STATES:
        raise ValueError(f"not a finished batch state: {state!r}")
    now = time.time()
    with transaction(db) as conn:
        cur = conn.execute(
            f"UPDATE batch_jobs SET state = ?, raw_state = coalesce(?, raw_state), "
            f"remote_id = coalesce(?, remote_id), remote = coalesce(?, remote), "
            f"embedded = ?, to_sync = ?, last_error = ?, finished_at = ?, updated_at = ? "
            f"WHERE id = ? AND state IN {_LIVE}",
            (state, raw_state, remote and remote.get("remote_id"),
             json.dumps(remote, sort_keys=True) if remote else None, embedded, to_sync,
             error[:1000] if error else None, now, now, job_id))
    return cur.rowcount == 1


#: The columns of a job row :func:`batch_job_summary` shows and their camelCase JSON keys.
_SUMMARY = (("id", "id"), ("provider", "provider"), ("state", "state"),
            ("raw_state", "rawState"), ("remote_id", "remoteId"), ("chunks", "chunks"),
            ("attempts", "attempts"), ("created_at", "createdAt"), ("deadline", "deadline"),
            ("finished_at", "finishedAt"), ("embedded", "embedded"), ("to_sync", "toSync"),
            ("last_error", "lastError"))


def batch_job_summary(job: dict[str, Any]) -> dict[str, Any]:
    """A batch job row for people and programs, with camelCase keys (``docs/json.md``; the
    spec and remote blobs left out)."""
    return {key: job[column] for column, key in _SUMMARY}
