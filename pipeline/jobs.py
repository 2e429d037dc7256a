"""The work behind the Celery tasks, as plain functions (the tasks only move messages).

An embedding job names its provider by a secret-free :class:`ProviderSpec` and carries chunk
(id, hash, text) triples (a media chunk adds its file's ``{mimeType, data}`` inline part); its
result carries (id, hash, vector) triples with vectors as base64 float32, so messages stay
JSON. A crash while embedding (a native abort in llama.cpp kills the
worker) redelivers the job: it is then split into single-chunk jobs, and a single chunk that
keeps crashing is given up as failed instead of killing workers forever.

Provider failures: a retryable error (429, 5xx, timeout) is retried by the task after
:func:`retry_delay`; a context-length error on several chunks splits them in halves until the
one chunk that is too long is isolated and marked failed, the others embedded.
"""

from __future__ import annotations

import atexit
import base64
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from pipeline.config import Settings
from pipeline.embeddings.base import DocumentInput, EmbeddingProvider, MediaInput
from pipeline.embeddings.ratelimit import FleetPause, FleetRateLimiter
from pipeline.embeddings.registry import ProviderSpec, build_from_spec, choose_provider
from pipeline.errors import EmbeddingError, InputTooLong, ProviderThrottled
from pipeline.ingest.producer import index_once
from pipeline.store import joblog, schema, writer
from pipeline.store.engine import Database, as_store_error, connect

MAX_DELIVERIES = 3


def _max_retries(env: Mapping[str, str] = os.environ) -> int:
    raw = env.get("MEMQ_EMBED_MAX_RETRIES", "").strip()
    if not raw:
        return 8
    if not raw.isdigit():
        raise ValueError(f"MEMQ_EMBED_MAX_RETRIES must be a whole number >= 0; got {raw!r}")
    return int(raw)


#: Retries of a retryable provider error before its chunks are marked failed (default 8: with a
#: 30% error rate the chance of 9 failures in a row is 2e-5 per job); MEMQ_EMBED_MAX_RETRIES
#: sets it per worker.
MAX_RETRIES = _max_retries()
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 8.0
#: The longest provider-requested wait honoured (a daily-quota Retry-After is not retried).
MAX_RETRY_AFTER_S = 300.0
THROTTLE_BUDGET_S = 60.0  # waiting in place on 429s per attempt; then the task's retry policy
THROTTLE_DEFAULT_S = 1.0  # a 429 that did not say how long

Job = dict[str, Any]
Result = dict[str, Any]

_providers: dict[str, EmbeddingProvider] = {}
_stores: dict[str, Database] = {}
_inodes: dict[str, int] = {}
_lock = threading.Lock()


def encode_vector(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def decode_vector(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4")


def provider_for(spec: ProviderSpec, settings: Settings) -> EmbeddingProvider:
    """One provider instance per spec per process: a local model loads once per worker."""
    key = repr(sorted(spec.to_dict().items()))
    with _lock:
        if key not in _providers:
            _providers[key] = build_from_spec(spec, settings)
        return _providers[key]


@atexit.register
def _close_providers() -> None:
    """Free native models before interpreter teardown (llama.cpp's finalizer fails after it)."""
    for provider in _providers.values():
        close = getattr(provider, "close", None)
        if close is not None:
            close()
    _providers.clear()


def retry_delay(retries: int, retry_after: float | None = None) -> float:
    """Seconds before retry number ``retries + 1``: about 0.5 s doubling to an 8 s cap with up
    to 20% jitter (OpenClaw's schedule), but never sooner than the provider asked."""
    delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**retries) * (1 + random.random() * 0.2)
    if retry_after is not None:
        delay = max(delay, min(float(retry_after), MAX_RETRY_AFTER_S))
    return delay


def embed_splitting(provider: EmbeddingProvider, texts: Sequence[DocumentInput]
                    ) -> list[np.ndarray | EmbeddingError]:
    """Embed ``texts``; a context-length error splits them in halves and retries each half.

    Returns one vector per text, or the context-length error for a text that is too long on
    its own. Any other error is raised for the caller's retry policy.
    """
    try:
        return list(provider.embed_documents(texts))
    except EmbeddingError as exc:
        if not isinstance(exc, InputTooLong):
            raise
        if len(texts) == 1:
            return [exc]
    mid = len(texts) // 2
    return embed_splitting(provider, texts[:mid]) + embed_splitting(provider, texts[mid:])


def _attach_rate_limit(provider: EmbeddingProvider, spec: ProviderSpec, redis_client: Any
                       ) -> None:
    """Hang the fleet-wide limiter a spec asks for on its provider (once per process)."""
    limits = spec.options.get("rate_limit")
    if not limits or redis_client is None or getattr(provider, "before_request", None):
        return
    limiter = FleetRateLimiter(redis_client, spec.provider_key, requests=limits.get("requests"),
                               tokens=limits.get("tokens"))
    provider.before_request = limiter.acquire  # type: ignore[attr-defined]


def embed_job(job: Job, settings: Settings, redis_client: Any = None) -> Result:
    """Embed a job's chunks; raises :class:`EmbeddingError` when the provider fails.

    ``redis_client`` (the fleet's broker) carries the shared rate limit, if the spec has one,
    and the fleet's pause when the provider throttles (:func:`embed_paced`).
    """
    spec = ProviderSpec.from_dict(job["spec"])
    provider = provider_for(spec, settings)
    _attach_rate_limit(provider, spec, redis_client)
    inputs = job_inputs(job)
    if not getattr(provider, "accepts_media", False) and any(
            isinstance(i, MediaInput) for i in inputs):
        raise EmbeddingError(f"{spec.name} model {spec.model!r} cannot embed image or audio "
                             "files (multimodal needs gemini-embedding-2-preview)")
    pause = FleetPause(redis_client, spec.provider_key) if spec.name != "local" else None
    outcomes = embed_paced(provider, inputs, pause)
    result: Result = {"spec": job["spec"], "store": job["store"], "vectors": [], "failed": []}
    for (cid, text_hash, *_), out in zip(job["chunks"], outcomes, strict=True):
        if isinstance(out, EmbeddingError):
            result["failed"].append([cid, f"input too long for the model: {out}"])
        else:
            result["vectors"].append([cid, text_hash, encode_vector(out)])
    return result


def embed_paced(provider: EmbeddingProvider, inputs: Sequence[DocumentInput],
                pause: FleetPause | None) -> list[np.ndarray | EmbeddingError]:
    """:func:`embed_splitting`, waiting out the provider's rate limit in place.

    A throttled request (429, not a spent quota) pauses the whole fleet for the wait the
    provider asked (:class:`~pipeline.embeddings.ratelimit.FleetPause`; 1 s when it did not
    say) and is tried again here, without spending one of the job's retries, for at most
    ``THROTTLE_BUDGET_S`` of wall-clock time from the first try (requests and waits alike);
    then the error goes to the task's retry policy (the job is re-queued with a countdown), so
    a worker never runs into its task time limit however short the provider's waits are.
    Measured in bench/remote_throughput.py against a double limited to 20 requests/s.
    """
    deadline = time.monotonic() + THROTTLE_BUDGET_S
    while True:
        if pause is not None:
            pause.wait(limit=deadline - time.monotonic())
        try:
            return embed_splitting(provider, inputs)
        except EmbeddingError as exc:
            if pause is None or not isinstance(exc, ProviderThrottled):
                raise
            wait = min(exc.retry_after or THROTTLE_DEFAULT_S, THROTTLE_BUDGET_S)
            pause.hold(wait)
            if time.monotonic() + wait >= deadline:
                raise


def job_inputs(job: Job) -> list[DocumentInput]:
    """A job's documents: a chunk's text, or (a media chunk) its label with its inline bytes."""
    return [MediaInput(c[2], c[3]["mimeType"], c[3]["data"]) if len(c) > 3 else c[2]
            for c in job["chunks"]]


def failure_result(job: Job, reason: str) -> Result:
    """A result that marks every chunk of ``job`` as failed with ``reason``."""
    return {"spec": job["spec"], "store": job["store"], "vectors": [],
            "failed": [[c[0], reason] for c in job["chunks"]]}


def held_result(job: Job, reason: str) -> Result:
    """A result that leaves every chunk of ``job`` pending, with ``reason`` shown in status,
    for the next producer pass to queue again (a rejected key: fix it and run ``memq index``)."""
    return {"spec": job["spec"], "store": job["store"], "vectors": [], "failed": [],
            "held": [[c[0], reason] for c in job["chunks"]]}


def after_crash(job: Job) -> tuple[list[Job], Result | None]:
    """What to do with a job that was redelivered because its worker died mid-task.

    A group is split so the one chunk that crashes cannot sink its neighbours; a single chunk
    is retried until it has been delivered ``MAX_DELIVERIES`` times, then given up as failed.
    Returns (jobs to submit, failure result to store or None).
    """
    attempt = int(job.get("attempt", 0)) + 1
    if len(job["chunks"]) > 1:
        return [{**job, "chunks": [c], "attempt": attempt} for c in job["chunks"]], None
    if attempt < MAX_DELIVERIES:
        return [{**job, "attempt": attempt}], None
    return [], failure_result(job, f"worker crashed {attempt} times embedding this chunk")


def store_for(path: str, settings: Settings) -> Database | None:
    """One open connection per store file per writer process; None when the file is gone.

    Jobs name a store generation by its real path; a generation deleted after a rebuild was
    swapped in must not be re-created empty by a late result, nor keep its cached connection.
    """
    with _lock:
        try:
            inode = os.stat(path).st_ino
        except FileNotFoundError:
            stale = _stores.pop(path, None)
            if stale is not None:
                stale.close()
            return None
        db = _stores.get(path)
        if db is not None and _inodes.get(path) != inode:
            db.close()
            db = None
        if db is None:
            db = connect(path, want_vectors=settings.store.vector_enabled)
            schema.ensure_schema(db)
            _stores[path], _inodes[path] = db, inode
        return db


def apply_result(result: Result, settings: Settings) -> writer.WriteOutcome:
    """The single writer's job: attach vectors (idempotently) and record failures.

    A result from another model than the index's (a late message from before a model switch)
    is refused whole and reported in the outcome; the chunks stay pending for the new model.
    """
    db = store_for(result["store"], settings)
    if db is None:
        return writer.WriteOutcome(refused=f"store {result['store']} no longer exists "
                                           "(replaced by a rebuild)")
    try:
        return _apply(db, result, settings)
    except db.operational_error as exc:
        raise as_store_error(exc, db.path) or exc from exc


def _apply(db: Database, result: Result, settings: Settings) -> writer.WriteOutcome:
    spec = ProviderSpec.from_dict(result["spec"])
    outcome = writer.WriteOutcome()
    if result["vectors"]:
        outcome = writer.write_vectors(
            db,
            provider=spec.name,
            model=spec.model,
            provider_key=spec.provider_key,
            items=[(cid, h, decode_vector(v)) for cid, h, v in result["vectors"]],
            cache=settings.cache.enabled,
        )
    if result["failed"]:
        failed = writer.mark_failed(db, [(cid, reason) for cid, reason in result["failed"]])
        outcome = replace(outcome, failed=failed)
    if result.get("held"):
        writer.mark_held(db, [(cid, reason) for cid, reason in result["held"]])
    return outcome


def index_job(job_id: str, settings: Settings, submit: Callable[[Job], None], *,
              retry_failed: bool = False, host: str | None = None,
              batch_submit: Callable[[Job], None] | None = None,
              resume_batches: Callable[[Database], int] | None = None
              ) -> tuple[dict[str, int], bool]:
    """An index job enqueued from anywhere, run on the store's host: one producer pass.

    The provider is chosen from this host's settings (the store's owner decides what the
    index holds); the pass is idempotent, so a redelivered job only repeats cheap checks. When
    the configuration no longer matches the store, a rebuild is started beside it; returns
    (counts, whether a rebuild was started) so the caller can drive it. ``batch_submit``
    sends provider batch jobs (``remote.batch.enabled``); ``resume_batches`` restarts the
    polling of live batch jobs that lost their messages.
    """
    from pipeline.batch.workflow import routing_for
    from pipeline.ingest.reindex import start_rebuild

    db = connect(settings.store.path, want_vectors=settings.store.vector_enabled)
    try:
        schema.ensure_schema(db)
        with joblog.opened(settings.store.path) as log, \
                joblog.logged(log, job_id, "remote", host) as counts:
            choice = choose_provider(settings)
            report = index_once(db, settings, choice, submit, retry_failed=retry_failed,
                                batch=routing_for(settings.remote.batch, batch_submit))
            if resume_batches is not None:
                resume_batches(db)
            if report.rebuild_needed:
                start_rebuild(settings, choice, "configuration changed")
            counts.update(report.counts())
        return counts, report.rebuild_needed
    finally:
        db.close()
