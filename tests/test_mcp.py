"""``memq mcp`` through the official MCP SDK's client: a real ``memq mcp`` subprocess over stdio
(and over streamable HTTP), real tool calls, real files."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from memq.mcp_server import is_loopback, parse_bind, tool_descriptions
from pipeline.config import Settings
from pipeline.results import SearchHit
from pipeline.search.citations import apply_citations
from tests.conftest import REPO, DailyLogDays, run_memq


def server_params(settings: Settings) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "memq.cli", "mcp", "--workspace", str(settings.workspace),
              "--config", str(settings.config_file)],
        cwd=str(REPO))


@asynccontextmanager
async def session(settings: Settings) -> AsyncIterator[Client]:
    with anyio.fail_after(60):
        async with Client(server_params(settings), read_timeout_seconds=60) as client:
            yield client


async def call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """A call that must succeed; returns the tool's JSON answer."""
    result = await client.call_tool(tool, args)
    text = result.content[0].text
    assert not result.is_error, text
    data = json.loads(text)
    assert result.structured_content == data
    return data


async def refused(client: Client, tool: str, args: Any) -> str:
    """A call that must come back as a tool error (not a protocol error, not a crash)."""
    result = await client.call_tool(tool, args)
    assert result.is_error, f"{tool}({args!r}) was accepted: {result.content}"
    return result.content[0].text


def test_session_lists_searches_reads_appends_and_finds(keyword_settings: Settings) -> None:
    ws = keyword_settings.workspace
    memory_before = (ws / "MEMORY.md").read_text()
    daily: dict[str, str] = {}

    async def scenario() -> None:
        async with session(keyword_settings) as client:
            assert "## Memory Recall" in (client.instructions or "")
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == {"memory_search", "memory_get", "memory_append"}
            assert "memory_get" in tools["memory_search"].description
            assert "before answering" in tools["memory_search"].description
            for name in ("memory_search", "memory_get"):
                assert "MEMORY.md, USER.md" in tools[name].description
            assert set(tools["memory_get"].input_schema["properties"]) == {"path", "from", "lines",
                                                                     "corpus"}
            assert tools["memory_search"].input_schema["required"] == ["query"]
            titles = {name: (t.title, t.annotations.title) for name, t in tools.items()}
            assert titles == {"memory_search": ("Search memory", "Search memory"),
                              "memory_get": ("Read memory lines", "Read memory lines"),
                              "memory_append": ("Append to memory", "Append to memory")}
            for name in ("memory_search", "memory_get"):
                hints = tools[name].annotations
                assert hints.read_only_hint is True and hints.open_world_hint is False
                assert hints.destructive_hint is None and hints.idempotent_hint is None
            hints = tools["memory_append"].annotations
            assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint,
                    hints.open_world_hint) == (False, False, False, False)

            found = await call(client, "memory_search", {"query": "ledger tables"})
            assert found["mode"] == "keyword-only" and "dirty" not in found
            # OpenClaw names the configured mode (auto: cited, an MCP client is a direct chat)
            assert found["citations"] == "auto"
            top = found["results"][0]
            assert top["path"] == "memory/2026-11-03.md"
            assert set(top) >= {"path", "startLine", "endLine", "score", "snippet", "source",
                                "textScore", "corpus", "provenance"}
            assert "vectorScore" not in top and top["corpus"] == "memory"
            assert found["debug"]["hits"] == len(found["results"])
            assert found["debug"]["toolMs"] >= found["debug"]["searchMs"] >= 0
            cite = f"{top['path']}#L{top['startLine']}-L{top['endLine']}"
            assert top["citation"] == cite and top["snippet"].endswith(f"\n\nSource: {cite}")

            got = await call(client, "memory_get", {"path": top["path"], "from": 4, "lines": 2})
            lines = (ws / top["path"]).read_text().split("\n")
            assert got == {"status": "ok", "path": top["path"], "from": 4, "lines": 2,
                           "truncated": True, "nextFrom": 6,
                           "text": "\n".join(lines[3:5]) + "\n\n[More content available. Use "
                                                           "from=6 to continue.]"}

            note = "- Zorblax rollout moved to Thursday; Priya owns the runbook."
            with DailyLogDays() as days:
                saved = await call(client, "memory_append", {"text": note})
            assert saved["path"] in days.paths and saved["target"] == "daily"
            daily["path"] = saved["path"]
            assert saved["indexed"] is True and saved["vectors"] == "none (keyword-only index)"
            back = await call(client, "memory_get", {"path": saved["path"],
                                                     "from": saved["startLine"], "lines": 1})
            assert back["text"] == note
            hits = await call(client, "memory_search", {"query": "Zorblax runbook"})
            assert hits["results"][0]["path"] == daily["path"]
            assert "Zorblax" in hits["results"][0]["snippet"] and "dirty" not in hits

            decaf = {"text": "- Sam switched to decaf after 14:00.", "target": "longterm"}
            saved = await call(client, "memory_append", decaf)
            assert saved["path"] == "MEMORY.md"
            hits = await call(client, "memory_search", {"query": "decaf"})
            assert hits["results"][0]["path"] == "MEMORY.md"

    anyio.run(scenario)
    assert (ws / daily["path"]).read_text() == (
        "- Zorblax rollout moved to Thursday; Priya owns the runbook.\n")
    memory_after = (ws / "MEMORY.md").read_text()
    assert memory_after.startswith(memory_before)
    assert memory_after.endswith("- Sam switched to decaf after 14:00.\n")


def test_descriptions_name_what_the_tools_read(workspace: Path, make_settings,
                                               tmp_path: Path) -> None:
    """As OpenClaw 2026.9.6's memory_search / memory_get: USER.md is memory (and evergreen),
    extra paths and session transcripts are named when configured, every corpus is told."""
    plain = tool_descriptions(make_settings(workspace, provider="none"))
    search, get = plain["memory_search"], plain["memory_get"]
    files = "MEMORY.md, USER.md, Markdown files recursively under memory/"
    assert f"search {files} by meaning" in search and f"Read lines of {files}," in get
    assert "extra paths" not in search and "session transcripts by" not in search
    for corpus in ("corpus=memory", "corpus=sessions", "corpus=wiki", "corpus=all"):
        assert corpus in search
    assert "MEMORY.md and USER.md are evergreen" not in search  # decay off (write_config)
    extra = tmp_path / "notes"
    extra.mkdir()
    wide = tool_descriptions(make_settings(
        workspace, provider="none", extraPaths=[str(extra)], sources=["memory", "sessions"],
        experimental={"sessionMemory": True},
        query={"hybrid": {"temporalDecay": {"enabled": True}}}))
    more = f"{files}, configured extra paths"
    assert f"search {more}, indexed session transcripts by meaning" in wide["memory_search"]
    assert f"Read lines of {more}," in wide["memory_get"]
    assert "MEMORY.md and USER.md are evergreen and never decay" in wide["memory_search"]
    # with vectors, memq's default recency (superseded) is what the model is told
    for mode, told in (("superseded", "the newer ranks first"), ("decay", "rank lower")):
        embedded = tool_descriptions(make_settings(
            workspace, provider="local",
            query={"hybrid": {"temporalDecay": {"enabled": True, "mode": mode}}}))
        assert told in embedded["memory_search"] and "USER.md are evergreen" in \
            embedded["memory_search"]
        assert ("decay" in embedded["memory_search"]) == (mode == "decay")
    qmd = tool_descriptions(make_settings(workspace, provider="none", backend="qmd"))
    # QMD's collections (memory-root, memory-dir) do not hold USER.md; memory_get reads it
    assert "search MEMORY.md, Markdown files recursively under memory/ by" in qmd["memory_search"]
    assert f"Read lines of {files}," in qmd["memory_get"]


def test_hostile_arguments_are_tool_errors(keyword_settings: Settings, tmp_path: Path) -> None:
    ws = keyword_settings.workspace
    outside = tmp_path / "outside.md"
    outside.write_text("secret\n")
    (ws / "memory" / "link.md").symlink_to(outside)
    files_before = {p: p.read_bytes() for p in ws.rglob("*") if p.is_file()}

    async def scenario() -> None:
        async with session(keyword_settings) as client:
            # refused paths are answers, as OpenClaw's memory_get gives them
            for path in ("../outside.md", str(outside), "memory/../../outside.md", "memory/link.md",
                         "MEMORY.md\x00", "memory", "/etc/passwd", "memory/2026-11-03.txt",
                         "sessions/abc.jsonl"):
                answer = await call(client, "memory_get", {"path": path})
                assert answer == {"path": path, "text": "", "status": "error",
                                  "code": "MEMORY_PATH_NOT_ALLOWED",
                                  "error": "path is not an allowed Markdown memory file"}
            assert "secret" not in await refused(client, "memory_get", {"path": ""})
            for args in ({"path": "MEMORY.md", "from": -5}, {"path": "MEMORY.md", "from": 0},
                         {"path": "MEMORY.md", "lines": -1}, {"path": "MEMORY.md", "lines": 0},
                         {"path": "MEMORY.md", "from": "3"},
                         {"path": "MEMORY.md", "from": True}, {"path": "MEMORY.md", "lines": 1.5},
                         {"path": 7}, {}, {"path": "MEMORY.md", "evil": 1}):
                await refused(client, "memory_get", args)
            far = await call(client, "memory_get", {"path": "MEMORY.md", "from": 10**30})
            assert (far["text"], far["lines"]) == ("", 0)
            whole = await call(client, "memory_get", {"path": "MEMORY.md", "lines": 10**30})
            assert whole["text"] + "\n" == (ws / "MEMORY.md").read_text()

            for args in ({"query": 123}, {"query": None}, {"query": ["a"]}, {},
                         {"query": "x" * 5000}, {"query": "x", "maxResults": 0},
                         {"query": "x", "maxResults": -3}, {"query": "x", "minScore": 5},
                         {"query": "x", "minScore": "high"}, {"query": "x", "top_k": 3}):
                message = await refused(client, "memory_search", args)
                assert "invalid" in message
            odd = await call(client, "memory_search", {"query": '" OR * NEAR( AND -) ^ "'})
            assert isinstance(odd["results"], list)

            for args in ({"text": ""}, {"text": "   \n"}, {}, {"text": 5},
                         {"text": "a\x00b"}, {"text": "x" * 70_000},
                         {"text": "ok", "target": "../../outside"},
                         {"text": "ok", "target": "session"}):
                await refused(client, "memory_append", args)
            (ws / "MEMORY.md").rename(ws / "MEMORY.real")
            (ws / "MEMORY.md").symlink_to(outside)
            await refused(client, "memory_append", {"text": "leak", "target": "longterm"})
            (ws / "MEMORY.md").unlink()
            (ws / "MEMORY.real").rename(ws / "MEMORY.md")

            await refused(client, "memory_delete", {"path": "MEMORY.md"})
            alive = await call(client, "memory_search", {"query": "PostgreSQL"})
            assert alive["results"]

    anyio.run(scenario)
    assert outside.read_text() == "secret\n"
    files_after = {p: p.read_bytes() for p in ws.rglob("*") if p.is_file()}
    assert files_after == files_before


def test_memory_get_takes_openclaws_corpus_argument(keyword_settings: Settings) -> None:
    """memory_get's ``corpus`` as OpenClaw 2026.9.6 takes it: memory (the files), all (the
    files, and no wiki registered), wiki (nothing: memq has none), anything else refused."""
    whole = (keyword_settings.workspace / "MEMORY.md").read_text()

    async def scenario() -> None:
        async with session(keyword_settings) as client:
            plain = await call(client, "memory_get", {"path": "MEMORY.md"})
            memory = await call(client, "memory_get", {"path": "MEMORY.md", "corpus": "memory"})
            assert plain == memory and memory["text"] + "\n" == whole
            assert "corpora" not in memory
            both = await call(client, "memory_get", {"path": "MEMORY.md", "corpus": "all",
                                                     "from": 1, "lines": 1})
            assert both["text"] == (whole.splitlines()[0] + "\n\n[More content available. "
                                    "Use from=2 to continue.]")
            assert (both["status"], both["nextFrom"]) == ("ok", 2)
            assert both["corpora"] == [{"corpus": "memory", "outcome": "ok"},
                                       {"corpus": "wiki", "outcome": "not-registered"}]
            wiki = await call(client, "memory_get", {"path": "MEMORY.md", "corpus": "wiki"})
            assert wiki["text"] == "" and wiki["path"] == "MEMORY.md"
            assert wiki["corpora"] == [{"corpus": "wiki", "outcome": "not-registered"}]
            assert "status" not in wiki  # as OpenClaw: no corpus answered
            assert "Wiki corpus is not registered" in wiki["warning"]
            for corpus in ("sessions", "everything", 3):
                await refused(client, "memory_get", {"path": "MEMORY.md", "corpus": corpus})

    anyio.run(scenario)


def test_search_answers_at_once_when_dirty_and_syncs_in_background(
        keyword_settings: Settings) -> None:
    ws = keyword_settings.workspace

    async def scenario() -> None:
        async with session(keyword_settings) as client:
            clean = await call(client, "memory_search", {"query": "PostgreSQL"})
            assert "dirty" not in clean
            (ws / "memory" / "2026-12-01.md").write_text("- The quokka sticker goes on the NAS.\n")
            first = await call(client, "memory_search", {"query": "quokka sticker"})
            assert first["dirty"] == 1 and first["results"] == []
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                later = await call(client, "memory_search", {"query": "quokka sticker"})
                # The staleness check runs before the search: an answer given while the
                # background sync commits can hold the new rows and still say "dirty".
                if later["results"] and "dirty" not in later:
                    break
                await anyio.sleep(0.1)
            assert later["results"][0]["path"] == "memory/2026-12-01.md"
            assert "dirty" not in later

    anyio.run(scenario)


def test_citations_off_and_openclaw_key(workspace: Path, make_settings, tmp_path: Path) -> None:
    settings = make_settings(workspace, provider="none", citations="off")
    assert settings.citations == "off"
    run_memq("index", "--workspace", str(workspace), "--config", str(settings.config_file))

    async def scenario() -> None:
        async with session(settings) as client:
            assert "Citations are disabled" in (client.instructions or "")
            out = await call(client, "memory_search", {"query": "PostgreSQL"})
            assert out["citations"] == "off" and out["results"]
            assert all("citation" not in r and "Source:" not in r["snippet"]
                       for r in out["results"])

    anyio.run(scenario)

    from pipeline.config import ConfigError, load_settings

    openclaw = tmp_path / "openclaw.json"
    openclaw.write_text(json.dumps({"memory": {"citations": "on"},
                                    "agents": {"defaults": {"workspace": str(workspace)}}}))
    assert load_settings(config_file=openclaw, env={}).citations == "on"
    openclaw.write_text(json.dumps({"memory": {"citations": "sometimes"}}))
    with pytest.raises(ConfigError, match=r"memory\.citations"):
        load_settings(config_file=openclaw, env={})


def test_citation_format_and_bind_parsing() -> None:
    out = apply_citations([SearchHit("MEMORY.md", 3, 3, 0.5, "x", "memory")], "on")
    assert out[0].citation == "MEMORY.md#L3"
    assert out[0].snippet == "x\n\nSource: MEMORY.md#L3"
    assert out[0].to_dict()["citation"] == "MEMORY.md#L3"
    assert parse_bind("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert parse_bind("[::1]:80") == ("::1", 80)
    assert parse_bind("9000") == ("127.0.0.1", 9000)
    for bad in ("localhost", "host:0", "host:99999", "host:http"):
        with pytest.raises(ValueError):
            parse_bind(bad)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")
    assert not is_loopback("example.com")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_http_mode_needs_the_bearer_token(keyword_settings: Settings) -> None:
    import httpx2

    token = "t0k3n-" + "x" * 26
    port = _free_port()
    argv = [sys.executable, "-m", "memq.cli", "mcp", "--workspace",
            str(keyword_settings.workspace), "--config", str(keyword_settings.config_file),
            "--http", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(argv, cwd=REPO, env={**os.environ, "MEMQ_MCP_TOKEN": token},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1].decode()
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        accept = {"Accept": "application/json, text/event-stream"}
        for auth in ({}, {"Authorization": "Bearer wrong-token-of-enough-length"},
                     {"Authorization": f"Basic {token}"}, {"Authorization": token}):
            answer = httpx2.post(url, json=hello, headers={**accept, **auth})
            assert answer.status_code == 401, answer.text
            assert token not in answer.text

        async def scenario() -> None:
            from mcp.client.streamable_http import streamable_http_client

            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
            async with http, Client(streamable_http_client(url, http_client=http)) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                assert names == {"memory_search", "memory_get", "memory_append"}
                out = await call(client, "memory_search", {"query": "Zigbee"})
                assert out["results"][0]["path"] in ("memory/2026-11-10.md", "MEMORY.md")

        anyio.run(scenario)
    finally:
        proc.terminate()
        proc.wait(20)


def test_http_refuses_to_expose_memory_without_a_token(keyword_settings: Settings) -> None:
    args = ("mcp", "--workspace", str(keyword_settings.workspace), "--config",
            str(keyword_settings.config_file))
    exposed = run_memq(*args, "--http", f"0.0.0.0:{_free_port()}", env={"MEMQ_MCP_TOKEN": ""},
                       timeout=60)
    assert exposed.returncode == 2 and "without a bearer token" in exposed.stderr
    short = run_memq(*args, "--http", f"127.0.0.1:{_free_port()}", "--token", "short", timeout=60)
    assert short.returncode == 2 and "at least 16 characters" in short.stderr


@pytest.mark.integration
def test_append_embeds_in_the_server_without_a_broker_and_queues_with_one(
        workspace: Path, make_settings, tiny_model, broker_url: str, fleet) -> None:
    from pipeline.status import index_status
    from workers.indexing import run_index

    model = {"modelPath": str(tiny_model)}
    with_broker = make_settings(workspace, provider="local", brokerUrl=broker_url, local=model)
    no_broker = make_settings(workspace, provider="local", local=model)
    assert with_broker.store.path == no_broker.store.path
    fleet.start(["store.0", "embed.local"], "both")
    assert run_index(with_broker, wait=True).waited

    # The tiny model's weights are random: meaning ranks nothing, so look at every result.
    wombat = {"query": "wombat budget", "minScore": 0, "maxResults": 50}
    emu = {"query": "emu budget", "minScore": 0, "maxResults": 50}

    async def without_broker() -> None:
        async with session(no_broker) as client:
            saved = await call(client, "memory_append", {"text": "- The wombat budget is 40k."})
            assert saved["indexed"] and saved["vectors"] == "embedded"
            out = await call(client, "memory_search", wombat)
            assert out["mode"] == "hybrid" and "pending" not in out  # its vector is there
            assert any("wombat" in r["snippet"] for r in out["results"])

    async def with_a_broker() -> None:
        async with session(with_broker) as client:
            saved = await call(client, "memory_append", {"text": "- The emu budget is 12k."})
            assert saved["indexed"] and saved["vectors"] == "queued"
            deadline = time.monotonic() + 60
            out = await call(client, "memory_search", emu)
            while "pending" in out and time.monotonic() < deadline:
                await anyio.sleep(0.2)
                out = await call(client, "memory_search", emu)
            assert "pending" not in out, fleet.logs()
            assert out["mode"] == "hybrid"
            assert any("emu" in r["snippet"] for r in out["results"])

    anyio.run(without_broker)
    assert index_status(no_broker)["pending"] == 0
    anyio.run(with_a_broker)
    assert index_status(with_broker)["pending"] == 0
