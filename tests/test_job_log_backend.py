"""The job log's Celery backend, built on first use, and the finalisers that run meanwhile."""

from __future__ import annotations

import threading
from pathlib import Path

import celery.app.backends as backends
import pytest
from celery import Celery
from celery.result import AsyncResult

from pipeline.fleet.job_log import JobLogBackend


def test_a_result_collected_while_the_backend_is_built_does_not_deadlock(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Building the backend imports SQLAlchemy; a garbage collection inside that import can run
    a dead ``AsyncResult``'s ``__del__`` on the same thread, which asks this backend to drop
    the result. An embed worker that had retried a job hung there until its time limit."""
    app = Celery(set_as_current=False)
    app.conf.result_backend = f"db+sqlite:///{tmp_path / 'jobs.sqlite'}"
    backend = JobLogBackend(app)
    real = backends.by_url

    def by_url(url: str, loader: object) -> tuple[type, str]:
        AsyncResult("collected-mid-build", backend=backend).__del__()  # what the collector does
        return real(url, loader)

    monkeypatch.setattr(backends, "by_url", by_url)
    built = threading.Event()
    threading.Thread(target=lambda: (backend.built, built.set()), daemon=True).start()
    assert built.wait(30), "building the job log backend deadlocked on a result's finaliser"
    assert backend.built is backend.built  # built once, then kept
