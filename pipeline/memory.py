"""``Memory``: one agent's memory, wherever its store is.

    from pipeline import Memory

    with Memory("~/agent-workspace") as memory:
        memory.index()
        for hit in memory.search("which database did we pick?"):
            print(hit.path, hit.start_line, hit.score)
        memory.get("memory/2026-11-18.md", from_line=3, lines=2)
        memory.append("Decided: Postgres for billing.", target="longterm")

A ``Memory`` is a thin front: when it is built it asks once whether this host holds the
memory's store (:mod:`pipeline.fleet.placement`) and then hands every call to the one
implementation that fits, :class:`~pipeline.local.LocalMemory` (the store is here) or
:class:`~pipeline.remote.RemoteMemory` (it is on another host, reached through its shard).
Both answer the same calls: search, get, append, status, index, sync, jobs. ``close()`` (or
the ``with`` block) releases what the implementation holds.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.config import Settings, load_settings
from pipeline.embeddings.providers import ProviderPool
from pipeline.errors import FleetError
from pipeline.fleet.placement import store_is_here
from pipeline.local import (
    MODE_REMOTE,
    STALL_HINT_S,
    UNKNOWN_JOB_AFTER_S,
    VECTORS_EMBEDDED,
    VECTORS_NONE,
    VECTORS_QUEUED,
    IndexRun,
    LocalMemory,
    wait_for_submission,
    wait_for_vectors,
)
from pipeline.results import Appended, MemoryText, SearchResults

if TYPE_CHECKING:
    from pipeline.dispatch import Dispatcher
    from pipeline.fleet.job_log import JobLog, JobRecord
    from pipeline.qmd import QmdBackend
    from pipeline.remote import RemoteMemory

__all__ = ["MODE_REMOTE", "STALL_HINT_S", "UNKNOWN_JOB_AFTER_S", "VECTORS_EMBEDDED",
           "VECTORS_NONE", "VECTORS_QUEUED", "IndexRun", "Memory", "wait_for_submission",
           "wait_for_vectors"]


class Memory:
    """One agent's memory: its workspace, resolved settings and store.

    Build it from a workspace folder (``Memory("~/agent-workspace")``), a config file
    (``config=``: memq.toml/.json or an OpenClaw ``openclaw.json``) and the OpenClaw agent
    whose memory it is (``agent=``), or from resolved ``settings``. ``local`` says whether this
    host holds the store (default: :mod:`pipeline.fleet.placement` decides, once); ``jobs`` is
    the job log to record index passes in (default: the one of ``resultBackend``, opened on
    first use). For a store here: ``dispatcher`` is where index passes send their embedding
    work (default: the fleet's broker when ``brokerUrl`` is set, else this process),
    ``in_memory`` (default) keeps the store's vectors and BM25 statistics in memory for fast
    repeated searches (pass False for a single search), ``providers`` the embedding providers
    to use (default: its own, closed with it).
    """

    def __init__(self, workspace: str | os.PathLike[str] | None = None, *,
                 config: str | os.PathLike[str] | None = None, agent: str | None = None,
                 settings: Settings | None = None, dispatcher: Dispatcher | None = None,
                 in_memory: bool = True, local: bool | None = None,
                 jobs: JobLog | None = None, providers: ProviderPool | None = None) -> None:
        if settings is None:
            settings = load_settings(config_file=config, workspace=workspace, agent=agent)
        self.settings = settings
        here = local if local is not None else store_is_here(settings)
        self._impl: LocalMemory | RemoteMemory
        if here:
            self._impl = LocalMemory(settings, dispatcher=dispatcher, in_memory=in_memory,
                                     jobs=jobs, providers=providers)
        else:
            from pipeline.remote import RemoteMemory  # Celery loads only when used

            self._impl = RemoteMemory(settings, jobs=jobs)

    @property
    def name(self) -> str:
        """The memory's name (its OpenClaw agent id; ``main`` by default)."""
        return self.settings.agent_id

    @property
    def shard(self) -> int:
        """The fleet's writer shard this memory belongs to (``store.<shard>``)."""
        return self.settings.fleet.shard_of(self.name)

    @property
    def workspace(self) -> Path:
        return self.settings.workspace

    @property
    def here(self) -> bool:
        """Whether this host holds the memory's store (decided when the memory was built): if
        not, reads go to its shard's reader and writes become jobs for its shard, and no store
        is created here."""
        return isinstance(self._impl, LocalMemory)

    @property
    def local(self) -> LocalMemory:
        """The memory as its store's host sees it; FleetError when the store is elsewhere."""
        if not isinstance(self._impl, LocalMemory):
            raise FleetError(f"the store of memory {self.name!r} is on shard {self.shard}'s "
                             "host, not here")
        return self._impl

    @property
    def remote(self) -> RemoteMemory:
        """The memory as reached through its shard; FleetError when the store is here."""
        if isinstance(self._impl, LocalMemory):
            raise FleetError(f"the store of memory {self.name!r} is here")
        return self._impl

    @property
    def jobs(self) -> JobLog:
        """This host's job log (``resultBackend``): the index passes run here are recorded
        there, and with a shared database every host's; when the store is here, the jobs of
        this store only (:class:`~pipeline.fleet.job_log.JobLog`'s ``store``)."""
        return self._impl.jobs

    def __repr__(self) -> str:
        return f"Memory({self.name!r}, workspace={str(self.workspace)!r})"

    # -- reading -----------------------------------------------------------------------------

    def search(self, query: str, *, max_results: int | None = None,
               min_score: float | None = None, sync: bool | None = None,
               citations: str | None = None, corpus: str | None = None,
               projects: Sequence[str] | None = None) -> SearchResults:
        """Search the memory by meaning and keywords; the hits, best first.

        Never raises for the content of ``query``: any text gives results or none. With
        ``backend: "qmd"`` the ``qmd`` CLI answers (``backend == "qmd"``); when it cannot (no
        executable, a non-zero exit, a timeout, bad output, not set up yet) memq's own index
        answers instead, with ``backend == "builtin"`` and ``fallback`` saying why.
        ``max_results`` and ``min_score`` default to ``query.maxResults`` (6) and
        ``query.minScore`` (0.35). ``sync`` (default ``sync.onSearch``) first brings changed
        files' text up to date (their vectors follow with the next index pass); a long-running
        server passes False and calls :meth:`sync_in_background` instead. ``citations`` (auto,
        on, off; default: the ``citations`` setting) adds a ``Source: path#Ls-Le`` line to each
        snippet. A store that cannot be opened gives ``mode == "unavailable"`` and the reason.
        ``corpus`` (``memory``, ``sessions``, ``all``, ``wiki``: OpenClaw's ``memory_search``
        argument) narrows the sources read (:mod:`pipeline.search.corpus`); any other value
        raises RequestRefused. With ``rerank.enabled`` a cross-encoder re-orders the best
        candidates, and ``rerank`` says what it did or why the fused order stands
        (:mod:`pipeline.search.rerank`). ``projects``: the active project keys (OpenClaw's
        ``activeProjectKeys``, which its gateway takes from the session's repository): entries
        annotated ``<!-- project: … -->`` with only active keys score ×1.15, other annotated
        entries ×0.9 (:mod:`pipeline.search.entries`; memq's own index only).
        """
        return self._impl.search(query, max_results=max_results, min_score=min_score,
                                 sync=sync, citations=citations, corpus=corpus,
                                 projects=projects)

    def get(self, path: str, from_line: int | None = None, lines: int | None = None
            ) -> MemoryText:
        """Read lines of a memory file (OpenClaw's ``memory_get``), only inside the memory files.

        As OpenClaw 2026.9.6: ``from_line`` is 1-based (default 1), ``lines`` how many (default
        120); the text stops at whole lines within 12,000 characters, and a cut text ends with
        a continuation notice (``truncated``, ``next_from``: where to continue). A file that
        does not exist yet (but could) gives ``status == "not_found"`` and empty text;
        anything outside the memory files, a symlink, a non-``.md`` path or a session hit
        (``sessions/...``) raises :class:`~pipeline.errors.MemoryPathError`
        (:meth:`~pipeline.results.MemoryText.refused` gives OpenClaw's ``status: "error"``
        answer for it). With ``backend: "qmd"``, QMD hits open too:
        ``qmd://<collection>/<path>`` (or OpenClaw's ``qmd/<collection>/<path>``) from the
        collection's folder, and workspace files a collection covers.
        """
        return self._impl.get(path, from_line, lines)

    def stale_files(self) -> list[str]:
        """Memory files the index does not reflect yet (all of them when nothing is indexed):
        a stat-only check, cheap enough before every search (asked of the shard's reader when
        the store is on another host)."""
        return self._impl.stale_files()

    def status(self) -> dict[str, Any]:
        """What is indexed, pending and failed, with which provider and why, the rebuild under
        way, recent index jobs and provider batch jobs (``memq status --json``'s index part); with
        ``backend: "qmd"``, ``backend`` says so and ``qmd`` holds the QMD backend's status.
        For a memory whose store is on another host, its shard's reader answers
        (``servedBy`` names it)."""
        return self._impl.status()

    # -- writing -----------------------------------------------------------------------------

    def append(self, text: str, target: str = "daily") -> Appended:
        """Remember ``text``: append it to today's ``memory/YYYY-MM-DD.md`` (``daily``) or to
        ``MEMORY.md`` (``longterm``), then index it before returning.

        Raises :class:`~pipeline.errors.AppendError` or
        :class:`~pipeline.errors.MemoryPathError` (nothing written) for a refused note or
        target. Once the note is on disk, a failure to index it is reported in ``warning``,
        never raised: a caller that retried would write the note twice.
        """
        return self._impl.append(text, target)

    def index(self, *, wait: bool = True, retry_failed: bool = False,
              rebuild: str | None = None, on_progress: Callable[[int, int], None] | None = None,
              warn: Callable[[str], None] | None = None, allow_deletions: bool = False,
              files_here: bool = False, **pass_: Any) -> IndexRun:
        """One index pass: bring the store in line with the files and embed what is new.

        ``wait`` returns only when every vector is written (else once the work is sent).
        ``retry_failed`` queues failed chunks again. ``rebuild`` names a reason to build a new
        index beside the live one and swap it in when complete (``memq reindex``); a
        configuration whose fingerprint no longer matches the store's does the same.
        ``on_progress(done, total)`` follows the vectors; ``warn`` gets hints for a person.
        A pass never empties a memory by an accident of the host (``allow_deletions``,
        ``files_here``: :meth:`pipeline.local.LocalMemory.index`). What else a pass on the
        store's host takes (``choice``, ``job_id``, ``origin``, ``host``, ``job_request``) is
        passed on to it.

        For a memory whose store is on another host (:attr:`here`), the pass is a job for the
        shard's writer host (``mode == "remote"``), followed to the end with ``wait``.
        """
        return self._impl.index(wait=wait, retry_failed=retry_failed, rebuild=rebuild,
                                on_progress=on_progress, warn=warn,
                                allow_deletions=allow_deletions, files_here=files_here,
                                **pass_)

    def reindex(self, *, wait: bool = True, on_progress: Callable[[int, int], None] | None = None,
                warn: Callable[[str], None] | None = None) -> IndexRun:
        """Build a new index beside the live one (searches keep using the live one) and swap
        it in when complete: :meth:`index` with ``rebuild="memq reindex"``."""
        return self._impl.reindex(wait=wait, on_progress=on_progress, warn=warn)

    def sync(self) -> IndexRun:
        """Bring the index in line with the files under its own provider and model (never a
        switch, which would drop every vector): new text is keyword-searchable at once, its
        vectors embedded here or queued to the fleet (``run.vectors`` says which). For a
        memory whose store is on another host, an index job for its shard."""
        return self._impl.sync()

    def sync_in_background(self) -> None:
        """Start :meth:`sync` on a thread unless one runs (which then runs once more); nothing
        while the memory is disabled."""
        if self.settings.enabled:
            self._impl.refresher.trigger()

    @property
    def syncing(self) -> bool:
        """A background sync is running."""
        return self._impl.refresher.running

    @property
    def sync_error(self) -> str | None:
        """Why the last sync failed (None after a good one)."""
        return self._impl.refresher.last_error

    def forget_queued(self) -> None:
        """:meth:`pipeline.local.LocalMemory.forget_queued` (the store must be here)."""
        self.local.forget_queued()

    # -- jobs --------------------------------------------------------------------------------

    def recent_jobs(self, limit: int = 20) -> list[JobRecord]:
        """The memory's recent jobs, newest first: from this host's job log when the store
        is here, else from the job log of its shard's host (through its reader)."""
        return self._impl.recent_jobs(limit)

    def job(self, job_id: str) -> JobRecord | None:
        """One of the memory's jobs: from this host's job log, else its shard's."""
        return self._impl.job(job_id)

    def follow_job(self, job_id: str, *, on_progress: Callable[[int, int], None] | None = None,
                   warn: Callable[[str], None] | None = None,
                   unknown_after: float = UNKNOWN_JOB_AFTER_S) -> JobRecord:
        """Wait until job ``job_id`` of this memory ended and, when it is done, until no
        chunk of the memory waits for a vector. Returns the job (``state`` done or failed).

        Raises :class:`~pipeline.errors.UnknownJob` for a job of another memory, or when it
        is neither in a job log nor waiting on the shard's ``control`` queue after
        ``unknown_after`` seconds.
        """
        return self._impl.follow_job(job_id, on_progress=on_progress, warn=warn,
                                     unknown_after=unknown_after)

    # -- the QMD backend (a store here only) -------------------------------------------------

    @property
    def qmd(self) -> QmdBackend | None:
        """The QMD backend (``backend: "qmd"``), built on first use; None for ``builtin``, or
        when the store is on another host (its host runs QMD)."""
        return self._impl.qmd if isinstance(self._impl, LocalMemory) else None

    def qmd_job(self, reason: str) -> None:
        """:meth:`pipeline.local.LocalMemory.qmd_job` (nothing when the store is elsewhere)."""
        if isinstance(self._impl, LocalMemory):
            self._impl.qmd_job(reason)

    def wait_for_qmd_jobs(self, timeout: float | None = None) -> None:
        """Wait for the QMD job this process runs in the background, if any."""
        if isinstance(self._impl, LocalMemory):
            self._impl.wait_for_qmd_jobs(timeout)

    # -- the end -----------------------------------------------------------------------------

    def close(self) -> None:
        """Release what this memory holds: background syncs and QMD jobs (waited for), the
        default dispatcher, built providers (a local model's memory), in-memory copies and
        connections."""
        self._impl.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
