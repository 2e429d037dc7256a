"""Celery tasks of embedding and indexing: thin wrappers that read a message, call the plain
functions of :mod:`pipeline`, and pass the outcome on through the fleet.

Every worker imports this module at start (the app includes it), so each task imports what it
runs (the messages, the embedding runner, the store, QMD: NumPy and pydantic among them) when
it first runs: an idle worker and its pool process hold none of it
(``tests/test_worker_imports.py``).
"""

from __future__ import annotations

import logging
import re
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import redis
from celery import Task
from celery.exceptions import SoftTimeLimitExceeded, WorkerLostError
from celery.worker import state as worker_state
from celery.worker.state import task_ready

from pipeline.embeddings.retries import MAX_RETRIES, retry_delay
from pipeline.errors import (
    EmbeddingError,
    JobRefused,
    MessageRefused,
    ProviderRefused,
    ProviderRetryable,
    ProviderUnavailable,
    StoreBusy,
)
from pipeline.fleet.job_log import RecordedJob
from pipeline.routing import (
    APPLY_TASK,
    EMBED_TASK,
    INDEX_TASK,
    QMD_JOB_TASK,
    REINDEX_STEP_TASK,
    WRITE_TASK,
    embed_queue,
    memory_of_job,
)
from workers.app import DescribedRequest, app
from workers.runtime import arrival_shard, runtime

if TYPE_CHECKING:
    from pipeline.messages import EmbedJob

log = logging.getLogger(__name__)
WRITE_RETRIES = 20
REINDEX_POLL_S = 1.0


def refused(message: Any, exc: MessageRefused) -> dict[str, str]:
    """A message this worker cannot read: logged and dropped (acknowledged, never retried)."""
    log.error("dropped a message: %s", exc)
    return {"refused": str(exc)}


def refuse_job(task: Task, memory: str | None, exc: MessageRefused, *,
               job_id: str | None = None, origin: str = "remote") -> NoReturn:
    """Refuse the job ``job_id`` (default: the task's id, which is the job id the sender was
    given): recorded failed, with the reason, in this host's job log, where the sender follows
    it (``memq index --remote``, ``memq jobs --follow``); then raised (:class:`JobRefused`),
    so Flower shows the task failed as the job log does."""
    job_id = job_id or str(task.request.id)
    host = str(task.request.hostname)
    reason = f"refused by {host}: {exc}"
    log.error("dropped a message: refused job %s: %s", job_id, exc)
    runtime.job_log().failed(job_id, reason, {"memory": memory or memory_of_job(job_id),
                                              "origin": origin, "host": host}, task.request)
    raise JobRefused(reason)


#: How a pool process ends when it is asked to stop (honcho and systemd signal the whole
#: process group on a restart): not a crash the job could have caused.
ORDERLY_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                             signal.SIGUSR1})


def crashed(exc: BaseException) -> bool:
    """Whether ``exc`` says a pool process died under a job (killed, aborted, a non-zero
    exit), rather than being stopped with the worker."""
    stopping = worker_state.should_stop is not None or worker_state.should_terminate is not None
    if not isinstance(exc, WorkerLostError) or stopping:  # (a clean exit sets them to 0)
        return False
    # billiard says only in words how the process ended: "signal 9 (SIGKILL)", "exitcode 1".
    if match := re.search(r"signal (\d+)", str(exc)):
        return int(match.group(1)) not in ORDERLY_SIGNALS
    match = re.search(r"exitcode (-?\d+)", str(exc))
    return match is None or int(match.group(1)) != 0


class EmbedRequest(DescribedRequest):
    """An embedding job as the worker's main process sees it.

    When the pool process running the job dies (``WorkerLostError``: a native abort in
    llama.cpp, the OOM killer, SIGKILL), the job may be what killed it: it is split here
    (:func:`after_crash`: single chunks, a chunk that crashes :data:`MAX_DELIVERIES` times is
    given up as failed), the parts are queued, and only then is the message acknowledged. A
    pool process stopped with the worker (:func:`crashed`) is no crash: Celery requeues the
    job whole.
    This is the only sign of a crash memq trusts: a broker's ``redelivered`` flag is not one
    (RabbitMQ sets it on every message it recovers after a restart, and on what a lost
    connection held), and splitting on it made every broker restart cost one request per
    chunk and give up healthy chunks as "crashed". Anything else goes to Celery's handling.
    """

    def on_failure(self, exc_info: Any, send_failed_event: bool = True,
                   return_ok: bool = False) -> Any:
        exc = exc_info.exception
        exc = getattr(exc, "exc", exc)  # ExceptionWithTraceback
        if crashed(exc) and self._split_after_crash():
            task_ready(self)
            self.acknowledge()
            self.send_event("task-retried", exception=repr(exc), traceback="")
            return None
        return super().on_failure(exc_info, send_failed_event, return_ok)

    def _split_after_crash(self) -> bool:
        """Queue the crashed job's parts (or its chunk's failure); False when that could not
        be done (Celery then requeues the message whole)."""
        from pipeline.embeddings.runner import after_crash
        from pipeline.messages import EmbedJob

        try:
            job = EmbedJob.from_json(self.args[0])
        except (MessageRefused, IndexError):  # (IndexError: a request without arguments)
            return False
        retries, failure = after_crash(job)
        try:
            fleet = runtime.fleet()
            for again in retries:
                fleet.embed(again)
            if failure is not None:
                fleet.write(failure)
        except Exception as exc:  # the broker is gone too: the message comes back whole
            log.warning("could not split a job that crashed its worker process (%s); it is "
                        "requeued whole", exc)
            return False
        log.warning("embedding job crashed its worker process: split into %d job(s)%s",
                    len(retries), ", gave up on its chunk" if failure else "")
        return True


@app.task(name=EMBED_TASK, bind=True, max_retries=MAX_RETRIES, Request=EmbedRequest)
def embed_chunks(self: Task, message: dict[str, Any]) -> dict[str, Any]:
    """Embed a group of chunks and send the vectors to the memory's writer (a job that
    crashes its worker process is split by :class:`EmbedRequest`)."""
    from pipeline.embeddings.runner import embed_yielding
    from pipeline.messages import EmbedJob

    try:
        job = EmbedJob.from_json(message)
    except MessageRefused as exc:
        return refused(message, exc)
    fleet = runtime.fleet()
    rest = None
    try:
        settings = runtime.settings_for(job.memory)
        client = runtime.redis()
        result, rest = embed_yielding(job, runtime.provider(job.spec, settings), client,
                                      should_yield=interactive_waiting(client, job))
    except ProviderRetryable as exc:
        if self.request.retries < MAX_RETRIES:
            delay = retry_delay(self.request.retries, exc.retry_after)
            log.info("retrying %d chunk(s) in %.1f s: %s", job.size, delay, exc)
            raise self.retry(countdown=delay) from None
        log.warning("embedding failed (after %d retries), %d chunk(s) marked failed: %s",
                    self.request.retries, job.size, exc)
        result = job.failed(f"{exc} (after {self.request.retries} retries)")
    except (ProviderRefused, ProviderUnavailable) as exc:
        log.warning("embedding refused, %d chunk(s) stay pending until the configuration "
                    "is fixed: %s", job.size, exc)
        result = job.held(str(exc))
    except EmbeddingError as exc:
        log.warning("embedding failed, %d chunk(s) marked failed: %s", job.size, exc)
        result = job.failed(str(exc))
    except SoftTimeLimitExceeded:
        if self.request.retries < MAX_RETRIES:  # a stalled provider, not a verdict on the chunks
            log.warning("embedding %d chunk(s) ran past the task's soft time limit: retrying",
                        job.size)
            raise self.retry(countdown=retry_delay(self.request.retries)) from None
        result = job.failed(f"ran past the task's soft time limit {self.request.retries + 1} "
                            "times")
    except Exception as exc:  # a bug: record it on the chunks, don't lose them
        log.exception("embedding job failed")
        result = job.failed(f"{type(exc).__name__}: {exc}")
    fleet.write(result)
    if rest is not None:  # interactive work waits: it goes first, the rest of this job after
        fleet.embed(rest)
        log.debug("bulk job of %s gave way to interactive work: %d chunk(s) queued again",
                  job.memory, rest.size)
    return {"embedded": len(result.vectors), "failed": len(result.failed),
            "requeued": rest.size if rest is not None else 0}


def interactive_waiting(client: redis.Redis | None, job: EmbedJob) -> Callable[[], bool]:
    """Whether an interactive message waits on ``job``'s embed queue: kombu keeps a Redis
    queue's priority-0 messages (the interactive lane) in the list named after the queue, and
    higher priorities in lists of their own. Never True without a Redis broker."""
    queue = embed_queue(job.spec.name)

    def waiting() -> bool:
        if client is None:
            return False
        try:
            return bool(client.llen(queue))
        except redis.RedisError:  # a hint only: keep embedding
            return False

    return waiting


@app.task(name=WRITE_TASK, bind=True, max_retries=WRITE_RETRIES)
def write_vectors(self: Task, message: dict[str, Any]) -> dict[str, object]:
    """Attach vectors to their chunks in the store (the only task that writes SQLite).

    A store locked by another process past the busy timeout is retried with backoff rather
    than dropping the vectors.
    """
    from pipeline.messages import EmbedResult
    from pipeline.store.results import apply_result, gone

    try:
        result = EmbedResult.from_json(message)
    except MessageRefused as exc:
        return refused(message, exc)
    try:
        settings = runtime.settings_for(result.memory)
        db = runtime.writable_store(result.memory, result.store, arrival_shard(self))
    except MessageRefused as exc:
        return refused(message, exc)
    try:
        outcome = (apply_result(db, result, cache=settings.cache.enabled) if db is not None
                   else gone(result))
    except StoreBusy as exc:
        raise self.retry(exc=exc, countdown=retry_delay(self.request.retries)) from exc
    if outcome.refused:
        log.warning("result refused: %s", outcome.refused)
    return {"written": outcome.written, "stale": outcome.stale, "failed": outcome.failed,
            "refused": outcome.refused}


@app.task(name=REINDEX_STEP_TASK, bind=True)
def reindex_step(self: Task, message: dict[str, Any]) -> dict[str, object]:
    """Drive a rebuild one short step at a time, re-queueing itself until it is swapped in.

    Each step is a producer pass over the new generation; no task ever waits for the queues,
    so the single store consumer is never blocked by the rebuild it serves.
    """
    from pipeline.embeddings.registry import choose_provider
    from pipeline.ingest.reindex import rebuild_step
    from pipeline.messages import IndexRequest

    try:
        request = IndexRequest.from_json(message)
        settings = runtime.served(request.memory, arrival_shard(self))
    except MessageRefused as exc:
        return refused(message, exc)
    fleet = runtime.fleet()
    progress = rebuild_step(settings, choose_provider(settings), fleet.embed)
    if progress is None:
        return {"rebuild": None}
    if not progress.done:
        fleet.rebuild_later(request.memory, countdown=REINDEX_POLL_S, shard=request.shard)
    return progress.as_dict()


@app.task(name=INDEX_TASK, bind=True, throws=(JobRefused,))
def index_memory(self: Task, message: dict[str, Any]) -> dict[str, Any]:
    """An index job (``memq index --remote``, or a pass or sync asked for by a host that does
    not hold the store), run by the writer host that owns the store.

    The task id is the job id; the job log (:mod:`pipeline.fleet.job_log`) records its state,
    progress and result, with this task's worker and queue.
    """
    from pipeline.messages import IndexRequest

    try:
        request = IndexRequest.from_json(message)
        runtime.served(request.memory, arrival_shard(self))
    except MessageRefused as exc:
        refuse_job(self, None, exc)
    with runtime.memory(request.memory) as memory:
        run = memory.index(wait=False, retry_failed=request.retry_failed,
                           rebuild=request.rebuild, job_id=self.request.id,
                           origin="sync" if request.interactive else "remote",
                           host=self.request.hostname, job_request=self.request)
    return run.report.counts()


@app.task(name=APPLY_TASK, bind=True, throws=(JobRefused,))
def apply_changes(self: Task, message: dict[str, Any]) -> dict[str, Any]:
    """Part of a producer pass that ran on the host holding a memory's files, sent to the
    writer host that holds its store (``control.<shard>``): applied as a local pass would
    (:func:`workers.shard_side.apply_changes`); every path is checked against the memory's own
    sources there."""
    from pipeline.messages import FileChanges
    from workers import shard_side

    try:
        changes = FileChanges.from_json(message)
    except MessageRefused as exc:
        return refused(message, exc)  # no job id to record it under
    try:
        runtime.served(changes.memory, arrival_shard(self))
    except MessageRefused as exc:
        refuse_job(self, changes.memory, exc, job_id=changes.job, origin=changes.origin)
    with runtime.memory(changes.memory) as memory:
        report = shard_side.apply_changes(memory.local, changes, job_request=self.request,
                                          held=runtime.store)
    return report.counts()


@app.task(name=QMD_JOB_TASK, bind=True, throws=(JobRefused,))
def qmd_update(self: Task, message: dict[str, Any]) -> dict[str, Any]:
    """A QMD backend's update job (:func:`pipeline.qmd.jobs.run_due`), run by the host that
    owns the memory, on its ``control.<shard>`` queue; the home's write lock keeps two from
    overlapping. Recorded in the job log (kind ``qmd-<reason>``) as index jobs are."""
    from pipeline.messages import QmdJobRequest
    from pipeline.qmd import QmdBackend
    from pipeline.qmd.jobs import run_due

    try:
        request = QmdJobRequest.from_json(message)
        settings = runtime.served(request.memory, arrival_shard(self))
    except MessageRefused as exc:
        refuse_job(self, None, exc, origin="qmd")
    if settings.backend != "qmd":
        return {"skipped": "backend is not qmd"}
    job = RecordedJob.start(runtime.jobs(settings), self.request.id, memory=request.memory,
                            origin=f"qmd-{request.reason}", host=self.request.hostname,
                            request=self.request, task=QMD_JOB_TASK)
    out = run_due(QmdBackend(settings), request.reason)
    if out.get("error"):
        job.failed(f"qmd {out.get('kind')}: {out['error']}")
    else:
        job.done({"qmd": out})
    return out
