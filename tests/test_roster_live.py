"""A running fleet follows its configuration's memories: a writer serves a memory whose
``memoriesDir`` sub-folder appeared after it started, and ``memq watch --all`` starts watching
memories added to the config (a new ``agents.list`` entry, a new ``memoriesDir`` sub-folder)
and stops watching removed ones, without a restart (real Redis, real worker and watch
processes, real SQLite)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipeline.config import load_settings, read_roster
from tests.conftest import REPO, Fleet
from tests.indexcheck import chunks, store_chunks
from tests.test_fleet import memq_argv, nodes_on, wait_for


def add_memory(folder: Path, text: str) -> Path:
    """A workspace at ``folder`` with one note."""
    (folder / "memory").mkdir(parents=True)
    (folder / "memory" / "note.md").write_text(f"# note\n\n{text}\n")
    return folder


def memories_dir_config(tmp_path: Path, *names: str) -> Path:
    """A keyword-only memq.toml of its own memory plus a ``memoriesDir`` of ``names``."""
    add_memory(tmp_path / "own", "the own memory keeps a ledger")
    for name in names:
        add_memory(tmp_path / "team" / name, f"{name} keeps bees")
    config = tmp_path / "memq.toml"
    config.write_text('workspace = "own"\nprovider = "none"\nmemoriesDir = "team"\n')
    return config


def memq(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(memq_argv(*args), env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=300, cwd=REPO)


def base_env(config: Path, tmp_path: Path) -> dict[str, str]:
    return {"MEMQ_CONFIG": str(config), "MEMQ_HOME": str(tmp_path / "data"),
            "HOME": str(tmp_path / "home"), "MEMQ_WORKSPACE": "", "MEMQ_AGENT_ID": "",
            "XDG_CONFIG_HOME": str(tmp_path / "xdg")}


def test_a_roster_says_when_its_file_or_memories_dir_changed(tmp_path: Path) -> None:
    """Adding or removing a ``memoriesDir`` sub-folder changes the roster's version (the
    folder's mtime); a note written inside a memory does not; editing the file does."""
    config = memories_dir_config(tmp_path, "alice")
    env = base_env(config, tmp_path)
    roster = read_roster(config, env)
    assert roster.served == ["main", "alice"] and not roster.changed()
    (tmp_path / "team" / "alice" / "memory" / "later.md").write_text("- alice saw a lynx\n")
    assert not roster.changed()
    add_memory(tmp_path / "team" / "Bob", "bob keeps goats")
    assert roster.changed()
    roster = read_roster(config, env)
    assert roster.served == ["main", "bob", "alice"] and not roster.changed()
    (tmp_path / "team" / "Bob").rename(tmp_path / "Bob")
    assert roster.changed()
    roster = read_roster(config, env)
    assert not roster.changed()
    os.utime(config, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert roster.changed()
    with pytest.raises(Exception, match="unknown memory"):
        read_roster(config, env).require("bob")


@pytest.mark.integration
def test_a_running_writer_serves_a_memory_folder_added_after_it_started(
        tmp_path: Path, broker_url: str, fleet: Fleet) -> None:
    """The writer read its roster (alice) before bob's folder existed; the config file is
    untouched, yet bob's remote index job is run, not refused."""
    config = memories_dir_config(tmp_path, "alice")
    env = base_env(config, tmp_path)
    fleet.spawn(memq_argv("worker", "--role", "writer", "--name", "writer@%h"), "writer", env)
    wait_for(lambda: nodes_on(broker_url, "control.0"), "the writer", fleet)
    env["MEMQ_BROKER_URL"] = broker_url
    done = memq("index", "--remote", "--memory", "alice", "--json", env=env)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: chunks(config, "alice", env) == 1, "alice indexed by the writer", fleet)

    config_stat = config.stat()
    add_memory(tmp_path / "team" / "Bob", "bob keeps goats")
    assert config.stat().st_mtime_ns == config_stat.st_mtime_ns  # the file did not change
    done = memq("index", "--remote", "--memory", "bob", "--json", env=env)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: chunks(config, "bob", env) == 1, "bob indexed by the running writer",
             fleet, timeout=60)
    assert "is not one of this fleet's" not in fleet.logs(None)


# ------------------------------------------------------------------------ memq watch --all


class Watch:
    """A real ``memq watch --all`` process, its output in a log file."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log_path = log
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "memq.cli", "watch", "--all",
                                      "--debounce-ms", "200"], cwd=REPO,
                                     env={**os.environ, **env}, stdout=self._log,
                                     stderr=self._log)

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait(self, check: Callable[[], object], what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            assert self.proc.poll() is None, f"watch exited\n{self.text()}"
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting for {what}\n{self.text()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(30)
        finally:
            self._log.close()


@pytest.fixture
def watches() -> Iterator[list[Watch]]:
    started: list[Watch] = []
    yield started
    for watch in started:
        if watch.proc.poll() is None:
            watch.proc.kill()
            watch.proc.wait()


def agents_config(path: Path, tmp_path: Path, agents: list[str]) -> None:
    """An openclaw.json of keyword-only ``agents`` (the first the default), each in
    ``ws-<agent>``, each store in ``stores/<agent>.sqlite``."""
    listed = [{"id": a, "workspace": str(tmp_path / f"ws-{a}")} for a in agents]
    listed[0]["default"] = True
    path.write_text(json.dumps({"agents": {
        "defaults": {"memorySearch": {"provider": "none", "store": {
            "path": str(tmp_path / "stores" / "{agentId}.sqlite")}}},
        "list": listed}}))


@pytest.mark.integration
def test_watch_all_follows_agents_added_to_and_removed_from_the_config(
        tmp_path: Path, broker_url: str, watches: list[Watch]) -> None:
    for agent in ("alpha", "beta", "gamma"):
        add_memory(tmp_path / f"ws-{agent}", f"{agent} keeps bees")
    config = tmp_path / "openclaw.json"
    agents_config(config, tmp_path, ["alpha", "beta"])
    env = {**base_env(config, tmp_path), "MEMQ_BROKER_URL": broker_url}
    watch = Watch(env, tmp_path / "watch.log")
    watches.append(watch)
    watch.wait(lambda: chunks(config, "alpha", env) == chunks(config, "beta", env) == 1,
               "alpha and beta indexed")
    beta_store = load_settings(config_file=config, agent="beta", env=env).store.path
    config.write_text('{"agents": {"list": [')  # saved half-way: watch goes on as it was
    watch.wait(lambda: "cannot read the configuration again" in watch.text(), "the bad save")

    # gamma added, beta removed, delta added before OpenClaw made its workspace
    agents_config(config, tmp_path, ["alpha", "gamma", "delta"])
    watch.wait(lambda: chunks(config, "gamma", env) == 1, "gamma picked up and indexed")
    watch.wait(lambda: "stopped watching beta" in watch.text(), "beta dropped")
    watch.wait(lambda: "not watching delta" in watch.text(), "delta named as unwatchable")
    add_memory(tmp_path / "ws-delta", "delta keeps owls")
    watch.wait(lambda: chunks(config, "delta", env) == 1, "delta watched once its folder is made")
    (tmp_path / "ws-gamma" / "memory" / "later.md").write_text("# later\n\ngamma saw a heron\n")
    (tmp_path / "ws-beta" / "memory" / "later.md").write_text("# later\n\nbeta saw a heron\n")
    (tmp_path / "ws-alpha" / "memory" / "later.md").write_text("# later\n\nalpha saw a heron\n")
    watch.wait(lambda: chunks(config, "gamma", env) == 2 and chunks(config, "alpha", env) == 2,
               "the new notes of alpha (still watched) and gamma (added) indexed")
    time.sleep(2)  # beta's note would be indexed after the debounce by now if beta were watched
    assert store_chunks(beta_store) == 1
    assert watch.stop() == 130, watch.text()
    text = watch.text()
    assert "watching 2 memories: alpha, beta" in text
    assert "now watching gamma" in text and "now watching delta" in text
    assert text.count("not watching delta") == 1  # named once, not at every check
    assert text.count("now watching alpha") == 0  # running ones were left alone


@pytest.mark.integration
def test_watch_all_follows_memory_folders_added_and_removed(
        tmp_path: Path, broker_url: str, watches: list[Watch]) -> None:
    config = memories_dir_config(tmp_path, "alice")
    env = {**base_env(config, tmp_path), "MEMQ_BROKER_URL": broker_url}
    watch = Watch(env, tmp_path / "watch.log")
    watches.append(watch)
    watch.wait(lambda: chunks(config, "alice", env) == 1 and chunks(config, "main", env) == 1,
               "main and alice indexed")

    add_memory(tmp_path / "team" / "Bob", "bob keeps goats")
    watch.wait(lambda: chunks(config, "bob", env) == 1, "bob's folder picked up and indexed")
    (tmp_path / "team" / "Bob" / "memory" / "later.md").write_text("# later\n\nbob saw a lynx\n")
    watch.wait(lambda: chunks(config, "bob", env) == 2, "bob's new note indexed")
    done = memq("search", "lynx", "--memory", "bob", "--json", "--min-score", "0", env=env)
    assert done.returncode == 0 and "bob saw a lynx" in done.stdout, done.stderr

    alice_store = load_settings(config_file=config, agent="alice", env=env).store.path
    (tmp_path / "team" / "alice").rename(tmp_path / "gone-alice")
    watch.wait(lambda: "stopped watching alice" in watch.text(), "alice dropped")
    (tmp_path / "gone-alice" / "memory" / "later.md").write_text("# later\n\nalice saw a lynx\n")
    time.sleep(2)
    assert store_chunks(alice_store) == 1
    assert watch.stop() == 130, watch.text()
    text = watch.text()
    assert "watching 2 memories: main, alice" in text and "now watching bob" in text
