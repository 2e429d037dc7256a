"""``LocalMemory``: a memory whose store is on this host, and everything done with it.

:class:`~memq.Memory` builds one when :mod:`pipeline.fleet.placement` says the store
is here (else a :class:`~pipeline.remote.RemoteMemory`). It owns what it uses: the embedding
providers it built (a local model loads once), its in-memory copies of the store (vectors and
BM25 statistics, for fast repeated searches), the connections and background threads it
started, and, unless one is given, the :class:`~pipeline.dispatch.Dispatcher` its index passes
send their embedding work to: the fleet's broker when ``brokerUrl`` is configured, else this
very process. ``close()`` releases them all.

Its index pass (:meth:`LocalMemory.index`) is the one every path runs: ``memq index``, a
sync before a search (:meth:`LocalMemory.sync`), a writer's index job, and an append.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pipeline.config import Settings
from pipeline.embeddings.providers import ProviderPool
from pipeline.embeddings.registry import ProviderChoice, choose_provider, fallback_note
from pipeline.errors import (
    AppendError,
    DeletionRefused,
    EmbeddingError,
    MemoryPathError,
    StoreError,
    UnknownJob,
    memory_disabled,
)
from pipeline.ingest.refresh import BackgroundRefresher, find_stale, stale_memory_paths
from pipeline.ingest.safety import reads_own_files
from pipeline.ingest.sources import relative_path, resolve_memory_path
from pipeline.outcome import VectorOutcome, WithoutVector, read_outcome
from pipeline.polling import POLL_S, Poll
from pipeline.results import NOT_FOUND, Appended, MemoryText, SearchResults
from pipeline.routing import control_queue, embed_queue, memory_of_job, new_job_id
from pipeline.search.citations import apply_citations, check_mode
from pipeline.search.corpus import check_corpus, corpus_sources, refusal
from pipeline.search.deadline import (
    COOLDOWN_S,
    Cooldown,
    Deadline,
    EmbeddedQuery,
    embed_within,
    in_background,
    timed_out_message,
    within,
)
from pipeline.store import batches, joblog, reads, schema
from pipeline.store.engine import Database, as_store_error, connect
from pipeline.store.owner import check_owner, owner_of
from pipeline.store.reads import rebuild_info

# A one-shot search (``memq search``) imports this module: what only indexing, appending,
# transcripts, the QMD backend or the fleet need is imported where it is used. So does an
# index pass: the hybrid ranking (NumPy) and the reranker load with the first search
# (:meth:`LocalMemory.search_part`).
if TYPE_CHECKING:
    from concurrent.futures import Future

    from pipeline.dispatch import Dispatcher
    from pipeline.embeddings.base import EmbeddingProvider
    from pipeline.fleet.job_log import JobLog, JobRecord
    from pipeline.ingest.producer import IndexReport
    from pipeline.ingest.reindex import RebuildProgress
    from pipeline.messages import ProviderSpec
    from pipeline.qmd import QmdBackend
    from pipeline.qmd.jobs import QmdJobs
    from pipeline.search.hybrid import HeldCopies
    from pipeline.search.rerank import Reranker

log = logging.getLogger(__name__)

#: How long a job may be neither in the job log nor waiting in its queue before a follower
#: calls it unknown.
UNKNOWN_JOB_AFTER_S = 15.0
STALL_HINT_S = 30.0
#: What happens to a pass's new chunks' vectors (``IndexRun.vectors``).
VECTORS_EMBEDDED = "embedded"
VECTORS_QUEUED = "queued"
VECTORS_NONE = "none (keyword-only index)"
#: ``IndexRun.mode`` of a pass sent to the writer host of a memory whose store is elsewhere.
MODE_REMOTE = "remote"
#: ``SearchResults.mode`` of a QMD answer, by ``qmd.searchMode``.
_QMD_MODES = {"search": "keyword-only", "vsearch": "hybrid", "query": "hybrid"}


@dataclass
class IndexRun:
    """What one index pass did (``report``), with which provider (``mode``, ``provider``,
    ``model``, ``reason``), whether it waited for every vector, how long it took, the chunks
    left without a vector (``failed_chunks``), a rebuild's progress, and its job id."""

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
    vectors: str | None = None  # VECTORS_EMBEDDED, VECTORS_QUEUED or VECTORS_NONE
    #: The store after the pass: vectors written, chunks pending or failed, and why.
    outcome: VectorOutcome = field(default_factory=VectorOutcome)

    @property
    def vectors_written(self) -> int | None:
        """Vectors written during the pass (None when it did not wait for them)."""
        return self.outcome.written

    @property
    def pending(self) -> int:
        """Chunks still without a vector and not failed (queued, or held with a reason)."""
        return self.outcome.pending

    @property
    def without_vector(self) -> tuple[WithoutVector, ...]:
        """The chunks left without a vector, grouped by state and reason."""
        return self.outcome.groups


def wait_for_vectors(db: Database, *, on_progress: Callable[[int, int], None] | None = None,
                     check: Callable[[], None] | None = None,
                     warn: Callable[[str], None] | None = None) -> None:
    """Block until no chunk is pending and no provider batch job is still finishing;
    ``check`` runs between polls (:meth:`Dispatcher.check`)."""
    total = reads.waiting_count(db)
    last_change, last_left = time.monotonic(), total
    hinted = False
    while True:
        left = reads.waiting_count(db)
        if on_progress:
            on_progress(total - left, total)
        if left == 0 and not batches.live_jobs(db):
            return
        if left != last_left:
            last_change, last_left = time.monotonic(), left
        elif not hinted and warn and time.monotonic() - last_change > STALL_HINT_S:
            warn("no progress for 30 s: is a worker consuming the embed and store queues? "
                 "(memq worker --role embed / --role writer)")
            hinted = True
        if check:
            check()
        time.sleep(POLL_S)


def wait_for_submission(db: Database, *, check: Callable[[], None] | None = None) -> None:
    """Block until every live batch job was created at its provider (``remote.batch.wait``
    false: the run returns then, and the vectors land later, or in the next run)."""
    while any(job["remote"] is None for job in batches.live_jobs(db)):
        if check:
            check()
        time.sleep(POLL_S)


@dataclass
class SearchPart:
    """What a :class:`LocalMemory` searches with, built on its first search
    (:meth:`LocalMemory.search_part`): the in-memory copies of its stores (``held``; None:
    each search reads the store) and the ``rerank.*`` cross-encoder stage with its outage
    state (``reranker``; None when off)."""

    held: HeldCopies | None
    reranker: Reranker | None

    def close(self) -> None:
        """Drop the copies and close the reranker."""
        if self.held is not None:
            self.held.close()
        if self.reranker is not None:
            self.reranker.close()


def check_enabled(settings: Settings) -> None:
    """Raise :class:`~pipeline.errors.MemoryDisabled` when ``enabled = false``: OpenClaw then
    has no memory tools and indexes nothing, and neither does memq."""
    if not settings.enabled:
        raise memory_disabled(settings.config_file)


def search_terms(settings: Settings, citations: str | None, corpus: str | None
                 ) -> tuple[str, str | None, SearchResults | None]:
    """A search's ``citations`` and ``corpus`` checked (RequestRefused for a wrong value),
    and the answer when the settings refuse that corpus (else None)."""
    citations = check_mode(citations or settings.citations)
    corpus = check_corpus(corpus)
    refused = refusal(settings, corpus)
    if refused is not None:
        refused.citations = citations
    return citations, corpus, refused


def read_memory_file(settings: Settings, target: Path, from_line: int | None,
                     lines: int | None) -> MemoryText:
    """OpenClaw's ``memory_get`` window of the memory file ``target`` (a checked path):
    ``status: "not_found"`` for a file that does not exist yet."""
    rel = relative_path(settings.workspace, target)
    if not target.exists():
        return MemoryText(rel, "", status=NOT_FOUND)
    # bytes decoded as they are: a "\r" stays in the text, as OpenClaw reads it
    return MemoryText.window(rel, target.read_bytes().decode("utf-8", errors="replace"),
                             from_line, lines, suggest_read=in_workspace_memory(rel))


def in_workspace_memory(rel: str) -> bool:
    """Whether workspace-relative ``rel`` is one of the workspace's own memory files (OpenClaw's
    ``isMemoryPath``), not an extra path's: a ``memory_get`` notice for a line over the
    character budget then suggests reading the raw file."""
    return rel in ("MEMORY.md", "USER.md") or rel.lower() == "dreams.md" \
        or rel.startswith("memory/")


class LocalMemory:
    """One agent's memory whose store is on this host: its resolved settings and SQLite store.

    ``dispatcher`` is where index passes send their embedding work (default: the fleet's
    broker when ``brokerUrl`` is set, else this process). ``in_memory`` (default) keeps the
    store's vectors and BM25 statistics in memory for fast repeated searches; pass False for
    a single search. ``jobs`` is the job log to record index passes in (default: the one of
    ``resultBackend``, opened on first use); ``providers`` the embedding providers to use
    (default: its own, closed with it).
    """

    def __init__(self, settings: Settings, *, dispatcher: Dispatcher | None = None,
                 in_memory: bool = True, jobs: JobLog | None = None,
                 providers: ProviderPool | None = None) -> None:
        self.settings = settings
        self._own_providers = providers is None
        self._providers = ProviderPool() if providers is None else providers
        self._in_memory = in_memory
        self._search_part: SearchPart | None = None  # built on first search
        #: The provider skipped after a search ran out of time (``query.timeoutMs``).
        self._cooldown = Cooldown()
        self._search_sync: Future[int] | None = None  # sync.onSearch's, when it outlasts one
        self._dispatcher = dispatcher
        self._owned: Any = None  # the default dispatcher, built on first use, closed with us
        self._fleet: Any = None  # the broker, asked whether a followed job still waits
        self._jobs = jobs  # the job log: the one given, else built on first use
        self._own_jobs = jobs is None
        self._lock = threading.Lock()
        #: :meth:`sync` on a background thread (:meth:`memq.Memory.sync_in_background`).
        self.refresher: BackgroundRefresher[IndexRun] = BackgroundRefresher(self.sync)
        self._qmd: QmdBackend | None = None  # backend "qmd": built on first use
        self._qmd_jobs: QmdJobs | None = None  # where its update jobs go
        self._qmd_opened = False  # the boot job was asked for (update.onBoot)
        self._old_log_checked = False  # memq's old job log was looked for (once)

    def search_part(self) -> SearchPart:
        """The held copies and reranker searches use, built on the first call: an index pass,
        which never searches, does not import the hybrid ranking (NumPy) at all."""
        with self._lock:
            if self._search_part is None:
                from pipeline.search.hybrid import HeldCopies
                from pipeline.search.rerank import build_reranker

                self._search_part = SearchPart(
                    HeldCopies() if self._in_memory else None,
                    build_reranker(self.settings.rerank, local=self.settings.local))
            return self._search_part

    @property
    def name(self) -> str:
        """As :attr:`memq.Memory.name`."""
        return self.settings.agent_id

    @property
    def shard(self) -> int:
        """As :attr:`memq.Memory.shard`."""
        return self.settings.fleet.shard_of(self.name)

    @property
    def workspace(self) -> Path:
        return self.settings.workspace

    @property
    def jobs(self) -> JobLog:
        """This host's job log (``resultBackend``), of this store's jobs only
        (:class:`~pipeline.fleet.job_log.JobLog`'s ``store``): the index passes run here are
        recorded there. With no broker, a SQLite job log is written without Celery (``lean``:
        a single-host pass loads neither Celery nor SQLAlchemy for its record)."""
        with self._lock:
            if self._jobs is None:
                from pipeline.fleet.job_log import JobLog  # SQLAlchemy loads only when used

                self._jobs = JobLog(self.settings.result_backend,
                                    keep_days=self.settings.fleet.jobs_keep_days,
                                    store=self.settings.store.path,
                                    lean=not self.settings.broker_url)
            return self._jobs

    def __repr__(self) -> str:
        return f"LocalMemory({self.name!r}, workspace={str(self.workspace)!r})"

    # -- reading -----------------------------------------------------------------------------

    def search(self, query: str, *, max_results: int | None = None,
               min_score: float | None = None, sync: bool | None = None,
               citations: str | None = None, corpus: str | None = None,
               projects: Sequence[str] | None = None) -> SearchResults:
        """As :meth:`memq.Memory.search`."""
        check_enabled(self.settings)
        citations, corpus, refused = search_terms(self.settings, citations, corpus)
        if refused is not None:
            return refused
        sources = corpus_sources(self.settings, corpus)
        fallback = None
        backend = self.qmd
        if backend is not None:
            from pipeline.qmd import QmdUnavailable

            self._qmd_open()
            try:
                hits = backend.search(str(query), max_results=max_results, min_score=min_score)
            except QmdUnavailable as exc:  # the backend logged it (once per outage)
                fallback = exc.as_dict()
            else:
                if sources is not None:
                    hits = [hit for hit in hits if hit.source in sources]
                return SearchResults(hits=apply_citations(hits, citations), provider="qmd",
                                     model=backend.qmd.search_mode,
                                     mode=_QMD_MODES[backend.qmd.search_mode],
                                     citations=citations, backend="qmd")
        results = self._search_builtin(str(query), max_results, min_score, sync, citations,
                                       sources, projects)
        if backend is not None:
            results.backend, results.fallback = "builtin", fallback
        return results

    def _search_builtin(self, query: str, max_results: int | None, min_score: float | None,
                        sync: bool | None, citations: str, sources: tuple[str, ...] | None,
                        projects: Sequence[str] | None = None) -> SearchResults:
        try:
            db = self.open_store()
        except StoreError as exc:  # OpenClaw's "unavailable" shape: the agent is told
            return SearchResults(mode="unavailable", error=str(exc),
                                 action="rebuild the index with `memq index` after moving the "
                                        "store aside")
        if db is None:
            return SearchResults(warning=f"nothing indexed yet at {self.settings.store.path}: "
                                         "run `memq index`")
        try:
            return self._search(db, query, max_results, min_score, sync, citations, sources,
                                projects)
        finally:
            db.close()

    def _search(self, db: Database, query: str, max_results: int | None,
                min_score: float | None, sync: bool | None, citations: str,
                sources: tuple[str, ...] | None, projects: Sequence[str] | None = None
                ) -> SearchResults:
        # Built (imported, the first time) before the deadline starts and the query is
        # embedded: a one-shot search imports the ranking while its local model loads on
        # another thread.
        part = self.search_part()
        deadline = Deadline(self.settings.query.timeout_ms)
        spec = schema.index_spec(db)
        provider, warning = None, None
        if spec is not None:
            try:
                provider = self._providers.get(spec, self.settings)
            except EmbeddingError as exc:
                warning = f"query embedding unavailable, keyword results only: {exc}"
        synced: int | None = 0
        cut = None  # why the search answers from keywords only (query.timeoutMs)
        if self.settings.sync.on_search if sync is None else sync:
            try:
                synced = self._sync_rows(db, spec, provider, deadline)
            except DeletionRefused as exc:  # the index stays as it is; the caller is told
                warning = f"not synced: {exc}"
            if synced is None:  # still syncing at the deadline: no time left to embed either
                provider, cut = None, (f"{timed_out_message(deadline.timeout_ms)} while the "
                                       "changed files were synced: answered from the index as "
                                       "it was, keyword matches only (the sync goes on)")
        if provider is not None and spec is not None and query.strip():
            try:
                provider, cut = self._query_vector(provider, spec, query, deadline)
            except EmbeddingError as exc:
                provider, warning = None, f"query embedding failed, keyword results only: {exc}"
        from pipeline.search.hybrid import search  # imported by search_part() above

        answer = search(db, self.settings, query, max_results=max_results, min_score=min_score,
                        provider=provider, held=part.held, reranker=part.reranker,
                        sources=sources, projects=projects)
        hits = answer.hits
        warning = "; ".join(filter(None, [warning, cut]))
        if not db.fts_ok:
            warning = "; ".join(filter(None, [warning, f"keyword search unavailable: "
                                                       f"{db.fts_error}"]))
        reason = schema.get_meta(db, "mode_reason")
        rebuild = rebuild_info(db)
        return SearchResults(
            hits=apply_citations(hits, citations),
            provider=spec.name if spec else None, model=spec.model if spec else None,
            mode="hybrid" if provider is not None else "keyword-only", citations=citations,
            reason=reason if spec is None and reason else None,
            pending=reads.pending_count(db) if spec is not None else None,
            warning=warning or None, synced=synced, syncing=True if synced is None else None,
            vector_unavailable=spec is not None and provider is None,  # keywords answered
            fallback=fallback_note(spec, self.settings, reason), rerank=answer.rerank,
            partial=True if cut else None, timed_out=True if cut else None,
            timeout_ms=deadline.timeout_ms if cut else None,
            # answered from the live index while its successor is built
            rebuilding=(rebuild.get("reason") or "reindex") if rebuild is not None else None)

    def _query_vector(self, provider: EmbeddingProvider, spec: ProviderSpec, query: str,
                      deadline: Deadline) -> tuple[EmbeddingProvider | None, str | None]:
        """The provider to rank with, the query's vector known (None: keyword-only), and why
        not (None when it answered): the query's embedding is waited for until ``deadline``
        at most; a provider that made a search run out of time is skipped for
        :data:`~pipeline.search.deadline.COOLDOWN_S` (:mod:`pipeline.search.deadline`)."""
        key = (spec.name, spec.model)
        skipped = self._cooldown.left(key)
        if skipped:
            return None, (f"{self._cooldown.reason}; it is skipped for another "
                          f"{math.ceil(skipped)} s: keyword matches only")
        left = deadline.left()
        vector = embed_within(provider, query, left)
        if vector is not None:
            return EmbeddedQuery(provider, vector), None
        said = timed_out_message(deadline.timeout_ms)
        if left <= 0:  # the provider had no time: it is not to blame
            return None, f"{said} before the query was embedded: keyword matches only"
        reason = f"{said}: the query embedding ({spec.name}) did not answer in time"
        self._cooldown.start(key, reason)
        return None, (f"{reason}; keyword matches only, and the provider is skipped for the "
                      f"next {COOLDOWN_S:.0f} s")

    def _sync_rows(self, db: Database, spec: ProviderSpec | None,
                   provider: EmbeddingProvider | None, deadline: Deadline) -> int | None:
        """``sync.onSearch``: bring the chunk rows of changed memory files up to date before
        answering, so a search never answers silently from old text. Returns the files synced,
        or None when the sync is still running at ``deadline`` (it goes on, on its own
        connection and thread; a search meanwhile waits for that one, never starts another).

        Only rows are written (keyword search sees the new text at once); their vectors follow
        with the next index pass, and the result says they are pending. Nothing happens while
        the index is being rebuilt for another configuration, or when the index's provider
        cannot be built here (its input limit decides how chunks are cut).
        """
        with self._lock:
            running = self._search_sync
            if running is not None and running.done():
                running = self._search_sync = None
        if running is None:
            if spec is not None and provider is None:
                return 0
            if not reads_own_files(db, self.settings):  # its producer on another host syncs it
                return 0
            stale = stale_memory_paths(db, self.settings)
            if not stale:
                return 0
            choice = ProviderChoice(provider, spec, schema.get_meta(db, "mode_reason"))
            with self._lock:
                running = self._search_sync = in_background(
                    lambda: self._sync_files(choice, stale), "memq-sync-on-search")
        done, synced = within(running, deadline.left())
        return synced if done else None

    def _sync_files(self, choice: ProviderChoice, paths: list[Path]) -> int:
        """:func:`~pipeline.ingest.producer.sync_files` of ``paths`` on a connection of its
        own; the files synced."""
        from pipeline.ingest.producer import sync_files  # writes rows: only when files changed

        db = connect(self.settings.store.path, want_vectors=self.settings.store.want_vectors)
        try:
            report = sync_files(db, self.settings, choice, paths=paths)
        finally:
            db.close()
        return report.changed + report.deleted

    def get(self, path: str, from_line: int | None = None, lines: int | None = None
            ) -> MemoryText:
        """As :meth:`memq.Memory.get`."""
        check_enabled(self.settings)
        backend = self.qmd
        if backend is not None and _names_qmd_file(backend, str(path)):
            return backend.get(str(path), from_line, lines)
        try:  # a session hit (sessions/...) is refused here, as OpenClaw refuses it
            target = resolve_memory_path(self.settings, str(path))
        except MemoryPathError as refused:
            if backend is None:
                raise
            from pipeline.qmd import QmdPathError

            try:  # a file of a QMD collection (its folder inside the workspace)
                return backend.get(str(path), from_line, lines)
            except QmdPathError:
                raise refused from None
        return self._read_file(target, from_line, lines)

    def _read_file(self, target: Path, from_line: int | None, lines: int | None) -> MemoryText:
        rel = relative_path(self.settings.workspace, target)
        elsewhere, kept = self._kept_text(rel)
        if elsewhere:  # a file the store does not know reads as one that could exist
            return (MemoryText(rel, "", status=NOT_FOUND) if kept is None
                    else MemoryText.window(rel, kept, from_line, lines,
                                           suggest_read=in_workspace_memory(rel)))
        return read_memory_file(self.settings, target, from_line, lines)

    def _kept_text(self, path: str | None = None) -> tuple[bool, str | None]:
        """Whether the store's files are sent from another host's folder (the folder here is
        not them: :mod:`pipeline.ingest.safety`), and then the text of memory file ``path``
        that the store keeps (None for a file it does not know, or without ``path``)."""
        db = self.open_store()
        if db is None:
            return False, None
        try:
            if reads_own_files(db, self.settings):
                return False, None
            return True, reads.kept_text(db, path) if path is not None else None
        finally:
            db.close()

    def stale_files(self) -> list[str]:
        """As :meth:`memq.Memory.stale_files`."""
        return find_stale(self.settings)

    def status(self) -> dict[str, Any]:
        """As :meth:`memq.Memory.status`."""
        from pipeline.status import index_status

        status = index_status(self.settings, self.jobs)
        backend = self.qmd
        status["backend"] = "builtin" if backend is None else "qmd"
        if backend is not None:
            status["qmd"] = backend.status()
        return status

    # -- writing -----------------------------------------------------------------------------

    def append(self, text: str, target: str = "daily") -> Appended:
        """As :meth:`memq.Memory.append`."""
        from pipeline.ingest.append import append_note

        check_enabled(self.settings)
        if self._kept_text()[0]:  # the store is fed from another host's folder
            raise AppendError(f"the files of memory {self.name!r} are on the host that sends "
                              "them to this store, not here: append the note there")
        note = append_note(text, target, settings=self.settings)
        try:
            run = self.refresher.refresh_now()
        except Exception as exc:  # on disk already: report, never raise (see above)
            log.exception("indexing after memory_append failed")
            return replace(note, warning=f"saved, but indexing it failed: "
                                         f"{type(exc).__name__}: {exc}")
        return replace(note, indexed=True, vectors=run.vectors)

    def index(self, *, wait: bool = True, retry_failed: bool = False,
              rebuild: str | None = None, choice: ProviderChoice | None = None,
              on_progress: Callable[[int, int], None] | None = None,
              warn: Callable[[str], None] | None = None, job_id: str | None = None,
              origin: str = "local", host: str | None = None,
              job_request: Any = None, allow_deletions: bool = False,
              files_here: bool = False) -> IndexRun:
        """One index pass: bring the store in line with the files and embed what is new.

        ``wait`` returns only when every vector is written (else once the work is sent).
        ``retry_failed`` queues failed chunks again. ``rebuild`` names a reason to build a new
        index beside the live one and swap it in when complete (``memq reindex``); a
        configuration whose fingerprint no longer matches the store's does the same.
        ``choice`` is the provider to index with (default: chosen from the settings).
        ``on_progress(done, total)`` follows the vectors; ``warn`` gets hints for a person.
        The pass is recorded in the job log (``job_id``, ``origin`` and ``host`` say what
        ran it; ``job_request`` is the Celery request of the task running it, whose worker and
        queue go with the record).

        A pass never empties a memory by an accident of the host (:mod:`pipeline.ingest.safety`):
        one that would remove every file or most of them (an empty, missing or unmounted
        folder) raises :class:`~pipeline.errors.DeletionRefused` unless ``allow_deletions``;
        one over a folder that is not the memory's files (they are sent from another host's
        folder) raises :class:`~pipeline.errors.FilesElsewhere` unless ``files_here`` makes
        this folder the memory's files. Nothing is written then.
        """
        from pipeline.fleet.job_log import RecordedJob  # an index pass only
        from pipeline.ingest.producer import IndexReport

        check_enabled(self.settings)
        started, began = time.monotonic(), time.time()
        choice = choice or choose_provider(self.settings)
        if choice.fallback_from is not None:
            log.warning("%s", choice.reason)
            if warn is not None:
                warn(f"warning: {choice.reason}")
        run = IndexRun(IndexReport(), choice.mode, choice.spec.name if choice.spec else None,
                       choice.spec.model if choice.spec else None, choice.reason,
                       job_id=job_id or new_job_id(self.name))
        db = connect(self.settings.store.path, want_vectors=self.settings.store.want_vectors)
        try:
            schema.ensure_schema(db)
            check_owner(db, self.owner, claim=True)
            self._carry_old_job_log(db)
            job = RecordedJob.start(self.jobs, run.job_id, memory=self.name, origin=origin,
                                    host=host, request=job_request)

            def progress(done: int, total: int) -> None:
                job.progress({"vectors_done": done, "vectors_total": total})
                if on_progress is not None:
                    on_progress(done, total)

            with job.failing():
                self._produce(run, db, choice, wait=wait, retry_failed=retry_failed,
                              rebuild=rebuild, on_progress=progress, warn=warn, began=began,
                              allow_deletions=allow_deletions, files_here=files_here)
            job.done({**run.report.counts(), **run.outcome.to_dict()})
            self._qmd_after(run.report)
            return run
        except db.operational_error as exc:
            raise as_store_error(exc, db.path) or exc from exc
        finally:
            run.seconds = time.monotonic() - started
            db.close()

    def _carry_old_job_log(self, db: Database) -> None:
        """Hand the rows of memq's old job log (beside or inside the store) to the job log,
        then remove the old one: the first pass after an upgrade does; it is looked for once
        per ``LocalMemory``, not at every pass."""
        if self._old_log_checked:
            return
        self._old_log_checked = True
        rows = joblog.old_rows(self.settings.store.path, db)
        if rows or joblog.log_path(self.settings.store.path).exists():
            self.jobs.import_rows(self.name, rows)
            joblog.forget_old(self.settings.store.path, db)

    def reindex(self, *, wait: bool = True, on_progress: Callable[[int, int], None] | None = None,
                warn: Callable[[str], None] | None = None) -> IndexRun:
        """As :meth:`memq.Memory.reindex`."""
        return self.index(wait=wait, rebuild="memq reindex", on_progress=on_progress, warn=warn)

    def sync(self) -> IndexRun:
        """Bring the index in line with the files under its own provider and model (never a
        switch, which would drop every vector): new text is keyword-searchable at once, its
        vectors embedded here or queued to the fleet (``run.vectors`` says which)."""
        from pipeline.ingest.producer import index_once

        check_enabled(self.settings)
        db = connect(self.settings.store.path, want_vectors=self.settings.store.want_vectors)
        try:
            schema.ensure_schema(db)
            check_owner(db, self.owner, claim=True)
            choice = self.index_choice(db)
            if choice.spec is None:
                report = index_once(db, self.settings, choice, None)
                self._qmd_after(report)
                return IndexRun(report, choice.mode, None, None, choice.reason,
                                vectors=VECTORS_NONE)
        finally:
            db.close()
        return self.index(choice=choice, wait=False)

    # -- the QMD backend ---------------------------------------------------------------------

    @property
    def qmd(self) -> QmdBackend | None:
        """The QMD backend (``backend: "qmd"``), built on first use; None for ``builtin``."""
        if self.settings.backend != "qmd":
            return None
        from pipeline.qmd import QmdBackend

        with self._lock:
            if self._qmd is None:
                self._qmd = QmdBackend(self.settings)
            return self._qmd

    def qmd_job(self, reason: str) -> None:
        """Ask for a QMD update job (``boot``, ``changed`` or ``due``; see
        :mod:`pipeline.qmd.jobs`) unless nothing would be done: on the fleet's
        ``control.<shard>`` queue when a broker takes it, else on this memory's background
        thread (one job at a time). Nothing happens with ``backend: "builtin"``."""
        jobs = self._qmd_scheduler()
        if jobs is not None:
            jobs.ask(reason)

    def wait_for_qmd_jobs(self, timeout: float | None = None) -> None:
        """As :meth:`memq.Memory.wait_for_qmd_jobs`."""
        with self._lock:
            jobs = self._qmd_jobs
        if jobs is not None:
            jobs.runner.wait(timeout)

    def _qmd_scheduler(self) -> QmdJobs | None:
        backend = self.qmd
        if backend is None:
            return None
        from pipeline.qmd.jobs import QmdJobs

        with self._lock:
            if self._qmd_jobs is None:
                self._qmd_jobs = QmdJobs(backend, lambda reason: self.dispatcher.qmd_job(
                    self.name, reason, shard=self.shard))
            return self._qmd_jobs

    def _qmd_open(self) -> None:
        """Before a QMD search. Once per ``Memory`` (``update.onBoot``): set QMD up, or
        refresh it when due, in the background (before answering, with
        ``update.waitForBootSync``, when the home is not set up yet). Later: the intervals'
        jobs when due (looked at every 30 s at most)."""
        from pipeline.qmd.jobs import needs_boot

        jobs = self._qmd_scheduler()
        if jobs is None:
            return
        if self._qmd_opened or not jobs.backend.qmd.update.on_boot:
            jobs.ask("due")
            return
        self._qmd_opened = True
        if jobs.backend.qmd.update.wait_for_boot_sync and needs_boot(jobs.backend):
            jobs.runner.run_now("boot")
            return
        jobs.ask("boot")

    def _qmd_after(self, report: IndexReport) -> None:
        """After an index pass: QMD follows the files too (a debounced update)."""
        if self.settings.backend == "qmd":
            self.qmd_job("changed" if report.changed or report.deleted else "due")

    # -- the parts ---------------------------------------------------------------------------

    @property
    def dispatcher(self) -> Dispatcher:
        """Where index passes send embedding work: the one given, else the fleet's broker
        (``brokerUrl``), else this process."""
        if self._dispatcher is not None:
            return self._dispatcher
        with self._lock:
            if self._owned is None:
                if self.settings.broker_url:
                    from pipeline.fleet.broker import FleetDispatcher  # Celery loads only when used

                    self._owned = FleetDispatcher(self.settings.broker_url)
                else:
                    from pipeline.dispatch import InlineDispatcher  # an index pass only

                    self._owned = InlineDispatcher(self.settings, self._providers)
            return self._owned

    def open_store(self) -> Database | None:
        """The memory's store, opened for reading and checked to be this memory's (None when
        nothing is indexed yet: nothing is created)."""
        db = schema.open_store(self.settings.store.path,
                               want_vectors=self.settings.store.want_vectors)
        if db is not None:
            try:
                check_owner(db, self.owner, claim=False)
            except StoreError:
                db.close()
                raise
        return db

    @property
    def owner(self) -> dict[str, str]:
        """What this memory's store records as its owner (name and workspace); a store that
        records another is refused (:class:`~pipeline.errors.StoreOwnedElsewhere`)."""
        return owner_of(self.name, self.workspace)

    def index_choice(self, db: Database) -> ProviderChoice:
        """The provider choice the index already made; a store never indexed chooses afresh
        (without fetching the default model: a reader must not start a download)."""
        spec = schema.index_spec(db)
        reason = schema.get_meta(db, "mode_reason")
        if spec is not None:
            return ProviderChoice(self._providers.get(spec, self.settings), spec, reason)
        if schema.get_meta(db, "index") is not None:
            return ProviderChoice(None, None, reason)  # a keyword-only index stays so
        return choose_provider(self.settings, fetch_default_model=False)

    def _produce(self, run: IndexRun, db: Database, choice: ProviderChoice, *, wait: bool,
                 retry_failed: bool, rebuild: str | None,
                 on_progress: Callable[[int, int], None] | None,
                 warn: Callable[[str], None] | None, began: float,
                 allow_deletions: bool = False, files_here: bool = False) -> None:
        from pipeline.ingest.producer import index_once

        settings = self.settings
        guards = {"allow_deletions": allow_deletions, "files_here": files_here}
        if choice.spec is None:
            run.report = index_once(db, settings, choice, None, **guards)
            run.vectors = VECTORS_NONE
            if run.report.rebuild_needed or rebuild:
                run.rebuild = self._rebuild(choice, None, wait=True,
                                            reason=rebuild or "configuration changed")
            return
        dispatcher = self.dispatcher
        if not dispatcher.durable:  # jobs queued by an earlier run died with it
            self.forget_queued()
        try:
            batch = dispatcher.batch_routing(settings.remote.batch)
            run.report = index_once(db, settings, choice, dispatcher.embed,
                                    retry_failed=retry_failed, batch=batch, **guards)
            run.vectors = VECTORS_QUEUED if dispatcher.durable else VECTORS_EMBEDDED
            run.batch_resumed = dispatcher.resume_batches(db, self.name, self.shard)
            resume = wait and rebuild_info(db) is not None  # finish one left unfinished
            if run.report.rebuild_needed or rebuild or resume:
                run.rebuild = self._rebuild(choice, dispatcher, wait=wait,
                                            reason=rebuild or "configuration changed",
                                            on_progress=on_progress)
                run.waited = wait
            elif wait and batch is not None and not settings.remote.batch.wait \
                    and batches.live_jobs(db):
                wait_for_submission(db, check=dispatcher.check)
            elif wait:
                wait_for_vectors(db, on_progress=on_progress, warn=warn, check=dispatcher.check)
                run.waited = True
            elif warn and dispatcher.consumers(embed_queue(choice.spec.name)) == 0:
                warn(f"no worker consumes {embed_queue(choice.spec.name)} yet: the jobs wait "
                     "there until one starts")
        finally:
            if not dispatcher.durable:
                self.forget_queued()
        if run.rebuild is None:  # no swap: ``db`` is the live store
            self._count_outcome(run, db, began)
            return
        live = connect(settings.store.path, want_vectors=settings.store.want_vectors)
        try:  # after a swap the live store is another file than ``db``
            self._count_outcome(run, live, began)
        finally:
            live.close()

    @staticmethod
    def _count_outcome(run: IndexRun, db: Database, began: float) -> None:
        """What the pass that began at ``began`` left in the live store ``db``."""
        run.outcome = read_outcome(db, run.provider, since=began,
                                   cached=run.report.chunks_cached, waited=run.waited)
        run.failed_chunks = run.outcome.failed

    def _rebuild(self, choice: ProviderChoice, dispatcher: Dispatcher | None, *, wait: bool,
                 reason: str, on_progress: Callable[[int, int], None] | None = None
                 ) -> RebuildProgress:
        """Build a new index beside the live one; with ``wait`` (or a dispatcher that cannot
        take the steps), drive it to the swap here, else hand its steps to the writer."""
        from pipeline.ingest.reindex import (
            RebuildProgress,
            progress_of,
            rebuild_step,
            start_rebuild,
        )

        start_rebuild(self.settings, choice, reason)
        handed_off = (not wait and dispatcher is not None
                      and dispatcher.rebuild_later(self.name, shard=self.shard))
        if handed_off:
            live = self.open_store()
            try:
                info = rebuild_info(live) if live is not None else None
            finally:
                if live is not None:
                    live.close()
            return progress_of(info, self.settings) if info else RebuildProgress("", reason, 0.0)
        while True:
            progress = rebuild_step(self.settings, choice,
                                    dispatcher.embed if dispatcher is not None else None)
            if progress is None or progress.done:
                return progress or RebuildProgress("", reason, 0.0, done=True)
            if on_progress:
                on_progress(progress.ready, progress.chunks)
            if dispatcher is not None:
                dispatcher.check()
            time.sleep(POLL_S)

    def forget_queued(self) -> None:
        """Jobs sent to a dispatcher that does not outlive this process died with it: let the
        next pass queue the pending chunks again (in the live store and a rebuild's target)."""
        paths = [self.settings.store.path]
        live = self.open_store()
        if live is None:
            return
        try:
            info = rebuild_info(live)
            if info is not None and Path(info["target"]).exists():
                paths.append(Path(info["target"]))
        finally:
            live.close()
        for path in paths:
            db = connect(path, want_vectors=self.settings.store.want_vectors)
            try:
                reads.forget_queued(db)
            finally:
                db.close()

    # -- jobs --------------------------------------------------------------------------------

    def recent_jobs(self, limit: int = 20) -> list[JobRecord]:
        """The memory's recent jobs, newest first, from this host's job log."""
        return self.jobs.recent(self.name, limit)

    def job(self, job_id: str) -> JobRecord | None:
        """One of the memory's jobs, from this host's job log."""
        return self.jobs.get(job_id)

    def job_waiting(self, job_id: str) -> bool:
        """Whether the job may still wait on the shard's ``control`` queue (a hint: False
        without a broker, or when the broker does not answer)."""
        if not self.settings.broker_url:
            return False
        from pipeline.fleet.broker import FleetDispatcher  # Celery loads only when used

        with self._lock:
            if self._fleet is None:
                self._fleet = FleetDispatcher(self.settings.broker_url)
            fleet = self._fleet
        try:
            return fleet.job_waiting(control_queue(self.shard), job_id)
        except Exception:  # a hint only: the broker may be down
            return False

    def wait_for_vectors(self, *, on_progress: Callable[[int, int], None] | None = None,
                         warn: Callable[[str], None] | None = None) -> None:
        """Block until no chunk of the store waits for a vector (none of a keyword-only
        index does). The store is opened now: a rebuild may have swapped another file in."""
        db = schema.open_store(self.settings.store.path, want_vectors=False)
        if db is None:
            return
        try:
            if schema.index_spec(db) is not None:
                wait_for_vectors(db, on_progress=on_progress, warn=warn)
        finally:
            db.close()

    def follow_job(self, job_id: str, *, on_progress: Callable[[int, int], None] | None = None,
                   warn: Callable[[str], None] | None = None,
                   unknown_after: float = UNKNOWN_JOB_AFTER_S) -> JobRecord:
        """:func:`follow_job` of this memory."""
        return follow_job(self, job_id, on_progress=on_progress, warn=warn,
                          unknown_after=unknown_after)

    # -- the end -----------------------------------------------------------------------------

    def close(self) -> None:
        """Release what this memory holds: background syncs and QMD jobs (waited for), the
        default dispatcher, built providers (a local model's memory) and in-memory copies."""
        self.refresher.wait()
        with self._lock:
            jobs, self._qmd_jobs = self._qmd_jobs, None
        if jobs is not None:
            jobs.close()
        with self._lock:
            owned, self._owned = self._owned, None
            fleet, self._fleet = self._fleet, None
            jobs = self._jobs if self._own_jobs else None
            self._jobs = None if self._own_jobs else self._jobs
        for part in (owned, fleet, jobs):
            if part is not None:
                part.close()
        if self._own_providers:
            self._providers.close()
        with self._lock:
            searched = self._search_part
        if searched is not None:
            searched.close()

    def __enter__(self) -> LocalMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()



def _names_qmd_file(backend: QmdBackend, path: str) -> bool:
    """Whether ``path`` names a QMD document: ``qmd://…``, or ``qmd/<collection>/…`` for one
    of the backend's collections (else ``qmd/`` is a workspace folder)."""
    if path.startswith("qmd://"):
        return True
    return path.startswith("qmd/") and path[4:].partition("/")[0] in {
        c.name for c in backend.collections}


class FollowedMemory(Protocol):
    """What :func:`follow_job` asks of a memory (:class:`LocalMemory`, or
    :class:`~pipeline.remote.RemoteMemory`)."""

    name: str

    @property
    def shard(self) -> int: ...

    def job(self, job_id: str) -> JobRecord | None: ...

    def job_waiting(self, job_id: str) -> bool: ...

    def wait_for_vectors(self, *, on_progress: Callable[[int, int], None] | None = None,
                         warn: Callable[[str], None] | None = None) -> object: ...


def follow_job(memory: FollowedMemory, job_id: str, *,
               on_progress: Callable[[int, int], None] | None = None,
               warn: Callable[[str], None] | None = None,
               unknown_after: float = UNKNOWN_JOB_AFTER_S, settle: bool = True) -> JobRecord:
    """Wait until job ``job_id`` of ``memory`` ended and, when it is done (and ``settle``),
    until no chunk of the memory waits for a vector. Returns the job (``state`` done or
    failed).

    Raises :class:`~pipeline.errors.UnknownJob` for a job of another memory, or when it is
    neither in a job log nor waiting on the shard's ``control`` queue after
    ``unknown_after`` seconds.
    """
    if memory_of_job(job_id) not in (None, memory.name):
        raise UnknownJob(f"job {job_id} is not a job of memory {memory.name!r}")
    started = time.monotonic()
    poll = Poll()
    while True:
        job = memory.job(job_id)
        if job is not None and not job.running:
            break
        if job is None and time.monotonic() - started > unknown_after \
                and not memory.job_waiting(job_id):
            raise UnknownJob(f"unknown job {job_id}: in no job log memory {memory.name!r} "
                             f"can read, not waiting on 'control.{memory.shard}'")
        poll.wait()
    if job.state == "done" and settle:
        memory.wait_for_vectors(on_progress=on_progress, warn=warn)
    return job
