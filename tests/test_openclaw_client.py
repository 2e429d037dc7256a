"""OpenClaw as a real memq client: the ``openclaw`` 2026.9.6 package registers ``memq mcp`` with
``openclaw mcp set``, probes it with ``openclaw mcp probe --json`` and calls its tools through
OpenClaw's own MCP runtime, offline, with no gateway, in a sandboxed HOME and state dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import Settings
from tests.conftest import REPO
from tests.tools import node_env, tool

pytestmark = pytest.mark.slow

OPENCLAW_VERSION = "2026.9.6"
TOOLS = ["memq__memory_append", "memq__memory_get", "memq__memory_search"]
CLIENT = Path(__file__).with_name("openclaw_client.mjs")


def openclaw_env(root: Path) -> dict[str, str]:
    """Node 24 on PATH; OpenClaw's home, state dir, config, log file and temp files under root.

    OpenClaw reads ``OPENCLAW_HOME``/``HOME``, ``OPENCLAW_STATE_DIR`` and
    ``OPENCLAW_CONFIG_PATH`` (src/config/paths.ts); ``OPENCLAW_OFFLINE`` stops its tool
    downloads and ``OPENCLAW_NO_AUTO_UPDATE`` its update checks. Inherited ``OPENCLAW_*``
    variables (a profile, another config) are dropped.
    """
    home = root / "home"
    state = home / ".openclaw"
    tmp = root / "tmp"
    for folder in (state, tmp):
        folder.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCLAW_")}
    env.update(HOME=str(home), OPENCLAW_HOME=str(home), OPENCLAW_STATE_DIR=str(state),
               OPENCLAW_CONFIG_PATH=str(state / "openclaw.json"), OPENCLAW_OFFLINE="1",
               OPENCLAW_NO_AUTO_UPDATE="1", TMPDIR=str(tmp),
               XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"),
               XDG_DATA_HOME=str(home / ".local" / "share"),
               XDG_STATE_HOME=str(home / ".local" / "state"))
    # Its log file defaults to /tmp/openclaw/openclaw-<date>.log whatever TMPDIR says.
    (state / "openclaw.json").write_text(json.dumps(
        {"logging": {"file": str(root / "openclaw.log")}, "update": {"checkOnStart": False}}))
    return node_env(env)


def memq_server(settings: Settings) -> dict[str, Any]:
    """The ``mcp.servers.memq`` entry: this venv's ``memq`` executable, else ``python -m``."""
    args = ["mcp", "--workspace", str(settings.workspace), "--config", str(settings.config_file)]
    memq = Path(sys.executable).with_name("memq")
    if memq.exists():
        return {"command": str(memq), "args": args}
    return {"command": sys.executable, "args": ["-m", "pipeline.cli", *args], "cwd": str(REPO)}


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under folder with its size and mtime (empty when the folder is absent)."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()} if folder.exists() else {}


def test_openclaw_registers_probes_and_calls_memq(keyword_settings: Settings,
                                                  tmp_path: Path) -> None:
    openclaw = tool("openclaw")
    package = openclaw.resolve().parent
    assert json.loads((package / "package.json").read_text())["version"] == OPENCLAW_VERSION
    real_state = Path.home() / ".openclaw"
    real_before = snapshot(real_state)
    root = tmp_path / "openclaw"
    env = openclaw_env(root)
    config = Path(env["OPENCLAW_CONFIG_PATH"])

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"{argv[:3]} failed:\n{done.stdout}\n{done.stderr}"
        return done

    server = memq_server(keyword_settings)
    saved = run(str(openclaw), "mcp", "set", "memq", json.dumps(server))
    assert f'Saved MCP server "memq" to {config}.' in saved.stdout
    assert json.loads(config.read_text())["mcp"]["servers"] == {"memq": server}

    probe = json.loads(run(str(openclaw), "mcp", "probe", "memq", "--json").stdout)
    assert probe["tools"] == TOOLS and probe["diagnostics"] == []
    memq = probe["servers"]["memq"]
    assert memq["launch"] == " ".join([server["command"], *server["args"]])
    assert memq["tools"] == 3 and memq["codexApprovalMode"] == "auto"
    # Without annotations: "tools have no safety annotations; calls require approval in
    # prompting session postures".
    assert "approvalHint" not in memq

    note = "- The quokka sticker goes on the NAS (decided with OpenClaw)."
    calls = [["memq__memory_search", {"query": "PostgreSQL ledger tables"}],
             ["memq__memory_get", {"path": "memory/2026-11-03.md", "from": 1, "lines": 3}],
             ["memq__memory_append", {"text": note}],
             ["memq__memory_search", {"query": "quokka sticker"}]]
    client = run(str(tool("node")), str(CLIENT), str(package), json.dumps(calls))
    seen = json.loads(client.stdout)
    assert seen["diagnostics"] == []
    assert seen["agentTools"] == [
        {"name": "memq__memory_append", "label": "Append to memory"},
        {"name": "memq__memory_get", "label": "Read memory lines"},
        {"name": "memq__memory_search", "label": "Search memory"}]
    read_only = {"readOnlyHint": True, "openWorldHint": False}
    assert {t["tool"]: (t["title"], t["annotations"]) for t in seen["catalog"]} == {
        "memory_search": ("Search memory", read_only),
        "memory_get": ("Read memory lines", read_only),
        "memory_append": ("Append to memory", {"readOnlyHint": False, "destructiveHint": False,
                                               "idempotentHint": False, "openWorldHint": False})}
    # OpenClaw's rule asks the operator about an unannotated tool, about none of memq's.
    assert seen["unannotatedNeedsApproval"] is True
    assert [t["needsApproval"] for t in seen["catalog"]] == [False, False, False]

    search, get, append, again = seen["calls"]
    found = search["details"]["structuredContent"]
    assert search["details"]["mcpTool"] == "memory_search"
    assert found["mode"] == "keyword-only" and "dirty" not in found
    top = found["results"][0]
    assert top["path"] == "memory/2026-11-03.md" and "PostgreSQL" in top["snippet"]
    # The model sees the answer once: OpenClaw drops a text block that mirrors the
    # structured content.
    assert [block["type"] for block in search["content"]] == ["text"]
    assert search["content"][0]["text"].startswith("structuredContent:\n")
    lines = (keyword_settings.workspace / "memory/2026-11-03.md").read_text().split("\n")
    assert get["details"]["structuredContent"]["text"] == "\n".join(lines[:3])
    saved = append["details"]["structuredContent"]
    assert saved["path"] == f"memory/{date.today().isoformat()}.md" and saved["indexed"] is True
    assert (keyword_settings.workspace / saved["path"]).read_text() == note + "\n"
    assert again["details"]["structuredContent"]["results"][0]["path"] == saved["path"]

    assert snapshot(real_state) == real_before, "OpenClaw wrote into the real ~/.openclaw"
    assert (root / "openclaw.log").exists()
