"""The work behind the Celery tasks, as plain functions (the tasks only move messages).

An embedding job names its provider by a secret-free :class:`ProviderSpec` and carries chunk
(id, hash, text) triples; its result carries (id, hash, vector) triples with vectors as base64
float32, so messages stay JSON. A crash while embedding (a native abort in llama.cpp kills the
worker) redelivers the job: it is then split into single-chunk jobs, and a single chunk that
keeps crashing is given up as failed instead of killing workers forever.
"""

from __future__ import annotations

import atexit
import base64
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from pipeline.config import Settings
from pipeline.embeddings.base import EmbeddingProvider
from pipeline.embeddings.registry import ProviderSpec, build_from_spec, choose_provider
from pipeline.producer import index_once
from pipeline.store import joblog, schema, writer
from pipeline.store.engine import Database, connect

MAX_DELIVERIES = 3

Job = dict[str, Any]
Result = dict[str, Any]

_providers: dict[str, EmbeddingProvider] = {}
_stores: dict[str, Database] = {}
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


def embed_job(job: Job, settings: Settings) -> Result:
    """Embed a job's chunks; raises :class:`EmbeddingError` when the provider fails."""
    spec = ProviderSpec.from_dict(job["spec"])
    provider = provider_for(spec, settings)
    texts = [text for _, _, text in job["chunks"]]
    vectors = provider.embed_documents(texts)
    return {
        "spec": job["spec"],
        "store": job["store"],
        "vectors": [
            [cid, text_hash, encode_vector(v)]
            for (cid, text_hash, _), v in zip(job["chunks"], vectors, strict=True)
        ],
        "failed": [],
    }


def failure_result(job: Job, reason: str) -> Result:
    """A result that marks every chunk of ``job`` as failed with ``reason``."""
    return {"spec": job["spec"], "store": job["store"], "vectors": [],
            "failed": [[cid, reason] for cid, _, _ in job["chunks"]]}


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


def store_for(path: str, settings: Settings) -> Database:
    """One open connection per store file per writer process."""
    with _lock:
        if path not in _stores:
            db = connect(path, want_vectors=settings.store.vector_enabled)
            schema.ensure_schema(db)
            _stores[path] = db
        return _stores[path]


def apply_result(result: Result, settings: Settings) -> writer.WriteOutcome:
    """The single writer's job: attach vectors (idempotently) and record failures.

    A result from another model than the index's (a late message from before a model switch)
    is refused whole and reported in the outcome; the chunks stay pending for the new model.
    """
    db = store_for(result["store"], settings)
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
    return outcome


def index_job(job_id: str, settings: Settings, submit: Callable[[Job], None], *,
              retry_failed: bool = False, host: str | None = None) -> dict[str, int]:
    """An index job enqueued from anywhere, run on the store's host: one producer pass.

    The provider is chosen from this host's settings (the store's owner decides what the
    index holds); the pass is idempotent, so a redelivered job only repeats cheap checks.
    """
    db = store_for(str(settings.store.path), settings)
    with joblog.logged(db, job_id, "remote", host) as counts:
        report = index_once(db, settings, choose_provider(settings), submit,
                            retry_failed=retry_failed)
        counts.update(report.counts())
    return counts
