"""Celery tasks: thin wrappers that move messages; the logic lives in :mod:`pipeline.jobs`."""

from __future__ import annotations

import logging
import random
from functools import cache

from celery import Task
from kombu import Connection

from pipeline import jobs
from pipeline.config import Settings, load_settings
from pipeline.embeddings.base import EmbeddingError
from workers.app import STORE_QUEUE, app, embed_queue

log = logging.getLogger(__name__)
MAX_RETRIES = 5


@cache
def settings() -> Settings:
    """This worker's own settings (environment and config file), read once per process."""
    return load_settings()


def backoff(retries: int) -> float:
    """About 0.5 s doubling to an 8 s cap, with up to 20% jitter (OpenClaw's schedule)."""
    return min(8.0, 0.5 * 2**retries) * (1 + random.random() * 0.2)


def submit_embed_job(job: jobs.Job, connection: Connection | None = None) -> None:
    """Queue an embedding job on its provider's queue (on ``connection``'s broker if given)."""
    embed_chunks.apply_async(args=[job], queue=embed_queue(job["spec"]["name"]),
                             connection=connection)


@app.task(name="memq.embed_chunks", bind=True, max_retries=MAX_RETRIES)
def embed_chunks(self: Task, job: jobs.Job) -> dict[str, int]:
    """Embed a group of chunks and send the vectors to the single writer."""
    if self.request.delivery_info.get("redelivered"):
        retries, failure = jobs.after_crash(job)
        for again in retries:
            submit_embed_job(again)
        if failure is not None:
            write_vectors.apply_async(args=[failure], queue=STORE_QUEUE)
        log.warning("embedding job was redelivered after a crash: split into %d job(s)%s",
                    len(retries), ", gave up on its chunk" if failure else "")
        return {"embedded": 0, "resubmitted": len(retries)}
    try:
        result = jobs.embed_job(job, settings())
    except EmbeddingError as exc:
        if exc.retryable and self.request.retries < MAX_RETRIES:
            raise self.retry(exc=exc, countdown=backoff(self.request.retries)) from exc
        result = jobs.failure_result(job, str(exc))
    write_vectors.apply_async(args=[result], queue=STORE_QUEUE)
    return {"embedded": len(result["vectors"]), "failed": len(result["failed"])}


@app.task(name="memq.write_vectors")
def write_vectors(result: jobs.Result) -> dict[str, object]:
    """Attach vectors to their chunks in the store (the only task that writes SQLite)."""
    outcome = jobs.apply_result(result, settings())
    if outcome.refused:
        log.warning("result refused: %s", outcome.refused)
    return {"written": outcome.written, "stale": outcome.stale, "failed": outcome.failed,
            "refused": outcome.refused}


@app.task(name="memq.index_workspace", bind=True)
def index_workspace(self: Task, options: dict[str, object] | None = None) -> dict[str, int]:
    """An index job (``memq index --remote``), run by the writer host that owns the store.

    The task id is the job id; ``pipeline.store.joblog`` records its progress in the store.
    """
    options = options or {}
    return jobs.index_job(self.request.id, settings(), submit_embed_job,
                          retry_failed=bool(options.get("retry_failed")),
                          host=self.request.hostname)
