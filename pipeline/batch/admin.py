"""``memq batch list / cancel / enable``: look at provider batch jobs and steer them by hand."""

from __future__ import annotations

from typing import Any

from pipeline.batch.api import BATCH_PROVIDERS, RemoteBatch, batch_api_for
from pipeline.batch.policy import enable, provider_policy
from pipeline.config import Settings
from pipeline.errors import BatchCommandError
from pipeline.messages import ProviderSpec
from pipeline.store import batches, schema
from pipeline.store.engine import Database


def _open(settings: Settings) -> Database | None:
    return schema.open_store(settings.store.path, want_vectors=settings.store.want_vectors)


def list_jobs(settings: Settings, limit: int = 20) -> list[dict[str, Any]]:
    """Live jobs first, then the newest finished ones."""
    db = _open(settings)
    if db is None:
        return []
    try:
        return [batches.batch_job_summary(job) for job in batches.recent_jobs(db, limit)]
    finally:
        db.close()


def cancel_job(settings: Settings, job_id: str) -> RemoteBatch:
    """Ask the provider to cancel a live job (with this host's API key).

    The job's poll task then sees it stop, keeps whatever lines finished, and sends the rest
    to the sync path; a cancel by hand does not count against the provider's batch mode.
    """
    db = _open(settings)
    if db is None:
        raise BatchCommandError(f"no store at {settings.store.path}")
    try:
        job = batches.get_job(db, job_id)
    finally:
        db.close()
    if job is None:
        raise BatchCommandError(f"no batch job {job_id} in this store")
    if job["state"] not in batches.LIVE_STATES:
        raise BatchCommandError(f"batch job {job_id} already finished ({job['state']})")
    if job["remote"] is None:
        raise BatchCommandError(f"batch job {job_id} is not created at {job['provider']} yet; "
                                "try again in a moment")
    api = batch_api_for(ProviderSpec.from_dict(job["spec"]), settings)
    try:
        return api.cancel(RemoteBatch.from_dict(job["remote"]))
    finally:
        api.close()


def enable_provider(settings: Settings, provider: str) -> dict[str, Any]:
    """Turn a provider's batch mode back on after the failure policy turned it off."""
    if provider not in BATCH_PROVIDERS:
        raise BatchCommandError(f"{provider} has no batch mode (only {', '.join(BATCH_PROVIDERS)})")
    db = _open(settings)
    if db is None:
        raise BatchCommandError(f"no store at {settings.store.path}")
    try:
        enable(db, provider)
        return provider_policy(db, provider)
    finally:
        db.close()
