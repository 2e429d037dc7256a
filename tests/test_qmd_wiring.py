"""``memory.backend: "qmd"`` through what a user runs: ``memq search/get/status`` (real
subprocesses), the library's :class:`~pipeline.Memory` and the MCP server, against the real
``qmd`` CLI in ``search`` (BM25) mode; and the fallback to memq's own index when qmd is
removed, hangs or fails mid-use (the caller gets builtin results, no error, a warning).

The notes folder lies outside the workspace and is a QMD collection only (not in
``extraPaths``), so a hit there can only come from qmd; a hit for "Zigbee" (in MEMORY.md) comes
from either backend, and the answer says which.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from pipeline.config import load_settings
from pipeline.errors import MemoryPathError
from pipeline.memory import Memory
from pipeline.qmd import QmdBackend
from pipeline.qmd.jobs import QmdJobRunner, needs_boot, run_due
from tests.conftest import EXAMPLE_WORKSPACE, REPO, Fleet, run_memq
from tests.test_fleet import memq_argv, nodes_on, wait_for
from tests.tools import node_env, tool
from workers.watching import WatchGroup, run_watch

OPS = "# Ops\n\nThe deployment uses kubernetes on hetzner.\nBackups run nightly at 03:00 UTC.\n"


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


class Setup:
    """A workspace, a notes folder outside it, an openclaw.json with ``backend: "qmd"`` whose
    ``command`` is a wrapper script (so a test can remove or replace qmd mid-use)."""

    def __init__(self, root: Path, **qmd: Any) -> None:
        self.root = root
        self.ws = root / "ws"
        shutil.copytree(EXAMPLE_WORKSPACE, self.ws)
        notes = root / "notes"
        notes.mkdir()
        (notes / "ops.md").write_text(OPS, encoding="utf-8")
        self.wrapper = root / "bin" / "qmd"
        self.use_real_qmd()
        qmd = {"command": str(self.wrapper), "searchMode": "search",
               "paths": [{"path": str(notes), "name": "notes"}], **qmd}
        self.config = root / "openclaw.json"
        self.config.write_text(json.dumps({
            "agents": {"defaults": {"workspace": str(self.ws),
                                    "memorySearch": {"provider": "none"}}},
            "memory": {"backend": "qmd", "qmd": qmd}}), encoding="utf-8")
        self.env = node_env({**os.environ, "HOME": str(root)})
        for key in ("MEMQ_CONFIG", "MEMQ_WORKSPACE", "MEMQ_STORE_PATH", "MEMQ_BROKER_URL",
                    "REDIS_URL", "XDG_DATA_HOME", "XDG_STATE_HOME"):
            self.env.pop(key, None)

    def use_real_qmd(self) -> None:
        _script(self.wrapper, f'exec "{tool("qmd")}" "$@"\n')

    def settings(self) -> Any:
        return load_settings(self.config, env=self.env)

    def memq(self, *args: str) -> Any:
        done = run_memq(*args, "--config", str(self.config), env=self.env, timeout=300)
        return done

    def memq_json(self, *args: str) -> dict[str, Any]:
        done = self.memq(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Setup:
    s = Setup(tmp_path)
    for key in ("PATH", "HOME"):
        monkeypatch.setenv(key, s.env[key])
    for key in ("MEMQ_CONFIG", "MEMQ_WORKSPACE", "MEMQ_STORE_PATH", "MEMQ_BROKER_URL",
                "REDIS_URL"):
        monkeypatch.delenv(key, raising=False)
    return s


@pytest.fixture
def indexed(setup: Setup) -> Setup:
    """``memq index``: memq's own index, and (the backend being qmd) QMD's home booted."""
    done = setup.memq("index")
    assert done.returncode == 0, done.stderr
    assert not needs_boot(QmdBackend(setup.settings()))
    return setup


# ---------------------------------------------------------------------------------------------
# the CLI


def test_memq_search_answers_from_qmd(indexed: Setup) -> None:
    out = indexed.memq_json("search", "kubernetes hetzner")
    assert out["backend"] == "qmd" and "fallback" not in out
    assert [r["path"] for r in out["results"]] == ["qmd://notes-main/ops.md"]
    assert "kubernetes on hetzner" in out["results"][0]["snippet"]
    assert out["provider"] == "qmd"
    human = indexed.memq("search", "kubernetes hetzner")
    assert human.returncode == 0 and "backend: qmd" in human.stdout
    assert "qmd://notes-main/ops.md" in human.stdout


def test_memq_get_reads_a_qmd_collection_file(indexed: Setup) -> None:
    out = indexed.memq_json("get", "qmd://notes-main/ops.md", "--from", "3", "--lines", "1")
    assert out == {"status": "ok", "path": "qmd://notes-main/ops.md",
                   "text": "The deployment uses kubernetes on hetzner.\n\n[More content "
                           "available. Use from=4 to continue.]", "from": 3, "lines": 1,
                   "truncated": True, "nextFrom": 4}
    # memory_get's window (the final newline ends the last line, as OpenClaw reads it)
    assert indexed.memq_json("get", "qmd/notes-main/ops.md")["text"] + "\n" == OPS
    assert indexed.memq_json("get", "MEMORY.md")["text"] + "\n" == (
        indexed.ws / "MEMORY.md").read_text()
    refused = indexed.memq("get", "qmd://notes-main/../ws/MEMORY.md")
    assert refused.returncode == 2 and "escapes" in refused.stderr


def test_memq_status_says_backend_qmd(indexed: Setup) -> None:
    out = indexed.memq_json("status")
    assert out["backend"] == "qmd"
    assert out["qmd"]["available"] is True and out["qmd"]["searchMode"] == "search"
    docs = {c["name"]: c["documents"] for c in out["qmd"]["collections"]}
    assert docs["notes-main"] == 1 and docs["memory-root-main"] == 1
    human = indexed.memq("status")
    assert human.returncode == 0 and "backend:   qmd" in human.stdout


def test_memq_search_falls_back_when_qmd_is_missing(indexed: Setup) -> None:
    indexed.wrapper.unlink()
    done = indexed.memq("search", "Zigbee", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["backend"] == "builtin"
    assert out["fallback"]["kind"] == "missing" and out["fallback"]["from"] == "qmd"
    assert {r["path"] for r in out["results"]} >= {"MEMORY.md"}
    assert "QMD unavailable" in done.stderr
    human = indexed.memq("search", "Zigbee")
    assert human.returncode == 0 and "backend: builtin (qmd missing:" in human.stdout
    status = indexed.memq_json("status")
    assert status["backend"] == "qmd" and status["qmd"]["available"] is False


@pytest.mark.parametrize(("search", "kind", "reason"), [
    ("sleep 30", "timeout", "qmd search timed out after 3000 ms"),  # hangs past timeoutMs
    ("kill -9 $$", "killed", "qmd search was killed by SIGKILL"),
    ('echo "not json at all"; exit 0', "json", "qmd search did not print a JSON array"),
])
def test_memq_search_falls_back_when_qmd_fails_mid_use(tmp_path: Path, search: str, kind: str,
                                                       reason: str) -> None:
    setup = Setup(tmp_path, limits={"timeoutMs": 3000})
    assert setup.memq("index").returncode == 0
    assert setup.memq_json("search", "Zigbee")["backend"] == "qmd"
    real = tool("qmd")
    # from now on qmd works for everything but searches
    _script(setup.wrapper, f'if [ "$1" = search ]; then {search}; fi\nexec "{real}" "$@"\n')
    done = setup.memq("search", "Zigbee", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["backend"] == "builtin"
    assert out["fallback"]["kind"] == kind and out["fallback"]["reason"] == reason
    assert "MEMORY.md" in {r["path"] for r in out["results"]}
    assert "QMD unavailable" in done.stderr and "Traceback" not in done.stderr


def test_memq_search_without_memqs_index_still_answers_from_qmd(setup: Setup) -> None:
    run_due(QmdBackend(setup.settings()), "boot")  # QMD set up, memq's index never built
    out = setup.memq_json("search", "kubernetes hetzner")
    assert out["backend"] == "qmd" and out["results"][0]["path"] == "qmd://notes-main/ops.md"


# ---------------------------------------------------------------------------------------------
# the library


def test_library_search_get_status(indexed: Setup) -> None:
    with Memory(config=indexed.config) as memory:
        found = memory.search("kubernetes hetzner", citations="on")
        assert found.backend == "qmd" and found.fallback is None
        (hit,) = found
        assert hit.path == "qmd://notes-main/ops.md"
        assert hit.citation == f"qmd://notes-main/ops.md#L{hit.start_line}-L{hit.end_line}"
        text = memory.get(hit.path, hit.start_line, hit.end_line - hit.start_line + 1).text
        assert "kubernetes on hetzner" in text
        status = memory.status()
        assert status["backend"] == "qmd" and status["qmd"]["available"] is True
        zigbee = memory.search("Zigbee")
        assert zigbee.backend == "qmd"
        assert {h.path for h in zigbee} == {"MEMORY.md", "memory/2026-11-10.md"}
        with pytest.raises(MemoryPathError) as refused:  # neither backend's file: as builtin
            memory.get("/etc/passwd")
        assert str(refused.value).startswith("path required: a memory .md file")


def test_library_falls_back_mid_use_and_says_why(indexed: Setup,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    with Memory(config=indexed.config) as memory:
        assert memory.search("Zigbee").backend == "qmd"
        # qmd starts failing mid-use: a non-zero exit
        _script(indexed.wrapper, 'echo "boom: index corrupt" >&2\nexit 3\n')
        with caplog.at_level(logging.WARNING):
            failed = memory.search("Zigbee")
        assert failed.backend == "builtin"
        assert failed.fallback["kind"] == "exit" and "exit 3" in failed.fallback["reason"]
        assert "MEMORY.md" in {h.path for h in failed}
        assert any("QMD unavailable" in r.getMessage() for r in caplog.records)
        d = failed.to_dict()
        assert d["backend"] == "builtin" and d["fallback"]["kind"] == "exit"
        # still down (the cool-down): answered at once from memq's index, no qmd run
        again = memory.search("Zigbee")
        assert again.backend == "builtin" and again.fallback["kind"] == "exit"
        assert "retryAt" in again.fallback
        # removed altogether: still no error to the caller
        indexed.wrapper.unlink()
        assert memory.search("Zigbee").backend == "builtin"
        # a qmd:// path cannot be read from memq's index, but the file is still there
        assert "kubernetes" in memory.get("qmd://notes-main/ops.md").text


def test_library_boots_qmd_on_first_search_when_asked_to_wait(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    setup = Setup(tmp_path, update={"waitForBootSync": True})
    monkeypatch.setenv("PATH", setup.env["PATH"])
    monkeypatch.setenv("HOME", setup.env["HOME"])
    with Memory(config=setup.config) as memory:  # nothing indexed by either backend yet
        found = memory.search("kubernetes hetzner")
        assert found.backend == "qmd" and [h.path for h in found] == ["qmd://notes-main/ops.md"]


def test_library_boots_qmd_in_the_background(setup: Setup) -> None:
    with Memory(config=setup.config) as memory:
        lock = memory.qmd.home.write_lock
        lock.parent.mkdir(parents=True, exist_ok=True)
        with open(lock, "a") as held:  # another process mid-update: the boot job must wait
            fcntl.flock(held, fcntl.LOCK_EX)
            first = memory.search("kubernetes hetzner")  # QMD not set up yet: memq's index
            assert first.backend == "builtin" and first.fallback["kind"] == "collections"
        memory.wait_for_qmd_jobs()
        assert memory.search("kubernetes hetzner").backend == "qmd"


def test_index_after_a_change_updates_qmd(indexed: Setup) -> None:
    note = indexed.ws / "memory" / "2026-12-01.md"
    with Memory(config=indexed.config) as memory:
        assert memory.search("flamingo").hits == []
        note.write_text("# Dec 1\n\n- Saw a flamingo at the Tagus estuary.\n")
        memory.index()
        memory.wait_for_qmd_jobs()
        found = memory.search("flamingo")
        assert found.backend == "qmd" and [h.path for h in found] == ["memory/2026-12-01.md"]


# ---------------------------------------------------------------------------------------------
# the update jobs


def test_runner_reruns_a_debounced_update_and_never_misses_a_change(setup: Setup) -> None:
    backend = QmdBackend(setup.settings())
    assert run_due(backend, "boot")["job"] == "boot"
    assert run_due(backend, "changed")["skipped"] == "debounced"  # 15 s after the boot
    (setup.root / "notes" / "radio.md").write_text("# Radio\n\ncallsign CT7ABC\n")
    runner = QmdJobRunner(backend)
    runner.trigger("changed")  # debounced: waits for dueAt, or runs forced on close
    runner.close()
    assert runner.last is not None and runner.last.get("updated") is True
    assert [h.path for h in backend.search("callsign")] == ["qmd://notes-main/radio.md"]


def test_run_due_reports_failures_without_raising(setup: Setup) -> None:
    setup.wrapper.unlink()
    out = run_due(QmdBackend(setup.settings()), "boot")
    assert out["kind"] == "missing" and "cannot run" in out["error"]
    with pytest.raises(ValueError, match="unknown QMD job reason"):
        run_due(QmdBackend(setup.settings()), "sometime")


# ---------------------------------------------------------------------------------------------
# MCP


def test_mcp_memory_search_and_get_through_qmd(indexed: Setup) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memq.cli", "mcp", "--config", str(indexed.config)],
        cwd=str(REPO), env=indexed.env)

    async def call(client: Client, tool_name: str, args: dict[str, Any]) -> dict[str, Any]:
        result = await client.call_tool(tool_name, args)
        assert not result.is_error, result.content[0].text
        return json.loads(result.content[0].text)

    async def scenario() -> None:
        with anyio.fail_after(120):
            async with Client(params, read_timeout_seconds=60) as client:
                tools = {t.name: t for t in (await client.list_tools()).tools}
                assert "`backend` says which engine answered" in \
                    tools["memory_search"].description
                found = await call(client, "memory_search", {"query": "kubernetes hetzner"})
                assert found["backend"] == "qmd"
                assert [r["path"] for r in found["results"]] == ["qmd://notes-main/ops.md"]
                got = await call(client, "memory_get", {"path": "qmd://notes-main/ops.md",
                                                        "from": 3, "lines": 1})
                assert got["text"].startswith("The deployment uses kubernetes on hetzner.\n\n"
                                              "[More content available. Use from=4")
                indexed.wrapper.unlink()  # qmd removed while the server runs
                fallback = await call(client, "memory_search", {"query": "Zigbee"})
                assert fallback["backend"] == "builtin"
                assert fallback["fallback"]["kind"] == "missing"
                assert any(r["path"] == "MEMORY.md" for r in fallback["results"])

    anyio.run(scenario)


# ---------------------------------------------------------------------------------------------
# the watcher and the fleet


def _until(check: Any, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_memq_watch_updates_qmd_after_a_change(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    setup = Setup(tmp_path, update={"debounceMs": 0})
    monkeypatch.setenv("PATH", setup.env["PATH"])
    assert setup.memq("index").returncode == 0
    settings = setup.settings()
    backend = QmdBackend(settings)
    assert backend.search("flamingo") == []
    started: list[WatchGroup] = []
    thread = threading.Thread(target=run_watch, args=([settings],),
                              kwargs={"debounce_s": 0.2, "on_start": started.append},
                              daemon=True)
    thread.start()
    try:
        _until(lambda: started and all(s.reconciles for s in started[0].stats.values()),
               "the first reconcile")
        (setup.ws / "memory" / "2026-12-02.md").write_text("- Saw a flamingo in Lisbon.\n")
        _until(lambda: [h.path for h in backend.search("flamingo")] == ["memory/2026-12-02.md"],
               "qmd to find the new note")
    finally:
        started[0].stop()
        thread.join(60)
    assert not thread.is_alive()


def test_update_jobs_go_to_the_owners_control_queue(tmp_path: Path, broker_url: str,
                                                    fleet: Fleet) -> None:
    setup = Setup(tmp_path)
    env = {**setup.env, "MEMQ_CONFIG": str(setup.config), "MEMQ_BROKER_URL": broker_url}
    fleet.spawn(memq_argv("worker", "--role", "writer"), "writer", env)
    wait_for(lambda: nodes_on(broker_url, "control.0"), "the writer on control.0", fleet)
    settings = load_settings(setup.config, env=env)
    assert settings.broker_url == broker_url
    backend = QmdBackend(settings, env=setup.env)
    assert needs_boot(backend)
    with Memory(settings=settings) as memory:
        memory.index()  # keyword-only: no embedding work; the QMD job goes to control.0
    wait_for(lambda: "memq.qmd_update" in fleet.logs(None) and not needs_boot(backend),
             "the writer to run memq.qmd_update and boot QMD", fleet)
    assert [h.path for h in backend.search("kubernetes hetzner")] == ["qmd://notes-main/ops.md"]
    # The job is in the job log, beside the index pass, with what it did.
    from pipeline.fleet.job_log import JobLog

    log = JobLog(load_settings(setup.config, env={**os.environ, **env}).result_backend)
    qmd = wait_for(lambda: [j for j in log.recent(settings.agent_id) if j.origin
                            and j.origin.startswith("qmd-") and not j.running],
                   "the QMD job in the job log", fleet)
    assert qmd[0].state == "done" and qmd[0].result["qmd"]["job"] == "boot"
    assert qmd[0].host.startswith("writer@")
    log.close()


def test_a_broker_that_is_down_fails_neither_index_nor_search(
        setup: Setup, caplog: pytest.LogCaptureFixture) -> None:
    env = {**setup.env, "MEMQ_BROKER_URL": "redis://:hunter2-not-a-real-one@127.0.0.1:9/0"}
    settings = load_settings(setup.config, env=env)
    with caplog.at_level(logging.WARNING), Memory(settings=settings) as memory:
        memory.index()  # the QMD job cannot be queued: it runs here instead
        memory.wait_for_qmd_jobs()
        found = memory.search("kubernetes hetzner")
        assert found.backend == "qmd" and found[0].path == "qmd://notes-main/ops.md"
    queued = [r.getMessage() for r in caplog.records if "cannot queue the QMD" in r.getMessage()]
    assert queued and all("hunter2" not in m for m in queued)
