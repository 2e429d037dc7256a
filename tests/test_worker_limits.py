"""Worker limits: a pool process over its memory cap is replaced between tasks, and the index
still completes (real Redis, real ``celery worker`` processes, a real GGUF model)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from pipeline.status import index_status
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
    fleet.start(["store"], "writer")
    fleet.start(["embed.local"], "embed")
    run = run_index(settings, wait=False)
    deadline = time.monotonic() + 90  # a writer that cannot replace its pool process hangs
    while (status := index_status(settings))["pending"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status["pending"] == 0 and status["failed"] == 0, fleet.logs()
    assert status["vectors"] == status["chunks"] == run.report.chunks_queued > 0
    for role in ("embed", "writer"):
        log = (fleet.log_dir / f"{role}.log").read_text()
        # One pool process at a time (concurrency 1): a new name means the old one was recycled.
        workers = set(re.findall(r"(ForkPoolWorker-\d+)\] Task memq\.\S+ succeeded", log))
        assert len(workers) >= 2, log
        # A replacement that never came up would leave the writer stuck (kombu's after-fork
        # cleanup once blocked on a connection the single-writer check left in the pool).
        assert "Timed out waiting for UP message" not in log, log
