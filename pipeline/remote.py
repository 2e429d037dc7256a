"""Reaching a memory whose store is on another host: its shard's readers, over the broker.

:class:`RemoteMemory` is what :class:`~memq.Memory` is for a memory whose store this host
does not hold (:mod:`pipeline.fleet.placement`): the same surface as
:class:`~pipeline.local.LocalMemory` (search, get, append, status, index, jobs). Every read
goes to the shard's reader (:class:`~pipeline.fleet.reader.ShardReader`), and no store is ever
created here. When the memory's files are here, its index passes run here and send what
changed to the shard's writer (:meth:`RemoteMemory.produce`); when they are not, they are
jobs for the shard's host, which reads its own copy.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.config import Settings
from pipeline.errors import (
    BrokerUnreachable,
    DeletionRefused,
    FleetError,
    MemoryPathError,
    ShardUnreachable,
)
from pipeline.fleet.broker import FleetDispatcher, taking
from pipeline.fleet.job_log import JobRecord
from pipeline.fleet.reader import ShardReader, unwrap
from pipeline.ingest.producer import IndexReport, Known, scan_sources
from pipeline.ingest.refresh import BackgroundRefresher
from pipeline.ingest.safety import folder_identity
from pipeline.ingest.sources import resolve_memory_path
from pipeline.ingest.transfer import FilesHereDigest, changes_of, packed, stale_against
from pipeline.local import (
    MODE_REMOTE,
    UNKNOWN_JOB_AFTER_S,
    VECTORS_QUEUED,
    IndexRun,
    check_enabled,
    follow_job,
    read_memory_file,
    search_terms,
)
from pipeline.messages import FileChange, FileChanges, IndexRequest, QueryRequest
from pipeline.outcome import VectorOutcome, WithoutVector
from pipeline.polling import POLL_S, Poll
from pipeline.results import Appended, MemoryText, SearchResults
from pipeline.routing import control_queue, new_job_id

if TYPE_CHECKING:
    from pipeline.fleet.job_log import JobLog

log = logging.getLogger(__name__)

__all__ = ["RemoteMemory", "ShardReader", "unwrap"]

#: How long a pass waits for its job at the quick pace (:meth:`RemoteMemory.ended_soon`).
QUICK_JOB_S = 2.0
#: The quick pace's shortest wait between two looks at a job.
QUICK_POLL_S = 0.02


class RemoteMemory:
    """One memory as seen from a host that does not hold its store (``settings`` are this
    host's view of it: the name, the shard, the broker, the timeouts). ``jobs`` is this host's
    job log (default: the one of ``resultBackend``, opened on first use)."""

    def __init__(self, settings: Settings, *, jobs: JobLog | None = None) -> None:
        self.settings = settings
        self.name = settings.agent_id
        self.shard = settings.fleet.shard_of(self.name)
        self._reader: ShardReader | None = None
        self._fleet: FleetDispatcher | None = None
        self._jobs = jobs
        self._own_jobs = jobs is None
        self._lock = threading.Lock()
        #: The files check of :meth:`search` (the files here), shared by concurrent searches.
        self.files_digest = FilesHereDigest(settings)
        #: :meth:`sync` on a background thread (:meth:`memq.Memory.sync_in_background`).
        self.refresher: BackgroundRefresher[IndexRun] = BackgroundRefresher(self.sync)

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

    @property
    def workspace(self) -> Path:
        return self.settings.workspace

    @property
    def jobs(self) -> JobLog:
        """This host's job log (``resultBackend``), of every store: a shared database holds
        the jobs of the memory's shard too."""
        with self._lock:
            if self._jobs is None:
                from pipeline.fleet.job_log import JobLog  # SQLAlchemy loads only when used

                self._jobs = JobLog(self.settings.result_backend,
                                    keep_days=self.settings.fleet.jobs_keep_days)
            return self._jobs

    def _request(self, op: str, args: dict[str, Any] | None = None) -> QueryRequest:
        return QueryRequest(self.name, op, {k: v for k, v in (args or {}).items()
                                            if v is not None}, self.shard)

    def ask(self, op: str, args: dict[str, Any] | None = None) -> Any:
        """The answer of the shard's reader to ``op`` (see :data:`QUERY_ARGS`)."""
        return self.reader.answer(self._request(op, args))

    # -- reads -------------------------------------------------------------------------------

    def search(self, query: str, *, max_results: int | None = None,
               min_score: float | None = None, sync: bool | None = None,
               citations: str | None = None, corpus: str | None = None,
               projects: Sequence[str] | None = None) -> SearchResults:
        """The reader's answer (the same hits, scores and notes the store host gives); a
        shard that does not answer gives ``mode == "unavailable"`` and why. With ``sync``
        (default ``sync.onSearch``), files the index does not reflect are counted
        (``dirty``: against the files here when they are here, else on the shard's host)
        and sent to the shard (``syncing``), never waited for. The arguments are
        :meth:`memq.Memory.search`'s."""
        check_enabled(self.settings)
        citations, corpus, refused = search_terms(self.settings, citations, corpus)
        if refused is not None:
            return refused
        query = str(query)
        want_sync = self.settings.sync.on_search if sync is None else sync
        files_here = self.settings.workspace.is_dir()
        check_here = bool(want_sync) and files_here  # the reader sends the store's digest
        args: dict[str, Any] = {"query": query, "maxResults": max_results,
                                "minScore": min_score, "citations": citations,
                                "stale": bool(want_sync) and not files_here, "corpus": corpus,
                                "storeDigest": check_here or None}
        if projects:
            args["projects"] = list(projects)
        try:
            request = self._request("search", args)
            sent = self.reader.send(request)
            # While the reader searches: the digest of the files here, compared with the
            # store's when the answer comes (in step only when both are known and equal).
            ours = self.files_digest.get() if check_here else None
            reply = self.reader.wait(sent)
            if reply.kind == "refused" and check_here:
                # A reader older than storeDigest refuses it (a fleet being upgraded): asked
                # again as such a reader is asked, with the digest of the files here. A
                # refusal for another reason comes back the same, one round trip later.
                request = self._request("search", {**args, "storeDigest": None,
                                                   "filesDigest": ours})
                reply = self.reader.ask(request)
            answer = dict(unwrap(reply, request))
            theirs = answer.pop("filesDigest", None)
            in_step = ours is not None and (answer.pop("filesMatch", None) is True
                                            or theirs == ours)
            results = SearchResults.from_dict(answer)
            stale: list[str] = []
            if want_sync and files_here and not in_step:  # what differs, from the manifest
                stale = self.stale_files()
                results.dirty = len(stale) or None
        except ShardUnreachable as exc:  # timedOut: no reader answered within the wait
            waited = not isinstance(exc, BrokerUnreachable)
            return SearchResults(mode="unavailable", citations=citations, error=exc.reason,
                                 action=exc.action or f"start `memq worker --role reader "
                                                      f"--shard {self.shard}` on the host "
                                                      f"that holds shard {self.shard}'s stores",
                                 timed_out=waited or None,
                                 timeout_ms=self.settings.fleet.query_timeout_ms if waited
                                 else None)
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

    def get(self, path: str, from_line: int | None = None, lines: int | None = None
            ) -> MemoryText:
        """Lines of a memory file (:meth:`memq.Memory.get`): a memory file is read here when
        it is here (the files are the truth), anything else (no workspace here, a QMD
        document) by the shard's reader. A session hit (``sessions/...``) is refused, here or
        there, as OpenClaw refuses it."""
        check_enabled(self.settings)
        path = str(path)
        if self.workspace.is_dir():
            try:
                target = resolve_memory_path(self.settings, path)
            except MemoryPathError:
                pass
            else:
                return read_memory_file(self.settings, target, from_line, lines)
        return MemoryText.from_dict(self.ask("get", {"path": path, "from": from_line,
                                                     "lines": lines}))

    def status(self) -> dict[str, Any]:
        """The status of the memory's index, from its shard (``servedBy``: the reader)."""
        request = self._request("status")
        reply = self.reader.ask(request)
        status = dict(unwrap(reply, request))
        status.update(servedBy=reply.node, shard=self.shard)
        return status

    def append(self, text: str, target: str = "daily") -> Appended:
        """Remember ``text`` (:meth:`memq.Memory.append`). With the workspace here, the
        note is written here and sent to the shard's writer (the answer waits, up to
        ``fleet.queryTimeoutMs``, until the writer has written it); without it, the shard's
        host appends and indexes the note."""
        from pipeline.ingest.append import append_note

        check_enabled(self.settings)
        if not self.workspace.is_dir():
            return Appended.from_dict(self.ask("append", {"text": text, "target": target}))
        note = append_note(text, target, settings=self.settings)
        try:
            run = self._pass(wait=False, interactive=True,
                             paths=[Path(os.path.normpath(self.workspace / note.path))])
            job = run.job_id
            indexed = job is not None and self.wait_ended(
                job, self.settings.fleet.query_timeout_ms / 1000)
        except FleetError as exc:  # on disk already: report, never raise (a retry doubles it)
            return replace(note, warning=f"saved, but indexing it failed: {exc}")
        return replace(note, indexed=indexed, vectors=VECTORS_QUEUED,
                       warning=None if indexed else f"saved; shard {self.shard} indexes it "
                                                    f"(job {job}), not yet searchable")

    # -- index passes ------------------------------------------------------------------------

    def index(self, *, wait: bool = True, retry_failed: bool = False,
              rebuild: str | None = None, on_progress: Callable[[int, int], None] | None = None,
              warn: Callable[[str], None] | None = None, allow_deletions: bool = False,
              files_here: bool = False, **_local: Any) -> IndexRun:
        """An index pass (:meth:`memq.Memory.index`) of a memory whose store is on another
        host: a job for the shard's writer host (``mode == "remote"``), followed to the end
        with ``wait``. What only a pass on the store's host uses (``choice``, ``job_id``,
        ``origin``, ``host``, ``job_request``) is not used."""
        check_enabled(self.settings)
        if files_here:
            raise FleetError(f"--files-here makes the folder of the store's host the "
                             f"files of memory {self.name!r}: run it on the host of shard "
                             f"{self.shard}'s store")
        return self._pass(wait=wait, retry_failed=retry_failed, rebuild=rebuild,
                          on_progress=on_progress, warn=warn, allow_deletions=allow_deletions)

    def reindex(self, *, wait: bool = True, on_progress: Callable[[int, int], None] | None = None,
                warn: Callable[[str], None] | None = None) -> IndexRun:
        """:meth:`index` with ``rebuild="memq reindex"`` (the shard's host rebuilds)."""
        return self.index(wait=wait, rebuild="memq reindex", on_progress=on_progress, warn=warn)

    def sync(self) -> IndexRun:
        """An index job for the memory's shard, not waited for (this host never creates the
        store)."""
        check_enabled(self.settings)
        return self._pass(wait=False, interactive=True)

    def _pass(self, *, wait: bool, retry_failed: bool = False, rebuild: str | None = None,
              on_progress: Callable[[int, int], None] | None = None,
              warn: Callable[[str], None] | None = None, paths: list[Path] | None = None,
              interactive: bool = False, allow_deletions: bool = False) -> IndexRun:
        """An index pass followed to the end (its vectors written) with ``wait``: with the
        files here, a pass here that sends what changed to the shard's writer (nothing when
        nothing changed); without them, a job for the shard's host, which reads its own copy."""
        started = time.monotonic()
        here = self.workspace.is_dir()
        if here and rebuild is not None:
            raise FleetError(f"a rebuild of memory {self.name!r} runs on the host of its "
                             f"store (shard {self.shard}), which does not have its files: "
                             "move the store aside there and index again from here")
        if here:
            job_id, report = self.produce(paths=paths, interactive=interactive,
                                          retry_failed=retry_failed,
                                          origin="sync" if interactive else "remote",
                                          allow_deletions=allow_deletions)
        elif allow_deletions:
            raise FleetError(f"--allow-deletions lets a pass over the files of memory "
                             f"{self.name!r} remove them from its index: run it on the host "
                             f"that holds them ({self.workspace} is not here)")
        else:
            job_id, report = self.queue_index(
                retry_failed=retry_failed, rebuild=rebuild, interactive=interactive), None
        sent = f"sent as job {job_id}" if job_id else "nothing changed"
        run = IndexRun(report or IndexReport(), MODE_REMOTE, None, None,
                       f"the store is on shard {self.shard}'s host: {sent}",
                       job_id=job_id, vectors=VECTORS_QUEUED)
        settled: dict[str, Any] | None = None  # the shard's status once no vector waits
        if wait and job_id is not None:
            self.ended_soon(job_id)
            job = self.follow_job(job_id, on_progress=on_progress, warn=warn, settle=False)
            if job.state != "done":
                raise FleetError(f"job {job_id} {job.state}: {job.error}")
            counts = IndexReport.from_counts(job.result)
            if report is None:
                run.report = counts
            else:  # what the writer made of what was sent
                report.chunks_queued, report.chunks_cached, report.jobs = (
                    counts.chunks_queued, counts.chunks_cached, counts.jobs)
                report.errors += [e for e in job.result.get("errors", ()) if e not in
                                  report.errors]
            settled = self.wait_for_vectors(on_progress=on_progress, warn=warn)
        if wait:
            run.waited = True
            status = settled if settled is not None else self.status()
            run.outcome = VectorOutcome(
                None, int(status.get("pending") or 0), int(status.get("failed") or 0),
                tuple(WithoutVector(status.get("provider"), e["state"], e["error"], e["chunks"])
                      for e in status.get("chunkErrors") or ()))
            run.failed_chunks = run.outcome.failed
        run.seconds = time.monotonic() - started
        return run

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
        manifest = self.manifest()
        scan = scan_sources(self.settings, manifest, paths, allow_deletions=allow_deletions)
        report = scan.report

        def counted() -> Iterator[FileChange]:
            for change in changes_of(scan, manifest, self.settings):
                report.changed += change.op == "write"
                report.deleted += change.op == "delete"
                yield change

        job, sent = new_job_id(self.name), None  # the last part sent
        parts = packed(counted(), memory=self.name, job=job, files=report.files,
                       errors=report.errors, shard=self.shard, interactive=interactive,
                       origin=origin, retry_failed=retry_failed,
                       folder=folder_identity(self.settings.workspace), empty=retry_failed)
        try:
            for message in parts:
                with taking(str(self.settings.broker_url), "the file changes"):
                    self.fleet.file_changes(message)
                sent = message
        except BaseException as exc:
            if sent is not None and not sent.last:
                self._end_unfinished(sent, exc)
            raise
        return (job if sent else None), report

    def _end_unfinished(self, sent: FileChanges, why: BaseException) -> None:
        """A pass that stopped after its first parts were sent (a read that raised, an
        interrupt, a broker gone): a last, empty part ends its job on the writer, saying why,
        so the job does not stay "started" for good (best effort: the broker may be gone)."""
        ended = sent.model_copy(update={
            "changes": (), "part": sent.part + 1, "last": True,
            "errors": (f"the pass stopped on the host of the files before it sent every "
                       f"change ({type(why).__name__}: {why})"[:500],)})
        try:
            with taking(str(self.settings.broker_url), "the end of the file changes"):
                self.fleet.file_changes(ended)
        except Exception as exc:  # the pass's own error is the one raised
            log.warning("job %s of memory %s could not be ended on its writer: %s",
                        sent.job, self.name, exc)

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
        with taking(str(self.settings.broker_url), "the index job"):
            return self.fleet.index(request, job_id=new_job_id(self.name))

    def recent_jobs(self, limit: int = 20) -> list[JobRecord]:
        """The memory's recent jobs, from the job log of its shard's host."""
        return [JobRecord.from_dict(d) for d in self.ask("jobs", {"limit": limit})]

    def job(self, job_id: str) -> JobRecord | None:
        """One job of the memory: from this host's job log, else its shard's host's."""
        found = self.jobs.get(job_id)
        if found is not None:
            return found
        rows = self.ask("jobs", {"id": job_id})
        return JobRecord.from_dict(rows[0]) if rows else None

    def follow_job(self, job_id: str, *, on_progress: Callable[[int, int], None] | None = None,
                   warn: Callable[[str], None] | None = None,
                   unknown_after: float = UNKNOWN_JOB_AFTER_S, settle: bool = True
                   ) -> JobRecord:
        """:func:`pipeline.local.follow_job` of this memory."""
        return follow_job(self, job_id, on_progress=on_progress, warn=warn,
                          unknown_after=unknown_after, settle=settle)

    def job_waiting(self, job_id: str) -> bool:
        """Whether the job's message may still wait on the shard's ``control`` queue (a
        hint: False without a broker, or when the broker does not answer)."""
        if not self.settings.broker_url:
            return False
        try:
            return self.fleet.job_waiting(control_queue(self.shard), job_id)
        except Exception:  # a hint only: the broker may be down
            return False

    def wait_for_vectors(self, *, on_progress: Callable[[int, int], None] | None = None,
                         warn: Callable[[str], None] | None = None,
                         check: Callable[[], None] | None = None) -> dict[str, Any]:
        """Block until the shard's store has no chunk waiting for a vector (``warn`` is not
        used: the shard's host warns of its own workers); the shard's status then
        (:meth:`status`)."""
        total = None
        poll = Poll()
        while True:
            status = self.status()
            left = int(status.get("pending") or 0)
            total = max(total or 0, left)
            if on_progress:
                on_progress(total - left, total)
            if left == 0 and not (status.get("batch") or {}).get("live"):
                return status
            if check:
                check()
            poll.wait()

    def ended_soon(self, job_id: str, within_s: float = QUICK_JOB_S) -> bool:
        """Whether job ``job_id`` ended within ``within_s``, asked about after a tenth of the
        time waited so far (at least every :data:`QUICK_POLL_S`, at most every
        :data:`~pipeline.polling.POLL_S`): a job of a fraction of a second is seen ending a
        few hundredths of a second after it does, a longer one is left to the usual pace.
        Between two looks it waits for the writer's word that the job ended
        (:meth:`~pipeline.fleet.broker.FleetDispatcher.await_job_end`, on a Redis broker),
        and looks again the moment it comes."""
        started = time.monotonic()
        while True:
            job = self.job(job_id)
            if job is not None and not job.running:
                return True
            waited = time.monotonic() - started
            if waited >= within_s:
                return False
            self.pause_for_job(job_id, min(max(waited / 10, QUICK_POLL_S), POLL_S,
                                           within_s - waited))

    def pause_for_job(self, job_id: str, seconds: float) -> bool:
        """Wait ``seconds`` before the next look at job ``job_id``, less when its writer says
        it ended (without a broker, a sleep): True when the writer's word ended the wait."""
        if self.settings.broker_url:
            return self.fleet.await_job_end(job_id, seconds)
        time.sleep(seconds)
        return False

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
        """Wait for a background sync, then close the connections this memory opened."""
        self.refresher.wait()
        with self._lock:
            reader, self._reader = self._reader, None
            fleet, self._fleet = self._fleet, None
            jobs = self._jobs if self._own_jobs else None
            self._jobs = None if self._own_jobs else self._jobs
        for part in (reader, fleet, jobs):
            if part is not None:
                part.close()

    def __enter__(self) -> RemoteMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
