"""``memq index``: run the producer, hand jobs to a broker, and follow them to the end.

With ``brokerUrl`` / ``MEMQ_BROKER_URL`` the fleet's broker and workers do the work; without
one, an embedded broker and worker are started for the run and stopped after it.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from kombu import Connection

from pipeline.batch.workflow import routing_for
from pipeline.config import Settings
from pipeline.embeddings.registry import ProviderChoice, choose_provider
from pipeline.errors import FleetError
from pipeline.ingest.producer import EmbedJob, IndexReport, index_once
from pipeline.ingest.reindex import (
    RebuildProgress,
    progress_of,
    rebuild_info,
    rebuild_step,
    start_rebuild,
)
from pipeline.store import joblog, schema
from pipeline.store.batches import live_jobs
from pipeline.store.engine import Database, as_store_error, connect
from workers.app import app, embed_queue
from workers.monitor import queue_consumers

if TYPE_CHECKING:
    from workers.embedded import EmbeddedFleet

POLL_S = 0.2
STALL_HINT_S = 30.0
MAX_RESTARTS = 20


class IndexingFailed(FleetError):
    """The run could not finish (a worker keeps dying, no worker consumes the queue, …)."""


@dataclass
class IndexRun:
    report: IndexReport
    mode: str
    provider: str | None
    model: str | None
    reason: str | None
    waited: bool = False
    seconds: float = 0.0
    failed_chunks: int = 0
    warnings: list[str] = field(default_factory=list)
    rebuild: RebuildProgress | None = None
    job_id: str | None = None
    batch_resumed: int = 0  # live batch jobs whose polling this run started again


def pending_count(db: Database) -> int:
    """Chunks still waiting for a vector that something is working on (held chunks, refused
    until the configuration is fixed, are not waited for)."""
    return db.conn.execute(
        "SELECT count(*) FROM chunks WHERE state = 'pending' "
        "AND (error IS NULL OR queued_at IS NOT NULL)").fetchone()[0]


def _worker_env(settings: Settings) -> dict[str, str]:
    """What a spawned worker needs to build the same provider as this process."""
    env = {"MEMQ_WORKSPACE": str(settings.workspace), "MEMQ_STORE_PATH": str(settings.store.path)}
    if settings.config_file is not None:
        env["MEMQ_CONFIG"] = str(settings.config_file)
    if settings.local.model_cache_dir is not None:
        env["MEMQ_CACHE_DIR"] = str(settings.local.model_cache_dir)
    if settings.local.threads is not None:
        env["MEMQ_LOCAL_THREADS"] = str(settings.local.threads)
    return env


def _consumers(broker_url: str, queue: str) -> int:
    return sum(1 for queues in queue_consumers(broker_url).values() if queue in queues)


def wait_for_vectors(db: Database, *, on_progress: Callable[[int, int], None] | None = None,
                     check_workers: Callable[[], None] | None = None,
                     warn: Callable[[str], None] | None = None) -> None:
    """Block until no chunk is pending and no provider batch job is still finishing;
    ``check_workers`` runs between polls."""
    total = pending_count(db)
    last_change, last_left = time.monotonic(), total
    hinted = False
    while True:
        left = pending_count(db)
        if on_progress:
            on_progress(total - left, total)
        if left == 0 and not live_jobs(db):
            return
        if left != last_left:
            last_change, last_left = time.monotonic(), left
        elif not hinted and warn and time.monotonic() - last_change > STALL_HINT_S:
            warn("no progress for 30 s: is a worker consuming the embed and store queues? "
                 "(memq worker --role embed / --role writer)")
            hinted = True
        if check_workers:
            check_workers()
        time.sleep(POLL_S)


def wait_for_submission(db: Database, *, check_workers: Callable[[], None] | None = None
                        ) -> None:
    """Block until every live batch job was created at its provider (``remote.batch.wait``
    false: the run returns then, and the vectors land later, or in the next run)."""
    while any(job["remote"] is None for job in live_jobs(db)):
        if check_workers:
            check_workers()
        time.sleep(POLL_S)


def run_index(settings: Settings, *, wait: bool = True, retry_failed: bool = False,
              on_progress: Callable[[int, int], None] | None = None,
              warn: Callable[[str], None] | None = None,
              choice: ProviderChoice | None = None, rebuild: str | None = None) -> IndexRun:
    """Index the workspace once; with ``wait``, return only when every vector is written.

    When the configuration's fingerprint no longer matches the store's, or ``rebuild`` names a
    reason (``memq reindex``), a new index is built beside the live one and swapped in when
    complete (:mod:`pipeline.ingest.reindex`); with ``wait`` this returns after the swap. The run is
    logged as a job (``run.job_id``) in the store, like jobs enqueued remotely.
    """
    started = time.monotonic()
    choice = choice or choose_provider(settings)
    db = connect(settings.store.path, want_vectors=settings.store.vector_enabled)
    run = IndexRun(IndexReport(), choice.mode, choice.spec.name if choice.spec else None,
                   choice.spec.model if choice.spec else None, choice.reason,
                   job_id=uuid.uuid4().hex)
    try:
        schema.ensure_schema(db)
        with joblog.opened(settings.store.path) as log, \
                joblog.logged(log, run.job_id, "local", socket.gethostname()) as counts:
            _produce(run, db, settings, choice, wait=wait, retry_failed=retry_failed,
                     rebuild=rebuild, on_progress=on_progress, warn=warn)
            counts.update(run.report.counts())
        return run
    except db.operational_error as exc:
        raise as_store_error(exc, db.path) or exc from exc
    finally:
        run.seconds = time.monotonic() - started
        db.close()


def _forget_queued(settings: Settings) -> None:
    """The embedded broker's messages die with it: let the next run queue leftovers again
    (in the live store and in a rebuild's target)."""
    live = connect(settings.store.path, want_vectors=settings.store.vector_enabled)
    try:
        paths = [settings.store.path]
        info = rebuild_info(live)
        if info is not None and Path(info["target"]).exists():
            paths.append(Path(info["target"]))
    finally:
        live.close()
    for path in paths:
        db = connect(path, want_vectors=settings.store.vector_enabled)
        try:
            with schema.transaction(db):
                db.conn.execute("UPDATE chunks SET queued_at = NULL WHERE state = 'pending'")
        finally:
            db.close()


def _rebuild(settings: Settings, choice: ProviderChoice, submit: Callable[[EmbedJob], None] | None,
             *, wait: bool, reason: str, connection: Connection | None = None,
             on_progress: Callable[[int, int], None] | None = None,
             check_workers: Callable[[], None] | None = None) -> RebuildProgress:
    """Build a new index beside the live one; with ``wait``, drive it to the swap here,
    else hand its steps to the ``store`` queue's worker."""
    start_rebuild(settings, choice, reason)
    if not wait:
        from workers.tasks import submit_reindex_step

        submit_reindex_step(connection=connection)
        live = connect(settings.store.path, want_vectors=settings.store.vector_enabled)
        try:
            info = rebuild_info(live)
        finally:
            live.close()
        return progress_of(info, settings) if info else RebuildProgress("", reason, 0.0)
    while True:
        progress = rebuild_step(settings, choice, submit)
        if progress is None or progress.done:
            return progress or RebuildProgress("", reason, 0.0, done=True)
        if on_progress:
            on_progress(progress.ready, progress.chunks)
        if check_workers:
            check_workers()
        time.sleep(POLL_S)


def _produce(run: IndexRun, db: Database, settings: Settings, choice: ProviderChoice, *,
             wait: bool, retry_failed: bool, rebuild: str | None,
             on_progress: Callable[[int, int], None] | None,
             warn: Callable[[str], None] | None) -> None:
    if choice.spec is None:
        run.report = index_once(db, settings, choice, None)
        if run.report.rebuild_needed or rebuild:
            run.rebuild = _rebuild(settings, choice, None, wait=True,
                                   reason=rebuild or "configuration changed")
        return
    with ExitStack() as stack:
        fleet = None
        if settings.broker_url:
            broker_url = settings.broker_url
        elif not wait:
            raise IndexingFailed("--no-wait needs a broker that outlives this command: set "
                                 "MEMQ_BROKER_URL (or brokerUrl) and run workers")
        else:
            from workers.embedded import EmbeddedFleet

            fleet = stack.enter_context(EmbeddedFleet(choice.spec.name, _worker_env(settings)))
            broker_url = fleet.broker.url
            # Jobs queued by an earlier embedded run died with its private broker.
            _forget_queued(settings)
            stack.callback(_forget_queued, settings)
        from workers.batch_tasks import resume_batches, submit_batch_job
        from workers.tasks import submit_embed_job

        connection = stack.enter_context(app.connection_for_write(broker_url))
        submit = partial(submit_embed_job, connection=connection)
        batch = routing_for(settings.remote.batch,
                            partial(submit_batch_job, broker_url=broker_url, connection=connection))
        run.report = index_once(db, settings, choice, submit, retry_failed=retry_failed,
                                batch=batch)
        run.batch_resumed = resume_batches(db, broker_url, connection)
        resume = wait and rebuild_info(db) is not None  # finish one left unfinished
        if run.report.rebuild_needed or rebuild or resume:
            run.rebuild = _rebuild(settings, choice, submit, wait=wait,
                                   reason=rebuild or "configuration changed",
                                   connection=connection, on_progress=on_progress,
                                   check_workers=_embedded_check(fleet) if fleet else None)
            run.waited = wait
        elif wait and batch is not None and not settings.remote.batch.wait and live_jobs(db):
            wait_for_submission(db, check_workers=_embedded_check(fleet) if fleet else None)
        elif wait:
            wait_for_vectors(db, on_progress=on_progress, warn=warn,
                             check_workers=_embedded_check(fleet) if fleet else None)
            run.waited = True
        elif warn and _consumers(broker_url, embed_queue(choice.spec.name)) == 0:
            warn(f"no worker consumes {embed_queue(choice.spec.name)} yet: the jobs wait "
                 "there until one starts")
    live = connect(settings.store.path, want_vectors=settings.store.vector_enabled)
    try:  # after a swap the live store is another file than ``db``
        run.failed_chunks = live.conn.execute(
            "SELECT count(*) FROM chunks WHERE state = 'failed'").fetchone()[0]
    finally:
        live.close()




def _embedded_check(fleet: EmbeddedFleet) -> Callable[[], None]:
    """Restart the embedded worker when it dies; give up when it keeps dying."""

    def check() -> None:
        if fleet.worker.ensure_alive() and fleet.worker.restarts > MAX_RESTARTS:
            raise IndexingFailed(f"the embedded worker died {fleet.worker.restarts} times; "
                                 f"last log:\n{fleet.log_tail()}")

    return check

