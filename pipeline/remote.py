"""Reaching a memory whose store is on another host: its shard's readers, over the broker.

:class:`RemoteMemory` is what :class:`~pipeline.Memory` does with a memory whose store this
host does not hold (:mod:`pipeline.fleet.placement`): every read goes to the shard's reader, and no
store is ever created here. When the memory's files are here, its index passes run here and
send what changed to the shard's writer (:meth:`RemoteMemory.produce`); when they are not,
they are jobs for the shard's host, which reads its own copy.

A :class:`ShardReader` sends a :class:`~pipeline.messages.QueryRequest` to the memory's
``query.<shard>`` queue (the interactive lane, expiring with the wait) and waits for the
:class:`~pipeline.messages.QueryReply` on Celery's ``rpc://`` result backend: one reply queue
per client thread, the answer pushed to it the moment the reader has it (a database result
backend would be polled; docs/deploy.md compares both). Past ``fleet.queryTimeoutMs`` the
caller gets :class:`~pipeline.errors.ShardUnreachable`, never a hang.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from celery.exceptions import TimeoutError as CeleryTimeout
from kombu.exceptions import OperationalError

from pipeline.config import Settings, redact_url
from pipeline.errors import (
    AppendError,
    DeletionRefused,
    FleetError,
    MemoryDisabled,
    MemoryPathError,
    MessageRefused,
    ShardUnreachable,
    WorkspaceMissing,
)
from pipeline.fleet.broker import (
    BROKER_ERRORS,
    FleetDispatcher,
    broker_failure,
    client_app,
    describe,
    silent_shard,
)
from pipeline.fleet.job_log import JobRecord
from pipeline.ingest.producer import IndexReport, Known
from pipeline.ingest.safety import folder_identity
from pipeline.ingest.transfer import changes_since, disk_stats, packed, stale_against, stats_digest
from pipeline.messages import IndexRequest, QueryReply, QueryRequest
from pipeline.polling import Poll
from pipeline.results import Appended, MemoryText, SearchResults
from pipeline.routing import QUERY_TASK, Lane, control_queue, new_job_id, query_queue

#: The error a reply's kind stands for, raised again on the asking side.
_RAISED: dict[str, type[Exception]] = {
    "path": MemoryPathError, "append": AppendError, "disabled": MemoryDisabled,
    "workspace": WorkspaceMissing,
}


class ShardReader:
    """Asks the readers of the fleet on ``broker_url``; waits ``timeout_s`` at most for each
    answer. Thread-safe (Celery keeps one result consumer per thread); ``close()`` releases
    the connections."""

    def __init__(self, broker_url: str, timeout_s: float) -> None:
        self.broker_url = broker_url
        self.timeout_s = timeout_s
        self.app = client_app(broker_url)
        self.app.conf.update(result_backend="rpc://", result_persistent=False)
        self._lanes = urlsplit(broker_url).scheme in ("redis", "rediss", "redis+socket")
        self._lock = threading.Lock()

    def ask(self, request: QueryRequest) -> QueryReply:
        """Send ``request`` to its shard and wait for the reply."""
        queue = query_queue(request.shard)
        message = request.to_json()
        try:
            result = self.app.send_task(
                QUERY_TASK, args=[message], queue=queue, expires=self.timeout_s,
                priority=int(Lane.INTERACTIVE) if self._lanes else None,
                argsrepr=describe(message), kwargsrepr="{}")  # no query text in events
            raw = result.get(timeout=self.timeout_s, propagate=False, interval=0.05)
        except CeleryTimeout:  # why: no worker on this broker at all, or no reader of it
            raise silent_shard(self.broker_url, request.shard, self.timeout_s) from None
        except BROKER_ERRORS as exc:
            raise broker_failure(self.broker_url, exc) from None
        if not isinstance(raw, dict):
            raise ShardUnreachable(f"the reader of shard {request.shard} failed: {raw!r}"[:500])
        try:
            return QueryReply.from_json(raw)
        except MessageRefused as exc:
            raise ShardUnreachable(f"the reader of shard {request.shard} answered in a form "
                                   f"this memq cannot read: {exc}") from None

    def answer(self, request: QueryRequest) -> Any:
        """The answer to ``request`` (:func:`unwrap`)."""
        return unwrap(self.ask(request), request)

    def close(self) -> None:
        """Close the connections of this reader (its app's pool and this thread's consumer)."""
        with self._lock:
            backend = self.app._backend
            consumer = getattr(backend, "result_consumer", None)
            if consumer is not None and getattr(consumer, "_connection", None) is not None:
                try:
                    consumer.stop()
                    consumer._connection.close()
                except Exception:  # closing is best effort: the process may be exiting
                    pass
            self.app.close()

    def __enter__(self) -> ShardReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def unwrap(reply: QueryReply, request: QueryRequest) -> Any:
    """The answer a reply holds; a refusal raised as the same error a local call would raise
    (a path outside the memory, a refused note, a memory turned off), anything else as a
    :class:`~pipeline.errors.FleetError` naming the reader."""
    if reply.error is None:
        return reply.answer
    raised = _RAISED.get(reply.kind or "")
    if raised is not None:
        raise raised(reply.error)
    where = f" ({reply.node})" if reply.node else ""
    if reply.kind == "refused":
        raise FleetError(f"the reader of shard {request.shard}{where} refused to answer for "
                         f"memory {request.memory!r}: {reply.error}")
    raise FleetError(f"the reader of shard {request.shard}{where} failed: {reply.error}")


class RemoteMemory:
    """One memory as seen from a host that does not hold its store (``settings`` are this
    host's view of it: the name, the shard, the broker, the timeouts)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.name = settings.agent_id
        self.shard = settings.fleet.shard_of(self.name)
        self._reader: ShardReader | None = None
        self._fleet: FleetDispatcher | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RemoteMemory({self.name!r}, shard={self.shard})"

    @property
    def reader(self) -> ShardReader:
        with self._lock:
            if self._reader is None:
                self._reader = ShardReader(str(self.settings.broker_url),
                                           self.settings.fleet.query_timeout_ms / 1000)
            return self._reader

    @property
    def fleet(self) -> FleetDispatcher:
        with self._lock:
            if self._fleet is None:
                self._fleet = FleetDispatcher(str(self.settings.broker_url))
            return self._fleet

    def _request(self, op: str, args: dict[str, Any] | None = None) -> QueryRequest:
        return QueryRequest(self.name, op, {k: v for k, v in (args or {}).items()
                                            if v is not None}, self.shard)

    def ask(self, op: str, args: dict[str, Any] | None = None) -> Any:
        """The answer of the shard's reader to ``op`` (see :data:`QUERY_ARGS`)."""
        return self.reader.answer(self._request(op, args))

    # -- reads -------------------------------------------------------------------------------

    def search(self, query: str, *, max_results: int | None, min_score: float | None,
               sync: bool | None, citations: str, corpus: str | None = None,
               projects: Sequence[str] | None = None) -> SearchResults:
        """The reader's answer (the same hits, scores and notes the store host gives); a
        shard that does not answer gives ``mode == "unavailable"`` and why. With ``sync``
        (default ``sync.onSearch``), files the index does not reflect are counted
        (``dirty``: against the files here when they are here, else on the shard's host)
        and sent to the shard (``syncing``), never waited for."""
        want_sync = self.settings.sync.on_search if sync is None else sync
        files_here = self.settings.workspace.is_dir()
        args: dict[str, Any] = {"query": query, "maxResults": max_results,
                                "minScore": min_score, "citations": citations,
                                "stale": bool(want_sync) and not files_here, "corpus": corpus}
        if projects:
            args["projects"] = list(projects)
        stats = disk_stats(self.settings) if want_sync and files_here else None
        if stats is not None:  # the reader says whether the store holds these very stats
            args["filesDigest"] = stats_digest(stats)
        try:
            answer = dict(self.ask("search", args))
            in_step = answer.pop("filesMatch", False) is True
            results = SearchResults.from_dict(answer)
            stale: list[str] = []
            if want_sync and files_here and not in_step:  # what differs, from the manifest
                stale = self.stale_files()
                results.dirty = len(stale) or None
        except ShardUnreachable as exc:
            return SearchResults(mode="unavailable", citations=citations, error=exc.reason,
                                 action=exc.action or f"start `memq worker --role reader "
                                                      f"--shard {self.shard}` on the host "
                                                      f"that holds shard {self.shard}'s stores")
        except FleetError as exc:
            return SearchResults(mode="unavailable", citations=citations, error=str(exc),
                                 action=f"list memory {self.name!r} in the configuration of "
                                        f"shard {self.shard}'s host")
        if want_sync and results.dirty:
            try:
                if files_here:
                    self.produce(interactive=True, origin="sync",
                                 paths=[self.settings.workspace / path for path in stale])
                else:
                    self.queue_index(interactive=True)
                results.syncing = True
            except (FleetError, DeletionRefused) as exc:  # answered all the same, and told
                results.sync_error = str(exc)
        return results

    def get(self, path: str, from_line: int | None, lines: int | None) -> MemoryText:
        """Lines of a memory file, read by the shard's reader."""
        return MemoryText.from_dict(self.ask("get", {"path": path, "from": from_line,
                                                     "lines": lines}))

    def status(self) -> dict[str, Any]:
        """The status of the memory's index, from its shard (``servedBy``: the reader)."""
        request = self._request("status")
        reply = self.reader.ask(request)
        status = dict(unwrap(reply, request))
        status.update(servedBy=reply.node, shard=self.shard)
        return status

    def append(self, text: str, target: str) -> Appended:
        """Append a note on the shard's host (the memory's files are there, not here)."""
        return Appended.from_dict(self.ask("append", {"text": text, "target": target}))

    # -- a producer here, the store there -----------------------------------------------------

    def manifest(self) -> dict[str, Known]:
        """The store's files as its shard's reader lists them: path -> (hash, mtime_ns, size,
        error)."""
        listed = self.ask("manifest")
        return {path: (row[0], int(row[1]), int(row[2]), row[3])
                for path, row in dict(listed).items()}

    def produce(self, *, paths: list[Path] | None = None, interactive: bool = False,
                retry_failed: bool = False, origin: str = "remote",
                allow_deletions: bool = False) -> tuple[str | None, IndexReport]:
        """A producer pass over the memory's files on this host, against its store on the
        shard's host: what changed is sent to the shard's writer (:mod:`pipeline.ingest.
        transfer`); a pass that finds nothing sends nothing (job None). A pass that would
        empty the memory raises :class:`~pipeline.errors.DeletionRefused` (nothing is sent)
        unless ``allow_deletions``."""
        changes, report = changes_since(self.settings, self.manifest(), paths,
                                        allow_deletions=allow_deletions)
        report.changed = sum(1 for c in changes if c.op == "write")
        report.deleted = sum(1 for c in changes if c.op == "delete")
        if not changes and not retry_failed:
            return None, report
        job = new_job_id(self.name)
        try:
            for message in packed(changes, memory=self.name, job=job, files=report.files,
                                  errors=report.errors, shard=self.shard,
                                  interactive=interactive, origin=origin,
                                  retry_failed=retry_failed,
                                  folder=folder_identity(self.settings.workspace)):
                self.fleet.file_changes(message)
        except (OperationalError, OSError) as exc:
            raise FleetError(f"the broker {redact_url(str(self.settings.broker_url))} did "
                             f"not take the file changes: {exc}") from None
        return job, report

    def stale_files(self) -> list[str]:
        """The files on this host the shard's store does not reflect yet, when the workspace
        is here; else as the shard's host sees them."""
        if self.settings.workspace.is_dir():
            return stale_against(self.settings, self.manifest())
        return list(self.ask("stale"))

    # -- jobs --------------------------------------------------------------------------------

    def queue_index(self, *, interactive: bool = False, retry_failed: bool = False,
                    rebuild: str | None = None) -> str:
        """Send an index pass of the memory to its shard's writer host; the job id."""
        request = IndexRequest(self.name, retry_failed, self.shard, interactive, rebuild)
        try:
            return self.fleet.index(request, job_id=new_job_id(self.name))
        except (OperationalError, OSError) as exc:
            raise FleetError(f"the broker {redact_url(str(self.settings.broker_url))} did "
                             f"not take the index job: {exc}") from None

    def jobs(self, limit: int = 20) -> list[JobRecord]:
        """The memory's recent jobs, from the job log of its shard's host."""
        return [JobRecord.from_dict(d) for d in self.ask("jobs", {"limit": limit})]

    def job(self, job_id: str) -> JobRecord | None:
        """One job of the memory, from the job log of its shard's host."""
        found = self.ask("jobs", {"id": job_id})
        return JobRecord.from_dict(found[0]) if found else None

    def job_waiting(self, job_id: str) -> bool:
        """Whether the job's message may still wait on the shard's ``control`` queue."""
        return self.fleet.job_waiting(control_queue(self.shard), job_id)

    def wait_for_vectors(self, *, on_progress: Callable[[int, int], None] | None = None,
                         check: Callable[[], None] | None = None) -> None:
        """Block until the shard's store has no chunk waiting for a vector."""
        total = None
        poll = Poll()
        while True:
            status = self.status()
            left = int(status.get("pending") or 0)
            total = max(total or 0, left)
            if on_progress:
                on_progress(total - left, total)
            if left == 0 and not (status.get("batch") or {}).get("live"):
                return
            if check:
                check()
            poll.wait()

    def wait_ended(self, job_id: str, timeout_s: float) -> bool:
        """Wait until job ``job_id`` ended on the shard's host (at most ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        poll = Poll()
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job is not None and not job.running:
                return job.state == "done"
            poll.wait()
        return False

    def close(self) -> None:
        with self._lock:
            reader, self._reader = self._reader, None
            fleet, self._fleet = self._fleet, None
        if reader is not None:
            reader.close()
        if fleet is not None:
            fleet.close()
