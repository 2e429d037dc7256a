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
from pipeline.fleet.broker import FleetDispatcher
from pipeline.ingest.producer import index_once
from pipeline.memory import Memory
from pipeline.store.engine import connect
from tests.conftest import REPO, Fleet
from tests.test_fleet import memq_argv, nodes_on, wait_for
from tests.test_shards import fleet_env, two_agents

pytestmark = pytest.mark.integration


def status_fleet(env: dict[str, str], *extra: str, code: int = 0
                 ) -> subprocess.CompletedProcess[str]:
    """``memq status --fleet``, which must exit with ``code`` (0: every shard has a live
    writer and reader; 3: the view is blind somewhere)."""
    done = subprocess.run(memq_argv("status", "--fleet", *extra),
                          env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
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

    before: dict[str, Any] = json.loads(status_fleet(env, "--json", code=3).stdout)
    assert before["reachable"] is True
    assert [m["memory"] for m in before["memories"]] == ["alpha", "beta"]
    assert all(not m["indexed"] and m["lastJob"] is None for m in before["memories"])
    assert not any(s.store.path.exists() for s in settings.values())  # status created nothing
    assert [(s["leaseHolder"], s["consumers"], s["writerAlive"]) for s in before["shards"]] \
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

    view: dict[str, Any] = json.loads(status_fleet(env, "--json", code=3).stdout)
    assert view["queues"]["embed.local"] == {"interactive": 1, "bulk": bulk}
    rows = {m["memory"]: m for m in view["memories"]}
    for agent in ("alpha", "beta"):
        row = rows[agent]
        assert row["indexed"] and row["shard"] == shard[agent]
        assert row["pending"] == pending_in(settings[agent].store.path) > 0
        assert row["ready"] == 0 and row["chunks"] == row["pending"]
        assert row["lastJob"]["kind"] == "local" and row["lastJob"]["state"] == "done"
    assert view["totals"]["pending"] == rows["alpha"]["pending"] + rows["beta"]["pending"]
    s0, s1 = view["shards"]
    assert s0["leaseHolder"].startswith("w0@") and s0["consumers"] == [s0["leaseHolder"]]
    assert s0["writerAlive"] is True
    assert (s1["leaseHolder"], s1["consumers"], s1["writerAlive"]) == (None, [], False)
    assert sorted(s0["memories"] + s1["memories"]) == ["alpha", "beta"]
    assert s0["memories"] == [a for a in ("alpha", "beta") if shard[a] == 0]

    human = status_fleet(env, code=3).stdout
    assert f"shard 0:  writer {s0['leaseHolder']} (alive)" in human
    assert "shard 1:  writer none" in human
    assert f"embed.local           1 / {bulk}" in human
    assert "alpha" in human and "beta" in human

    # The writer killed outright: its lease outlives it, and the view says nobody answers.
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    wait_for(lambda: not nodes_on(broker_url, "store.0"), "the killed writer to go", fleet)
    dead: dict[str, Any] = json.loads(status_fleet(env, "--json", code=3).stdout)
    assert dead["shards"][0]["leaseHolder"] == s0["leaseHolder"]
    assert dead["shards"][0]["writerAlive"] is False
    assert "which does not answer" in status_fleet(env, code=3).stdout


def test_fleet_view_without_a_broker_lists_the_memories(tmp_path: Path,
                                                       tiny_model: Path) -> None:
    config = two_agents(tmp_path, tiny_model)
    env = {**fleet_env(config, tmp_path), "MEMQ_BROKER_URL": ""}
    view = json.loads(status_fleet(env, "--json").stdout)
    assert view["reachable"] is False and view["queues"] is None
    assert "no broker configured" in view["error"]
    assert [m["memory"] for m in view["memories"]] == ["alpha", "beta"]
    assert "broker:   none (unknown: no broker configured" in status_fleet(env).stdout


def _memq(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(memq_argv(*args), env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=120, cwd=REPO)


def test_fleet_view_shows_each_shards_readers_and_exits_3_when_it_cannot_see(
        tmp_path: Path, tiny_model: Path, broker_url: str, fleet: Fleet) -> None:
    """Issue 33, 7: a line per shard's reader; a shard without a live reader, or a broker that
    cannot be reached, is exit 3 and says so (it was exit 0 with "memories: 1 (0 chunks")."""
    config = two_agents(tmp_path, tiny_model)
    env = {**fleet_env(config, tmp_path), "MEMQ_BROKER_URL": broker_url}
    fleet.spawn(memq_argv("worker", "--role", "writer", "--name", "w@%h"), "w", env)
    reader = fleet.spawn(memq_argv("worker", "--role", "reader", "--name", "r@%h"), "r", env)
    wait_for(lambda: nodes_on(broker_url, "store.1") and nodes_on(broker_url, "query.1"),
             "a writer and a reader of both shards", fleet)
    seen: dict[str, Any] = json.loads(status_fleet(env, "--json").stdout)
    assert seen["problems"] == []
    for shard in seen["shards"]:
        assert shard["writerAlive"] is True and shard["readers"][0].startswith("r@")
    human = status_fleet(env).stdout
    node = seen["shards"][0]["readers"][0]
    assert f"shard 0:  reader {node} (alive)" in human
    assert f"shard 1:  reader {node} (alive)" in human

    reader.terminate()
    reader.wait(30)
    wait_for(lambda: not nodes_on(broker_url, "query.0"), "the reader to go", fleet)
    blind: dict[str, Any] = json.loads(status_fleet(env, "--json", code=3).stdout)
    assert [s["readers"] for s in blind["shards"]] == [[], []]
    assert "shard 0: no live reader" in blind["problems"]
    human = status_fleet(env, code=3).stdout
    assert "shard 0:  reader none" in human and "shard 1:  reader none" in human

    # The broker's port refuses: exit 3, and the view says the broker cannot be reached.
    gone = {**env, "MEMQ_BROKER_URL": "redis://:s3cret@127.0.0.1:1/0"}
    down = status_fleet(gone, code=3)
    assert "the broker redis://:***@127.0.0.1:1/0 cannot be reached" in down.stdout
    assert "s3cret" not in down.stdout + down.stderr and "Traceback" not in down.stderr


def test_broker_mistakes_are_one_line_that_names_the_broker(
        tmp_path: Path, tiny_model: Path, broker_url: str, redis_server: str,
        fleet: Fleet) -> None:
    """Issue 33, 8: a refused port says the broker cannot be reached (not "start a reader"); a
    broker on which no memq worker runs at all (a wrong database number) is told apart from
    one shard's missing reader; each in one line, exit 3."""
    from tests.conftest import leased_db

    config = two_agents(tmp_path, tiny_model)
    agent_host = {**fleet_env(config, tmp_path), "MEMQ_LOCAL_SHARDS": "none",
                  "MEMQ_QUERY_TIMEOUT_MS": "2000"}
    alpha_shard = load_settings(config_file=config, agent="alpha",
                                env=agent_host).fleet.shard_of("alpha")
    # The right broker, with a writer of alpha's shard (on the store's host) but no reader.
    fleet.spawn(memq_argv("worker", "--role", "writer", "--shard", str(alpha_shard), "--name",
                          "w@%h"), "w", fleet_env(config, tmp_path))
    wait_for(lambda: nodes_on(broker_url, f"store.{alpha_shard}"), "the writer", fleet)

    def one_line(url: str, *args: str) -> str:
        done = _memq({**agent_host, "MEMQ_BROKER_URL": url}, *args)
        assert done.returncode == 3, (url, args, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        return lines[0]

    refused = "redis://:s3cret@127.0.0.1:1/0"
    for args in (("search", "--agent", "alpha", "billing"), ("status", "--agent", "alpha")):
        said = one_line(refused, *args)
        assert "the broker redis://:***@127.0.0.1:1/0 cannot be reached" in said
        assert "--role reader" not in said and "s3cret" not in said

    missing = one_line(broker_url, "search", "--agent", "alpha", "billing")
    assert f"no reader of shard {alpha_shard} answered" in missing
    assert f"memq worker --role reader --shard {alpha_shard}" in missing
    assert "no memq worker" not in missing

    with leased_db() as empty:  # a database of the same Redis nobody's workers use
        wrong_db = f"{redis_server}/{empty}"
        for args in (("search", "--agent", "alpha", "billing"), ("status", "--agent", "alpha")):
            said = one_line(wrong_db, *args)
            assert f"no memq worker answers on {wrong_db}" in said, said
            assert "database number" in said
        view = _memq({**agent_host, "MEMQ_BROKER_URL": wrong_db}, "status", "--fleet")
        assert view.returncode == 3 and f"no memq worker answers on {wrong_db}" in view.stdout
