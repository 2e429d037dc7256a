"""The batch workflow as plain functions; the Celery tasks (``workers/batch_tasks.py``) only
move the messages these return.

Three places take part, and only the first and last touch SQLite:

- the **producer** (:func:`queue_batches`) packs uncached chunks of many files into as few
  jobs as the API's limits allow, records each job in the store and sends a
  :class:`~pipeline.messages.BatchSubmit` to ``batch.<provider>``; at most ``concurrency`` jobs
  of a provider run at once, the rest of the chunks wait (pending) for a finished job to make
  room (:func:`apply_update` tops up);
- a **batch worker** (:func:`submit_step`, :func:`poll_step`) does the HTTP: uploads and
  creates the job, polls it once per message (the next poll is a new message with a
  countdown, never a sleep; it carries the job's chunk ids, 65 bytes each, to account for
  every line of the output), and once it stopped downloads the output; it sends state
  changes and vectors to the writer as :class:`~pipeline.messages.BatchUpdate` messages;
- the **writer** (:func:`apply_update`) records states, attaches vectors, and on the finishing
  message sends every chunk without a vector (failed lines, lines never run) to the sync
  ``embed.<provider>`` path and counts the outcome (:mod:`pipeline.batch.policy`).

A job outliving ``timeoutMinutes`` (stuck, or in a state nobody knows: OpenClaw #7319) is
cancelled remotely, its partial output kept and the rest embedded by the sync path.
:func:`reconcile` finds live jobs whose message chain died (a Redis flush, a killed worker)
and starts a new one (at writer start, on each index pass and in ``memq status``); a lease
per job (:class:`Leases`) makes sure only one chain polls it.
"""

from __future__ import annotations

import importlib
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from pipeline.batch.api import (
    BATCH_PROVIDERS,
    BatchApi,
    BatchOutput,
    BatchRequest,
    RemoteBatch,
)
from pipeline.batch.policy import provider_policy, record_outcome
from pipeline.config import BatchSettings
from pipeline.embeddings.limits import HARD_MAX_INPUT_BYTES
from pipeline.errors import (
    BatchUnavailable,
    EmbeddingError,
    ProviderRefused,
    ProviderRetryable,
)
from pipeline.messages import (
    DEFAULT_ROUTE,
    BatchJobRef,
    BatchOptions,
    BatchPoll,
    BatchSubmit,
    BatchUpdate,
    EmbedJob,
    ProviderSpec,
    Route,
    embed_jobs,
    new_token,
    pack,
)
from pipeline.store import batches, writer
from pipeline.store.engine import Database

#: The longest wait between two polls of a job, whatever ``pollIntervalMs`` says: far below
#: the broker's visibility timeout, so a waiting poll message is never handed out twice.
POLL_CAP_S = 60.0
#: Text in one submit message (the chunks travel in it): keeps Redis messages reasonable.
#: With each JSONL line's overhead (~250 bytes) a full job's file stays under 50 MB, well
#: inside the APIs' own limits (OpenAI 200 MB, Voyage 1 GB, Gemini 2 GB), so the producer,
#: which has no API client (nor key), needs no ``line_size()``.
MESSAGE_MAX_BYTES = 32 * 1000 * 1000
#: Vectors per message to the writer (a 3072-wide float32 vector is 16 KB as base64).
VECTORS_PER_MESSAGE = 256
_API_CLASSES = {"openai": "OpenAIBatchApi", "voyage": "VoyageBatchApi",
                "gemini": "GeminiBatchApi"}


@dataclass(frozen=True)
class BatchRouting:
    """Batch mode for a producer pass: the job options (:func:`options_for`) and how to send a
    submit message."""

    options: BatchOptions
    submit: Callable[[BatchSubmit], None]


def routing_for(settings: BatchSettings, submit: Callable[[BatchSubmit], None] | None
                ) -> BatchRouting | None:
    """The routing ``remote.batch.*`` asks for; None when batch mode is off."""
    if not settings.enabled or submit is None:
        return None
    return BatchRouting(options_for(settings), submit)


@dataclass
class Step:
    """What one batch task produced: messages for the writer (in order) and the next poll."""

    updates: list[BatchUpdate] = field(default_factory=list)
    next_poll: BatchPoll | None = None


class Leases(Protocol):
    """One lease per job in the broker's Redis: the message chain holding it is the one that
    polls the job; a chain whose token lost the lease stops."""

    def claim(self, job_id: str, token: str, ttl: float) -> bool:
        """Take the lease only if nobody holds it."""
        ...

    def hold(self, job_id: str, token: str, ttl: float) -> bool:
        """Renew the lease held with ``token`` (or take it if it expired); False if another
        token holds it."""
        ...


def batch_limits(provider: str) -> tuple[int, int]:
    """(requests, bytes of text) one job of ``provider`` may hold."""
    module = importlib.import_module(f"pipeline.batch.{provider}")
    api = getattr(module, _API_CLASSES[provider])
    return int(api.max_requests), min(int(api.max_bytes), MESSAGE_MAX_BYTES)


def options_for(settings: BatchSettings) -> BatchOptions:
    """The batch settings a job carries in its messages and its row."""
    return BatchOptions(poll_s=min(settings.poll_interval_ms / 1000, POLL_CAP_S),
                        timeout_s=settings.timeout_minutes * 60.0,
                        concurrency=settings.concurrency)


def uses_batch(db: Database, spec: ProviderSpec, routing: BatchRouting | None) -> bool:
    """Batch mode is on, the provider has a batch API, and the policy has not turned it off."""
    return (routing is not None and spec.name in BATCH_PROVIDERS
            and not provider_policy(db, spec.name)["disabled"])


# -- the producer -----------------------------------------------------------------------------

def queue_batches(db: Database, memory: str, spec: ProviderSpec, store: str,
                  pending: Sequence[writer.PendingChunk], options: BatchOptions,
                  submit: Callable[[BatchSubmit], None], route: Route = DEFAULT_ROUTE
                  ) -> tuple[int, int]:
    """Pack ``pending`` (across files) into jobs and submit as many as ``concurrency`` allows.

    Chunks of jobs not submitted stay pending and unqueued until a finished job makes room.
    Each job is recorded before its message is sent: a message lost on the way is found by
    :func:`reconcile`. Returns (jobs submitted, chunks in them).
    """
    room = options.concurrency - len(batches.live_jobs(db, spec.name))
    if room <= 0 or not pending:
        return 0, 0
    max_requests, max_bytes = batch_limits(spec.name)
    jobs = chunks = 0
    for group in pack(pending, max_chunks=max_requests, max_bytes=max_bytes)[:room]:
        job_id = uuid.uuid4().hex
        batches.create_job(db, job_id, spec.to_dict(), options.to_json(), [c.id for c in group],
                           time.time() + options.timeout_s)
        writer.mark_queued(db, [c.rowid for c in group])
        submit(BatchSubmit(job_id, memory, spec, store, options, route,
                           chunks=tuple((c.id, c.text) for c in group), token=new_token()))
        jobs, chunks = jobs + 1, chunks + len(group)
    return jobs, chunks


# -- the batch worker (HTTP only) -------------------------------------------------------------

def _finished(job: BatchJobRef, outcome: str, remote: RemoteBatch | None = None, *,
              embedded: Sequence[str] = (), error: str | None = None) -> BatchUpdate:
    return BatchUpdate(*_fields(job), event="finished", outcome=outcome,
                       remote=remote.to_dict() if remote else None, embedded=tuple(embedded),
                       error=error)


def _fields(job: BatchJobRef) -> tuple[object, ...]:
    return (job.job, job.memory, job.spec, job.store, job.options, job.route)


def submit_failed(msg: BatchSubmit, exc: EmbeddingError) -> Step:
    """A submit that cannot succeed: the job ends, its chunks go the sync path (or wait for a
    configuration fix, when the key was refused)."""
    outcome = ("disabled" if isinstance(exc, BatchUnavailable)
               else "held" if isinstance(exc, ProviderRefused) else "failed")
    return Step([_finished(msg, outcome, error=str(exc))])


def submit_step(api: BatchApi, msg: BatchSubmit) -> Step:
    """Upload the chunks and create the remote job; raises :class:`ProviderRetryable` for the
    task to retry."""
    if not msg.chunks:
        return Step([_finished(msg, "cancelled", error="its chunks are gone (files changed)")])
    requests = [BatchRequest(cid, text) for cid, text in msg.chunks]
    try:
        remote = api.submit(requests, display_name=f"memq-{msg.job}")
    except ProviderRetryable:
        raise
    except EmbeddingError as exc:
        return submit_failed(msg, exc)
    poll = BatchPoll(*_fields(msg), token=msg.token, remote=remote.to_dict(),
                     deadline=time.time() + msg.options.timeout_s,
                     ids=tuple(cid for cid, _ in msg.chunks))
    return Step([BatchUpdate(*_fields(msg), event="state", remote=remote.to_dict())], poll)


def poll_step(api: BatchApi, msg: BatchPoll, now: float | None = None) -> Step:
    """Poll the job once; when it stopped (or timed out), collect what it produced."""
    remote = RemoteBatch.from_dict(msg.remote)
    if (now or time.time()) >= msg.deadline:
        return _time_out(api, msg, remote)
    try:
        polled = api.poll(remote)
    except ProviderRetryable:
        return Step([], msg)
    except EmbeddingError as exc:
        return Step([_finished(msg, "failed", remote, error=str(exc))])
    if polled.terminal:
        return _collect(api, msg, polled, polled.state.value)
    changed = (polled.state, polled.raw_state) != (remote.state, remote.raw_state)
    updates = ([BatchUpdate(*_fields(msg), event="state", remote=polled.to_dict())]
               if changed else [])
    return Step(updates, msg.with_remote(polled.to_dict()))


def _time_out(api: BatchApi, msg: BatchPoll, remote: RemoteBatch) -> Step:
    minutes = msg.options.timeout_s / 60
    error = f"still {remote.raw_state} after {minutes:g} minutes: cancelled"
    try:
        remote = api.cancel(remote)
    except EmbeddingError as exc:
        error += f" (the cancel request failed: {exc})"
    return _collect(api, msg, remote, "timeout", error=error, retry=False)


def _collect(api: BatchApi, msg: BatchPoll, remote: RemoteBatch, outcome: str, *,
             error: str | None = None, retry: bool = True) -> Step:
    """Download a stopped job's output: vectors to the writer, then the finishing message."""
    try:
        output = api.results(remote, list(msg.ids))
    except EmbeddingError as exc:
        if isinstance(exc, ProviderRetryable) and retry:
            return Step([], msg.with_remote(remote.to_dict()))
        output = BatchOutput()
        error = f"{error}; " if error else ""
        error += f"output not readable: {exc}"
    updates = vector_messages(msg, output.vectors)
    if output.errors and error is None:
        reason = next(iter(output.errors.values()))
        error = f"{len(output.errors)} line(s) failed, e.g. {reason}"
    error = error or remote.message
    updates.append(_finished(msg, outcome, remote, embedded=sorted(output.vectors), error=error))
    return Step(updates)


def vector_messages(job: BatchJobRef, vectors: dict[str, np.ndarray]) -> list[BatchUpdate]:
    """A job's vectors, as messages of at most ``VECTORS_PER_MESSAGE`` each."""
    items = sorted(vectors.items())
    return [BatchUpdate(*_fields(job), event="vectors",
                        vectors=tuple(items[i:i + VECTORS_PER_MESSAGE]))
            for i in range(0, len(items), VECTORS_PER_MESSAGE)]


# -- the writer (SQLite only) -----------------------------------------------------------------

@dataclass
class Applied:
    """What the writer must send on after an update: sync embedding jobs for the chunks a
    finished job did not embed, and whether a slot opened for more batch jobs."""

    embed_jobs: list[EmbedJob] = field(default_factory=list)
    top_up: bool = False
    outcome: writer.WriteOutcome | None = None


def apply_update(db: Database, update: BatchUpdate, *, cache: bool = True) -> Applied:
    """Apply one message of a batch job to the store (idempotent: redeliveries are harmless).
    ``cache``: keep the vectors in the embedding cache too (``cache.enabled``)."""
    if update.event == "state":
        remote = update.remote or {}
        batches.record_state(db, update.job, remote["state"], remote["raw_state"], remote)
        return Applied()
    if update.event == "vectors":
        return Applied(outcome=_write_vectors(db, update, cache))
    return _finish(db, update)


def _write_vectors(db: Database, update: BatchUpdate, cache: bool) -> writer.WriteOutcome:
    vectors = dict(update.vectors)
    hashes = batches.chunk_hashes(db, list(vectors))
    items = [(cid, hashes[cid], v) for cid, v in vectors.items() if cid in hashes]
    if not items:
        return writer.WriteOutcome(stale=len(vectors))
    spec = update.spec
    outcome = writer.write_vectors(db, provider=spec.name, model=spec.model,
                                   provider_key=spec.provider_key, items=items, cache=cache)
    return writer.WriteOutcome(outcome.written, outcome.stale + len(vectors) - len(items),
                               outcome.failed, outcome.refused)


def _finish(db: Database, update: BatchUpdate) -> Applied:
    job = batches.get_job(db, update.job)
    if job is None or job["state"] not in batches.LIVE_STATES:
        return Applied()  # a duplicate of a message already applied
    embedded = set(update.embedded)
    left = [c for c in batches.job_chunks(db, update.job) if c.id not in embedded]
    outcome, error, remote = update.outcome or "failed", update.error, update.remote
    batches.finish_job(db, update.job, outcome, raw_state=remote and remote["raw_state"],
                       remote=dict(remote) if remote else None, embedded=len(embedded),
                       to_sync=0 if outcome == "held" else len(left), error=error)
    record_outcome(db, job["provider"], outcome, error)
    if outcome == "held":
        writer.mark_held(db, [(c.id, error or "refused") for c in left])
        return Applied()
    jobs = [job for _, job in embed_jobs(update.memory, update.spec, update.store, left,
                                         max_bytes=HARD_MAX_INPUT_BYTES, route=update.route)]
    writer.mark_queued(db, [c.rowid for c in left])
    return Applied(embed_jobs=jobs, top_up=True)


# -- resuming jobs whose messages died --------------------------------------------------------

def reconcile(db: Database, memory: str, store: str, leases: Leases, *,
              submit: Callable[[BatchSubmit], None], poll: Callable[[BatchPoll], None],
              submit_ttl: float, poll_grace_s: float, route: Route = DEFAULT_ROUTE) -> int:
    """Start a new message chain for every live job nobody holds the lease of.

    A job never submitted is submitted again (its texts come from the store); a submitted one
    is polled. Read-only on the store (the chains report to the writer), so ``memq status``
    may run it. Returns how many jobs were resumed.
    """
    resumed = 0
    for row in batches.live_jobs(db):
        token = uuid.uuid4().hex
        options = BatchOptions.from_json(row["options"])
        ref = (row["id"], memory, ProviderSpec.from_dict(row["spec"]), store, options, route)
        if row["remote"] is None:
            if not leases.claim(row["id"], token, submit_ttl):
                continue
            chunks = tuple((c.id, c.text) for c in batches.job_chunks(db, row["id"]))
            submit(BatchSubmit(*ref, chunks=chunks, token=token))
        else:
            if not leases.claim(row["id"], token, poll_ttl(options, poll_grace_s)):
                continue
            poll(BatchPoll(*ref, token=token, remote=row["remote"], deadline=row["deadline"],
                           ids=tuple(batches.job_chunk_ids(db, row["id"]))))
        resumed += 1
    return resumed


def poll_ttl(options: BatchOptions, grace_s: float) -> float:
    """How long a poll chain's lease lasts without renewal: two intervals and some grace."""
    return 2 * options.poll_s + grace_s

