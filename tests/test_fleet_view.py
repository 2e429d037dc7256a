"""``memq status --fleet``: every memory of the config, the writer of each shard (lease holder
and alive), queue depths per lane, pending chunks per memory. Real Redis, real workers, the
real CLI."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import load_settings
from pipeline.embeddings.registry import choose_provider
from pipeline.fleet import FleetDispatcher
from pipeline.ingest.producer import index_once
from pipeline.memory import Memory
from pipeline.store.engine import connect
from tests.conftest import REPO, Fleet
from tests.test_fleet import memq_argv, nodes_on, wait_for
from tests.test_shards import fleet_env, two_agents

pytestmark = pytest.mark.integration


def status_fleet(env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(memq_argv("status", "--fleet", *extra),
                          env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return done


def pending_in(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT count(*) FROM chunks WHERE state = 'pending'").fetchone()[0]
    finally:
        conn.close()


def test_fleet_view_shows_memories_writers_lanes_and_pending(
        tmp_path: Path, tiny_model: Path, broker_url: str, fleet: Fleet) -> None:
    config = two_agents(tmp_path, tiny_model)
    env = {**fleet_env(config, tmp_path), "MEMQ_BROKER_URL": broker_url}
    settings = {a: load_settings(config_file=config, agent=a, env=env) for a in ("alpha", "beta")}
    shard = {a: s.fleet.shard_of(a) for a, s in settings.items()}

    before: dict[str, Any] = json.loads(status_fleet(env, "--json").stdout)
    assert before["reachable"] is True
    assert [m["memory"] for m in before["memories"]] == ["alpha", "beta"]
    assert all(not m["indexed"] and m["last_job"] is None for m in before["memories"])
    assert not any(s.store.path.exists() for s in settings.values())  # status created nothing
    assert [(s["lease_holder"], s["consumers"], s["writer_alive"]) for s in before["shards"]] \
        == [(None, [], False), (None, [], False)]

    # A writer for shard 0 only, and no embed worker: every embedding job waits in its lane.
    writer = fleet.spawn(memq_argv("worker", "--role", "writer", "--shard", "0", "--name",
                                   "w0@%h"), "w0", env)
    wait_for(lambda: nodes_on(broker_url, "store.0"), "the writer of shard 0", fleet)
    bulk = 0
    with FleetDispatcher(broker_url) as dispatcher:
        for agent in ("alpha", "beta"):  # full passes: the bulk lane
            with Memory(settings=settings[agent], dispatcher=dispatcher) as memory:
                bulk += memory.index(wait=False).report.jobs
        note = settings["beta"].workspace / "memory" / "2026-12-03.md"
        note.write_text("- beta moved the cache to Valkey\n")
        db = connect(settings["beta"].store.path)
        try:  # a watcher's pass over one file: the interactive lane
            report = index_once(db, settings["beta"], choose_provider(settings["beta"]),
                                dispatcher.embed, paths=[note])
        finally:
            db.close()
    assert bulk >= 2 and report.jobs == 1

    view: dict[str, Any] = json.loads(status_fleet(env, "--json").stdout)
    assert view["queues"]["embed.local"] == {"interactive": 1, "bulk": bulk}
    rows = {m["memory"]: m for m in view["memories"]}
    for agent in ("alpha", "beta"):
        row = rows[agent]
        assert row["indexed"] and row["shard"] == shard[agent]
        assert row["pending"] == pending_in(settings[agent].store.path) > 0
        assert row["ready"] == 0 and row["chunks"] == row["pending"]
        assert row["last_job"]["kind"] == "local" and row["last_job"]["state"] == "done"
    assert view["totals"]["pending"] == rows["alpha"]["pending"] + rows["beta"]["pending"]
    s0, s1 = view["shards"]
    assert s0["lease_holder"].startswith("w0@") and s0["consumers"] == [s0["lease_holder"]]
    assert s0["writer_alive"] is True
    assert (s1["lease_holder"], s1["consumers"], s1["writer_alive"]) == (None, [], False)
    assert sorted(s0["memories"] + s1["memories"]) == ["alpha", "beta"]
    assert s0["memories"] == [a for a in ("alpha", "beta") if shard[a] == 0]

    human = status_fleet(env).stdout
    assert f"shard 0:  writer {s0['lease_holder']} (alive)" in human
    assert "shard 1:  writer none" in human
    assert f"embed.local           1 / {bulk}" in human
    assert "alpha" in human and "beta" in human

    # The writer killed outright: its lease outlives it, and the view says nobody answers.
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    wait_for(lambda: not nodes_on(broker_url, "store.0"), "the killed writer to go", fleet)
    dead: dict[str, Any] = json.loads(status_fleet(env, "--json").stdout)
    assert dead["shards"][0]["lease_holder"] == s0["lease_holder"]
    assert dead["shards"][0]["writer_alive"] is False
    assert "which does not answer" in status_fleet(env).stdout


def test_fleet_view_without_a_broker_lists_the_memories(tmp_path: Path,
                                                       tiny_model: Path) -> None:
    config = two_agents(tmp_path, tiny_model)
    env = {**fleet_env(config, tmp_path), "MEMQ_BROKER_URL": ""}
    view = json.loads(status_fleet(env, "--json").stdout)
    assert view["reachable"] is False and view["queues"] is None
    assert "no broker configured" in view["error"]
    assert [m["memory"] for m in view["memories"]] == ["alpha", "beta"]
    assert "broker:   none (unknown: no broker configured" in status_fleet(env).stdout
