"""``memq index --all``: every memory of an openclaw.json, here or as one job per memory on its
shard's writer (real Redis, a real ``memq worker``); a memory that cannot be indexed is
reported and the others are indexed anyway."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from pipeline.config import load_settings
from tests.conftest import REPO, Fleet
from tests.indexcheck import chunks
from tests.test_fleet import memq_argv, nodes_on, wait_for

AGENTS = ("alpha", "beta", "gamma")


def roster(tmp_path: Path, missing: str | None = None) -> Path:
    """An openclaw.json of three keyword-only agents, each with a note of its own; the
    workspace of ``missing`` is not created."""
    listed = []
    for agent in AGENTS:
        ws = tmp_path / f"ws-{agent}"
        if agent != missing:
            (ws / "memory").mkdir(parents=True)
            (ws / "memory" / "note.md").write_text(f"# {agent}\n\nthe {agent} codeword is "
                                                   f"{agent}-{len(agent)}\n")
        listed.append({"id": agent, "workspace": str(ws)})
    listed[0]["default"] = True
    config = tmp_path / "openclaw.json"
    config.write_text(json.dumps({"agents": {
        "defaults": {"memorySearch": {"provider": "none", "store": {
            "path": str(tmp_path / "stores" / "{agentId}.sqlite")}}},
        "list": listed}}))
    return config


def memq(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(memq_argv(*args), env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=300, cwd=REPO)


def test_index_all_indexes_every_memory_and_reports_the_one_that_fails(tmp_path: Path) -> None:
    config = roster(tmp_path, missing="beta")
    env = {"MEMQ_CONFIG": str(config), "MEMQ_HOME": str(tmp_path / "home")}
    done = memq("index", "--all", "--json", env=env)
    assert done.returncode == 1, done.stderr
    out = {m["memory"]: m for m in json.loads(done.stdout)["memories"]}
    assert list(out) == list(AGENTS)
    assert out["alpha"]["files"] == out["gamma"]["files"] == 1
    assert "does not exist" in out["beta"]["error"]
    assert chunks(config, "alpha", env) == chunks(config, "gamma", env) == 1
    assert chunks(config, "beta", env) == 0
    text = memq("index", "--all", env=env)
    assert "2 of 3 memories indexed, 1 failed" in text.stdout
    refused = memq("index", "--all", "--agent", "gamma", env=env)
    assert refused.returncode == 2 and "drop --agent" in refused.stderr


@pytest.mark.integration
def test_index_all_remote_queues_a_job_per_memory_on_its_shard(
        tmp_path: Path, broker_url: str, fleet: Fleet) -> None:
    config = roster(tmp_path)
    env = {"MEMQ_CONFIG": str(config), "MEMQ_HOME": str(tmp_path / "home"),
           "MEMQ_FLEET_SHARDS": "2"}
    fleet.spawn(memq_argv("worker", "--role", "writer", "--name", "writer@%h"), "writer", env)
    wait_for(lambda: nodes_on(broker_url, "control.0") and nodes_on(broker_url, "control.1"),
             "the writer of both shards", fleet)
    env["MEMQ_BROKER_URL"] = broker_url
    done = memq("index", "--remote", "--all", "--json", env=env)
    assert done.returncode == 0, done.stderr
    out = {m["memory"]: m for m in json.loads(done.stdout)["memories"]}
    for agent in AGENTS:
        shard = load_settings(config_file=config, agent=agent, env=env).fleet.shard_of(agent)
        assert out[agent]["queue"] == f"control.{shard}"
    assert {out[a]["queue"] for a in AGENTS} == {"control.0", "control.1"}
    wait_for(lambda: all(chunks(config, a, env) == 1 for a in AGENTS),
             "every memory indexed by its shard's writer", fleet)
    no_broker = memq("index", "--remote", "--all",
                     env={k: v for k, v in env.items() if k != "MEMQ_BROKER_URL"})
    assert no_broker.returncode == 1 and "needs the fleet's broker" in no_broker.stdout


def test_watch_all_follows_every_memory_in_one_process(tmp_path: Path) -> None:
    """`memq watch --all`: one process follows every watchable memory of the config (the one
    whose workspace is gone is named and left out); a note saved in each is indexed into its
    own store."""
    import signal
    import sys
    import time

    config = roster(tmp_path, missing="beta")
    env = {"MEMQ_CONFIG": str(config), "MEMQ_HOME": str(tmp_path / "home")}
    refused = memq("watch", "--all", "--agent", "alpha", env=env)
    assert refused.returncode == 2 and "drop --agent" in refused.stderr
    log = open(tmp_path / "watch.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "memq.cli", "watch", "--all",
                             "--debounce-ms", "200"], cwd=REPO, env={**os.environ, **env},
                            stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not (
                chunks(config, "alpha", env) == chunks(config, "gamma", env) == 1):
            time.sleep(0.3)
        assert chunks(config, "alpha", env) == chunks(config, "gamma", env) == 1, \
            (tmp_path / "watch.log").read_text()
        for agent in ("alpha", "gamma"):
            (tmp_path / f"ws-{agent}" / "memory" / "later.md").write_text(
                f"# later\n\n{agent} saw a kingfisher\n")
        while time.monotonic() < deadline and not (
                chunks(config, "alpha", env) == chunks(config, "gamma", env) == 2):
            time.sleep(0.3)
        assert chunks(config, "alpha", env) == chunks(config, "gamma", env) == 2, \
            (tmp_path / "watch.log").read_text()
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(30)
        log.close()
    text = (tmp_path / "watch.log").read_text()
    assert code == 130, text
    assert "watching 2 memories: alpha, gamma" in text
    assert "not watching beta" in text and chunks(config, "beta", env) == 0
