"""Every bench/ script still imports on the current API and answers ``--help``, so a benchmark
can never silently rot."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPTS = sorted(p.stem for p in (Path(REPO) / "bench").glob("*.py"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_bench_module_imports(name: str) -> None:
    sys.path.insert(0, str(Path(REPO) / "bench"))
    try:
        importlib.import_module(name)
    finally:
        sys.path.remove(str(Path(REPO) / "bench"))


@pytest.mark.parametrize("name", [s for s in SCRIPTS if s not in {"harness", "notes"}])
def test_bench_script_help(name: str) -> None:
    done = subprocess.run([sys.executable, f"bench/{name}.py", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_the_fleet_benchmarks_of_issue_18_are_here() -> None:
    assert {"many_memories", "fairness", "shard_kill"} <= set(SCRIPTS)
