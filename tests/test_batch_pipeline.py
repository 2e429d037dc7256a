"""Provider batch mode through the real pipeline: a real Redis broker, real ``celery worker``
processes (writer, batch worker, embed worker) and the OpenAI double's Files and Batches APIs
on loopback. A backfill of hundreds of chunks across many files takes a handful of HTTP
requests; a killed batch worker and a flushed Redis still end with every chunk embedded once;
failed and never-run lines come back through the sync path; the disable policy holds."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.batch import admin
from pipeline.status import index_status
from pipeline.store.engine import connect
from pipeline.store.vectors import get_vectors
from tests.conftest import redis_client, run_memq
from tests.fakes.batch_doubles import BatchPlan
from tests.fakes.provider_doubles import ProviderDouble
from tests.test_remote_pipeline import SENTINEL, add_notes, database_bytes
from workers.indexing import run_index
from workers.monitor import fleet_status

pytestmark = pytest.mark.integration


@pytest.fixture
def double(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    with ProviderDouble("openai", api_key=SENTINEL) as d:
        d.batches.polls_per_step = 1  # a job moves one state per poll: workers drive it
        yield d


def batch_settings(make_settings, workspace: Path, broker_url: str, double, **batch):
    return make_settings(workspace, provider="openai", brokerUrl=broker_url,
                         remote={"baseUrl": double.url,
                                 "batch": {"enabled": True, "pollIntervalMs": 200, **batch}})


def start_fleet(fleet) -> None:
    fleet.env["MEMQ_BATCH_POLL_GRACE"] = "2"
    fleet.start(["store.0"], "writer")
    fleet.start(["embed.openai"], "embed")
    fleet.start(["batch.openai"], "batch")


def batch_calls(double) -> list:
    return [r for r in double.requests if double.batches.is_route(r.path)]


def assert_all_embedded_once(settings, double) -> dict:
    """Every chunk has the double's vector for its text, and was embedded exactly once:
    by one batch line that succeeded, or else by one sync request."""
    status = index_status(settings)
    assert status["pending"] == status["failed"] == 0, status["chunkErrors"]
    assert status["vectors"] == status["chunks"] > 0
    db = connect(settings.store.path)
    try:
        rows = db.conn.execute("SELECT rowid, id, text FROM chunks").fetchall()
        stored = get_vectors(db, [r[0] for r in rows])
    finally:
        db.close()
    for rowid, _, text in rows:
        want = double.vector(text)
        np.testing.assert_allclose(stored[rowid], want / np.linalg.norm(want), atol=1e-5)
    jobs = list(double.batches.jobs.values())
    good = [cid for job in jobs for cid, _ in job.requests[:double.batches._done_count(job)]
            if cid not in job.line_errors]
    assert len(good) == len(set(good))  # no chunk's line succeeded in two jobs
    synced = [t for r in double.embed_requests() if r.status == 200 for t in r.body["input"]]
    rest = [text for _, cid, text in rows if cid not in set(good)]
    assert sorted(synced) == sorted(rest)  # the others went the sync way, each once
    return status


def test_backfill_across_files_takes_a_handful_of_requests(
        workspace: Path, make_settings, broker_url, fleet, double) -> None:
    add_notes(workspace, files=80)
    settings = batch_settings(make_settings, workspace, broker_url, double)
    start_fleet(fleet)
    run = run_index(settings, wait=True)
    status = assert_all_embedded_once(settings, double)
    assert run.waited and run.report.batch_jobs == 1 and run.report.jobs == 0
    assert status["chunks"] >= 200 and double.embed_requests() == []
    calls = batch_calls(double)
    # upload, create, a poll per state (validating, in_progress, finalizing, completed),
    # the output download: no request per file, none per chunk.
    assert len(calls) <= 10, [(r.method, r.path) for r in calls]
    [job] = double.batches.jobs.values()
    assert len(job.requests) == status["chunks"]
    [row] = status["batch"]["jobs"]
    assert (row["state"], row["embedded"], row["toSync"]) == ("completed", status["chunks"], 0)
    assert SENTINEL.encode() not in database_bytes(settings.store.path)
    assert SENTINEL not in fleet.logs(None)
    print(f"batch backfill: {status['chunks']} chunks in {len(calls)} HTTP requests")


def test_killed_batch_worker_and_flushed_redis_lose_nothing(
        workspace: Path, make_settings, broker_url, fleet, double) -> None:
    add_notes(workspace, files=20)
    double.batches.polls_per_step = None  # the job waits in "validating" until we advance it
    settings = batch_settings(make_settings, workspace, broker_url, double, wait=False)
    start_fleet(fleet)
    batch_worker = fleet.procs[-1]
    run = run_index(settings, wait=True)  # batch.wait false: returns once submitted
    assert not run.waited and run.report.batch_jobs == 1
    [job] = index_status(settings)["batch"]["jobs"]
    assert job["remoteId"] and job["state"] in ("submitted", "running")
    assert index_status(settings)["pending"] == job["chunks"]

    def polls() -> int:
        return sum(1 for r in batch_calls(double) if r.method == "GET")

    seen = polls()
    deadline = time.time() + 20
    while polls() < seen + 2 and time.time() < deadline:  # the poll chain is alive
        time.sleep(0.1)
    os.kill(batch_worker.pid, signal.SIGKILL)  # mid-flight: its next poll dies with it
    batch_worker.wait()
    client = redis_client(broker_url)
    client.flushdb()  # and the broker forgets every message and lease
    client.close()
    double.batches.advance(10)
    fleet.start(["batch.openai"], "batch-again")
    status = run_memq("status", "--json", "--workspace", str(settings.workspace),
                      "--config", str(settings.config_file))
    assert json.loads(status.stdout)["batch"]["resumed"] == 1, status.stderr  # status notices
    deadline = time.time() + 60
    while time.time() < deadline:  # vectors first, then the job's finishing message
        now = index_status(settings)
        if now["pending"] == now["batch"]["live"] == 0:
            break
        time.sleep(0.2)
    status = assert_all_embedded_once(settings, double)
    assert len(double.batches.jobs) == 1 and double.embed_requests() == []
    assert status["batch"]["live"] == 0


def test_failed_lines_and_expired_jobs_recover_through_sync(
        workspace: Path, make_settings, broker_url, fleet, double) -> None:
    add_notes(workspace, files=30)
    double.batches.plan = BatchPlan(line_error=lambda text: "# Note 1" in text)
    settings = batch_settings(make_settings, workspace, broker_url, double)
    start_fleet(fleet)
    run_index(settings, wait=True)
    status = assert_all_embedded_once(settings, double)
    [job] = double.batches.jobs.values()
    assert job.line_errors and len(double.embed_requests()) >= 1
    synced = {t for r in double.embed_requests() for t in r.body["input"]}
    assert all("# Note 1" in t for t in synced)
    [row] = status["batch"]["jobs"]
    assert row["toSync"] == len(job.line_errors) and "line(s) failed" in row["lastError"]
    assert status["batch"]["providers"]["openai"]["failures"] == 0

    # An expired job: half its lines done; the rest is embedded the sync way.
    lines = [f"Line {i} of a long note about the ledger and the harbour." for i in range(200)]
    (workspace / "memory" / "2027-02-01.md").write_text("\n".join(lines) + "\n")
    double.batches.plan = BatchPlan(outcome="expire", partial=0.5)
    before = len(double.embed_requests())
    run_index(settings, wait=True)
    status = assert_all_embedded_once(settings, double)
    expired = status["batch"]["jobs"][0]
    assert expired["state"] == "expired" and expired["embedded"] > 0 and expired["toSync"] > 0
    assert len(double.embed_requests()) > before
    assert status["batch"]["providers"]["openai"]["failures"] == 1


def test_two_failures_disable_batch_mode_until_enabled(
        workspace: Path, make_settings, broker_url, fleet, double) -> None:
    settings = batch_settings(make_settings, workspace, broker_url, double)
    start_fleet(fleet)
    double.batches.plan = BatchPlan(outcome="fail")
    for day in (1, 2):
        (workspace / "memory" / f"2027-01-0{day}.md").write_text(f"# Day {day}\n\nRouter.\n")
        run_index(settings, wait=True)
        assert_all_embedded_once(settings, double)  # each failed job fell back to sync
    policy = index_status(settings)["batch"]["providers"]["openai"]
    assert policy["disabled"] and policy["failures"] == 2
    jobs_before = len(double.batches.jobs)
    (workspace / "memory" / "2027-01-03.md").write_text("# Day 3\n\nKettle.\n")
    run = run_index(settings, wait=True)
    assert run.report.batch_jobs == 0 and run.report.jobs == 1  # the sync path
    assert len(double.batches.jobs) == jobs_before
    from tests.conftest import run_memq

    env = {"OPENAI_API_KEY": SENTINEL}
    shown = run_memq("status", "--config", str(settings.config_file), "--workspace",
                     str(workspace), env=env)
    assert "openai DISABLED" in shown.stdout and "memq batch enable openai" in shown.stdout
    done = run_memq("batch", "enable", "openai", "--config", str(settings.config_file),
                    "--workspace", str(workspace), env=env)
    assert done.returncode == 0, done.stderr
    double.batches.plan = BatchPlan()
    (workspace / "memory" / "2027-01-04.md").write_text("# Day 4\n\nViolin.\n")
    run = run_index(settings, wait=True)
    assert run.report.batch_jobs == 1
    assert_all_embedded_once(settings, double)
    listed = admin.list_jobs(settings)
    assert [j["state"] for j in listed] == ["completed", "failed", "failed"]


def test_not_available_disables_at_once(workspace: Path, make_settings, broker_url, fleet,
                                        double) -> None:
    double.batches.plan = BatchPlan(not_available=True)
    settings = batch_settings(make_settings, workspace, broker_url, double)
    start_fleet(fleet)
    run_index(settings, wait=True)
    status = assert_all_embedded_once(settings, double)
    policy = status["batch"]["providers"]["openai"]
    assert policy["disabled"] and "not available" in policy["reason"]
    assert status["batch"]["jobs"][0]["state"] == "disabled"


@pytest.mark.parametrize("style", ["gemini", "voyage"])
def test_gemini_and_voyage_batch_through_the_fleet(style: str, workspace: Path, make_settings,
                                                  broker_url, fleet, monkeypatch) -> None:
    """The same workflow on the other two batch APIs; Gemini's key is on every batch call
    (upload and download included: OpenClaw's batch path loses it)."""
    monkeypatch.setenv(f"{style.upper()}_API_KEY", SENTINEL)
    with ProviderDouble(style, api_key=SENTINEL) as double:
        double.batches.polls_per_step = 1
        settings = make_settings(workspace, provider=style, brokerUrl=broker_url,
                                 remote={"baseUrl": double.url,
                                         "batch": {"enabled": True, "pollIntervalMs": 200}})
        fleet.start(["store.0"], "writer")
        fleet.start([f"embed.{style}", f"batch.{style}"], "batch")
        run = run_index(settings, wait=True)
        status = index_status(settings)
        assert run.report.batch_jobs == 1 and double.embed_requests() == []
        assert status["vectors"] == status["chunks"] > 0 and status["pending"] == 0
        [row] = status["batch"]["jobs"]
        assert (row["state"], row["embedded"]) == ("completed", status["chunks"])
        calls = batch_calls(double)
        assert calls and len(calls) <= 10 and all(r.status == 200 for r in calls)
        if style == "gemini":
            assert all(r.headers.get("x-goog-api-key") == SENTINEL for r in calls)


def test_batch_mode_with_the_embedded_broker(workspace: Path, make_settings, double) -> None:
    """`memq index` with no broker configured: its private worker consumes batch.openai too."""
    settings = make_settings(workspace, provider="openai",
                             remote={"baseUrl": double.url,
                                     "batch": {"enabled": True, "pollIntervalMs": 200}})
    run = run_index(settings, wait=True)
    assert run.waited and run.report.batch_jobs == 1
    status = assert_all_embedded_once(settings, double)
    assert double.embed_requests() == [] and status["batch"]["jobs"][0]["state"] == "completed"


def test_a_restarted_writer_resumes_jobs_after_a_redeploy(
        workspace: Path, make_settings, broker_url, fleet, double) -> None:
    """The whole fleet goes away and Redis is emptied while a job runs; the writer that comes
    back resumes its polling with no index pass or status call."""
    double.batches.polls_per_step = None
    settings = batch_settings(make_settings, workspace, broker_url, double, wait=False)
    start_fleet(fleet)
    run = run_index(settings, wait=True)
    assert not run.waited and run.report.batch_jobs == 1
    fleet.stop()
    client = redis_client(broker_url)
    client.flushdb()
    client.close()
    double.batches.advance(10)
    fleet.env["MEMQ_CONFIG"] = str(settings.config_file)  # the writer finds its store
    fleet.procs.clear()
    start_fleet(fleet)
    deadline = time.time() + 60
    while time.time() < deadline:
        now = index_status(settings)
        if now["pending"] == now["batch"]["live"] == 0:
            break
        time.sleep(0.2)
    assert_all_embedded_once(settings, double)
    assert "resumed polling of 1 batch job(s)" in fleet.logs(None)


def test_fleet_of_writer_two_embed_workers_and_a_batch_worker_indexes_together(
        workspace: Path, make_settings, broker_url, fleet, double) -> None:
    """The fleet issue's shape on one machine: one writer, two embed workers and a batch worker,
    each its own process. Batch lines that fail go to the embed workers; every chunk ends
    embedded once, the writer stays single, and ``memq status`` sees every node and no work
    left on any queue."""
    add_notes(workspace, files=40)
    double.batches.plan = BatchPlan(line_error=lambda text: "# Note 2" in text)
    settings = batch_settings(make_settings, workspace, broker_url, double)
    fleet.env["MEMQ_BATCH_POLL_GRACE"] = "2"
    fleet.start(["store.0"], "writer")
    for name in ("embed-a", "embed-b"):
        fleet.start(["embed.openai"], name)
    fleet.start(["batch.openai"], "batch")
    run = run_index(settings, wait=True)
    assert run.report.batch_jobs == 1
    status = assert_all_embedded_once(settings, double)
    [row] = status["batch"]["jobs"]
    assert row["state"] == "completed" and row["toSync"] > 0 and double.embed_requests()
    fleet_s = fleet_status(settings)["fleet"]
    roles = sorted(node.split("-")[0] for node in fleet_s["nodes"])  # "embed-a-1f2e3d@host"
    assert roles == ["batch", "embed", "embed", "writer"], fleet_s["nodes"]
    assert [n for n, qs in fleet_s["nodes"].items() if "store.0" in qs] == \
        [n for n in fleet_s["nodes"] if n.startswith("writer")]
    assert all(fleet_s["queues"].get(q, 0) == 0
               for q in ("store.0", "control.0", "embed.openai", "batch.openai")), fleet_s["queues"]
    logs = {name: (fleet.log_dir / f"{name}.log").read_text() for name in ("batch", "writer")}
    assert "memq.batch_poll" in logs["batch"] and "memq.batch_update" in logs["writer"]
