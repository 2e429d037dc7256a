"""Workers import and build only what their role uses: an idle embed worker and an idle
writer (``memq worker --role embed|writer``, real processes, prefork pool) have not imported
SQLAlchemy nor Celery's database result backend, nor what their tasks run (NumPy, pydantic,
the messages, the store, the search, QMD, the producer, the batch workflow, the reader): each
task imports it when it first runs. Their tasks ignore results; the writer's job log
(:mod:`pipeline.fleet.job_log`) loads SQLAlchemy when a job arrives, and still records it.

How it is seen, with no hook in memq's code: the workers run with a test-only
``sitecustomize`` (tests/import_trace) that records every module each process of the tree
loads (the pool process forked after start included; a child the writer forks at start to
look for its predecessor's cut-off jobs in the job log, and waits for, is gone), and every
process of the tree is checked for SQLAlchemy's and NumPy's compiled extensions in
``/proc/<pid>/maps``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.hostkit import Host, SimulatedFleet, two_memories, wait_until

pytestmark = pytest.mark.integration

TRACE = Path(__file__).parent / "import_trace"
#: What a worker must not load while it waits for work: the job log's database (its tasks
#: ignore results) and what its tasks run (loaded by the first task that runs it).
UNWANTED = ("sqlalchemy", "celery.backends.database", "numpy", "pydantic", "pipeline.messages",
            "pipeline.memory", "pipeline.local", "pipeline.store.results", "pipeline.qmd.backend",
            "pipeline.ingest.producer", "pipeline.batch.workflow", "pipeline.embeddings.runner",
            "workers.reader", "workers.shard_side")
#: Packages whose compiled extensions an idle worker must not have mapped.
UNMAPPED = ("sqlalchemy", "numpy")
IDLE_S = 3.0


@pytest.fixture
def host(tmp_path: Path, tiny_model: Path, broker_url: str) -> Iterator[tuple[SimulatedFleet,
                                                                              Host]]:
    """One host running shard 0's writer and an embed worker, both traced."""
    config, _ = two_memories(tmp_path, tiny_model, files=4)
    fleet = SimulatedFleet(tmp_path / "hosts", broker_url, config,
                           f"db+sqlite:///{tmp_path / 'jobs.sqlite'}")
    path = os.pathsep.join(p for p in (str(TRACE), os.environ.get("PYTHONPATH")) if p)
    try:
        h = fleet.host("hostC")
        h.spawn("writer-0", "worker", "--role", "writer", "--shard", "0", "--name",
                "writer-0@hostC", extra=_traced(path, tmp_path / "writer-0.imports"))
        h.spawn("embed", "worker", "--role", "embed", "--provider", "local", "--name",
                "embed@hostC", extra=_traced(path, tmp_path / "embed.imports"))
        fleet.wait_for_nodes(["store.0", "control.0", "embed.local"])
        yield fleet, h
    finally:
        fleet.stop()


def _traced(pythonpath: str, log: Path) -> dict[str, str]:
    return {"PYTHONPATH": pythonpath, "MEMQ_TEST_IMPORT_LOG": str(log)}


def _tree(pid: int) -> list[psutil.Process]:
    proc = psutil.Process(pid)
    return [proc, *proc.children(recursive=True)]


def _imported(log: Path, pids: set[int] | None = None) -> set[str]:
    """The modules the processes traced to ``log`` imported (those of ``pids`` only: a
    short-lived child the worker forked and waited for is not part of the idle worker)."""
    lines = (line.split(" ", 1) for line in log.read_text().splitlines())
    return {module for pid, module in lines if pids is None or int(pid) in pids}


def _unwanted(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == u or m.startswith(f"{u}.") for u in UNWANTED))


def _mapped(procs: list[psutil.Process]) -> dict[int, list[str]]:
    """Per process, the files of :data:`UNMAPPED` packages mapped in its memory (their compiled
    extensions)."""
    found = {}
    for proc in procs:
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        files = sorted({line.split()[-1] for line in maps.splitlines()
                        if any(f"/{name}/" in line for name in UNMAPPED)})
        if files:
            found[proc.pid] = files
    return found


def test_idle_embed_worker_and_writer_have_not_loaded_what_their_tasks_run(
        host: tuple[SimulatedFleet, Host], tmp_path: Path) -> None:
    fleet, h = host
    for label in ("writer-0", "embed"):
        pid = h.procs[label].pid
        # the worker forked its pool process (a prefork worker of concurrency 1)
        wait_until(lambda pid=pid: len(_tree(pid)) >= 2, f"{label}'s pool process",
                   logs=fleet.logs)
    time.sleep(IDLE_S)  # idle: started, waiting for work
    for label in ("writer-0", "embed"):
        procs = _tree(h.procs[label].pid)
        assert len(procs) >= 2, f"{label}: no pool process\n{fleet.logs()}"
        modules = _imported(tmp_path / f"{label}.imports", {p.pid for p in procs})
        # the trace works: the worker's own modules are in it
        assert {"celery.apps.worker", "workers.app", "workers.runtime"} <= modules, label
        assert _unwanted(modules) == [], f"{label} imported them while idle"
        assert _mapped(procs) == {}, f"{label} mapped them while idle"

    # the writer still records the job it runs (its job log loads SQLAlchemy for it)
    done = h.memq("index", "--agent", "alpha", "--json")
    assert done.returncode == 0, done.stderr + fleet.logs()
    report = json.loads(done.stdout)
    listed = h.memq("jobs", "--agent", "alpha", "--json")
    assert listed.returncode == 0, listed.stderr
    jobs = json.loads(listed.stdout)["jobs"]
    assert any(job["state"] == "done" for job in jobs), (report, jobs)
    writer = _imported(tmp_path / "writer-0.imports")
    assert {"sqlalchemy", "numpy", "pipeline.messages", "pipeline.store.results"} <= writer
    assert {"numpy", "pipeline.embeddings.runner"} <= _imported(tmp_path / "embed.imports")


def test_celery_finds_the_app_after_its_module_was_imported() -> None:
    """``celery -A workers`` finds the app whether or not :mod:`workers.app` was imported
    first (then the package's ``app`` attribute is that submodule, and Celery looks for
    ``workers.celery``): a launcher that imports it before Celery's CLI still starts."""
    import subprocess
    import sys

    probe = ("import workers.app, workers\n"
             "from celery.app.utils import find_app\n"
             "print(find_app('workers') is workers.app.app)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=False, cwd=Path(__file__).resolve().parents[1])
    assert done.stdout.strip() == "True", done.stderr
