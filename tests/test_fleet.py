"""The fleet on one machine, all real processes on a real Redis: a writer and two embedding
workers started with ``memq worker``, an index job enqueued with ``memq index --remote``,
Flower watching with basic auth; status and Flower must agree on what ran. And the writer
stays single: a second writer refuses to start."""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, Fleet, run_memq
from workers.monitor import fleet_status, queue_consumers

pytestmark = pytest.mark.integration

FLOWER_USER, FLOWER_PASSWORD = "ops", "flower-test-pw-8f3a"


def memq_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "memq.cli", *args]


def wait_for(check: Callable[[], Any], what: str, fleet: Fleet, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}\n{fleet.logs()}")


def store_env(workspace: Path, tmp_path: Path, tiny_model: Path) -> dict[str, str]:
    """The writer host's settings, as the environment a deployed writer would have."""
    return {"MEMQ_WORKSPACE": str(workspace), "MEMQ_STORE_PATH": str(tmp_path / "memq.sqlite"),
            "MEMQ_HOME": str(tmp_path / "home"), "MEMQ_PROVIDER": "local",
            "MEMQ_LOCAL_MODEL_PATH": str(tiny_model), "MEMQ_LOCAL_THREADS": "1"}


def nodes_on(broker_url: str, queue: str) -> list[str]:
    return sorted(n for n, qs in queue_consumers(broker_url).items() if queue in qs)


def test_second_writer_refuses_to_start(workspace: Path, tmp_path: Path, tiny_model: Path,
                                        broker_url: str, fleet: Fleet) -> None:
    env = store_env(workspace, tmp_path, tiny_model)
    first = fleet.spawn(memq_argv("worker", "--role", "writer", "--name", "writer-1@%h"),
                        "writer-1", env)
    wait_for(lambda: nodes_on(broker_url, "store.0"), "the first writer", fleet)
    second = subprocess.run(memq_argv("worker", "--role", "writer", "--name", "writer-2@%h"),
                            env={**os.environ, **env, "MEMQ_BROKER_URL": broker_url},
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert second.returncode != 0
    assert "refusing to start writer-2@" in second.stderr
    assert "writer-1@" in second.stderr and "already consumes queue 'store.0'" in second.stderr
    # A plain celery worker on `store` is refused the same way.
    plain = subprocess.run([sys.executable, "-m", "celery", "-A", "workers", "worker", "-Q",
                            "store.0", "-n", "plain@%h"],
                           env={**os.environ, **env, "MEMQ_BROKER_URL": broker_url},
                           capture_output=True, text=True, timeout=120, cwd=REPO)
    assert plain.returncode != 0 and "refusing to start plain@" in plain.stderr
    assert first.poll() is None, fleet.logs()
    assert [n.split("@")[0] for n in nodes_on(broker_url, "store.0")] == ["writer-1"]


def test_two_writers_started_together_leave_one(workspace: Path, tmp_path: Path,
                                               tiny_model: Path, broker_url: str,
                                               fleet: Fleet) -> None:
    """Started in the same instant, both pass the live check; the lease lets one through."""
    env = store_env(workspace, tmp_path, tiny_model)
    procs = {name: fleet.spawn(memq_argv("worker", "--role", "writer", "--name", f"{name}@%h"),
                               name, env) for name in ("twin-a", "twin-b")}
    live = wait_for(lambda: nodes_on(broker_url, "store.0"), "a writer", fleet)
    winner = live[0].split("@")[0]
    loser = "twin-b" if winner == "twin-a" else "twin-a"
    wait_for(lambda: procs[loser].poll() is not None, "the second writer to give up", fleet,
             timeout=90)
    assert procs[loser].returncode != 0
    log = (fleet.log_dir / f"{loser}.log").read_text()
    assert f"refusing to start {loser}@" in log and f"{winner}@" in log, log
    assert procs[winner].poll() is None
    assert [n.split("@")[0] for n in nodes_on(broker_url, "store.0")] == [winner]


def test_stale_writer_lease_is_waited_out_and_released(workspace: Path, tmp_path: Path,
                                                       tiny_model: Path, broker_url: str,
                                                       fleet: Fleet) -> None:
    """A lease left by a writer that died without shutting down expires; the new writer then
    takes it, and gives it back on a warm shutdown."""
    from workers.monitor import redis_client
    from workers.single_writer import lease_key

    LEASE_KEY = lease_key(0)

    client = redis_client(broker_url)
    client.set(LEASE_KEY, "ghost@gone", ex=8)
    env = store_env(workspace, tmp_path, tiny_model)
    fleet.spawn(memq_argv("worker", "--role", "writer", "--name", "heir@%h"), "heir", env)
    seen = "writer lease of shard 0 held by ghost@gone, which does not answer"

    def ghost_seen() -> bool:
        """Keep the ghost's lease alive until the starting writer has met it (however long
        its start takes on a busy machine); from then on it is left to expire."""
        if seen in (fleet.log_dir / "heir.log").read_text():
            return True
        holder = client.get(LEASE_KEY)
        assert holder in (None, b"ghost@gone"), f"the lease went to {holder!r} too early"
        client.set(LEASE_KEY, "ghost@gone", ex=8)
        return False

    wait_for(ghost_seen, "the writer meeting the ghost's lease", fleet)
    assert client.get(LEASE_KEY).decode() == "ghost@gone"
    wait_for(lambda: nodes_on(broker_url, "store.0"), "the writer after the lease expired", fleet)
    assert client.get(LEASE_KEY).decode().startswith("heir@")
    fleet.stop()
    assert client.get(LEASE_KEY) is None
    client.close()


def test_procfile_fleet_starts_and_indexes(workspace: Path, tmp_path: Path, tiny_model: Path,
                                           broker_url: str, fleet: Fleet) -> None:
    """`honcho start` on the repo's Procfile: every role comes up, an index job queued from
    elsewhere is run by its writer and embedded by its embed worker, its watcher indexes a
    note written afterwards, and its reader answers a search from a host without the store."""
    from pipeline.config import load_settings
    from workers.jobs_api import enqueue_index

    env = {**store_env(workspace, tmp_path, tiny_model), "FLOWER_PORT": str(free_port()),
           "FLOWER_BASIC_AUTH": f"{FLOWER_USER}:{FLOWER_PASSWORD}",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    fleet.spawn([sys.executable, "-m", "honcho", "-f", str(REPO / "Procfile"), "start"],
                "honcho", env)
    env["MEMQ_FLEET_SHARDS"] = "2"
    expected = {"writer-0": ["control.0", "store.0"], "writer-1": ["control.1", "store.1"],
                "reader-0": ["query.0"], "reader-1": ["query.1"],
                "embed-local": ["embed.local"],
                "batch-openai": ["batch.openai"]}
    # Embed and batch nodes are named with their pid (embed-local-4242@host): strip it.
    wait_for(lambda: {re.sub(r"^((?:embed|batch)-\w+)-\d+$", r"\1", n.split("@")[0]): q
                      for n, q in queue_consumers(broker_url).items()}
             == expected, "the Procfile's workers", fleet)

    def flower_up() -> bool:
        try:
            return http_get(f"http://127.0.0.1:{env['FLOWER_PORT']}/api/workers")[0] == 200
        except OSError:
            return False

    wait_for(flower_up, "the Procfile's Flower (with auth)", fleet)
    settings = load_settings(env={**env, "MEMQ_BROKER_URL": broker_url})
    job_id = enqueue_index(settings)

    def done() -> bool:
        s = fleet_status(settings)
        return bool(s["jobs"] and s["jobs"][0]["id"] == job_id
                    and s["jobs"][0]["state"] == "done" and s["pending"] == 0
                    and s["vectors"] == s["chunks"] > 0)

    wait_for(done, "the index job", fleet, timeout=120)

    # The Procfile's watcher follows the files: a note written now is indexed and embedded.
    (workspace / "memory" / "from-the-watcher.md").write_text("# Seen\nwritten while watched\n")

    def watched() -> bool:
        from pipeline.store.engine import connect

        db = connect(settings.store.path, want_vectors=False)
        try:
            return db.conn.execute(
                "SELECT count(*) FROM chunks WHERE path = 'memory/from-the-watcher.md' "
                "AND state = 'ready'").fetchone()[0] > 0
        finally:
            db.close()

    wait_for(watched, "the watcher to index a new note", fleet, timeout=60)

    # A host without the store (fleet.localShards none) asks the Procfile's reader.
    elsewhere = run_memq("search", "--json", "written while watched",
                         env={**env, "MEMQ_BROKER_URL": broker_url, "MEMQ_LOCAL_SHARDS": "none",
                              "MEMQ_HOME": str(tmp_path / "elsewhere")}, timeout=120)
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert json.loads(elsewhere.stdout)["results"][0]["path"] == "memory/from-the-watcher.md"
    assert not (tmp_path / "elsewhere").exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, params: dict[str, str] | None = None, *, auth: bool = True,
             timeout: float = 10) -> tuple[int, str]:
    """GET with Flower's basic auth; (status, body) also for HTTP errors."""
    if params:
        url += "?" + urllib.parse.urlencode(params)
    request = urllib.request.Request(url)
    if auth:
        token = base64.b64encode(f"{FLOWER_USER}:{FLOWER_PASSWORD}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def metric_sum(metrics: str, name: str, **labels: str) -> float:
    """Sum a Prometheus counter over the series whose labels include ``labels``."""
    total = 0.0
    for line in metrics.splitlines():
        if not line.startswith(name + "{"):
            continue
        series, value = line.rsplit(" ", 1)
        if all(f'{k}="{v}"' in series for k, v in labels.items()):
            total += float(value)
    return total


def test_fleet_indexes_together_and_flower_agrees(workspace: Path, tmp_path: Path,
                                                  tiny_model: Path, broker_url: str,
                                                  fleet: Fleet) -> None:
    env = store_env(workspace, tmp_path, tiny_model)
    port = free_port()
    flower = f"http://127.0.0.1:{port}"
    fleet.spawn([sys.executable, "-m", "celery", "-A", "workers", "flower", f"--port={port}",
                 "--address=127.0.0.1", "--inspect_timeout=5000"], "flower",
                {"FLOWER_BASIC_AUTH": f"{FLOWER_USER}:{FLOWER_PASSWORD}"})
    fleet.spawn(memq_argv("worker", "--role", "writer"), "writer", env)
    for name in ("embed-a", "embed-b"):
        fleet.spawn(memq_argv("worker", "--role", "embed", "--provider", "local",
                              "--name", f"{name}@%h"), name, env)

    def flower_up() -> bool:
        try:
            return http_get(f"{flower}/healthcheck", auth=False, timeout=2)[0] == 200
        except OSError:
            return False

    wait_for(flower_up, "Flower", fleet)
    wait_for(lambda: len(queue_consumers(broker_url)) == 3, "three workers", fleet)

    out = run_memq("index", "--remote", "--json",
                   env={**env, "MEMQ_BROKER_URL": broker_url}, timeout=60)
    assert out.returncode == 0 and "no worker consumes" not in out.stderr, out.stderr
    job_id = json.loads(out.stdout)["job"]

    settings_env = {**env, "MEMQ_BROKER_URL": broker_url}
    # `memq jobs --follow` returns once the job ran and every vector is written.
    follow = run_memq("jobs", "--follow", job_id, env=settings_env, timeout=180)
    assert follow.returncode == 0, follow.stderr + fleet.logs()
    assert follow.stdout.startswith(f"{job_id}  remote done "), follow.stdout
    # A loaded machine may answer a 1 s inspect late: give the final check some room.
    from pipeline.config import load_settings

    status = fleet_status(load_settings(env=settings_env), timeout=3)
    assert status["pending"] == 0 and status["vectors"] == status["chunks"] > 0
    job = status["jobs"][0]
    assert job["id"] == job_id and job["state"] == "done"
    assert job["kind"] == "remote" and job["host"].startswith("writer@")
    assert job["chunksQueued"] == status["chunks"] > 0 and job["embedJobs"] > 0
    fleet_s = status["fleet"]
    assert fleet_s["workers"] == 3
    assert sorted(n.split("@")[0] for n in fleet_s["nodes"]) == ["embed-a", "embed-b", "writer"]
    assert all(fleet_s["queues"][q] == 0 for q in ("store.0", "control.0", "embed.local"))
    assert status["pendingByProvider"] == {"local": {"chunks": 0, "queuedJobs": 0}}

    # The CLI shows the same job and fleet.
    jobs = json.loads(run_memq("jobs", "--json", env=settings_env, timeout=60).stdout)
    assert jobs["jobs"][0]["id"] == job_id and jobs["queued"] == 0
    text = run_memq("status", "--timeout", "3", env=settings_env, timeout=60).stdout
    assert re.search(r"^workers:   3 \(embed-a@\S+ \[embed.local\]; embed-b@\S+ "
                     r"\[embed.local\]; writer@\S+ \[control.0, store.0\]\)$", text, re.M), text
    assert re.search(rf"^  {job_id}  remote done ", text, re.M), text

    # Flower: auth is enforced, the three workers are listed, and the tasks that ran are the
    # ones status counted: one index job, one embed task and one write per embedding job.
    assert http_get(f"{flower}/api/workers", auth=False)[0] == 401
    code, body = http_get(f"{flower}/api/workers", {"refresh": "1"}, timeout=30)
    assert code == 200, body
    workers = json.loads(body)
    assert sorted(n.split("@")[0] for n in workers) == ["embed-a", "embed-b", "writer"]

    def tasks(name: str) -> dict[str, Any]:
        code, body = http_get(f"{flower}/api/tasks", {"taskname": name, "state": "SUCCESS"})
        assert code == 200, body
        return json.loads(body)

    n_jobs = job["embedJobs"]
    wait_for(lambda: len(tasks("memq.write_vectors")) == n_jobs, "Flower's task events", fleet,
             timeout=30)
    index_tasks = tasks("memq.index_memory")
    assert list(index_tasks) == [job_id]
    assert index_tasks[job_id]["worker"].startswith("writer@")
    embeds = tasks("memq.embed_chunks")
    assert len(embeds) == n_jobs
    assert {t["worker"].split("@")[0] for t in embeds.values()} <= {"embed-a", "embed-b"}
    assert all(t["worker"].startswith("writer@") for t in tasks("memq.write_vectors").values())

    code, metrics = http_get(f"{flower}/metrics", auth=False)
    assert code == 200
    assert metric_sum(metrics, "flower_events_total", task="memq.embed_chunks",
                      type="task-succeeded") == n_jobs
    assert metric_sum(metrics, "flower_events_total", task="memq.index_memory",
                      type="task-succeeded") == 1

    # A local `memq index` against the same fleet: a progress bar with rate and ETA when asked
    # for (stderr is not a TTY here), none otherwise; both runs are logged as jobs.
    note = workspace / "memory" / "2026-11-10.md"
    note.write_text(note.read_text() + "\n- The greenhouse sensor reports every 5 minutes.\n")
    shown = run_memq("index", "--progress", env=settings_env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"embedding: 100%.*\| (\d+)/\1 \[\d\d:\d\d<00:00, +[\d.]+chunk/s\]",
                     shown.stderr), shown.stderr
    note.write_text(note.read_text() + "\n- Its battery lasts a year.\n")
    quiet = run_memq("index", env=settings_env, timeout=120)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    jobs = json.loads(run_memq("jobs", "--json", env=settings_env, timeout=60).stdout)["jobs"]
    assert [j["kind"] for j in jobs[:3]] == ["local", "local", "remote"]
    assert all(j["state"] == "done" and j["chunksQueued"] > 0 for j in jobs[:2])


def test_worker_flags_reach_the_worker(workspace: Path, tmp_path: Path, tiny_model: Path,
                                       broker_url: str, fleet: Fleet) -> None:
    """`memq worker --workspace DIR --config FILE`, started from another directory, runs its
    index jobs on DIR with FILE's settings (the flags travel to the worker, not lost)."""
    config = tmp_path / "memq.json"
    config.write_text(json.dumps({"provider": "local", "local": {"modelPath": str(tiny_model)},
                                  "store": {"path": str(tmp_path / "flags.sqlite")}}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"MEMQ_HOME": str(tmp_path / "home"), "MEMQ_LOCAL_THREADS": "1"}
    flags = ["--workspace", str(workspace), "--config", str(config)]
    for role, name in ((["--role", "writer"], "writer"),
                       (["--role", "embed", "--provider", "local"], "embed")):
        proc = subprocess.Popen(memq_argv("worker", *role, *flags),
                                env={**os.environ, **env, "MEMQ_BROKER_URL": broker_url},
                                cwd=elsewhere, stdout=subprocess.DEVNULL,
                                stderr=open(fleet.log_dir / f"{name}.log", "ab"))  # noqa: SIM115
        fleet.procs.append(proc)
    wait_for(lambda: nodes_on(broker_url, "store.0") and nodes_on(broker_url, "embed.local"),
             "the workers", fleet)
    done = run_memq("index", "--remote", *flags, env={**env, "MEMQ_BROKER_URL": broker_url})
    assert done.returncode == 0, done.stderr
    from pipeline.config import load_settings

    settings = load_settings(config_file=config, workspace=workspace, env=env)

    def indexed() -> bool:
        s = fleet_status(settings)
        return bool(s["indexed"] and s["files"] > 0 and s["pending"] == 0 and s["vectors"] > 0)

    wait_for(indexed, "the index job on the flagged workspace", fleet, timeout=120)
    assert fleet_status(settings)["workspace"] == str(workspace)
    assert not (elsewhere / ".memq").exists() and list(elsewhere.iterdir()) == []
