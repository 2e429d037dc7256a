"""Enqueue index jobs from any host that reaches the broker (``memq index --remote``), and
follow one to the end on the store's host (``memq jobs --follow``).

The job runs on the writer host (queue ``control``), which owns the store; the caller needs
neither the store nor the memory files, only the broker. The returned job id is the Celery
task id: Flower shows it, and ``memq jobs`` on the store host shows what the job did.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kombu.exceptions import OperationalError

from pipeline.config import Settings, redact_url
from pipeline.errors import FleetError
from pipeline.fleet import FleetDispatcher
from pipeline.memory import POLL_S, wait_for_vectors
from pipeline.messages import IndexRequest
from pipeline.routing import control_queue
from pipeline.store import joblog
from pipeline.store.engine import connect
from workers.monitor import broker_status

UNKNOWN_AFTER_S = 15.0


class JobError(FleetError):
    """An index job could not be queued or followed."""


class EnqueueFailed(JobError):
    """No broker is configured, or it did not take the message (nothing was queued)."""


def enqueue_index(settings: Settings, *, retry_failed: bool = False) -> str:
    """Queue one index pass of the writer host's workspace; returns the job id."""
    if not settings.broker_url:
        raise EnqueueFailed("enqueueing an index job needs the fleet's broker: set MEMQ_BROKER_URL "
                       "(or brokerUrl) and run `memq worker --role writer`")
    try:
        with FleetDispatcher(settings.broker_url) as fleet:
            return fleet.index(IndexRequest(settings.agent_id, retry_failed,
                                            settings.fleet.shard_of(settings.agent_id)))
    except OperationalError as exc:
        raise EnqueueFailed(f"broker {redact_url(settings.broker_url)} did not take the job: "
                            f"{exc}") from exc


def follow_job(settings: Settings, job_id: str, *,
               on_progress: Callable[[int, int], None] | None = None,
               warn: Callable[[str], None] | None = None,
               unknown_after: float = UNKNOWN_AFTER_S) -> dict[str, Any]:
    """Wait on the store's host until job ``job_id`` ran and no chunk waits for a vector.

    Returns the job's log row (``state`` is ``done`` or ``failed``). Raises :class:`JobError`
    when there is no store here, or when the job is neither logged nor waiting on ``control``
    after ``unknown_after`` seconds.
    """
    if not settings.store.path.exists():
        raise JobError(f"no store at {settings.store.path}: follow a job on the writer host "
                       "(or in Flower)")
    with joblog.opened(settings.store.path) as log:
        started = time.monotonic()
        while True:
            job = joblog.get_job(log, job_id)
            if job is not None and job["state"] != "running":
                break
            if job is None and time.monotonic() - started > unknown_after and not _waiting(
                    settings, job_id):
                queue = control_queue(settings.fleet.shard_of(settings.agent_id))
                raise JobError(f"unknown job {job_id}: not in this store's job log, not "
                               f"waiting on '{queue}'")
            time.sleep(POLL_S)
    if job["state"] == "done":
        # Opened now, not before the job ran: a rebuild may have swapped another file in.
        db = connect(settings.store.path, want_vectors=False)
        try:
            wait_for_vectors(db, on_progress=on_progress, warn=warn)
        finally:
            db.close()
    return job


def _waiting(settings: Settings, job_id: str) -> bool:
    if not settings.broker_url:
        return False
    status = broker_status(settings.broker_url, shards=settings.fleet.shards)
    return any(w["id"] == job_id for w in status["waiting_jobs"] or [])
