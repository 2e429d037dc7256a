"""Embedding one job's chunks, as plain functions (the embed task only moves the messages).

A crash while embedding (a native abort in llama.cpp kills the worker) redelivers the job: it
is then split into single-chunk jobs, and a single chunk that keeps crashing is given up as
failed instead of killing workers forever (:func:`after_crash`).

Provider failures: a :class:`~pipeline.errors.ProviderRetryable` error (429, 5xx, timeout) is
retried by the task after :func:`~pipeline.embeddings.retries.retry_delay`;
:class:`~pipeline.errors.InputTooLong` on several chunks splits them in halves until the one
chunk that is too long is isolated and marked failed, the others embedded; a 429 waits in
place (:func:`embed_paced`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pipeline.embeddings.base import DocumentInput, EmbeddingProvider, MediaInput
from pipeline.embeddings.ratelimit import FleetPause, FleetRateLimiter
from pipeline.errors import EmbeddingError, InputTooLong, ProviderThrottled
from pipeline.messages import ChunkVector, EmbedJob, EmbedResult, replace

MAX_DELIVERIES = 3
THROTTLE_BUDGET_S = 60.0  # waiting in place on 429s per attempt; then the task's retry policy
THROTTLE_DEFAULT_S = 1.0  # a 429 that did not say how long


def embed_splitting(provider: EmbeddingProvider, texts: Sequence[DocumentInput]
                    ) -> list[np.ndarray | InputTooLong]:
    """Embed ``texts``; an :class:`InputTooLong` error splits them in halves and retries each.

    Returns one vector per text, or the error for a text that is too long on its own. Any other
    error is raised for the caller's retry policy.
    """
    try:
        return list(provider.embed_documents(texts))
    except InputTooLong as exc:
        if len(texts) == 1:
            return [exc]
    mid = len(texts) // 2
    return embed_splitting(provider, texts[:mid]) + embed_splitting(provider, texts[mid:])


def embed_paced(provider: EmbeddingProvider, inputs: Sequence[DocumentInput],
                pause: FleetPause | None) -> list[np.ndarray | InputTooLong]:
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
        except ProviderThrottled as exc:
            if pause is None:
                raise
            wait = min(exc.retry_after or THROTTLE_DEFAULT_S, THROTTLE_BUDGET_S)
            pause.hold(wait)
            if time.monotonic() + wait >= deadline:
                raise


def attach_rate_limit(provider: EmbeddingProvider, job: EmbedJob, redis_client: Any) -> None:
    """Hang the fleet-wide limiter the job's spec asks for on its provider (once)."""
    limits = job.spec.options.get("rate_limit")
    if not limits or redis_client is None or getattr(provider, "before_request", None):
        return
    limiter = FleetRateLimiter(redis_client, job.spec.provider_key,
                               requests=limits.get("requests"), tokens=limits.get("tokens"))
    provider.before_request = limiter.acquire  # type: ignore[attr-defined]


def job_inputs(job: EmbedJob) -> list[DocumentInput]:
    """A job's documents: a chunk's text, or (a media chunk) its label with its inline bytes."""
    return [MediaInput(c.text, c.media.mime_type, c.media.data) if c.media is not None
            else c.text for c in job.chunks]


def embed_job(job: EmbedJob, provider: EmbeddingProvider, redis_client: Any = None
              ) -> EmbedResult:
    """Embed a job's chunks with ``provider``; raises :class:`EmbeddingError` when it fails.

    ``redis_client`` (the fleet's broker) carries the shared rate limit, if the spec has one,
    and the fleet's pause when the provider throttles (:func:`embed_paced`).
    """
    attach_rate_limit(provider, job, redis_client)
    inputs = job_inputs(job)
    if not getattr(provider, "accepts_media", False) and any(
            isinstance(i, MediaInput) for i in inputs):
        raise EmbeddingError(f"{job.spec.name} model {job.spec.model!r} cannot embed image or "
                             "audio files (multimodal needs gemini-embedding-2-preview)")
    pause = FleetPause(redis_client, job.spec.provider_key) if job.spec.name != "local" else None
    outcomes = embed_paced(provider, inputs, pause)
    vectors: list[ChunkVector] = []
    failed: list[tuple[str, str]] = []
    for chunk, out in zip(job.chunks, outcomes, strict=True):
        if isinstance(out, InputTooLong):
            failed.append((chunk.id, f"input too long for the model: {out}"))
        else:
            vectors.append(ChunkVector(chunk.id, chunk.hash, out))
    return job.result(vectors, failed)


def after_crash(job: EmbedJob) -> tuple[list[EmbedJob], EmbedResult | None]:
    """What to do with a job that was redelivered because its worker died mid-task.

    A group is split so the one chunk that crashes cannot sink its neighbours; a single chunk
    is retried until it has been delivered ``MAX_DELIVERIES`` times, then given up as failed.
    Returns (jobs to submit, failure result to store or None).
    """
    attempt = job.attempt + 1
    if job.size > 1:
        return [replace(job, chunks=(c,), attempt=attempt) for c in job.chunks], None
    if attempt < MAX_DELIVERIES:
        return [replace(job, attempt=attempt)], None
    return [], job.failed(f"worker crashed {attempt} times embedding this chunk")


#: A bulk job looks for waiting interactive work after about this much text (OpenClaw's
#: request budget: one remote request)...
YIELD_SLICE_BYTES = 8000
#: ...or, with the local model (one llama.cpp call per text), after this many chunks: a
#: fraction of a second whatever the chunk size. Both are per decode stream of a provider that
#: embeds several texts side by side (``streams``: the local model's), whose slices are as long
#: in time with that many times the texts (and one stream's last text idles the others less).
YIELD_SLICE_LOCAL_CHUNKS = 8


def slices(job: EmbedJob, max_bytes: int = YIELD_SLICE_BYTES,
           max_chunks: int | None = None) -> list[EmbedJob]:
    """``job`` cut, in order, into jobs of about ``max_bytes`` of text and at most
    ``max_chunks`` chunks (at least one chunk each)."""
    out: list[EmbedJob] = []
    start, size = 0, 0
    for i, chunk in enumerate(job.chunks):
        weight = len(chunk.text.encode("utf-8"))
        full = max_chunks is not None and i - start >= max_chunks
        if i > start and (full or size + weight > max_bytes):
            out.append(replace(job, chunks=job.chunks[start:i]))
            start, size = i, 0
        size += weight
    out.append(replace(job, chunks=job.chunks[start:]))
    return out


def embed_yielding(job: EmbedJob, provider: EmbeddingProvider, redis_client: Any = None, *,
                   should_yield: Callable[[], bool]) -> tuple[EmbedResult, EmbedJob | None]:
    """:func:`embed_job` for a bulk job that gives way to interactive work.

    The job is embedded slice by slice (:func:`slices`: :data:`YIELD_SLICE_BYTES` of text,
    and at most :data:`YIELD_SLICE_LOCAL_CHUNKS` chunks for the local model, each times the
    provider's ``streams``); between slices
    ``should_yield`` is asked whether interactive work waits on the same queue. If so, the
    vectors so far are returned with the rest of the chunks as a new job (same memory, store
    and lane), for the caller to queue again behind the interactive work. An interactive
    job, or a job of one slice, is embedded whole. Errors are raised as by :func:`embed_job`.
    """
    width = max(1, int(getattr(provider, "streams", 1)))
    parts = [job] if job.route.interactive else slices(
        job, YIELD_SLICE_BYTES * width,
        max_chunks=YIELD_SLICE_LOCAL_CHUNKS * width if job.spec.name == "local" else None)
    vectors: list[ChunkVector] = []
    failed: list[tuple[str, str]] = []
    for i, part in enumerate(parts):
        result = embed_job(part, provider, redis_client)
        vectors += result.vectors
        failed += result.failed
        if i + 1 < len(parts) and should_yield():
            rest = replace(job, chunks=tuple(c for p in parts[i + 1:] for c in p.chunks))
            return job.result(vectors, failed), rest
    return job.result(vectors, failed), None
