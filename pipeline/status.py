"""``memq status``: what is indexed, what is waiting, which provider and mode, and why."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline.batch.policy import all_policies
from pipeline.config import Settings
from pipeline.ingest.reindex import progress_of, rebuild_info
from pipeline.ingest.safety import files_from
from pipeline.store import batches, reads, schema
from pipeline.store.vectors import count_vectors, vector_dims

if TYPE_CHECKING:
    from pipeline.fleet.job_log import JobLog

MAX_LISTED_ERRORS = 20
RECENT_JOBS = 5
RECENT_BATCH_JOBS = 5


def batch_status(db: Any) -> dict[str, Any]:
    """Provider batch mode: live and recent jobs, and each provider's failure count and
    whether the policy turned its batch mode off (:mod:`pipeline.batch.policy`)."""
    if db is None:
        return {"live": 0, "jobs": [], "providers": {}}
    return {"live": len(batches.live_jobs(db)),
            "jobs": [batches.batch_job_summary(j)
                     for j in batches.recent_jobs(db, RECENT_BATCH_JOBS)],
            "providers": all_policies(db)}


DISABLED = "memory is disabled (enabled = false): nothing is indexed or searched"


def _recent_jobs(settings: Settings, jobs: JobLog | None) -> dict[str, Any]:
    """The memory's recent jobs and last failed one; a job log that cannot be read leaves
    them empty and says why (``jobs_error``), the rest of the status stands."""
    from pipeline.fleet.job_log import JobLog, JobLogError  # SQLAlchemy loads only when used

    log = jobs or JobLog(settings.result_backend, keep_days=settings.fleet.jobs_keep_days,
                         store=settings.store.path)
    try:
        failed = log.last_error(settings.agent_id)
        recent = log.recent(settings.agent_id, RECENT_JOBS)
    except JobLogError as exc:
        return {"jobs": [], "last_job_error": None, "jobs_error": str(exc)}
    finally:
        if jobs is None:
            log.close()
    return {"jobs": [job.to_dict() for job in recent],
            "last_job_error": failed.to_dict() if failed is not None else None}


def index_status(settings: Settings, jobs: JobLog | None = None) -> dict[str, Any]:
    """A JSON-able summary of the workspace's index (empty counts when never indexed), with
    the memory's recent jobs from ``jobs`` (default: the job log of ``settings``)."""
    status: dict[str, Any] = {
        "memory": settings.agent_id,
        "workspace": str(settings.workspace),
        "store": str(settings.store.path),
        "config": str(settings.config_file) if settings.config_file else None,
        "broker": "configured" if settings.broker_url else "embedded (per run)",
        "enabled": settings.enabled,
    }
    db = schema.open_store(settings.store.path, want_vectors=settings.store.want_vectors)
    if db is None:
        status.update(indexed=False, files=0, chunks=0, vectors=0, pending=0, failed=0,
                      mode=None, reason=(DISABLED if not settings.enabled
                                         else "never indexed: run `memq index`"), reindex=None,
                      jobs=[], last_job_error=None, batch=batch_status(None), watch=None)
        return status
    try:
        index = schema.get_meta(db, "index") or {}
        states = reads.state_counts(db)
        files, skipped = reads.file_counts(db)
        status.update(
            indexed=True,
            files=files,
            files_with_errors=skipped,
            file_errors=reads.file_errors(db, MAX_LISTED_ERRORS),
            chunks=sum(states.values()),
            vectors=count_vectors(db),
            pending=states.get("pending", 0) if index.get("provider") else 0,
            failed=states.get("failed", 0),
            chunk_errors=reads.chunk_errors(db, 5),
            provider=index.get("provider"),
            model=index.get("model"),
            dims=vector_dims(db),
            mode="hybrid" if index.get("provider") else "keyword-only",
            reason=schema.get_meta(db, "mode_reason"),
            vector_backend="sqlite-vec" if db.vector_ok else "in-process (numpy)",
            vector_backend_reason=db.vector_error,
            keyword_search="fts5" if db.fts_ok else "unavailable",
            keyword_search_reason=db.fts_error,
            sqlite_driver=db.driver,
            last_index_at=schema.get_meta(db, "last_index_at"),
            watch=schema.get_meta(db, "watch"),
            files_from=files_from(db),  # a producer on another host sends the files
        )
        status.update(_recent_jobs(settings, jobs))
        status["batch"] = batch_status(db)
        info = rebuild_info(db)
        status["reindex"] = progress_of(info, settings).as_dict() if info else None
        return status
    finally:
        db.close()
