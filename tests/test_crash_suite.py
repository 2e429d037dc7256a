"""Repeated crashes against real processes, each scenario ending with what it cost counted by
re-deriving the index from the disk (tests/faultkit.py): lost, duplicated and stale chunks must
all be zero, and SQLite's integrity check must pass.

Embedding goes through the OpenAI-compatible double on loopback with a small latency per
request, so a ~2,000-chunk index takes seconds and a kill lands while a request is in flight.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pipeline.status import index_status
from pipeline.store.engine import connect
from tests.conftest import REPO, Fleet, write_config
from tests.fakes.provider_doubles import ProviderDouble
from tests.faultkit import (
    RABBITMQ_SERVER,
    PrivateBroker,
    PrivateRabbit,
    PrivateRedis,
    damage,
    kill_tree,
    pool_children,
    record,
    unit,
    write_corpus,
)
from tests.indexcheck import index_vs_disk, wait_until
from tests.secrets_scan import SENTINEL
from workers.embedded import worker_argv
from workers.indexing import run_index

pytestmark = pytest.mark.integration

DIMS = 64
MODEL = "tiny-embed"  # a custom model: the double's width is not checked against a known one
VISIBILITY_S = 5  # a hard-killed worker's jobs come back after this


def double_settings(make_settings, workspace: Path, double: ProviderDouble, broker_url: str):
    return make_settings(workspace, provider="openai", model=MODEL, brokerUrl=broker_url,
                         remote={"baseUrl": double.url}, chunking={"tokens": 32, "overlap": 0})


def expected(double: ProviderDouble):
    return lambda text: unit(double.vector(text))


def wait_for_request(double: ProviderDouble, after: int, timeout: float = 30) -> bool:
    """Wait until the double has seen more than ``after`` requests (a worker is mid-request)."""
    deadline = time.monotonic() + timeout
    while len(double.requests) <= after:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@pytest.fixture
def openai_env(fleet, monkeypatch) -> None:
    """The sentinel key for this process (the producer) and the workers."""
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    fleet.env["MEMQ_VISIBILITY_TIMEOUT"] = str(VISIBILITY_S)


@pytest.mark.slow  # about 100 s: see docs/reliability.md
def test_repeated_embed_worker_kills_during_a_2000_chunk_index(
        workspace: Path, make_settings, broker_url, fleet, openai_env) -> None:
    """Four SIGKILLs while ~2,000 chunks are embedded: twice the pool processes mid-request
    (their jobs are redelivered and split), twice the whole worker (its jobs come back after
    the visibility timeout), each replaced at once. Then the index equals the disk."""
    write_corpus(workspace, files=100, lines=20)
    with ProviderDouble("openai", api_key=SENTINEL, dims=DIMS, latency=0.08) as double:
        settings = double_settings(make_settings, workspace, double, broker_url)
        fleet.start(["store.0"], "writer")
        embed = [fleet.start(["embed.openai"], "embed-0", concurrency=2)]
        started = time.monotonic()
        run = run_index(settings, wait=False)
        assert run.report.chunks_queued >= 2000, run.report
        kills: list[str] = []
        for n in range(4):
            assert wait_for_request(double, len(double.requests)), "no request in flight"
            if n % 2 == 0:
                children = pool_children(embed[-1].pid)
                assert children, "the worker has no pool process to kill"
                for child in children:  # the one mid-request among them
                    child.send_signal(signal.SIGKILL)
                kills.append("pool processes")
            else:
                kill_tree(embed[-1].pid)
                embed.append(fleet.start(["embed.openai"], f"embed-{n}", concurrency=2))
                kills.append("whole worker")
            time.sleep(0.7)
        last_kill = time.monotonic()
        wait_until(lambda: index_vs_disk(settings), 120, f"after kills {kills}\n{fleet.logs()}")
        converged = time.monotonic()
        cost = damage(settings, expected(double))
        stats = double.stats()
    record("embed worker SIGKILLed during a 2,000-chunk index", repetitions=len(kills),
           chunks=run.report.chunks_queued, damage=cost, texts_embedded=stats["texts_embedded"],
           total_s=converged - started, converge_after_last_kill_s=converged - last_kill)
    assert cost.clean, cost
    assert "crashed its worker process: split into" in fleet.logs(tail=None)
    assert index_status(settings)["chunks"] == run.report.chunks_queued


class LockProbe:
    """Tells whether another connection holds the store's write lock (a transaction is open)."""

    def __init__(self, store: Path) -> None:
        self.db = connect(store)
        self.db.conn.execute("PRAGMA busy_timeout=0")

    def held(self) -> bool:
        try:
            self.db.conn.execute("BEGIN IMMEDIATE")
        except self.db.operational_error:
            return True
        self.db.conn.execute("ROLLBACK")
        return False

    def close(self) -> None:
        self.db.close()


@pytest.mark.slow  # about 100 s: see docs/reliability.md
def test_writer_killed_mid_transaction_converges(
        workspace: Path, make_settings, broker_url, fleet, openai_env) -> None:
    """Results pile up on the store queue, then the writer starts and is SIGKILLed (main and
    pool process) while it holds the write lock, three times, each time restarted under the
    same node name as a supervisor would. SQLite rolls the open transaction back; the results
    come back after the visibility timeout and are written again."""
    write_corpus(workspace, files=100, lines=20)
    with ProviderDouble("openai", api_key=SENTINEL, dims=1024) as double:
        settings = double_settings(make_settings, workspace, double, broker_url)
        fleet.start(["embed.openai"], "embed", concurrency=2)
        started = time.monotonic()
        run = run_index(settings, wait=False)
        wait_until(lambda: [] if len(double.embed_requests()) >= run.report.jobs else ["wait"],
                   60, "embedding")
        writer_argv = worker_argv(["store.0"], "writer@crash-suite", loglevel="INFO",
                                  quiet_cluster=True)
        writer = fleet.spawn(writer_argv, "writer")
        kills: list[float] = []
        probe = LockProbe(settings.store.path)
        deadline = time.monotonic() + 60
        while len(kills) < 3 and time.monotonic() < deadline:
            if not probe.held():
                time.sleep(0.001)  # leave the writer room to take the lock
                continue
            kill_tree(writer.pid)
            kills.append(time.monotonic())
            writer = fleet.spawn(writer_argv, "writer")
            time.sleep(1.0)
        probe.close()
        assert len(kills) == 3, \
            f"caught the writer mid-transaction {len(kills)} times\n{fleet.logs()}"
        last_kill = kills[-1]
        wait_until(lambda: index_vs_disk(settings), 90, f"after kills\n{fleet.logs()}")
        converged = time.monotonic()
        cost = damage(settings, expected(double))
    record("writer SIGKILLed holding the write lock", repetitions=len(kills),
           chunks=run.report.chunks_queued, damage=cost, total_s=converged - started,
           converge_after_last_kill_s=converged - last_kill)
    assert cost.clean, cost


def test_producer_killed_mid_scan_then_rerun_converges(
        workspace: Path, tmp_path: Path, broker_url, fleet, openai_env) -> None:
    """``memq index`` SIGKILLed three times (mid-scan, while queueing, while waiting); the
    fourth run finishes and the index equals the disk."""
    from pipeline.config import load_settings

    write_corpus(workspace, files=800, lines=3)
    with ProviderDouble("openai", api_key=SENTINEL, dims=DIMS, latency=0.05) as double:
        cfg = write_config(tmp_path / "memq.json", provider="openai", model=MODEL,
                           brokerUrl=broker_url, remote={"baseUrl": double.url},
                           store={"path": str(tmp_path / "store.sqlite")},
                           chunking={"tokens": 32, "overlap": 0})
        settings = load_settings(config_file=cfg, workspace=workspace, env={})
        argv = [sys.executable, "-m", "memq.cli", "index", "--workspace", str(workspace),
                "--config", str(cfg)]
        fleet.start(["store.0"], "writer")
        fleet.start(["embed.openai"], "embed", concurrency=2)
        # Mid-scan: the store exists but not every file is committed (on a quiet machine the
        # whole scan is one transaction of ~0.25 s, so the count reads 0 until it commits).
        moments = {"mid-scan": lambda _: (settings.store.path.exists()
                                          and _count(settings, "files") < 800),
                   "while queueing": lambda _: _count(settings, "queued") > 0,
                   "while waiting": lambda age: age > 2.0 and _count(settings, "ready") > 0}
        started = time.monotonic()
        killed_at: list[str] = []
        for moment, reached in moments.items():
            proc = subprocess.Popen(argv, cwd=REPO, env={**os.environ, **fleet.env},
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            began = time.monotonic()
            while (not reached(time.monotonic() - began) and proc.poll() is None
                   and time.monotonic() < began + 60):
                time.sleep(0.01)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert proc.returncode == -signal.SIGKILL, f"memq index ended before {moment}"
            killed_at.append(moment)
        done = subprocess.run(argv, cwd=REPO, env={**os.environ, **fleet.env},
                              capture_output=True, text=True, timeout=120)
        converged = time.monotonic()
        assert done.returncode == 0, done.stderr
        assert index_vs_disk(settings) == []
        cost = damage(settings, expected(double))
    record("memq index SIGKILLed mid-scan, queueing, waiting", repetitions=len(killed_at),
           chunks=index_status(settings)["chunks"], damage=cost, total_s=converged - started)
    assert cost.clean, cost


def _count(settings, what: str) -> int:
    """Rows of the store, read without waiting for the writer (0 before the store exists)."""
    sql = {"files": "SELECT count(*) FROM files",
           "queued": "SELECT count(*) FROM chunks WHERE queued_at IS NOT NULL",
           "ready": "SELECT count(*) FROM chunks WHERE state = 'ready'"}[what]
    if not settings.store.path.exists():
        return 0
    db = connect(settings.store.path)
    try:
        return db.conn.execute(sql).fetchone()[0]
    except db.operational_error:
        return 0
    finally:
        db.close()



@contextmanager
def fleet_on_private_broker(tmp_path: Path, kind: str = "redis"
                            ) -> Iterator[tuple[PrivateBroker, Fleet]]:
    """A private broker (``redis`` or ``rabbitmq``) and a :class:`Fleet` on it (workers' logs
    in ``worker-logs``), both stopped at the end."""
    broker = PrivateRedis(tmp_path) if kind == "redis" else PrivateRabbit(tmp_path)
    broker.start()
    logs = tmp_path / "worker-logs"
    logs.mkdir()
    fleet = Fleet(broker.url, {"MEMQ_VISIBILITY_TIMEOUT": str(VISIBILITY_S)}, logs)
    try:
        yield broker, fleet
    finally:
        fleet.stop()
        broker.stop()


def reconcile_lost(settings, broker_url: str):
    """One reconcile pass (``memq watch``'s, queues empty): what the broker lost is queued
    again; its report."""
    from pipeline.embeddings.registry import choose_provider
    from pipeline.fleet.broker import FleetDispatcher
    from pipeline.routing import store_queue
    from workers.watching import WatchService

    with FleetDispatcher(broker_url) as dispatcher:
        service = WatchService(settings, choose_provider(settings), dispatcher,
                               reconcile_s=3600, lost_after_s=0.0)
        # A reconcile queues lost work again only when the embed and store queues are empty.
        # On a busy machine the results of the jobs that were in flight may still wait in the
        # store queue when the workers have reconnected: let the writer take them first. (The
        # embed queue is left as it is: a broker that kept its messages lost nothing.)
        store = store_queue(settings.fleet.shard_of(settings.agent_id))
        wait_until(lambda: [] if not dispatcher.queued(store) else [f"{store} not empty"],
                   60, "the writer to take the results in flight before the reconcile")
        return service.reconcile()


@pytest.mark.parametrize("fault", ["flushdb", "restart"])
def test_broker_flushed_or_restarted_mid_index_is_healed_by_reconcile(
        fault: str, workspace: Path, make_settings, tmp_path: Path, monkeypatch) -> None:
    """The broker loses every message (FLUSHDB, or a restart of a Redis that keeps nothing)
    while a ~2,000-chunk index is half done. The workers carry on; the chunks whose messages
    vanished stay pending until a reconcile pass (``memq watch``'s, with the queues empty)
    queues them again, and then the index equals the disk."""
    from tests.conftest import redis_client

    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    write_corpus(workspace, files=100, lines=20)
    with fleet_on_private_broker(tmp_path) as (broker, fleet), \
            ProviderDouble("openai", api_key=SENTINEL, dims=DIMS, latency=0.08) as double:
        settings = double_settings(make_settings, workspace, double, broker.url)
        fleet.start(["store.0"], "writer")
        fleet.start(["embed.openai"], "embed", concurrency=2)
        started = time.monotonic()
        run = run_index(settings, wait=False)
        wait_until(lambda: [] if _count(settings, "ready") > run.report.chunks_queued // 4
                   else ["wait"], 60, "a quarter embedded")
        if fault == "flushdb":
            redis_client(broker.url).flushdb()
        else:
            broker.restart()
        faulted = time.monotonic()
        # Whatever was in flight lands; then nothing moves: the rest of the work is gone.
        time.sleep(3 * 0.08 + 2.0)
        stuck = index_status(settings)["pending"]
        assert 0 < stuck < run.report.chunks_queued, "the fault lost nothing to heal"
        healed = reconcile_lost(settings, broker.url)
        assert healed.chunks_requeued == stuck
        wait_until(lambda: index_vs_disk(settings), 90, f"after reconcile\n{fleet.logs()}")
        converged = time.monotonic()
        cost = damage(settings, expected(double))
    record(f"broker {fault} mid-index, healed by reconcile", repetitions=1,
           chunks=run.report.chunks_queued, stuck_pending=stuck, damage=cost,
           total_s=converged - started, converge_after_fault_s=converged - faulted)
    assert cost.clean, cost


@pytest.mark.parametrize("kind", ["redis", pytest.param("rabbitmq", marks=pytest.mark.skipif(
    not RABBITMQ_SERVER.exists(), reason="no rabbitmq-server on this machine"))])
def test_production_workers_survive_broker_restarts(kind: str, workspace: Path, make_settings,
                                                    tmp_path: Path, monkeypatch) -> None:
    """The workers ``memq worker`` starts (not the tests' quiet ones: heartbeats on) ride
    through three restarts of their broker (a Redis that keeps nothing, or a RabbitMQ node
    SIGKILLed) while embedding: each reconnects and restarts its consumer without an error in
    its log, none dies, and after a reconcile the index equals the disk."""
    from memq.cli import worker_command

    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    write_corpus(workspace, files=60, lines=20)
    with fleet_on_private_broker(tmp_path, kind) as (broker, fleet):
        # Each request takes 0.4 s, so the work a reconcile queues again outlasts the
        # reconcile pass itself (on a busy machine a pass over the files can take longer than
        # embedding everything at 0.08 s a request), and the next restart finds it in flight.
        with ProviderDouble("openai", api_key=SENTINEL, dims=DIMS, latency=0.4) as double:
            settings = double_settings(make_settings, workspace, double, broker.url)
            workers = [fleet.spawn(worker_command("writer", None, None, "INFO"), "writer"),
                       fleet.spawn(worker_command("embed", "openai", 2, "INFO"), "embed")]
            run = run_index(settings, wait=False)
            for _ in range(3):
                seen = len(double.requests)
                assert wait_for_request(double, seen), f"no embedding in flight\n{fleet.logs()}"
                broker.restart()
                wait_until(lambda: [] if _all_reconnected(fleet.log_dir)
                           else ["not reconnected"], 60, f"reconnect\n{fleet.logs()}")
                time.sleep(0.5)  # the in-flight jobs' results land (or are lost) first
                reconcile_lost(settings, broker.url)  # the restarted broker kept nothing
            assert [w.poll() for w in workers] == [None, None], fleet.logs()
            reconcile_lost(settings, broker.url)
            wait_until(lambda: index_vs_disk(settings), 90, f"after reconcile\n{fleet.logs()}")
            assert run.report.chunks_queued > 0
            assert damage(settings, expected(double)).clean
        log_text = fleet.logs(tail=None)
        assert "Error on restarting" not in log_text, log_text
        assert "AttributeError" not in log_text, log_text
        # No worker process crashed: no job is taken for one that did (RabbitMQ marks every
        # message it recovers as redelivered; that is not a crash).
        assert "split into" not in log_text, log_text
        assert [w.poll() for w in workers] == [None, None]


def _all_reconnected(logs: Path) -> bool:
    """Every worker logged "Connected to" since its last "Connection to broker lost"."""
    return all("Connected to" in p.read_text(errors="replace").rsplit(
        "Connection to broker lost", 1)[-1] for p in logs.glob("*.log"))
