"""Celery tasks of provider batch jobs: thin wrappers around :mod:`pipeline.batch.workflow`.

``memq.batch_submit`` and ``memq.batch_poll`` run on ``batch.<provider>`` (HTTP only, any
host, never the SQLite file); ``memq.batch_update`` runs on ``store`` (the single writer). A
poll never sleeps: it asks once and sends the next poll as a new message with a countdown.
Each job's message chain holds a lease in the broker's Redis (:class:`RedisLeases`), so the
chain :func:`resume_batches` starts for a job whose messages died is the only one polling it.
"""

from __future__ import annotations

import logging
import os
import threading
from functools import partial
from typing import Any

import redis
from celery import Task
from celery.signals import worker_ready
from kombu import Connection

from pipeline import jobs
from pipeline.batch import workflow
from pipeline.batch.api import batch_api_for
from pipeline.embeddings.registry import ProviderSpec
from pipeline.errors import EmbeddingError, ProviderRetryable, StoreBusy
from pipeline.ingest.producer import queue_pending
from pipeline.store import batches, schema
from pipeline.store.engine import Database, as_store_error
from workers.app import (
    CONTROL_QUEUE,
    STORE_QUEUE,
    VISIBILITY_TIMEOUT_S,
    app,
    batch_queue,
    embed_queue,
)
from workers.monitor import redis_client
from workers.tasks import WRITE_RETRIES, settings, submit_embed_job

log = logging.getLogger(__name__)
SUBMIT_RETRIES = 5
#: A submit message may wait in its queue a while (and comes back after the visibility
#: timeout if its worker dies): its lease outlives both.
SUBMIT_LEASE_S = VISIBILITY_TIMEOUT_S + 60.0
#: A poll chain's lease lasts two poll intervals plus this; a chain silent for longer (its
#: worker was killed, Redis was flushed) is replaced by the next reconcile.
POLL_GRACE_S = float(os.environ.get("MEMQ_BATCH_POLL_GRACE", "60"))
LEASE_PREFIX = "memq:batch-lease:"
_HOLD = """
local held = redis.call('GET', KEYS[1])
if held == false or held == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""


class RedisLeases:
    """:class:`pipeline.batch.workflow.Leases` in the broker's Redis (one key per job)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._hold = client.register_script(_HOLD)

    def claim(self, job_id: str, token: str, ttl: float) -> bool:
        return bool(self.client.set(LEASE_PREFIX + job_id, token, nx=True, px=int(ttl * 1000)))

    def hold(self, job_id: str, token: str, ttl: float) -> bool:
        return bool(self._hold(keys=[LEASE_PREFIX + job_id], args=[token, int(ttl * 1000)]))


_leases: dict[str, RedisLeases] = {}
_lock = threading.Lock()


def leases_for(broker_url: str | None = None) -> RedisLeases:
    url = broker_url or str(app.conf.broker_url)
    with _lock:
        if url not in _leases:
            _leases[url] = RedisLeases(redis_client(url, timeout=10.0))
        return _leases[url]


def _send_submit(msg: workflow.Message, connection: Connection | None = None) -> None:
    batch_submit.apply_async(args=[msg], queue=batch_queue(msg["spec"]["name"]),
                             connection=connection)


def _send_poll(msg: workflow.Message, connection: Connection | None = None,
               countdown: float = 0.0) -> None:
    batch_poll.apply_async(args=[msg], queue=batch_queue(msg["spec"]["name"]),
                           countdown=countdown, connection=connection)


def submit_batch_job(msg: workflow.Message, *, broker_url: str | None = None,
                     connection: Connection | None = None) -> None:
    """The producer's hand-off: take the new job's lease, then queue its submit task."""
    leases_for(broker_url).claim(msg["job"], msg["token"], SUBMIT_LEASE_S)
    _send_submit(msg, connection)


def resume_batches(db: Database, broker_url: str | None = None,
                   connection: Connection | None = None) -> int:
    """Restart the message chain of every live batch job that lost it (reconcile).

    Chains die with a killed worker or a flushed Redis. A flush also forgets kombu's queue
    bindings, without which a process that declared a queue before publishes into the void,
    so while batch jobs are live the fleet's queues are declared again first (a few SADDs).
    """
    providers = {job["provider"] for job in batches.live_jobs(db)}
    if not providers:
        return 0
    names = [STORE_QUEUE, CONTROL_QUEUE, *(queue(p) for p in sorted(providers)
                                           for queue in (embed_queue, batch_queue))]
    with app.connection_for_write(broker_url) as fresh:
        channel = fresh.default_channel
        for name in names:
            app.amqp.queues[name].bind(channel).declare()
    return workflow.reconcile(
        db, os.path.realpath(db.path), leases_for(broker_url),
        submit=partial(_send_submit, connection=connection),
        poll=partial(_send_poll, connection=connection),
        submit_ttl=SUBMIT_LEASE_S, poll_grace_s=POLL_GRACE_S)


@worker_ready.connect
def resume_on_writer_start(sender: Any = None, **_: Any) -> None:
    """The writer, when it starts, resumes the batch jobs whose polling died with the fleet
    (a redeploy, a Redis restart without persistence)."""
    if sender is None or STORE_QUEUE not in sender.app.amqp.queues.consume_from:
        return
    from pipeline.query import open_store

    try:
        db = open_store(settings())
        if db is None:
            return
        try:
            resumed = resume_batches(db)
        finally:
            db.close()
    except Exception as exc:  # never keep the writer from starting; the next pass retries
        log.warning("could not resume batch jobs at start (%s: %s)", type(exc).__name__, exc)
        return
    if resumed:
        log.info("resumed polling of %d batch job(s)", resumed)


def _send(step: workflow.Step) -> None:
    for update in step.updates:
        batch_update.apply_async(args=[update], queue=STORE_QUEUE)
    poll = step.next_poll
    if poll is not None:
        leases_for().hold(poll["job"], poll["token"],
                          workflow.poll_ttl(poll["options"], POLL_GRACE_S))
        _send_poll(poll, countdown=float(poll["options"]["poll_s"]))


@app.task(name="memq.batch_submit", bind=True, max_retries=SUBMIT_RETRIES)
def batch_submit(self: Task, msg: workflow.Message) -> dict[str, Any]:
    """Upload a job's chunks and create the remote job, then start polling it."""
    if not leases_for().hold(msg["job"], msg["token"], SUBMIT_LEASE_S):
        return {"dropped": "another message chain holds this job"}
    try:
        api = batch_api_for(ProviderSpec.from_dict(msg["spec"]), settings())
        try:
            step = workflow.submit_step(api, msg)
        finally:
            api.close()
    except EmbeddingError as exc:
        if isinstance(exc, ProviderRetryable) and self.request.retries < SUBMIT_RETRIES:
            raise self.retry(countdown=jobs.retry_delay(self.request.retries, exc.retry_after)
                             ) from None
        log.warning("batch job %s not submitted: %s", msg["job"], exc)
        step = workflow.submit_failed(msg, exc)
    _send(step)
    return {"job": msg["job"], "submitted": step.next_poll is not None}


@app.task(name="memq.batch_poll")
def batch_poll(msg: workflow.Message) -> dict[str, Any]:
    """Ask for a job's state once; collect its output once it stopped."""
    if not leases_for().hold(msg["job"], msg["token"],
                             workflow.poll_ttl(msg["options"], POLL_GRACE_S)):
        return {"dropped": "another message chain holds this job"}
    try:
        api = batch_api_for(ProviderSpec.from_dict(msg["spec"]), settings())
    except EmbeddingError as exc:  # no key on this worker: keep polling until it has one
        log.warning("cannot poll batch job %s here: %s", msg["job"], exc)
        _send(workflow.Step(next_poll=msg))
        return {"job": msg["job"], "state": "not polled"}
    try:
        step = workflow.poll_step(api, msg)
    finally:
        api.close()
    _send(step)
    return {"job": msg["job"], "state": step.updates[-1]["event"] if step.updates else "same"}


@app.task(name="memq.batch_update", bind=True, max_retries=WRITE_RETRIES)
def batch_update(self: Task, update: workflow.Message) -> dict[str, Any]:
    """The writer's side of a batch job: states, vectors, and the hand-off of what the job
    did not embed to the sync path; a finished job makes room for the next one."""
    cfg = settings()
    db = jobs.store_for(update["store"], cfg)
    if db is None:
        return {"refused": f"store {update['store']} no longer exists"}
    try:
        try:
            applied = workflow.apply_update(db, update, cfg)
            for job in applied.embed_jobs:
                submit_embed_job(job)
            if applied.top_up:
                _top_up(db, update)
        except db.operational_error as exc:
            raise as_store_error(exc, db.path) or exc from exc
    except StoreBusy as exc:
        raise self.retry(exc=exc, countdown=jobs.retry_delay(self.request.retries)) from exc
    if applied.outcome is not None and applied.outcome.refused:
        log.warning("batch vectors refused: %s", applied.outcome.refused)
    return {"event": update["event"], "sync_jobs": len(applied.embed_jobs)}


def _top_up(db: Database, update: workflow.Message) -> None:
    """Queue the chunks left waiting for a free batch slot (same index model only)."""
    spec = ProviderSpec.from_dict(update["spec"])
    index = schema.get_meta(db, "index") or {}
    if (index.get("provider"), index.get("model"), index.get("provider_key")) != (
            spec.name, spec.model, spec.provider_key):
        return
    queue_pending(db, spec, submit_embed_job,
                  batch=workflow.BatchRouting(update["options"], submit_batch_job))
