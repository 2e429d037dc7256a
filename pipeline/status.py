"""``memq status``: what is indexed, what is waiting, which provider and mode, and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipeline.batch.policy import all_policies
from pipeline.config import Settings
from pipeline.errors import JobLogError
from pipeline.ingest.reindex import progress_of, rebuild_info
from pipeline.ingest.safety import files_from
from pipeline.store import batches, reads, schema
from pipeline.store.vectors import count_vectors, vector_dims

if TYPE_CHECKING:
    from pipeline.fleet.job_log import JobLog, JobRecord

MAX_LISTED_ERRORS = 20
RECENT_JOBS = 5
RECENT_BATCH_JOBS = 5


@dataclass(frozen=True)
class BatchStatus:
    """Provider batch mode: how many jobs are ``live``, the recent ``jobs`` (the rows of
    :func:`~pipeline.store.batches.batch_job_summary`) and each provider's policy (failure
    count, whether batch mode is off: :mod:`pipeline.batch.policy`)."""

    live: int = 0
    jobs: tuple[dict[str, Any], ...] = ()
    providers: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"live": self.live, "jobs": list(self.jobs), "providers": dict(self.providers)}


def batch_status(db: Any) -> BatchStatus:
    """The provider batch mode of the store ``db`` (None: no store, nothing to say)."""
    if db is None:
        return BatchStatus()
    return BatchStatus(len(batches.live_jobs(db)),
                       tuple(batches.batch_job_summary(j)
                             for j in batches.recent_jobs(db, RECENT_BATCH_JOBS)),
                       all_policies(db))


DISABLED = "memory is disabled (enabled = false): nothing is indexed or searched"

#: What every status says, in the order ``to_dict`` lists it (attribute, camelCase JSON key).
_ALWAYS = (("memory", "memory"), ("workspace", "workspace"), ("store", "store"),
           ("config", "config"), ("broker", "broker"), ("enabled", "enabled"),
           ("indexed", "indexed"), ("files", "files"), ("chunks", "chunks"),
           ("vectors", "vectors"), ("pending", "pending"), ("failed", "failed"),
           ("mode", "mode"), ("reason", "reason"))
#: What only a store that exists says (left out of a never-indexed memory's status).
_INDEXED = (("files_with_errors", "filesWithErrors"), ("file_errors", "fileErrors"),
            ("chunk_errors", "chunkErrors"), ("provider", "provider"), ("model", "model"),
            ("dims", "dims"), ("vector_backend", "vectorBackend"),
            ("vector_backend_reason", "vectorBackendReason"),
            ("keyword_search", "keywordSearch"),
            ("keyword_search_reason", "keywordSearchReason"), ("sqlite_driver", "sqliteDriver"),
            ("last_index_at", "lastIndexAt"), ("files_from", "filesFrom"))


@dataclass
class IndexStatus:
    """What a memory's store holds (``memq status --json``'s index part): counts of files,
    chunks and vectors, the mode and why, the store's engines, the rebuild under way
    (``reindex``), how changes are followed (``watch``), recent index jobs and the last failed
    one (``jobs_error``: why the job log could not be read) and provider batch jobs.

    :meth:`to_dict` gives the camelCase JSON (``docs/json.md``); the facts of
    :data:`_INDEXED` are in it only when the store exists (``indexed``)."""

    memory: str
    workspace: str
    store: str
    config: str | None
    broker: str
    enabled: bool
    indexed: bool = False
    files: int = 0
    chunks: int = 0
    vectors: int = 0
    pending: int = 0
    failed: int = 0
    mode: str | None = None
    reason: str | None = None
    files_with_errors: int = 0
    file_errors: list[dict[str, Any]] = field(default_factory=list)
    chunk_errors: list[dict[str, Any]] = field(default_factory=list)
    provider: str | None = None
    model: str | None = None
    dims: int | None = None
    vector_backend: str | None = None
    vector_backend_reason: str | None = None
    keyword_search: str | None = None
    keyword_search_reason: str | None = None
    sqlite_driver: str | None = None
    last_index_at: float | None = None
    files_from: Any = None
    watch: dict[str, Any] | None = None
    reindex: dict[str, Any] | None = None
    jobs: list[JobRecord] = field(default_factory=list)
    last_job_error: JobRecord | None = None
    jobs_error: str | None = None
    window_tokens: int | None = None  # the local model's window (local.windowTokens), if any
    batch: BatchStatus = field(default_factory=BatchStatus)

    def to_dict(self) -> dict[str, Any]:
        out = {key: getattr(self, attr)
               for attr, key in _ALWAYS + (_INDEXED if self.indexed else ())}
        out.update(watch=self.watch, jobs=[job.to_dict() for job in self.jobs],
                   lastJobError=None if self.last_job_error is None
                   else self.last_job_error.to_dict())
        if self.jobs_error is not None:
            out["jobsError"] = self.jobs_error
        if self.window_tokens:
            out["windowTokens"] = self.window_tokens
        out.update(batch=self.batch.to_dict(), reindex=self.reindex)
        return out


def _read_jobs(status: IndexStatus, settings: Settings, jobs: JobLog | None) -> None:
    """Fill ``status``' recent jobs and last failed one; a job log that cannot be read leaves
    them empty and says why (``jobs_error``), the rest of the status stands."""
    from pipeline.fleet.job_log import JobLog  # SQLAlchemy loads only when used

    log = jobs or JobLog(settings.result_backend, keep_days=settings.fleet.jobs_keep_days,
                         store=settings.store.path)
    try:
        status.last_job_error = log.last_error(settings.agent_id)
        status.jobs = list(log.recent(settings.agent_id, RECENT_JOBS))
    except JobLogError as exc:
        status.jobs, status.last_job_error, status.jobs_error = [], None, str(exc)
    finally:
        if jobs is None:
            log.close()


def read_index_status(settings: Settings, jobs: JobLog | None = None) -> IndexStatus:
    """The status of the workspace's index (empty counts when never indexed), with the
    memory's recent jobs from ``jobs`` (default: the job log of ``settings``)."""
    status = IndexStatus(
        memory=settings.agent_id, workspace=str(settings.workspace),
        store=str(settings.store.path),
        config=str(settings.config_file) if settings.config_file else None,
        broker="configured" if settings.broker_url else "embedded (per run)",
        enabled=settings.enabled)
    db = schema.open_store(settings.store.path, want_vectors=settings.store.want_vectors)
    if db is None:
        status.reason = (DISABLED if not settings.enabled
                         else "never indexed: run `memq index`")
        return status
    try:
        index = schema.get_meta(db, "index") or {}
        states = reads.state_counts(db)
        status.files, status.files_with_errors = reads.file_counts(db)
        status.indexed = True
        status.file_errors = reads.file_errors(db, MAX_LISTED_ERRORS)
        status.chunks = sum(states.values())
        status.vectors = count_vectors(db)
        status.pending = states.get("pending", 0) if index.get("provider") else 0
        status.failed = states.get("failed", 0)
        status.chunk_errors = reads.chunk_errors(db, 5)
        status.provider, status.model = index.get("provider"), index.get("model")
        status.window_tokens = (index.get("options") or {}).get("window_tokens")
        status.dims = vector_dims(db)
        status.mode = "hybrid" if index.get("provider") else "keyword-only"
        status.reason = schema.get_meta(db, "mode_reason")
        status.vector_backend = "sqlite-vec" if db.vector_ok else "in-process (numpy)"
        status.vector_backend_reason = db.vector_error
        status.keyword_search = "fts5" if db.fts_ok else "unavailable"
        status.keyword_search_reason = db.fts_error
        status.sqlite_driver = db.driver
        status.last_index_at = schema.get_meta(db, "last_index_at")
        status.watch = schema.get_meta(db, "watch")
        status.files_from = files_from(db)  # a producer on another host sends the files
        _read_jobs(status, settings, jobs)
        status.batch = batch_status(db)
        info = rebuild_info(db)
        status.reindex = progress_of(info, settings).as_dict() if info else None
        return status
    finally:
        db.close()


def index_status(settings: Settings, jobs: JobLog | None = None) -> dict[str, Any]:
    """:func:`read_index_status` as its camelCase JSON (a dict the caller may extend, as
    :meth:`~memq.Memory.status` does with ``backend`` and ``qmd``)."""
    return read_index_status(settings, jobs).to_dict()
