"""Index jobs and fleet status without workers: the job log, queue depths on a real Redis,
enqueueing, and a broker that is down (status says "unknown" instead of hanging)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from memq.cli import worker_command
from pipeline.store import joblog
from pipeline.store.engine import connect
from tests.conftest import run_memq
from workers.indexing import run_index
from workers.jobs_api import EnqueueFailed, JobError, enqueue_index, follow_job
from workers.monitor import broker_status, fleet_status, redis_client


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def test_job_log_records_done_and_failed(tmp_path: Path) -> None:
    db = connect(tmp_path / "s.sqlite")
    with joblog.logged(db, "a", "remote", "writer@h") as counts:
        assert joblog.get_job(db, "a")["state"] == "running"
        counts.update(files=3, chunks_queued=7)
    with pytest.raises(ValueError), joblog.logged(db, "b", "local", None):
        raise ValueError("model file is missing")
    a, b = joblog.get_job(db, "a"), joblog.get_job(db, "b")
    assert (a["state"], a["files"], a["chunks_queued"], a["error"]) == ("done", 3, 7, None)
    assert a["finished_at"] >= a["started_at"]
    assert (b["state"], b["error"]) == ("failed", "ValueError: model file is missing")
    assert joblog.last_error(db)["id"] == "b"
    assert [j["id"] for j in joblog.recent_jobs(db)] == ["b", "a"]


def test_job_log_keeps_the_newest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(joblog, "KEEP_JOBS", 3)
    db = connect(tmp_path / "s.sqlite")
    for i in range(5):
        joblog.record_start(db, f"j{i}", "local", None)
    assert {j["id"] for j in joblog.recent_jobs(db, 10)} == {"j2", "j3", "j4"}


def test_local_runs_are_logged_and_listed(workspace: Path, make_settings) -> None:
    settings = make_settings(workspace, provider="none")
    run = run_index(settings)
    assert run.job_id
    s = fleet_status(settings)
    assert s["jobs"][0]["id"] == run.job_id and s["jobs"][0]["state"] == "done"
    assert s["jobs"][0]["files"] == run.report.files > 0
    assert s["fleet"]["reachable"] is False and s["fleet"]["workers"] is None


def test_a_run_that_swaps_the_store_is_listed_afterwards(workspace: Path,
                                                        make_settings) -> None:
    """A run whose rebuild swaps a new store generation in mid-run (a chunking change here)
    finishes its log record where `memq jobs` reads it, for the first swap of a plain store
    file and for a later one between generations."""
    run_index(make_settings(workspace, provider="none"))
    for tokens in (64, 128):
        settings = make_settings(workspace, provider="none",
                                 chunking={"tokens": tokens, "overlap": 0})
        run = run_index(settings)
        assert run.rebuild is not None and run.rebuild.done
        assert settings.store.path.is_symlink()  # the store path names a new generation
        cli = run_memq("jobs", "--json", env={"MEMQ_CONFIG": str(settings.config_file),
                                              "MEMQ_WORKSPACE": str(workspace)}, timeout=60)
        assert cli.returncode == 0, cli.stderr
        listed = json.loads(cli.stdout)["jobs"]
        assert listed[0]["id"] == run.job_id and listed[0]["state"] == "done", listed
    assert len(listed) == 3  # the first run and both rebuilding runs


def test_job_rows_kept_in_an_older_store_are_carried_over(tmp_path: Path) -> None:
    store = tmp_path / "memq.sqlite"
    old = connect(store)
    joblog.record_start(old, "before-upgrade", "remote", "writer@h")
    joblog.record_finish(old, "before-upgrade", {"files": 4})
    old.close()
    with joblog.opened(store) as log:
        assert joblog.get_job(log, "before-upgrade")["files"] == 4
    assert joblog.log_path(store).exists()


def test_an_index_pass_prepares_the_job_log_once(workspace: Path, make_settings,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """One pass creates the job log's table once, not again for its start and its finish
    (schema work a process indexing many memories would pay for each)."""
    settings = make_settings(workspace, provider="none")
    prepared: list[Path] = []
    real = joblog.ensure_table
    monkeypatch.setattr(joblog, "ensure_table", lambda db: (prepared.append(db.path), real(db)))
    run = run_index(settings)
    assert prepared == [joblog.log_path(settings.store.path)]
    with joblog.opened(settings.store.path) as log:
        assert joblog.get_job(log, run.job_id)["state"] == "done"


def test_an_older_store_indexed_again_keeps_its_job_rows(workspace: Path,
                                                         make_settings) -> None:
    """A store an older memq logged its jobs in, indexed by this one: the old rows are carried
    over into the job log, beside the new run."""
    settings = make_settings(workspace, provider="none")
    old = connect(settings.store.path)
    joblog.record_start(old, "before-upgrade", "local", None)
    joblog.record_finish(old, "before-upgrade", {"files": 4})
    old.close()
    run = run_index(settings)
    with joblog.opened(settings.store.path) as log:
        assert [j["id"] for j in joblog.recent_jobs(log)] == [run.job_id, "before-upgrade"]


def test_writer_role_consumes_store_and_control() -> None:
    argv = worker_command("writer", None, None, "INFO")
    assert argv[argv.index("-Q") + 1] == "store.0,control.0" and argv[argv.index("-c") + 1] == "1"
    embed = worker_command("embed", "local", 2, "INFO", name="embed-a@%h")
    assert embed[embed.index("-Q") + 1] == "embed.local"
    assert embed[embed.index("-n") + 1] == "embed-a@%h"


def test_redis_client_understands_kombu_urls(tmp_path: Path) -> None:
    sock = redis_client("redis+socket:///tmp/x/broker.sock?virtual_host=2")
    assert sock.connection_pool.connection_kwargs["path"] == "/tmp/x/broker.sock"
    assert sock.connection_pool.connection_kwargs["db"] == 2
    tcp = redis_client("redis://:pw@redis.internal:6380/5")
    kw = tcp.connection_pool.connection_kwargs
    assert (kw["host"], kw["port"], kw["db"], kw["password"]) == ("redis.internal", 6380, 5, "pw")
    with pytest.raises(ValueError, match="Redis broker"):
        redis_client("amqp://guest@localhost//")


def test_unreachable_broker_is_unknown_not_a_hang(workspace: Path, tmp_path: Path) -> None:
    url = f"redis://:s3cret-pass@127.0.0.1:{_closed_port()}/0"
    status = broker_status(url, timeout=0.5)
    assert status["reachable"] is False and status["workers"] is None
    assert status["queues"] is None and "Connection" in status["error"]
    assert "s3cret-pass" not in json.dumps(status)
    env = {"MEMQ_HOME": str(tmp_path / "home"), "MEMQ_PROVIDER": "none",
           "MEMQ_BROKER_URL": url}
    assert run_memq("index", "--workspace", str(workspace), env=env).returncode == 0
    out = run_memq("status", "--workspace", str(workspace), env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "fleet:     unknown (ConnectionError" in out.stdout
    assert "s3cret-pass" not in out.stdout + out.stderr
    jobs = run_memq("jobs", "--workspace", str(workspace), "--json", env=env, timeout=60)
    data = json.loads(jobs.stdout)
    assert data["queued"] is None and data["waiting"] is None
    assert data["jobs"][0]["kind"] == "local"
    remote = run_memq("index", "--remote", "--workspace", str(workspace), env=env, timeout=60)
    assert remote.returncode == 2 and "did not take the job" in remote.stderr
    assert "s3cret-pass" not in remote.stderr


def test_enqueue_without_broker_is_refused(workspace: Path, make_settings) -> None:
    with pytest.raises(EnqueueFailed, match="MEMQ_BROKER_URL"):
        enqueue_index(make_settings(workspace, provider="none"))


@pytest.mark.integration
def test_queue_depths_on_real_redis(workspace: Path, make_settings, tiny_model,
                                    broker_url: str) -> None:
    """No workers: what was enqueued is counted in its queue, and nobody is listening."""
    settings = make_settings(workspace, provider="local", brokerUrl=broker_url,
                             local={"modelPath": str(tiny_model)})
    job_id = enqueue_index(settings, retry_failed=True)
    run = run_index(settings, wait=False)
    assert run.report.jobs > 0
    s = fleet_status(settings)
    fleet = s["fleet"]
    assert fleet["reachable"] is True and fleet["workers"] == 0
    assert fleet["queues"]["control.0"] == 1 and fleet["queues"]["store.0"] == 0
    assert fleet["queues"]["embed.local"] == run.report.jobs
    assert s["pending_by_provider"] == {"local": {"chunks": run.report.chunks_queued,
                                                  "queued_jobs": run.report.jobs}}
    assert fleet["waiting_jobs"] == [{"id": job_id, "task": "memq.index_memory"}]
    env = {"MEMQ_BROKER_URL": broker_url, "MEMQ_STORE_PATH": str(settings.store.path),
           "MEMQ_WORKSPACE": str(workspace), "MEMQ_PROVIDER": "none"}
    cli = run_memq("index", "--remote", "--json", env=env, timeout=60)
    assert cli.returncode == 0 and "no worker consumes 'control.0' yet" in cli.stderr
    second = json.loads(cli.stdout)["job"]
    jobs = json.loads(run_memq("jobs", "--json", env=env, timeout=60).stdout)
    assert jobs["queued"] == 2
    assert [w["id"] for w in jobs["waiting"]] == [job_id, second]  # oldest first
    assert jobs["jobs"][0]["id"] == run.job_id and jobs["jobs"][0]["kind"] == "local"


def test_following_an_unknown_job_fails_clearly(workspace: Path, make_settings,
                                                broker_url: str) -> None:
    settings = make_settings(workspace, provider="none", brokerUrl=broker_url)
    run_index(settings)
    with pytest.raises(JobError, match="unknown job nope"):
        follow_job(settings, "nope", unknown_after=0.5)
    failed = "f" * 32
    with joblog.opened(settings.store.path) as log:
        joblog.record_start(log, failed, "remote", "writer@h")
        joblog.record_finish(log, failed, error="ConfigError: bad provider")
    job = follow_job(settings, failed)
    assert (job["state"], job["error"]) == ("failed", "ConfigError: bad provider")
    with pytest.raises(JobError, match="no store at"):
        follow_job(make_settings(workspace, provider="none",
                                 store={"path": str(workspace.parent / "none.sqlite")}), failed)
