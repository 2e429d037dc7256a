"""A shard's side of a producer on another host: what the writer and reader of the store's host
answer a host that holds the memory's files (:mod:`pipeline.ingest.transfer`).

Functions over the :class:`~pipeline.local.LocalMemory` of a store on this host: the store's
files (:func:`manifest`, :func:`files_digest`, kept per store version by :class:`FilesDigests`)
a producer compares its own with, and the
changes it sends (:func:`apply_changes`), written as a local pass would and recorded in the job
log.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipeline.config.settings import Settings
from pipeline.embeddings.registry import choose_provider
from pipeline.errors import FleetError
from pipeline.fleet.job_log import RecordedJob
from pipeline.ingest.producer import IndexReport, Known
from pipeline.ingest.safety import record_files_from
from pipeline.ingest.sources import MEMORY_SOURCE
from pipeline.ingest.transfer import apply_changes as apply_to_store
from pipeline.ingest.transfer import stats_digest
from pipeline.local import LocalMemory, check_enabled
from pipeline.messages import FileChanges
from pipeline.store import cache, reads, schema
from pipeline.store.engine import Database, as_store_error, connect
from pipeline.store.owner import check_owner


def manifest(memory: LocalMemory) -> dict[str, Known]:
    """The store's files (path -> hash, mtime_ns, size, error): what a producer on another
    host compares its files with. Empty when nothing is indexed (nothing is created)."""
    db = memory.open_store()
    if db is None:
        return {}
    try:
        return reads.known_files(db)
    finally:
        db.close()


def files_digest(memory: LocalMemory) -> str:
    """:func:`~pipeline.ingest.transfer.stats_digest` of the memory files the store knows: a
    host with the files compares it with its own, instead of fetching the manifest."""
    db = memory.open_store()
    if db is None:
        return stats_digest({})
    try:
        return stats_digest(reads.file_stats(db, MEMORY_SOURCE))
    finally:
        db.close()


@dataclass
class _Held:
    """A store's connection kept for its digest: the file it opened (device, inode), and the
    digest it last computed with the data version (:func:`~pipeline.store.reads.data_version`)
    read before it."""

    db: Database
    identity: tuple[int, int]
    version: int | None = None
    digest: str | None = None


class FilesDigests:
    """:func:`files_digest` of each store a reader serves, computed again only when the store
    changed: one connection per store (at most ``max_stores``, the least recently used
    closed first) reads SQLite's data version (:func:`~pipeline.store.reads.data_version`),
    which changes whenever another connection (any process) commits to the store, and the
    digest is reused while it has not. A store
    file replaced at its path (moved aside and indexed again, a rebuild's new generation) is
    opened afresh. The version is read before the files, so a commit in between only makes
    the next call compute again: a digest is never newer than the version it is kept under.
    Thread-safe: one digest of a store at a time (a call that waits for another's gets its
    result), different stores side by side.
    :meth:`close` closes the connections."""

    def __init__(self, max_stores: int = 16) -> None:
        self.max_stores = max_stores
        self._held: OrderedDict[str, _Held] = OrderedDict()
        self._locks: dict[str, threading.Lock] = {}  # one per store: its digest, its connection
        self._lock = threading.Lock()  # the two maps

    def of(self, memory: LocalMemory) -> str:
        """The digest of the memory files ``memory``'s store knows (:func:`files_digest`).
        Stores are looked at side by side: a store being opened or read (another being
        created, a slow disk) holds back the callers of that store only."""
        path = memory.settings.store.path
        key = str(path.resolve())
        try:
            stat = os.stat(path)  # the generation it names, now
        except FileNotFoundError:  # nothing indexed: nothing is created
            self._forget(key)  # a store deleted since: its connection goes
            return files_digest(memory)
        identity = (stat.st_dev, stat.st_ino)
        with self._lock:
            store_lock = self._locks.setdefault(key, threading.Lock())
        with store_lock:
            with self._lock:
                held = self._held.get(key)
            if held is not None and held.identity != identity:
                self._forget(key, locked=True)
                held = None
            if held is None:
                db = memory.open_store()
                if db is None:  # gone since the stat
                    return files_digest(memory)
                held = _Held(db, identity)
            with self._lock:
                self._held[key] = held
                self._held.move_to_end(key)
                idle = [k for k in self._held if k != key]
            for other in idle[:max(0, len(idle) + 1 - self.max_stores)]:
                self._forget(other, wait=False)
            version = reads.data_version(held.db)
            if held.digest is None or held.version != version:
                held.digest = stats_digest(reads.file_stats(held.db, MEMORY_SOURCE))
                held.version = version
            return held.digest

    def _forget(self, key: str, *, locked: bool = False, wait: bool = True) -> None:
        """Close the connection kept for store ``key``: ``locked`` when the caller holds the
        store's lock; without ``wait``, a store in use now is left for a later call."""
        with self._lock:
            store_lock = self._locks.get(key)
        if store_lock is None:
            return
        if not locked and not store_lock.acquire(blocking=wait):
            return
        try:
            with self._lock:
                held = self._held.pop(key, None)
            if held is not None:
                held.db.close()
        finally:
            if not locked:
                store_lock.release()

    def close(self) -> None:
        """Close every connection kept (a later :meth:`of` opens again)."""
        with self._lock:
            keys = list(self._held)
        for key in keys:
            self._forget(key)

    def __enter__(self) -> FilesDigests:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def apply_changes(memory: LocalMemory, message: FileChanges, job_request: Any = None,
                  held: Callable[[str, Settings], Database | None] | None = None
                  ) -> IndexReport:
    """Write one part of a producer pass that ran on another host (the host that holds the
    files; :mod:`pipeline.ingest.transfer`), as a local pass would, and queue the embedding
    work; recorded in the job log as job ``message.job`` (started by its first part, done with
    its last). ``held``: the connection this process keeps open to a store file that exists
    (:meth:`workers.runtime.WorkerRuntime.store`), so the parts of a pass do not each open
    and close it; without it, or before the store exists, it is opened for this part."""
    check_enabled(memory.settings)
    host = getattr(job_request, "hostname", None)
    earlier = None
    if message.part == 0:
        job = RecordedJob.start(memory.jobs, message.job, memory=memory.name,
                                origin=message.origin, host=host, request=job_request)
    else:
        job, earlier = RecordedJob.resume(memory.jobs, message.job, memory=memory.name,
                                          origin=message.origin, host=host,
                                          request=job_request)
    before = IndexReport.from_counts(earlier.result if earlier else {})
    errors_before = list(earlier.result.get("errors") or ()) if earlier else []
    # A part that failed ends the job failed: later parts are still written (their files
    # are good), but neither their counts nor the last one's "done" overwrite the failure.
    failed_before = earlier is not None and earlier.state == "failed"
    try:
        with job.failing():
            report = _write_changes(memory, message, held)
    except BaseException:
        _say_ended(memory, message.job)  # a part that fails ends the job
        raise
    if failed_before:
        return report
    counts = {name: before.counts()[name] + value
              for name, value in report.counts().items()}
    counts["files"] = message.files
    result = {**counts, "errors": (errors_before + report.errors)[:MAX_JOB_ERRORS]}
    if message.last:
        job.done(result)
        _say_ended(memory, message.job)  # the job log says so: the producer need not look
    else:
        job.progress(result, force=True)
    return report


#: How many of a job's errors its record keeps (the earliest).
MAX_JOB_ERRORS = 20


def _say_ended(memory: LocalMemory, job_id: str) -> None:
    from pipeline.fleet.broker import FleetDispatcher

    dispatcher = memory.dispatcher
    if isinstance(dispatcher, FleetDispatcher):
        dispatcher.job_ended(job_id)


def _write_changes(memory: LocalMemory, message: FileChanges,
                   held: Callable[[str, Settings], Database | None] | None) -> IndexReport:
    from pipeline.ingest.multimodal import ReceivedMedia
    from pipeline.ingest.producer import queue_pending
    from pipeline.messages import Route

    settings = memory.settings
    db = held(str(settings.store.path), settings) if held is not None else None
    owned = db is None
    if db is None:
        db = connect(settings.store.path, want_vectors=settings.store.want_vectors)
    try:
        if owned:
            schema.ensure_schema(db)
        check_owner(db, memory.owner, claim=True)
        indexed = schema.get_meta(db, "index") is not None
        choice = memory.index_choice(db) if indexed else choose_provider(settings)
        report, media = apply_to_store(db, settings, choice, message.changes)
        record_files_from(db, message.folder, message.job)
        report.errors = [*message.errors, *report.errors]
        if report.rebuild_needed:
            raise FleetError(f"the index of memory {memory.name!r} was built for another "
                             "configuration: rebuild it from the host of its files "
                             "(move the store aside on this host, then memq index there)")
        if choice.spec is not None:
            queue_pending(db, choice.spec, memory.dispatcher.embed, memory=memory.name,
                          retry_failed=message.retry_failed, report=report,
                          media=ReceivedMedia(media, settings.multimodal),
                          route=Route(memory.shard, message.interactive),
                          use_cache=settings.cache.enabled)
        with schema.transaction(db):
            cache.prune_cache(db, settings.cache.max_entries)
            schema.set_meta(db, "last_index_at", time.time())
        return report
    except db.operational_error as exc:
        raise as_store_error(exc, db.path) or exc from exc
    finally:
        if owned:
            db.close()
