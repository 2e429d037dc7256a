"""The job log: every index pass, rebuild and QMD update job, in Celery's own result backend.

A job is recorded in Celery's database result backend (SQLAlchemy): one row per job in table
``memq_jobs`` (Celery's ``TaskExtended`` model under memq's name), written through Celery's
``DatabaseBackend`` so that Flower and ``AsyncResult`` read it as any Celery result. The
default database is a SQLite file in this host's data dir (``db+sqlite:///…/jobs.sqlite``);
a fleet on many hosts points every host at one PostgreSQL database
(``db+postgresql+psycopg://…``) and then any host lists and follows any job.

A job's id is ``<memory>:<hex>``: the memory it belongs to is part of its name, so the jobs of
one memory are one indexed range of ``task_id`` (a memory's listing never shows another
memory's jobs). Its row moves through ``STARTED``, ``PROGRESS`` (counts so far) and ends in
``SUCCESS`` (the pass's counts) or ``FAILURE`` (the error); each state's meta carries the
memory, where the job came from (``origin``), the host that ran it, when it started and
the memory's store (``store``: its path on the host that ran the job).
Finished rows older than ``fleet.jobsKeepDays`` are deleted by :meth:`JobLog.expire`, which
the writers and index passes call at most once an hour.

Two memories of one name (two workspaces on one host, each memory ``main`` by default) share
the job ids' prefix: a job log opened for one memory's store (``JobLog(url, store=path)``)
records that path with every job and lists, counts and finds only the jobs of that store (and
rows that name no store: those of an older memq, and a job a writer refused before it knew
the memory's store). A job log opened without a store sees every row.

Reading is one query (:meth:`JobLog.recent`): with ``sqlite3`` on a SQLite file
(:class:`~pipeline.fleet.sqlite_results.SqliteResults`), with SQLAlchemy Core on another
database; the stored results are JSON (Celery's json result serializer), never pickles.

A job log opened ``lean`` (a single-host index pass with no broker: ``memq index`` here)
on a SQLite file also writes without Celery: :class:`~pipeline.fleet.sqlite_results.SqliteResults`
stores the rows Celery's backend would, in its tables, so Celery, Flower and ``memq jobs``
read them alike (and Celery's backend goes on writing them). Otherwise rows are written through
Celery's ``DatabaseBackend``.

SQLAlchemy and Celery's database backend load when a job log is first written through Celery
(or read from another database than SQLite), not when this module is imported: a worker whose
tasks record no job (an embed worker, a writer waiting for work) never loads them (about
18 MiB a process), nor does a single-host ``memq index``. The workers' Celery app has the job
log as its result backend through :class:`JobLogBackend`, built when first used.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, timedelta
from functools import cache, cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import unquote

from pipeline.config import redact_url
from pipeline.errors import JobFailed, JobLogError
from pipeline.fleet.sqlite_results import SqliteResults
from pipeline.routing import describe, memory_of_job
from pipeline.store.engine import tune_connection

if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy.engine import Engine

log = logging.getLogger(__name__)

#: Celery's result tables, under memq's own names.
TABLES = {"task": "memq_jobs", "group": "memq_job_groups"}
INDEX_JOB = "memq.index_memory"
#: Celery states of a job still under way, and what memq calls each state.
RUNNING_STATES = ("PENDING", "RECEIVED", "STARTED", "PROGRESS", "RETRY")
STATE_WORDS = {"PENDING": "queued", "RECEIVED": "queued", "STARTED": "running",
               "PROGRESS": "running", "RETRY": "running", "SUCCESS": "done",
               "FAILURE": "failed", "REVOKED": "revoked"}
#: The counts of an index pass, kept at the top of a job's dict (``IndexReport.counts``).
COUNTS = ("files", "changed", "deleted", "chunks_queued", "chunks_cached", "embed_jobs")
EXPIRE_EVERY_S = 3600.0
PROGRESS_EVERY_S = 1.0
SQLITE_BUSY_MS = 30_000
#: How many closed job logs' databases keep a pooled connection (see PooledSessions.release).
IDLE_DATABASES = 4


def tune_engine(engine: Engine) -> None:
    """Celery's ``database_engine_callback``: on SQLite, WAL and a long busy timeout, so the
    writers, index passes and readers of one host (or of several on one machine) take turns
    instead of failing with "database is locked"."""
    if engine.dialect.name != "sqlite":
        return
    import sqlalchemy as sa

    @sa.event.listens_for(engine, "connect")
    def _pragmas(connection: Any, _record: Any) -> None:
        tune_connection(connection, SQLITE_BUSY_MS)


class PooledSessions:
    """Celery's session manager (:func:`pooled_sessions`: this class on Celery's
    ``SessionManager``, put together when first used), with one engine per database per
    process, shared by every job log of the process (SQLAlchemy's advice: an engine is a
    long-lived fixture, with its pool and its compiled statements). Celery's own keeps
    engines only in a forked pool child; anywhere else it builds an engine, a connection and
    every statement anew for each result stored (about 25 ms a write on SQLite: most of what
    a new memory's first index pass cost its caller). An engine made before a fork is never
    used after it: the child builds its own."""

    _engines_by_process: ClassVar[dict[tuple[int, str], Engine]] = {}
    _prepared_engines: ClassVar[set[Engine]] = set()
    _idle: ClassVar[dict[tuple[int, str], None]] = {}  # released databases, oldest first
    _shared_lock = threading.Lock()

    engine_callback: Callable[[Engine], None] | None

    def __init__(self, engine_callback: Any = None) -> None:
        super().__init__(engine_callback=engine_callback)  # type: ignore[call-arg]
        self.forked = True  # Celery's switch for "keep engines and sessions"

    def get_engine(self, dburi: str, **kwargs: Any) -> Engine:
        key = (os.getpid(), dburi)
        with self._shared_lock:
            self._idle.pop(key, None)
            engine = self._engines_by_process.get(key)
            if engine is None:
                import sqlalchemy as sa

                engine = self._engines_by_process[key] = sa.create_engine(dburi, **kwargs)
                if self.engine_callback is not None:
                    self.engine_callback(engine)
            return engine

    def prepare_models(self, engine: Engine) -> None:
        """Celery's tables, made (or checked) once per engine, not once per job log."""
        with self._shared_lock:
            self.prepared = engine in self._prepared_engines
        super().prepare_models(engine)  # type: ignore[misc]
        with self._shared_lock:
            self._prepared_engines.add(engine)

    def release(self, dburi: str) -> None:
        """A job log of ``dburi`` was closed. Its pooled connection is kept for the next job
        log of the same database (a loop over many memories opens one per memory: closing
        the last connection to a SQLite file checkpoints it, and the next one opens, tunes
        and recompiles again); only the :data:`IDLE_DATABASES` most recently released
        databases keep theirs, the rest are closed. The engine stays usable and connects
        again when next used."""
        key = (os.getpid(), dburi)
        with self._shared_lock:
            self._idle.pop(key, None)
            self._idle[key] = None
            evicted = list(self._idle)[:-IDLE_DATABASES] if len(self._idle) > IDLE_DATABASES \
                else []
            engines = []
            for old in evicted:
                del self._idle[old]
                if (engine := self._engines_by_process.get(old)) is not None:
                    engines.append(engine)
        for engine in engines:
            engine.dispose()


@cache
def _pooled_sessions_class() -> type:
    from celery.backends.database.session import SessionManager

    return type("PooledSessions", (PooledSessions, SessionManager), {})


def pooled_sessions(engine_callback: Callable[[Engine], None] | None = None) -> Any:
    """A :class:`PooledSessions` session manager (imports Celery's database backend and
    SQLAlchemy)."""
    return _pooled_sessions_class()(engine_callback=engine_callback)


def celery_backend_settings(url: str, keep_days: int) -> dict[str, Any]:
    """The result-backend part of a memq Celery app's configuration: Celery's database
    backend on ``url``, extended results (task name, arguments, worker, queue), memq's table
    names, rows kept ``keep_days`` days."""
    return {"result_backend": url, "result_extended": True,
            "result_expires": timedelta(days=keep_days),
            "database_table_names": dict(TABLES),
            "database_engine_callback": "pipeline.fleet.job_log.tune_engine",
            # made by the first job recorded, not at every worker's start (an embed worker
            # never records one, and a database that is down must not stop it)
            "database_create_tables_at_setup": False}


class JobLogBackend:
    """The result backend of memq's workers' Celery app (its ``backend_cls``): Celery's
    backend of the app's ``result_backend`` (the job log's database backend), built when a
    result is first stored or read, not when the worker starts. Every memq task ignores its
    result, so an idle worker never builds it (nor imports SQLAlchemy for it); Celery's worker
    banner asks only :meth:`as_uri`, and its tracer :meth:`process_cleanup` after each task.
    Anything else is the built backend's (Flower reads the jobs' outcomes through it)."""

    def __init__(self, app: Any, url: str | None = None, **kwargs: Any) -> None:
        self.app = app
        self.url = url or str(app.conf.result_backend or "")
        # as Celery's backends: one per thread unless the configuration says it is safe
        self.thread_safe = bool(app.conf.get("result_backend_thread_safe", False))
        self._kwargs = kwargs
        self._built: Any = None
        # re-entrant: building imports SQLAlchemy, and a garbage collection inside that import
        # can run a dead AsyncResult's __del__, which asks this backend again on this thread
        self._build_lock = threading.RLock()

    def as_uri(self, include_password: bool = False) -> str:
        """What the built backend's ``as_uri`` says: its URL (``db+`` taken off, as Celery
        does), the password masked unless ``include_password``."""
        scheme = self.url.partition("://")[0]
        url = self.url.split("+", 1)[1] if "+" in scheme else self.url
        if include_password:
            return url
        from kombu.utils.url import maybe_sanitize_url

        sanitized = maybe_sanitize_url(url)
        return sanitized[:-1] if sanitized.endswith(":///") else sanitized

    def process_cleanup(self) -> None:
        """After each task: the built backend's cleanup, nothing when none was built."""
        if self._built is not None:
            self._built.process_cleanup()

    @property
    def built(self) -> Any:
        """The Celery backend of the app's ``result_backend``, built on first use."""
        with self._build_lock:
            if self._built is None:
                from celery.app.backends import by_url

                cls, url = by_url(self.url, self.app.loader)
                built = cls(app=self.app, url=url, **self._kwargs)
                if self._built is None:  # else a finaliser run during the build built it
                    self._built = built
            return self._built

    def remove_pending_result(self, result: Any) -> Any:
        """What ``AsyncResult.__del__`` calls: nothing can be pending on a backend not built
        yet (and building one from a finaliser, in the middle of an import, is never wanted)."""
        if self._built is None:
            return result
        return self._built.remove_pending_result(result)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_built", "_build_lock", "_kwargs"):
            raise AttributeError(name)
        return getattr(self.built, name)


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite job log URL (``db+sqlite:///<path>``) as SQLAlchemy opens it, for
    ``sqlite3``; None for another database, an in-memory one, another driver or a URL with
    options (those are SQLAlchemy's to read)."""
    scheme, sep, tail = url.removeprefix("db+").partition("://")
    if not sep or scheme not in ("sqlite", "sqlite+pysqlite") or not tail.startswith("/") \
            or "?" in tail:
        return None
    database = unquote(tail[1:])
    return Path(database) if database and database != ":memory:" else None


def _jobs_table(metadata: sa.MetaData) -> sa.Table:
    """The columns of Celery's ``TaskExtended`` table that memq reads."""
    import sqlalchemy as sa

    return sa.Table(TABLES["task"], metadata,
                    sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("task_id", sa.String(155)),
                    sa.Column("status", sa.String(50)),
                    sa.Column("result", sa.LargeBinary),
                    sa.Column("date_done", sa.DateTime),
                    sa.Column("traceback", sa.Text),
                    sa.Column("name", sa.String(155)),
                    sa.Column("worker", sa.String(155)),
                    sa.Column("queue", sa.String(155)))


@dataclass
class JobRecord:
    """One job as the log holds it: ``state`` in memq's words (queued, running, done, failed,
    revoked) beside Celery's (``celery_state``), the counts and facts of its meta."""

    id: str
    memory: str | None
    state: str
    celery_state: str
    origin: str | None = None
    host: str | None = None
    store: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.celery_state in RUNNING_STATES

    #: The job log's snake_case names of a job's facts and the camelCase keys of its JSON
    #: (``docs/json.md``); the log itself keeps its names.
    JSON_NAMES: ClassVar[dict[str, str]] = {
        "chunks_queued": "chunksQueued", "chunks_cached": "chunksFromCache",
        "embed_jobs": "embedJobs", "vectors_done": "vectorsDone", "vectors_total": "vectorsTotal"}

    def to_dict(self) -> dict[str, Any]:
        """The job as ``memq jobs --json`` shows it, in camelCase: its counts at the top level
        (``files``, ``changed``, ``chunksQueued``…), what else its result holds under
        ``result`` (the job log's own names turned into :data:`JSON_NAMES`)."""
        counts = {self.JSON_NAMES.get(name, name): self.result.get(name) for name in COUNTS}
        rest = {self.JSON_NAMES.get(k, k): v for k, v in self.result.items() if k not in COUNTS}
        return {"id": self.id, "memory": self.memory, "kind": self.origin,
                "state": self.state, "celeryState": self.celery_state, "host": self.host,
                "store": self.store, "startedAt": self.started_at, "finishedAt": self.finished_at,
                "error": self.error, **counts, "result": rest}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobRecord:
        """The inverse of :meth:`to_dict` (a job read on another host)."""
        logged = {key: name for name, key in cls.JSON_NAMES.items()}
        result = {logged.get(k, k): v for k, v in (data.get("result") or {}).items()}
        result.update({name: data[key] for name in COUNTS
                       if data.get(key := cls.JSON_NAMES.get(name, name)) is not None})
        return cls(id=data["id"], memory=data.get("memory"), state=data["state"],
                   celery_state=data.get("celeryState") or "PENDING", origin=data.get("kind"),
                   host=data.get("host"), store=data.get("store"),
                   started_at=data.get("startedAt"),
                   finished_at=data.get("finishedAt"), error=data.get("error"), result=result)


def _record(row: Any) -> JobRecord:
    meta: Any = None
    if row.result:
        try:
            meta = json.loads(row.result)
        except ValueError:
            meta = None
    meta = meta if isinstance(meta, dict) else {}
    state = row.status or "PENDING"
    error = None
    if state == "FAILURE":
        message = meta.get("exc_message")
        args = list(message) if isinstance(message, list | tuple) else [message]
        if meta.get("exc_type") == JobFailed.__name__ and args:
            error, meta = str(args[0]), args[1] if len(args) > 1 and isinstance(args[1],
                                                                                 dict) else {}
        else:  # an exception Celery stored for a task memq did not record itself
            error = f"{meta.get('exc_type', 'error')}: {' '.join(map(str, args))}"
            meta = {}
    finished = meta.get("finishedAt")
    if finished is None and row.date_done is not None and state not in RUNNING_STATES:
        done = row.date_done  # Celery writes UTC; SQLite gives it back without its zone
        finished = (done if done.tzinfo else done.replace(tzinfo=UTC)).timestamp()
    return JobRecord(id=row.task_id, memory=meta.get("memory") or memory_of_job(row.task_id),
                     state=STATE_WORDS.get(state, state.lower()), celery_state=state,
                     origin=meta.get("origin"), host=meta.get("host") or row.worker,
                     store=meta.get("store"), started_at=meta.get("startedAt"),
                     finished_at=finished, error=error,
                     result={k: v for k, v in meta.items()
                             if k not in ("memory", "origin", "host", "store", "startedAt",
                                          "finishedAt")})


class JobLog:
    """The job log at ``url`` (a Celery database result backend URL): writes through Celery's
    own ``DatabaseBackend`` (or, ``lean`` on a SQLite file, the same rows with ``sqlite3``:
    :class:`~pipeline.fleet.sqlite_results.SqliteResults`), reads with one query (``sqlite3``
    on a SQLite file, SQLAlchemy Core elsewhere). With ``store`` (a memory's store path), the
    log of that store only: every state written names it, and reads skip the rows of another
    store. Thread-safe; ``close()`` releases its connections."""

    _backends: ClassVar[dict[tuple[int, str, int], Any]] = {}  # (pid, url, keep_days)
    _backends_lock = threading.Lock()

    def __init__(self, url: str, *, keep_days: int = 7,
                 store: str | os.PathLike[str] | None = None, lean: bool = False) -> None:
        self.url = url
        self.keep_days = keep_days
        self.store = store_key(store) if store is not None else None
        self._file = sqlite_path(url)
        #: Rows written with ``sqlite3`` (a SQLite file, ``lean`` asked), not through Celery.
        self.lean = lean and self._file is not None
        self._results = None if self._file is None else SqliteResults(
            self._file, task_table=TABLES["task"], group_table=TABLES["group"],
            keep_days=keep_days, busy_ms=SQLITE_BUSY_MS)
        self._lock = threading.Lock()
        self._backend: Any = None
        self._engine: Engine | None = None
        self._last_expiry = 0.0
        self._last_progress: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"JobLog({redact_url(self.url)!r})"

    @cached_property
    def _table(self) -> sa.Table:
        import sqlalchemy as sa

        return _jobs_table(sa.MetaData())

    # -- writing (Celery's backend) ----------------------------------------------------------

    @property
    def backend(self) -> Any:
        """Celery's ``DatabaseBackend`` on this log (an app that never touches a broker),
        shared by every job log of the same database in this process."""
        with self._lock:
            if self._backend is None:
                path = self._sqlite_file()
                if path is not None:  # SQLite makes the file, not its folder
                    path.parent.mkdir(parents=True, exist_ok=True)
                self._backend = self._shared_backend(self.url, self.keep_days)
            return self._backend

    @classmethod
    def _shared_backend(cls, url: str, keep_days: int) -> Any:
        """The Celery ``DatabaseBackend`` of ``url`` for this process (a forked child makes
        its own): building a Celery app and its backend costs more than the row a new
        memory's index pass records."""
        key = (os.getpid(), url, keep_days)
        with cls._backends_lock:
            backend = cls._backends.get(key)
            if backend is None:
                from celery import Celery

                app = Celery("memq-jobs", set_as_current=False)
                app.conf.update(celery_backend_settings(url, keep_days),
                                result_serializer="json", accept_content=["json"])
                backend = cls._backends[key] = app.backend
                backend.session_manager = pooled_sessions(engine_callback=tune_engine)
            return backend

    def _sqlalchemy_url(self) -> str:
        return self.url.removeprefix("db+")

    def _sqlite_file(self) -> Path | None:
        """The database file of a SQLite job log (None for another database)."""
        if self._file is not None:
            return self._file
        import sqlalchemy as sa

        url = sa.engine.make_url(self._sqlalchemy_url())
        if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
            return None
        return Path(url.database)

    def _scoped(self, meta: dict[str, Any]) -> dict[str, Any]:
        """``meta`` naming this log's store (unless it names one already, or the log has
        none)."""
        if self.store is None or "store" in meta:
            return meta
        return {**meta, "store": self.store}

    def _store(self, job_id: str, state: str, meta: Any, request: Any) -> None:
        if isinstance(meta, dict):
            meta = self._scoped(meta)
        try:
            if self._results is not None and self.lean:
                self._results.store_result(job_id, meta, state, request=_described(request))
            else:
                self.backend.store_result(job_id, meta, state, request=_described(request))
        except Exception as exc:  # a job log that cannot be written must not fail the job
            log.warning("job %s: could not record %s in the job log %s: %s", job_id, state,
                        redact_url(self.url), _without_url(exc, self.url))

    def started(self, job_id: str, *, memory: str, origin: str, host: str | None = None,
                started_at: float | None = None, request: Any = None,
                task: str = INDEX_JOB) -> dict[str, Any]:
        """Record ``job_id`` as started; returns the meta its later states repeat.

        ``request`` is the Celery task request when a worker runs the job (its extended
        fields, worker and queue, go with the row); a job run in this process passes none.
        """
        meta = self._scoped({"memory": memory, "origin": origin,
                             "host": host or socket.gethostname(),
                             "startedAt": started_at or time.time()})
        self._store(job_id, "STARTED", meta, request or _local_request(task, meta["host"]))
        return meta

    def progress(self, job_id: str, meta: dict[str, Any], request: Any = None, *,
                 force: bool = False) -> None:
        """Record the job's progress (at most once a second unless ``force``)."""
        now = time.monotonic()
        if not force and now - self._last_progress.get(job_id, 0.0) < PROGRESS_EVERY_S:
            return
        self._last_progress[job_id] = now
        self._store(job_id, "PROGRESS", meta, request or _local_request(INDEX_JOB,
                                                                          meta.get("host")))

    def finished(self, job_id: str, meta: dict[str, Any], request: Any = None) -> None:
        """Record the job done, with its result (``meta`` plus counts)."""
        self._last_progress.pop(job_id, None)
        self._store(job_id, "SUCCESS", {**meta, "finishedAt": time.time()},
                    request or _local_request(INDEX_JOB, meta.get("host")))
        self.expire_now_and_then()

    def failed(self, job_id: str, error: str, meta: dict[str, Any] | None = None,
               request: Any = None) -> None:
        """Record the job failed with ``error`` (a message for a person); ``meta`` is what
        :meth:`started` returned."""
        self._last_progress.pop(job_id, None)
        meta = self._scoped({"finishedAt": time.time(), **(meta or {})})
        described = _described(request or _local_request(INDEX_JOB, meta.get("host")))
        try:
            if self._results is not None and self.lean:
                self._results.mark_as_failure(job_id, JobFailed(error, meta), request=described)
            else:
                self.backend.mark_as_failure(job_id, JobFailed(error, meta), request=described)
        except Exception as exc:
            log.warning("job %s: could not record its failure in the job log %s: %s", job_id,
                        redact_url(self.url), _without_url(exc, self.url))

    def import_rows(self, memory: str, rows: list[dict[str, Any]]) -> int:
        """Record the rows of memq's old job log (:mod:`pipeline.store.joblog`) of
        ``memory``, with their own times; how many."""
        for row in rows:
            job_id = f"{memory}:{row['id']}"
            meta = {"memory": memory, "origin": row.get("kind"), "host": row.get("host"),
                    "startedAt": row.get("started_at")}
            if row.get("state") == "done":
                counts = {name: row.get(name) for name in COUNTS if row.get(name) is not None}
                self._store(job_id, "SUCCESS", {**meta, **counts,
                                                "finishedAt": row.get("finished_at")},
                            _local_request(INDEX_JOB, row.get("host")))
            else:
                ended = {"finishedAt": row["finished_at"]} if row.get("finished_at") else {}
                self.failed(job_id, row.get("error") or "interrupted: still running when "
                            "memq's job log moved to the result backend", {**meta, **ended})
        return len(rows)

    def expire_now_and_then(self) -> None:
        """Delete finished jobs older than ``keep_days`` (Celery's backend cleanup), at most
        once an hour per process."""
        if time.monotonic() - self._last_expiry < EXPIRE_EVERY_S:
            return
        self._last_expiry = time.monotonic()
        self.expire()

    def expire(self) -> None:
        """Delete finished jobs older than ``keep_days`` now."""
        try:
            if self._results is not None and self.lean:
                self._results.cleanup()
            else:
                self.backend.cleanup()
        except Exception as exc:
            log.warning("could not expire old jobs in %s: %s", redact_url(self.url),
                        _without_url(exc, self.url))

    # -- reading (sqlite3 on a SQLite file, SQLAlchemy Core elsewhere) ------------------------

    def _engine_for_reads(self) -> Engine:
        with self._lock:
            if self._engine is None:
                import sqlalchemy as sa

                engine = sa.create_engine(self._sqlalchemy_url(), poolclass=sa.pool.NullPool)
                tune_engine(engine)
                self._engine = engine
            return self._engine

    def recent(self, memory: str | None = None, limit: int = 20) -> list[JobRecord]:
        """The newest ``limit`` jobs (of ``memory``, else of every memory; of this log's
        store when it has one), newest first."""
        return self._newest({} if memory is None else {"prefix": f"{memory}:"}, limit)

    def get(self, job_id: str) -> JobRecord | None:
        """One job, or None when the log has no row of it (or, with a store, when the row is
        another store's job)."""
        rows = self._rows(task_id=job_id)
        return rows[0] if rows and self._mine(rows[0]) else None

    def running_on(self, queue: str) -> list[JobRecord]:
        """The jobs a worker of ``queue`` started and never ended (of every store)."""
        return self._rows(queue=queue, statuses=RUNNING_STATES)

    def last_error(self, memory: str) -> JobRecord | None:
        """The most recent failed job of ``memory`` (of this log's store when it has one)."""
        rows = self._newest({"prefix": f"{memory}:", "statuses": ("FAILURE",)}, 1)
        return rows[0] if rows else None

    def _mine(self, job: JobRecord) -> bool:
        """Whether ``job`` belongs to this log's store (every job does when it has none; a
        row that names no store belongs to every store)."""
        return self.store is None or job.store is None or job.store == self.store

    def _newest(self, where: dict[str, Any], limit: int) -> list[JobRecord]:
        """The newest ``limit`` rows matching ``where`` that are :meth:`_mine`, newest first
        (read a page at a time: the store is inside each row's JSON, not a column)."""
        page = limit if self.store is None else max(4 * limit, 50)
        out: list[JobRecord] = []
        before: int | None = None
        while len(out) < limit:
            rows = self._fetch(**where, before_id=before, limit=page, newest_first=True)
            out += [job for job in map(_record, rows) if self._mine(job)]
            if len(rows) < page:
                break
            before = rows[-1].id
        return out[:limit]

    def _rows(self, **where: Any) -> list[JobRecord]:
        return [_record(row) for row in self._fetch(**where)]

    def _fetch(self, **where: Any) -> list[Any]:
        """The rows matching ``where`` (the filters of
        :func:`pipeline.store.result_tables.select_rows`)."""
        if self._results is not None:
            try:
                return self._results.rows(**where)
            except (OSError, sqlite3.Error) as exc:  # a folder this user cannot enter…
                raise JobLogError(f"cannot read the job log {redact_url(self.url)}: {exc}"
                                  ) from None
        return self._fetch_sqlalchemy(**where)

    def _fetch_sqlalchemy(self, *, task_id: str | None = None, prefix: str | None = None,
                          statuses: tuple[str, ...] | None = None, queue: str | None = None,
                          before_id: int | None = None, limit: int | None = None,
                          newest_first: bool = False) -> list[Any]:
        """:meth:`_fetch` with SQLAlchemy Core (a database that is not a SQLite file)."""
        import sqlalchemy as sa

        table = self._table
        query = sa.select(table)
        if task_id is not None:
            query = query.where(table.c.task_id == task_id)
        if prefix is not None:
            query = query.where(table.c.task_id.startswith(prefix, autoescape=True))
        if statuses is not None:
            query = query.where(table.c.status.in_(statuses))
        if queue is not None:
            query = query.where(table.c.queue == queue)
        if before_id is not None:
            query = query.where(table.c.id < before_id)
        if newest_first:
            query = query.order_by(table.c.id.desc())
        if limit is not None:
            query = query.limit(limit)
        path = self._sqlite_file()
        try:
            if path is not None and not path.exists():
                return []  # nothing was ever recorded here (and reading must not create it)
        except OSError as exc:  # a folder this user cannot enter
            raise JobLogError(f"cannot read the job log {redact_url(self.url)}: {exc}"
                              ) from None
        try:
            with self._engine_for_reads().connect() as connection:
                return list(connection.execute(query))
        except sa.exc.DBAPIError as exc:
            if "no such table" in str(exc) or "does not exist" in str(exc):
                return []  # nothing was ever recorded here
            raise JobLogError(f"cannot read the job log {redact_url(self.url)}: "
                              f"{_without_url(exc, self.url)}") from None
        except sa.exc.SQLAlchemyError as exc:
            raise JobLogError(f"cannot read the job log {redact_url(self.url)}: "
                              f"{_without_url(exc, self.url)}") from None

    def close(self) -> None:
        """Release the connections (the log can still be used; they open again)."""
        with self._lock:
            engine, self._engine = self._engine, None
            backend, self._backend = self._backend, None
        if engine is not None:
            engine.dispose()
        if backend is not None:
            backend.session_manager.release(self._sqlalchemy_url())
        if self._results is not None:
            self._results.close()


class RecordedJob:
    """One job's record in a job log while it runs, the one bookkeeping of every job memq
    records (an index pass here, a writer's part of a pass sent from another host, a QMD
    update): :meth:`start` (or :meth:`resume` for a later part), :meth:`progress`, then
    :meth:`done` or :meth:`failed`. Every state repeats the meta the start recorded."""

    def __init__(self, log: JobLog, job_id: str, meta: dict[str, Any],
                 request: Any = None) -> None:
        self.log, self.id, self.meta, self.request = log, job_id, meta, request

    @classmethod
    def start(cls, log: JobLog, job_id: str, *, memory: str, origin: str,
              host: str | None = None, request: Any = None,
              task: str = INDEX_JOB) -> RecordedJob:
        """Record ``job_id`` as started (``request``: the Celery task request running it,
        None for a job run in this process)."""
        meta = log.started(job_id, memory=memory, origin=origin, host=host, request=request,
                           task=task)
        return cls(log, job_id, meta, request)

    @classmethod
    def resume(cls, log: JobLog, job_id: str, *, memory: str, origin: str,
               host: str | None = None, request: Any = None
               ) -> tuple[RecordedJob, JobRecord | None]:
        """A job an earlier part started (nothing is recorded now), and its row so far."""
        earlier = log.get(job_id)
        meta = {"memory": memory, "origin": origin, "host": host or socket.gethostname(),
                "startedAt": earlier.started_at if earlier else time.time()}
        return cls(log, job_id, meta, request), earlier

    def progress(self, counts: dict[str, Any], *, force: bool = False) -> None:
        """Record the counts so far (at most once a second unless ``force``)."""
        self.log.progress(self.id, {**self.meta, **counts}, self.request, force=force)

    def done(self, result: dict[str, Any]) -> None:
        """Record the job done with ``result``."""
        self.log.finished(self.id, {**self.meta, **result}, self.request)

    def failed(self, error: str | BaseException) -> None:
        """Record the job failed: ``error`` (a message, or the exception that ended it)."""
        if isinstance(error, BaseException):
            error = f"{type(error).__name__}: {error}"[:1000]
        self.log.failed(self.id, error, self.meta, self.request)

    @contextmanager
    def failing(self) -> Iterator[None]:
        """Record the job failed if the block raises (the error is raised on)."""
        try:
            yield
        except BaseException as exc:
            self.failed(exc)
            raise


def store_key(path: str | os.PathLike[str]) -> str:
    """How the job log names a memory's store: its absolute path (not resolved: a rebuild
    swaps the file a store path's link points to, the path stays)."""
    return os.path.abspath(os.fspath(path))


class _Described:
    """A Celery task request as the job log records it (Celery's extended result keeps the
    task's arguments): the message described (:func:`pipeline.routing.describe`: its memory and
    counts), never its content (a producer's changes carry the memory's text)."""

    def __init__(self, request: Any) -> None:
        self._request = request
        args = getattr(request, "args", None)
        if isinstance(args, list | tuple):
            self.args = [describe(a) if isinstance(a, dict) else type(a).__name__
                         for a in args]
        else:
            self.args = None
        self.kwargs = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._request, name)


def _described(request: Any) -> Any:
    return None if request is None else _Described(request)


def _local_request(task: str, host: str | None) -> SimpleNamespace:
    """What Celery's extended result wants of a request, for a job run in this process."""
    return SimpleNamespace(task=task, hostname=host or socket.gethostname(), args=None,
                           kwargs=None, retries=0, delivery_info=None, chord=None,
                           errbacks=None, chain=None, group=None, parent_id=None,
                           children=[], stamps=None)


def _without_url(exc: BaseException, url: str) -> str:
    """An error's text with the database URL (and its password) taken out."""
    text = str(exc).split("\n(Background on this error")[0]
    return text.replace(url, redact_url(url)).replace(url.removeprefix("db+"),
                                                       redact_url(url))
