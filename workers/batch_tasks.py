"""Celery tasks of provider batch jobs: thin wrappers around :mod:`pipeline.batch.workflow`.

``memq.batch_submit`` and ``memq.batch_poll`` run on ``batch.<provider>`` (HTTP only, any
host, never the SQLite file); ``memq.batch_update`` runs on ``store`` (the single writer). A
poll never sleeps: it asks once and sends the next poll as a new message with a countdown.
Each job's message chain holds a lease in the broker's Redis
(:class:`pipeline.fleet.broker.RedisLeases`), so the chain a reconcile starts for a job whose
messages died is the only one polling it.

Every worker imports this module at start: a task imports the batch workflow and the messages
(NumPy, pydantic) when it first runs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from celery import Task
from celery.signals import worker_ready

from pipeline.embeddings.retries import retry_delay
from pipeline.errors import EmbeddingError, MessageRefused, ProviderRetryable, StoreBusy
from pipeline.fleet.broker import POLL_GRACE_S, SUBMIT_LEASE_S
from pipeline.routing import (
    BATCH_POLL_TASK,
    BATCH_SUBMIT_TASK,
    BATCH_UPDATE_TASK,
)
from pipeline.store import schema
from pipeline.store.engine import Database, as_store_error
from workers.app import app
from workers.runtime import arrival_shard, runtime
from workers.single_writer import consumed_shards
from workers.tasks import WRITE_RETRIES, refused

if TYPE_CHECKING:
    from pipeline.batch import workflow
    from pipeline.messages import BatchUpdate

log = logging.getLogger(__name__)
SUBMIT_RETRIES = 5


def _send(step: workflow.Step) -> None:
    from pipeline.batch import workflow

    fleet = runtime.fleet()
    for update in step.updates:
        fleet.batch_update(update)
    poll = step.next_poll
    if poll is not None:
        fleet.leases().hold(poll.job, poll.token, workflow.poll_ttl(poll.options, POLL_GRACE_S))
        fleet.batch_poll(poll, countdown=poll.options.poll_s)


@worker_ready.connect
def resume_on_writer_start(sender: Any = None, **_: Any) -> None:
    """The writer, when it starts, resumes the batch jobs whose polling died with the fleet
    (a redeploy, a Redis restart without persistence)."""
    if sender is None:
        return
    shards = consumed_shards(list(sender.app.amqp.queues.consume_from))
    try:
        memory = runtime.default_memory()
        settings = runtime.settings_for(memory)
        shard = settings.fleet.shard_of(memory)
        if shard not in shards:
            return
        db = schema.open_store(settings.store.path, want_vectors=settings.store.want_vectors)
        if db is None:
            return
        try:
            resumed = runtime.fleet().resume_batches(db, memory, shard)
        finally:
            db.close()
    except Exception as exc:  # never keep the writer from starting; the next pass retries
        log.warning("could not resume batch jobs at start (%s: %s)", type(exc).__name__, exc)
        return
    if resumed:
        log.info("resumed polling of %d batch job(s)", resumed)


@app.task(name=BATCH_SUBMIT_TASK, bind=True, max_retries=SUBMIT_RETRIES)
def batch_submit(self: Task, message: dict[str, Any]) -> dict[str, Any]:
    """Upload a job's chunks and create the remote job, then start polling it."""
    from pipeline.batch import workflow
    from pipeline.batch.api import batch_api_for
    from pipeline.messages import BatchSubmit

    try:
        msg = BatchSubmit.from_json(message)
    except MessageRefused as exc:
        return refused(message, exc)
    if not runtime.fleet().leases().hold(msg.job, msg.token, SUBMIT_LEASE_S):
        return {"dropped": "another message chain holds this job"}
    try:
        api = batch_api_for(msg.spec, runtime.settings_for(msg.memory))
        try:
            step = workflow.submit_step(api, msg)
        finally:
            api.close()
    except ProviderRetryable as exc:
        if self.request.retries < SUBMIT_RETRIES:
            raise self.retry(countdown=retry_delay(self.request.retries, exc.retry_after)
                             ) from None
        log.warning("batch job %s not submitted: %s", msg.job, exc)
        step = workflow.submit_failed(msg, exc)
    except EmbeddingError as exc:
        log.warning("batch job %s not submitted: %s", msg.job, exc)
        step = workflow.submit_failed(msg, exc)
    _send(step)
    return {"job": msg.job, "submitted": step.next_poll is not None}


@app.task(name=BATCH_POLL_TASK)
def batch_poll(message: dict[str, Any]) -> dict[str, Any]:
    """Ask for a job's state once; collect its output once it stopped."""
    from pipeline.batch import workflow
    from pipeline.batch.api import batch_api_for
    from pipeline.messages import BatchPoll

    try:
        msg = BatchPoll.from_json(message)
    except MessageRefused as exc:
        return refused(message, exc)
    if not runtime.fleet().leases().hold(msg.job, msg.token,
                                         workflow.poll_ttl(msg.options, POLL_GRACE_S)):
        return {"dropped": "another message chain holds this job"}
    try:
        api = batch_api_for(msg.spec, runtime.settings_for(msg.memory))
    except EmbeddingError as exc:  # no key on this worker: keep polling until it has one
        log.warning("cannot poll batch job %s here: %s", msg.job, exc)
        _send(workflow.Step(next_poll=msg))
        return {"job": msg.job, "state": "not polled"}
    try:
        step = workflow.poll_step(api, msg)
    finally:
        api.close()
    _send(step)
    return {"job": msg.job, "state": step.updates[-1].event if step.updates else "same"}


@app.task(name=BATCH_UPDATE_TASK, bind=True, max_retries=WRITE_RETRIES)
def batch_update(self: Task, message: dict[str, Any]) -> dict[str, Any]:
    """The writer's side of a batch job: states, vectors, and the hand-off of what the job
    did not embed to the sync path; a finished job makes room for the next one."""
    from pipeline.batch import workflow
    from pipeline.messages import BatchUpdate

    try:
        update = BatchUpdate.from_json(message)
        settings = runtime.settings_for(update.memory)
        db = runtime.writable_store(update.memory, update.store, arrival_shard(self))
    except MessageRefused as exc:
        return refused(message, exc)
    if db is None:
        return {"refused": f"store {update.store} no longer exists"}
    fleet = runtime.fleet()
    try:
        try:
            applied = workflow.apply_update(db, update, cache=settings.cache.enabled)
            for job in applied.embed_jobs:
                fleet.embed(job)
            if applied.top_up:
                _top_up(db, update, use_cache=settings.cache.enabled)
        except db.operational_error as exc:
            raise as_store_error(exc, db.path) or exc from exc
    except StoreBusy as exc:
        raise self.retry(exc=exc, countdown=retry_delay(self.request.retries)) from exc
    if applied.outcome is not None and applied.outcome.refused:
        log.warning("batch vectors refused: %s", applied.outcome.refused)
    return {"event": update.event, "sync_jobs": len(applied.embed_jobs)}


def _top_up(db: Database, update: BatchUpdate, *, use_cache: bool = True) -> None:
    """Queue the chunks left waiting for a free batch slot (same index model only);
    ``use_cache`` is ``cache.enabled``."""
    from pipeline.batch import workflow
    from pipeline.ingest.producer import queue_pending
    from pipeline.messages import Route

    spec = update.spec
    index = schema.get_meta(db, "index") or {}
    if (index.get("provider"), index.get("model"), index.get("provider_key")) != (
            spec.name, spec.model, spec.provider_key):
        return
    fleet = runtime.fleet()
    queue_pending(db, spec, fleet.embed, memory=update.memory, use_cache=use_cache,
                  batch=workflow.BatchRouting(update.options, fleet.batch_submit),
                  route=Route(update.route.shard))
