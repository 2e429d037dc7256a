"""Celery tasks: thin wrappers that move messages; the logic lives in :mod:`pipeline.jobs`."""

from __future__ import annotations

import logging
from functools import cache

import redis
from celery import Task
from celery.exceptions import SoftTimeLimitExceeded
from kombu import Connection

from pipeline import jobs
from pipeline.config import Settings, load_settings
from pipeline.errors import (
    EmbeddingError,
    ProviderRefused,
    ProviderRetryable,
    ProviderUnavailable,
    StoreBusy,
)
from workers.app import STORE_QUEUE, app, embed_queue

log = logging.getLogger(__name__)
MAX_RETRIES = jobs.MAX_RETRIES
WRITE_RETRIES = 20


@cache
def settings() -> Settings:
    """This worker's own settings (environment and config file), read once per process."""
    return load_settings()


def broker_redis() -> redis.Redis | None:
    """A client for the broker's Redis (one per process and broker), where the fleet-wide rate
    limits are counted and a provider's pause is shared."""
    return _redis_at(str(app.conf.broker_url or ""))


@cache
def _redis_at(url: str) -> redis.Redis | None:
    if url.startswith("redis+socket://"):
        return redis.Redis(unix_socket_path=url.removeprefix("redis+socket://"))
    if url.startswith(("redis://", "rediss://")):
        return redis.Redis.from_url(url)
    log.warning("rate limits need a Redis broker; %s is not one: not enforced",
                url.split(":", 1)[0])
    return None


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
        result = jobs.embed_job(job, settings(), broker_redis())
    except EmbeddingError as exc:
        if isinstance(exc, ProviderRetryable) and self.request.retries < MAX_RETRIES:
            delay = jobs.retry_delay(self.request.retries, exc.retry_after)
            log.info("retrying %d chunk(s) in %.1f s: %s", len(job["chunks"]), delay, exc)
            raise self.retry(countdown=delay) from None
        if isinstance(exc, ProviderRefused | ProviderUnavailable):
            log.warning("embedding refused, %d chunk(s) stay pending until the configuration "
                        "is fixed: %s", len(job["chunks"]), exc)
            result = jobs.held_result(job, str(exc))
        else:
            tried = (f" (after {self.request.retries} retries)"
                     if isinstance(exc, ProviderRetryable) else "")
            log.warning("embedding failed%s, %d chunk(s) marked failed: %s", tried,
                        len(job["chunks"]), exc)
            result = jobs.failure_result(job, f"{exc}{tried}")
    except SoftTimeLimitExceeded:
        if self.request.retries < MAX_RETRIES:  # a stalled provider, not a verdict on the chunks
            log.warning("embedding %d chunk(s) ran past the task's soft time limit: retrying",
                        len(job["chunks"]))
            raise self.retry(countdown=jobs.retry_delay(self.request.retries)) from None
        result = jobs.failure_result(
            job, f"ran past the task's soft time limit {self.request.retries + 1} times")
    except Exception as exc:  # a bug: record it on the chunks, don't lose them
        log.exception("embedding job failed")
        result = jobs.failure_result(job, f"{type(exc).__name__}: {exc}")
    write_vectors.apply_async(args=[result], queue=STORE_QUEUE)
    return {"embedded": len(result["vectors"]), "failed": len(result["failed"])}


@app.task(name="memq.write_vectors", bind=True, max_retries=WRITE_RETRIES)
def write_vectors(self: Task, result: jobs.Result) -> dict[str, object]:
    """Attach vectors to their chunks in the store (the only task that writes SQLite).

    A store locked by another process past the busy timeout is retried with backoff rather
    than dropping the vectors.
    """
    try:
        outcome = jobs.apply_result(result, settings())
    except StoreBusy as exc:
        raise self.retry(exc=exc, countdown=jobs.retry_delay(self.request.retries)) from exc
    if outcome.refused:
        log.warning("result refused: %s", outcome.refused)
    return {"written": outcome.written, "stale": outcome.stale, "failed": outcome.failed,
            "refused": outcome.refused}


REINDEX_POLL_S = 1.0


def submit_reindex_step(connection: Connection | None = None, countdown: float = 0.0) -> None:
    """Queue the next step of a rebuild on the ``store`` queue (the host that owns SQLite)."""
    reindex_step.apply_async(queue=STORE_QUEUE, countdown=countdown, connection=connection)


@app.task(name="memq.reindex_step")
def reindex_step() -> dict[str, object]:
    """Drive a rebuild one short step at a time, re-queueing itself until it is swapped in.

    Each step is a producer pass over the new generation; no task ever waits for the queues,
    so the single store consumer is never blocked by the rebuild it serves.
    """
    from pipeline.embeddings.registry import choose_provider
    from pipeline.ingest.reindex import rebuild_step

    cfg = settings()
    progress = rebuild_step(cfg, choose_provider(cfg), submit_embed_job)
    if progress is None:
        return {"rebuild": None}
    if not progress.done:
        submit_reindex_step(countdown=REINDEX_POLL_S)
    return progress.as_dict()


@app.task(name="memq.index_workspace", bind=True)
def index_workspace(self: Task, options: dict[str, object] | None = None) -> dict[str, int]:
    """An index job (``memq index --remote``), run by the writer host that owns the store.

    The task id is the job id; ``pipeline.store.joblog`` records its progress in the store.
    """
    from workers.batch_tasks import resume_batches, submit_batch_job

    options = options or {}
    counts, rebuilding = jobs.index_job(self.request.id, settings(), submit_embed_job,
                                        retry_failed=bool(options.get("retry_failed")),
                                        host=self.request.hostname,
                                        batch_submit=submit_batch_job,
                                        resume_batches=resume_batches)
    if rebuilding:
        submit_reindex_step()
    return counts
