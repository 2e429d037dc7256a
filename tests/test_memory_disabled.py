"""``enabled = false``: OpenClaw builds no memory manager and registers no memory tools, so
nothing is indexed or searched. memq's search, get, append, index, reindex, sync and watch
refuse with :class:`MemoryDisabled` (CLI exit 2, an MCP tool error); ``memq status`` still
answers and says so."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from pipeline.errors import MemoryDisabled, MemqError
from pipeline.memory import Memory
from pipeline.query import memory_get, memory_search
from tests.conftest import run_memq
from tests.test_mcp import refused, session


def test_library_refuses_every_memory_operation(workspace: Path, make_settings) -> None:
    settings = make_settings(workspace, provider="none", enabled=False)
    before = {p: p.read_bytes() for p in workspace.rglob("*") if p.is_file()}
    with Memory(settings=settings) as memory:
        calls = {
            "search": lambda: memory.search("PostgreSQL"),
            "get": lambda: memory.get("MEMORY.md"),
            "append": lambda: memory.append("- a note"),
            "index": lambda: memory.index(),
            "reindex": lambda: memory.reindex(),
            "sync": lambda: memory.sync(),
        }
        for name, call in calls.items():
            with pytest.raises(MemoryDisabled, match=r"enabled = false") as exc:
                call()
            assert isinstance(exc.value, MemqError), name
            assert str(settings.config_file) in str(exc.value), name
    with pytest.raises(MemoryDisabled):
        memory_search("PostgreSQL", settings=settings)
    with pytest.raises(MemoryDisabled):
        memory_get("MEMORY.md", settings=settings)
    assert not settings.store.path.exists()  # nothing indexed, no store created
    assert {p: p.read_bytes() for p in workspace.rglob("*") if p.is_file()} == before


def test_cli_refuses_with_exit_2_and_status_still_answers(workspace: Path,
                                                          make_settings) -> None:
    settings = make_settings(workspace, provider="none", enabled=False)
    common = ("--workspace", str(workspace), "--config", str(settings.config_file))
    for argv in (("search", "PostgreSQL"), ("get", "MEMORY.md"), ("index",), ("reindex",),
                 ("watch",), ("index", "--remote")):
        done = run_memq(*argv, *common, timeout=120)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert "memory is disabled (enabled = false" in done.stderr, (argv, done.stderr)
        assert done.stdout == "", argv
    assert not settings.store.path.exists()
    status = run_memq("status", "--json", *common, timeout=120)
    assert status.returncode == 0, status.stderr
    out = json.loads(status.stdout)
    assert out["enabled"] is False and "enabled = false" in out["reason"]
    human = run_memq("status", *common, timeout=120)
    assert human.returncode == 0 and "memory is disabled" in human.stdout, human.stdout


def test_mcp_tools_are_tool_errors(workspace: Path, make_settings) -> None:
    settings = make_settings(workspace, provider="none", enabled=False)

    async def scenario() -> None:
        async with session(settings) as client:
            for tool, args in (("memory_search", {"query": "PostgreSQL"}),
                               ("memory_get", {"path": "MEMORY.md"}),
                               ("memory_append", {"text": "- a note"})):
                text = await refused(client, tool, args)
                assert "memory is disabled (enabled = false" in text, text
                assert "internal error" not in text

    anyio.run(scenario)
    assert not settings.store.path.exists()
    assert "a note" not in (workspace / "MEMORY.md").read_text()


def test_a_watch_over_many_memories_skips_a_disabled_one(tmp_path: Path, make_settings,
                                                         workspace: Path) -> None:
    import shutil
    import threading

    from workers.watching import WatchGroup, run_watch

    other = tmp_path / "ws-on"
    shutil.copytree(workspace, other)
    off = make_settings(workspace, provider="none", enabled=False, agentId="off")
    on = make_settings(other, provider="none", agentId="on",
                       store={"path": str(tmp_path / "on.sqlite")})
    started: list[WatchGroup] = []
    thread = threading.Thread(target=run_watch, args=([off, on],),
                              kwargs={"debounce_s": 0.2, "on_start": started.append},
                              daemon=True)
    thread.start()
    try:
        for _ in range(300):
            if started and all(s.reconciles for s in started[0].stats.values()):
                break
            threading.Event().wait(0.1)
        assert started, "run_watch never started"
        assert [s.settings.agent_id for s in started[0].services] == ["on"]
    finally:
        if started:
            started[0].stop()
        thread.join(30)
    assert not thread.is_alive()
    assert on.store.path.exists() and not off.store.path.exists()
