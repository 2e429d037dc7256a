"""Worker limits: a pool process over its memory cap is replaced between tasks, a job past its
soft time limit is retried, and the index still completes (real Redis, real ``celery worker``
processes, a real GGUF model or the OpenAI double)."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pytest

from pipeline.config import load_settings
from pipeline.status import index_status
from tests.conftest import run_memq, write_config
from tests.fakes.provider_doubles import Fault, ProviderDouble
from tests.secrets_scan import SENTINEL
from workers.embedded import worker_argv
from workers.indexing import run_index

pytestmark = pytest.mark.integration


def test_pool_process_over_its_memory_cap_is_replaced_and_nothing_is_lost(
        workspace: Path, make_settings, tiny_model: Path, broker_url: str, fleet) -> None:
    notes = workspace / "memory" / "many"
    notes.mkdir()
    for n in range(30):
        (notes / f"2026-09-{n:02d}.md").write_text(f"# Note {n}\n\n- item {n}: the cap holds\n")
    settings = make_settings(workspace, provider="local", brokerUrl=broker_url,
                             local={"modelPath": str(tiny_model), "threads": 1})
    fleet.env["MEMQ_WORKER_MAX_MEMORY_MB"] = "1"  # every pool process is over it after a task
    fleet.start(["store.0"], "writer")
    fleet.start(["embed.local"], "embed")
    run = run_index(settings, wait=False)
    deadline = time.monotonic() + 90  # a writer that cannot replace its pool process hangs
    while (status := index_status(settings))["pending"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status["pending"] == 0 and status["failed"] == 0, fleet.logs()
    assert status["vectors"] == status["chunks"] == run.report.chunks_queued > 0
    for role in ("embed", "writer"):
        # One pool process at a time (concurrency 1): a new name means the old one was recycled.
        # A task logs its success after it returns, a moment after its last write is visible.
        deadline = time.monotonic() + 10
        while True:
            log = (fleet.log_dir / f"{role}.log").read_text()
            workers = set(re.findall(r"(ForkPoolWorker-\d+)\] Task memq\.\S+ succeeded", log))
            if len(workers) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(workers) >= 2, log
        # A replacement that never came up would leave the writer stuck (kombu's after-fork
        # cleanup once blocked on a connection the single-writer check left in the pool).
        assert "Timed out waiting for UP message" not in log, log


def test_a_job_past_its_soft_time_limit_is_retried_not_failed(
        workspace: Path, tmp_path: Path, broker_url: str, fleet, monkeypatch) -> None:
    """A provider that stalls past the task's soft limit costs the job one retry, not its
    chunks: the next delivery embeds them."""
    (workspace / "memory" / "2026-09-01.md").write_text("# Stalled\n\n- one note to embed\n")
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    # Celery stamps the limits on each task where it is sent, so the operator's setting goes
    # to the workers and to the CLI alike.
    limits = {"MEMQ_TASK_TIME_LIMIT": "4"}  # soft limit 3.6 s
    with ProviderDouble("openai", api_key=SENTINEL,
                        script=[Fault("stall", seconds=6)]) as double:
        cfg = write_config(tmp_path / "memq.json", provider="openai", brokerUrl=broker_url,
                           remote={"baseUrl": double.url},
                           store={"path": str(tmp_path / "store.sqlite")})
        fleet.start(["store.0"], "writer")
        fleet.spawn(worker_argv(["embed.openai"], f"embed-{uuid.uuid4().hex[:6]}@%h",
                                loglevel="INFO", quiet_cluster=True), "embed", env=limits)
        ran = run_memq("index", "--workspace", str(workspace), "--config", str(cfg),
                       env=limits, timeout=120)
        requests = len(double.embed_requests())
    assert ran.returncode == 0, ran.stderr + fleet.logs()
    status = index_status(load_settings(config_file=cfg, workspace=workspace, env={}))
    assert status["failed"] == 0 and status["pending"] == 0, fleet.logs()
    assert status["vectors"] == status["chunks"] > 0 and requests >= 2
    assert "ran past the task's soft time limit: retrying" in fleet.logs(None)
