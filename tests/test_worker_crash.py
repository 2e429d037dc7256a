"""A worker process killed mid-task loses nothing: the job is redelivered (acks late + reject
on worker lost), split into single chunks, and the index converges."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest
from billiard.common import human_status
from celery.exceptions import WorkerLostError

from pipeline.embeddings.default_model import default_model_path
from pipeline.embeddings.runner import MAX_DELIVERIES, after_crash
from pipeline.errors import ProviderUnavailable
from pipeline.messages import ChunkText, EmbedJob, ProviderSpec
from pipeline.status import index_status
from workers.indexing import run_index
from workers.tasks import crashed

pytestmark = pytest.mark.integration


def test_after_crash_splits_then_gives_up() -> None:
    a, b = ChunkText("a", "h1", "x"), ChunkText("b", "h2", "y")
    job = EmbedJob("main", ProviderSpec("local", "m", "k"), "s", (a, b))
    retries, failure = after_crash(job)
    assert failure is None and [r.chunks for r in retries] == [(a,), (b,)]
    single = retries[0]
    for _ in range(MAX_DELIVERIES - 2):
        (single,), failure = after_crash(single)
        assert failure is None
    again, failure = after_crash(single)
    assert again == []
    assert failure is not None
    assert failure.failed == (("a", "worker crashed 3 times embedding this chunk"),)


def _lost(status: int) -> WorkerLostError:
    """The error billiard raises when a pool process ends with ``status`` under a job."""
    return WorkerLostError(f"Worker exited prematurely: {human_status(status)} Job: 7.")


def test_only_a_pool_process_that_died_under_its_job_counts_as_a_crash(monkeypatch) -> None:
    """Killed or aborted is a crash the job may have caused; stopped with the worker (honcho
    and systemd send SIGTERM to the whole process group) is not, nor is any other error."""
    from celery.worker import state

    for status in (-signal.SIGKILL, -signal.SIGSEGV, -signal.SIGABRT, 1, 139):
        assert crashed(_lost(status)), status
    for status in (-signal.SIGTERM, -signal.SIGINT, -signal.SIGHUP, -signal.SIGQUIT, 0):
        assert not crashed(_lost(status)), status
    assert not crashed(RuntimeError("signal 9 (SIGKILL)"))
    monkeypatch.setattr(state, "should_stop", 0)  # a warm shutdown is under way
    assert not crashed(_lost(-signal.SIGKILL))


def _kill_pool_child_when_busy(main_pid: int, stop: threading.Event) -> list[int]:
    """SIGKILL the worker's pool process once while it is busy embedding, i.e. mid-task."""
    deadline = time.monotonic() + 120
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            busy = [c for c in psutil.Process(main_pid).children()
                    if c.cpu_percent(interval=0.2) > 20]
        except psutil.Error:
            continue  # a pool process came or went while we looked
        if busy:
            os.kill(busy[0].pid, signal.SIGKILL)
            return [busy[0].pid]
    return []


def test_sigkill_mid_task_loses_nothing(workspace: Path, make_settings, broker_url,
                                        fleet) -> None:
    try:
        default_model_path()
    except ProviderUnavailable as exc:
        pytest.skip(f"default model unavailable: {exc}")
    notes = workspace / "memory" / "generated"
    notes.mkdir()
    for day in range(100):
        lines = [f"- Day {day} item {i}: reviewed ticket {day * 100 + i} about caching, "
                 f"retries and the billing ledger with the team." for i in range(12)]
        (notes / f"2026-10-{day:02d}.md").write_text(f"# Day {day}\n\n" + "\n".join(lines))
    settings = make_settings(workspace, provider="local", brokerUrl=broker_url,
                             local={"threads": 1})
    fleet.start(["store.0"], "writer")
    embed = fleet.start(["embed.local"], "embed")
    stop = threading.Event()
    killed: list[int] = []
    killer = threading.Thread(
        target=lambda: killed.extend(_kill_pool_child_when_busy(embed.pid, stop)))
    killer.start()
    try:
        run = run_index(settings, wait=True)
    finally:
        stop.set()
        killer.join()
    assert killed, "the embed worker was never caught mid-task"
    status = index_status(settings)
    assert status["pending"] == 0 and status["failed"] == 0, fleet.logs()
    assert status["vectors"] == status["chunks"] == run.report.chunks_queued
    assert "crashed its worker process: split into" in fleet.logs(tail=None)
