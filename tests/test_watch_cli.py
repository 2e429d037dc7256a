"""The real ``memq watch`` and ``memq reindex`` commands, with no broker configured (each starts
its own embedded Redis and worker process)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_memq, write_config

pytestmark = pytest.mark.integration


def _env(tmp_path: Path, tiny_model: Path) -> dict[str, str]:
    """The CLI's environment: the tiny model, an embedded broker, and a config that only turns
    temporal decay off (see tests.conftest.write_config: the sample notes are dated)."""
    config = write_config(tmp_path / "memq.json")
    return {"MEMQ_HOME": str(tmp_path / "home"), "MEMQ_LOCAL_MODEL_PATH": str(tiny_model),
            "MEMQ_PROVIDER": "local", "MEMQ_BROKER_URL": "", "REDIS_URL": "",
            "MEMQ_CONFIG": str(config)}


def _search(workspace: Path, env: dict[str, str], query: str) -> list[str]:
    done = run_memq("search", "--workspace", str(workspace), "--json", "--min-score", "0",
                    query, env=env)
    return [r["path"] for r in json.loads(done.stdout)["results"]]


def test_memq_watch_indexes_new_files_until_interrupted(workspace: Path, tmp_path: Path,
                                                        tiny_model: Path) -> None:
    import os

    env = _env(tmp_path, tiny_model)
    log = open(tmp_path / "watch.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "memq.cli", "watch", "--workspace",
                             str(workspace), "--debounce-ms", "300"], cwd=REPO,
                            env={**os.environ, **env}, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 90
        status: dict = {}
        while time.monotonic() < deadline:
            done = run_memq("status", "--workspace", str(workspace), "--json", env=env)
            status = json.loads(done.stdout) if done.returncode == 0 else {}
            if status.get("indexed") and status["vectors"] == status["chunks"] > 0:
                break
            time.sleep(0.5)
        assert status.get("vectors") == status.get("chunks") > 0, (tmp_path / "watch.log"
                                                                   ).read_text()
        (workspace / "memory" / "2026-12-01.md").write_text(
            "# 2026-12-01\n\n- The piano tuner comes on Thursday.\n")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if "memory/2026-12-01.md" in _search(workspace, env, "piano tuner Thursday"):
                break
            time.sleep(0.5)
        assert "memory/2026-12-01.md" in _search(workspace, env, "piano tuner Thursday")
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(30)
        log.close()
    assert code == 130, (tmp_path / "watch.log").read_text()
    assert "interrupted" in (tmp_path / "watch.log").read_text()


def test_memq_reindex_swaps_in_a_new_index(workspace: Path, tmp_path: Path,
                                           tiny_model: Path) -> None:
    env = _env(tmp_path, tiny_model)
    assert run_memq("index", "--workspace", str(workspace), env=env).returncode == 0
    done = run_memq("reindex", "--workspace", str(workspace), "--json", env=env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["waited"] and out["reindex"]["done"] and out["reindex"]["chunksQueued"] == 0
    assert out["reindex"]["chunksFromCache"] == out["reindex"]["chunks"] > 0
    status = json.loads(run_memq("status", "--workspace", str(workspace), "--json",
                                 env=env).stdout)
    assert status["reindex"] is None and status["vectors"] == status["chunks"]
    assert "memory/2026-11-18.md" in _search(workspace, env, "flight LH1169")
    refused = run_memq("reindex", "--workspace", str(workspace), "--no-wait", env=env)
    assert refused.returncode == 1 and "MEMQ_BROKER_URL" in refused.stderr


def test_memq_watch_prints_one_line_per_pass_that_changed_something(
        workspace: Path, tmp_path: Path) -> None:
    """stdout: one line per pass that changed the index (files changed or deleted, chunks
    queued), counts only, never memory text; a pass that changed nothing prints nothing."""
    import os
    import re

    env = {**os.environ, "MEMQ_HOME": str(tmp_path / "home"), "MEMQ_PROVIDER": "none",
           "MEMQ_BROKER_URL": "", "REDIS_URL": "", "MEMQ_CONFIG": "", "MEMQ_AGENT_ID": ""}
    out, err = tmp_path / "watch.out", tmp_path / "watch.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "memq.cli", "watch", "--workspace",
                                 str(workspace), "--debounce-ms", "200", "--polling"],
                                cwd=REPO, env=env, stdout=stdout, stderr=stderr)
    line = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d main: (\d+) files? changed, "
                      r"(\d+) deleted, (\d+) chunks queued$")

    def passes(count: int) -> list[tuple[int, ...]]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = out.read_text().splitlines()
            if len(rows) >= count:
                break
            time.sleep(0.2)
        rows = out.read_text().splitlines()
        assert len(rows) == count, out.read_text() + err.read_text()
        matched = [line.match(row) for row in rows]
        assert all(matched), rows
        return [tuple(int(g) for g in m.groups()) for m in matched if m]

    note = workspace / "memory" / "2026-12-01.md"
    try:
        (first,) = passes(1)  # the reconcile at start indexes every file
        assert first[0] == len(list(workspace.rglob("*.md"))) and first[1] == 0
        note.write_text("# 2026-12-01\n\n- The piano tuner comes on Thursday.\n")
        assert passes(2)[1] == (1, 0, 0)
        note.unlink()
        assert passes(3)[2] == (0, 1, 0)
        time.sleep(1.5)  # polling passes that find nothing new print nothing
        assert len(out.read_text().splitlines()) == 3
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(30)
    assert code == 130, err.read_text()
    assert "piano" not in out.read_text() + err.read_text()
