"""OpenClaw as a real memq client: the ``openclaw`` 2026.9.6 package registers ``memq mcp`` with
``openclaw mcp set``, probes it with ``openclaw mcp probe --json`` and calls its tools through
OpenClaw's own MCP runtime, offline, with no gateway, in a sandboxed HOME and state dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import Settings
from tests.conftest import REPO, DailyLogDays, run_memq
from tests.tools import node_env, tool

pytestmark = pytest.mark.slow

OPENCLAW_VERSION = "2026.9.6"
TOOLS = ["memory_append", "memory_get", "memory_search"]
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


def memq_server(settings: Settings, *, config_in_env: bool = False) -> dict[str, Any]:
    """An ``mcp.servers`` entry running this venv's ``memq`` (else ``python -m``) for settings'
    workspace, with its config file as ``--config`` or as ``MEMQ_CONFIG`` in the server's env."""
    args = ["mcp", "--workspace", str(settings.workspace)]
    config = str(settings.config_file)
    server: dict[str, Any] = {"args": args if config_in_env else [*args, "--config", config]}
    if config_in_env:
        server["env"] = {"MEMQ_CONFIG": config}
    memq = Path(sys.executable).with_name("memq")
    if memq.exists():
        return {"command": str(memq), **server}
    return {"command": sys.executable, **server, "args": ["-m", "memq.cli", *server["args"]],
            "cwd": str(REPO)}


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under folder with its size and mtime (empty when the folder is absent)."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()} if folder.exists() else {}


@pytest.fixture
def family_settings(tmp_path: Path, make_settings: Callable[..., Settings]) -> Settings:
    """A second agent's workspace (its own memory, its own index), keyword-only, indexed."""
    ws = tmp_path / "family-ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Family\n\n- Emma's piano recital is Saturday at 15:00.\n")
    settings = make_settings(ws, provider="none",
                             store={"path": str(tmp_path / "family-store" / "memq.sqlite")})
    done = run_memq("index", "--workspace", str(ws), "--config", str(settings.config_file),
                    timeout=120)
    assert done.returncode == 0, done.stderr
    return settings


def test_openclaw_registers_probes_and_calls_memq(keyword_settings: Settings,
                                                  family_settings: Settings,
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

    # One memq server per OpenClaw agent, each with its own --workspace. OpenClaw hands a stdio
    # server only HOME, PATH, USER... and the server's env: the family index (at the store path
    # its config names) is found only if MEMQ_CONFIG gets through.
    servers = {"memq": memq_server(keyword_settings),
               "memq-family": memq_server(family_settings, config_in_env=True)}
    for name, server in servers.items():
        saved = run(str(openclaw), "mcp", "set", name, json.dumps(server))
        assert f'Saved MCP server "{name}" to {config}.' in saved.stdout
    assert json.loads(config.read_text())["mcp"]["servers"] == servers

    probe = json.loads(run(str(openclaw), "mcp", "probe", "--json").stdout)
    assert probe["diagnostics"] == []
    assert probe["tools"] == sorted(f"{name}__{t}" for name in servers for t in TOOLS)
    assert set(probe["servers"]) == set(servers)
    for name, seen in probe["servers"].items():
        assert seen["launch"] == " ".join([servers[name]["command"], *servers[name]["args"]])
        assert seen["tools"] == 3 and seen["codexApprovalMode"] == "auto"
        # Without annotations: "tools have no safety annotations; calls require approval in
        # prompting session postures".
        assert "approvalHint" not in seen

    note = "- The quokka sticker goes on the NAS (decided with OpenClaw)."
    calls = [["memq__memory_search", {"query": "PostgreSQL ledger tables"}],
             ["memq__memory_get", {"path": "memory/2026-11-03.md", "from": 1, "lines": 3}],
             ["memq__memory_append", {"text": note}],
             ["memq__memory_search", {"query": "quokka sticker"}],
             ["memq-family__memory_search", {"query": "piano recital"}],
             ["memq-family__memory_search", {"query": "PostgreSQL ledger tables"}]]
    with DailyLogDays() as days:
        client = run(str(tool("node")), str(CLIENT), str(package), json.dumps(calls))
    seen = json.loads(client.stdout)
    assert seen["diagnostics"] == []
    labels = {"memory_append": "Append to memory", "memory_get": "Read memory lines",
              "memory_search": "Search memory"}
    assert len(seen["agentTools"]) == 6
    by_name = {t["name"]: t["label"] for t in seen["agentTools"]}
    assert by_name == {f"{name}__{t}": labels[t] for name in servers for t in TOOLS}
    read_only = {"readOnlyHint": True, "openWorldHint": False}
    hints = {"memory_search": read_only, "memory_get": read_only,
             "memory_append": {"readOnlyHint": False, "destructiveHint": False,
                               "idempotentHint": False, "openWorldHint": False}}
    assert len(seen["catalog"]) == 6
    for entry in seen["catalog"]:
        assert (entry["title"], entry["annotations"]) == (labels[entry["tool"]],
                                                          hints[entry["tool"]])
        # OpenClaw's rule asks the operator about an unannotated tool, about none of memq's.
        assert entry["needsApproval"] is False
    assert seen["unannotatedNeedsApproval"] is True

    search, get, append, again, family, elsewhere = seen["calls"]
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
    assert get["details"]["structuredContent"] == {
        "status": "ok", "path": "memory/2026-11-03.md", "from": 1, "lines": 3,
        "truncated": True, "nextFrom": 4,
        "text": "\n".join(lines[:3]) + "\n\n[More content available. Use from=4 to continue.]"}
    saved = append["details"]["structuredContent"]
    assert saved["path"] in days.paths and saved["indexed"] is True
    assert (keyword_settings.workspace / saved["path"]).read_text() == note + "\n"
    assert again["details"]["structuredContent"]["results"][0]["path"] == saved["path"]

    assert family["details"]["mcpServer"] == "memq-family"
    assert "dirty" not in family["details"]["structuredContent"]
    recital = family["details"]["structuredContent"]["results"]
    assert recital[0]["path"] == "MEMORY.md" and "piano recital" in recital[0]["snippet"]
    assert elsewhere["details"]["structuredContent"]["results"] == []
    assert list((family_settings.workspace / "memory").iterdir()) == []

    assert snapshot(real_state) == real_before, "OpenClaw wrote into the real ~/.openclaw"
    assert (root / "openclaw.log").exists()
