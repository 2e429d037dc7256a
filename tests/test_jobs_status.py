"""Index jobs and fleet status without workers: the job log, queue depths on a real Redis,
enqueueing, and a broker that is down (status says "unknown" instead of hanging)."""

from __future__ import annotations

import json
import socket
import sqlite3
from pathlib import Path

import pytest

from memq.cli import worker_command
from pipeline.errors import UnknownJob
from pipeline.fleet.job_log import JobLog
from pipeline.memory import Memory
from pipeline.routing import new_job_id
from pipeline.store import joblog
from tests.conftest import run_memq
from workers.indexing import run_index
from workers.jobs_api import EnqueueFailed, enqueue_index
from workers.monitor import broker_status, fleet_status, redis_client


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def test_job_log_records_done_and_failed_per_memory(tmp_path: Path) -> None:
    """Celery's database result backend as memq's job log: states, counts and errors, the
    newest first, and one memory's jobs only (a name with LIKE's wildcards included)."""
    log = JobLog(f"db+sqlite:///{tmp_path / 'jobs.sqlite'}")
    a, b, other = new_job_id("ma_n"), new_job_id("ma_n"), new_job_id("main")
    meta = log.started(a, memory="ma_n", origin="remote", host="writer@h")
    assert log.get(a).state == "running" and log.get(a).celery_state == "STARTED"
    log.finished(a, {**meta, "files": 3, "chunks_queued": 7})
    meta_b = log.started(b, memory="ma_n", origin="local")
    log.failed(b, "ValueError: model file is missing", meta_b)
    log.finished(other, {**log.started(other, memory="main", origin="local")})
    done, failed = log.get(a), log.get(b)
    assert (done.state, done.result["files"], done.result["chunks_queued"], done.error) == (
        "done", 3, 7, None)
    assert done.finished_at >= done.started_at and done.origin == "remote"
    assert done.host == "writer@h"
    assert (failed.state, failed.error, failed.origin) == (
        "failed", "ValueError: model file is missing", "local")
    assert log.last_error("ma_n").id == b and log.last_error("main") is None
    assert [j.id for j in log.recent("ma_n")] == [b, a]
    assert [j.id for j in log.recent("main")] == [other]  # "ma_n" is not a pattern for "main"
    assert [j.id for j in log.recent()] == [other, b, a]
    log.close()


def test_a_job_log_of_one_store_sees_its_jobs_and_old_rows(tmp_path: Path) -> None:
    """Two stores' memories named ``main`` in one job log: each store's log lists, counts and
    finds its own jobs, and rows that name no store (an older memq's) for both; the log of no
    store sees everything."""
    url = f"db+sqlite:///{tmp_path / 'jobs.sqlite'}"
    plain, one, two = (JobLog(url), JobLog(url, store=tmp_path / "one.sqlite"),
                       JobLog(url, store=tmp_path / "two.sqlite"))
    old = new_job_id("main")
    plain.finished(old, plain.started(old, memory="main", origin="local"))
    mine = [new_job_id("main") for _ in range(60)]  # more than a page of the other store's
    for job in mine:
        one.finished(job, one.started(job, memory="main", origin="local"))
    theirs = new_job_id("main")
    two.failed(theirs, "ValueError: x", two.started(theirs, memory="main", origin="local"))
    assert [j.id for j in two.recent("main")] == [theirs, old]
    assert two.recent("main")[0].store == str(tmp_path / "two.sqlite")
    assert [j.id for j in one.recent("main", 3)] == mine[:-4:-1]
    assert [j.id for j in one.recent("main", 100)] == [*reversed(mine), old]
    assert one.last_error("main") is None and two.last_error("main").id == theirs
    assert one.get(theirs) is None and two.get(mine[0]) is None and one.get(old) is not None
    assert len(plain.recent("main", 100)) == 62 and plain.get(theirs).state == "failed"
    for log in (plain, one, two):
        log.close()


def test_finished_jobs_expire_and_running_ones_stay(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite"
    log = JobLog(f"db+sqlite:///{path}", keep_days=2)
    old, young, running = (new_job_id("main") for _ in range(3))
    for job in (old, young):
        log.finished(job, log.started(job, memory="main", origin="local"))
    log.started(running, memory="main", origin="local")
    with sqlite3.connect(path) as db:  # as if `old` had ended three days ago
        db.execute("UPDATE memq_jobs SET date_done = datetime('now', '-3 days') "
                   "WHERE task_id = ?", (old,))
    log.expire()
    assert {j.id for j in log.recent("main")} == {young, running}
    log.close()


def test_reading_a_job_log_never_creates_it(tmp_path: Path) -> None:
    log = JobLog(f"db+sqlite:///{tmp_path / 'nowhere' / 'jobs.sqlite'}")
    assert log.recent("main") == [] and log.get(new_job_id("main")) is None
    assert not (tmp_path / "nowhere").exists()


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


#: The job log of memq up to this version: a table in the store, later in a file beside it.
OLD_JOB_LOG = """
CREATE TABLE index_jobs (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, state TEXT NOT NULL, host TEXT,
    started_at REAL NOT NULL, finished_at REAL, files INTEGER, changed INTEGER,
    deleted INTEGER, chunks_queued INTEGER, chunks_cached INTEGER, embed_jobs INTEGER,
    error TEXT)
"""


def _old_job_rows(path: Path, *rows: tuple[str, str, str | None]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:
        db.execute(OLD_JOB_LOG)
        for job_id, state, error in rows:
            db.execute("INSERT INTO index_jobs(id, kind, state, host, started_at, finished_at, "
                       "files, error) VALUES (?, 'remote', ?, 'writer@h', 1000.0, 1010.0, 4, ?)",
                       (job_id, state, error))


def test_old_job_logs_are_carried_over_once(workspace: Path, make_settings) -> None:
    """The rows an older memq kept inside the store and in the file beside it are recorded in
    the job log by the next index pass, with their own times, then the old logs are gone."""
    settings = make_settings(workspace, provider="none")
    _old_job_rows(settings.store.path, ("in-store", "done", None))
    _old_job_rows(joblog.log_path(settings.store.path), ("beside", "failed", "ConfigError: x"),
                  ("cut", "running", None))
    run = run_index(settings)
    s = fleet_status(settings)
    jobs = {j["id"]: j for j in s["jobs"]}
    assert next(iter(jobs)) == run.job_id
    assert jobs["main:in-store"]["state"] == "done" and jobs["main:in-store"]["files"] == 4
    assert jobs["main:in-store"]["startedAt"] == 1000.0
    assert jobs["main:in-store"]["finishedAt"] == 1010.0
    assert (jobs["main:beside"]["state"], jobs["main:beside"]["error"]) == (
        "failed", "ConfigError: x")
    assert jobs["main:cut"]["state"] == "failed" and "interrupted" in jobs["main:cut"]["error"]
    assert not joblog.log_path(settings.store.path).exists()
    with sqlite3.connect(settings.store.path) as db:
        assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'index_jobs'"
                          ).fetchone()[0] == 0
    run_index(settings)  # read once: nothing is carried over twice
    assert len(fleet_status(settings)["jobs"]) == 5


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
    assert s["pendingByProvider"] == {"local": {"chunks": run.report.chunks_queued,
                                                  "queuedJobs": run.report.jobs}}
    assert fleet["waitingJobs"] == [{"id": job_id, "task": "memq.index_memory"}]
    env = {"MEMQ_BROKER_URL": broker_url, "MEMQ_STORE_PATH": str(settings.store.path),
           "MEMQ_WORKSPACE": str(workspace), "MEMQ_PROVIDER": "none",
           "MEMQ_RESULT_BACKEND": settings.result_backend}
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
    with Memory(settings=settings, in_memory=False) as memory:
        with pytest.raises(UnknownJob, match="unknown job main:nope"):
            memory.follow_job("main:nope", unknown_after=0.5)
        with pytest.raises(UnknownJob, match="not a job of memory 'main'"):
            memory.follow_job(new_job_id("other"), unknown_after=0.5)
        failed = new_job_id("main")
        memory.jobs.failed(failed, "ConfigError: bad provider",
                           memory.jobs.started(failed, memory="main", origin="remote"))
        job = memory.follow_job(failed)
    assert (job.state, job.error) == ("failed", "ConfigError: bad provider")


def test_two_workspaces_named_main_on_one_host_never_mix_jobs(tmp_path: Path) -> None:
    """Two workspaces on one host, each memory named ``main`` by default, one data dir (one job
    log): ``memq jobs``, ``memq status`` and ``memq jobs --follow`` of one never show the
    other's jobs."""
    env = {"MEMQ_HOME": str(tmp_path / "home"), "MEMQ_PROVIDER": "none",
           "MEMQ_BROKER_URL": "", "REDIS_URL": ""}
    ids = {}
    for name in ("first", "second"):
        ws = tmp_path / name
        (ws / "memory").mkdir(parents=True)
        (ws / "MEMORY.md").write_text(f"# {name}\n\nThe {name} workspace's notes.\n")
        done = run_memq("index", "--workspace", str(ws), "--json", env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        ids[name] = json.loads(done.stdout)["job"]
    assert all(job.startswith("main:") for job in ids.values())
    for name, other in (("first", "second"), ("second", "first")):
        ws = str(tmp_path / name)
        jobs = json.loads(run_memq("jobs", "--workspace", ws, "--json", env=env,
                                   timeout=60).stdout)["jobs"]
        assert [j["id"] for j in jobs] == [ids[name]], jobs
        status = json.loads(run_memq("status", "--workspace", ws, "--json", env=env,
                                     timeout=60).stdout)
        assert [j["id"] for j in status["jobs"]] == [ids[name]], status["jobs"]
        theirs = run_memq("jobs", "--workspace", ws, "--follow", ids[other], "--json",
                          env=env, timeout=120)
        assert theirs.returncode == 2 and not theirs.stdout, theirs.stdout
        assert f"unknown job {ids[other]}" in theirs.stderr
