"""``memory_search``'s ``corpus`` (OpenClaw 2026.9): memory notes only, session transcripts
only, everything configured, or the wiki memq does not have; any other value refused. Through
the library, the CLI (a fresh process) and an MCP session."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from pipeline.embeddings.registry import choose_provider
from pipeline.errors import RequestRefused
from pipeline.ingest.producer import index_once
from pipeline.memory import Memory
from pipeline.messages import QueryRequest
from pipeline.search.corpus import CORPORA, SESSIONS_DISABLED
from pipeline.store.engine import connect
from tests.conftest import run_memq
from tests.test_mcp import call, refused, session
from tests.test_sessions import msg


@pytest.fixture
def both(tmp_path: Path, workspace: Path, make_settings):
    """A keyword-only memory whose notes and one session transcript both hold the gate code."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    (workspace / "MEMORY.md").write_text("# Facts\n\n- The gate code is 4471.\n")
    (folder / "abc.jsonl").write_text("\n".join([
        json.dumps({"type": "session", "id": "abc"}),
        msg("user", [{"type": "text", "text": "What is the gate code?"}]),
        msg("assistant", [{"type": "text", "text": "The gate code is 4471."}]),
    ]) + "\n")
    settings = make_settings(workspace, provider="none", sources=["memory", "sessions"],
                             experimental={"sessionMemory": True}, sessionsDir=str(folder))
    db = connect(settings.store.path)
    try:
        index_once(db, settings, choose_provider(settings), None)
    finally:
        db.close()
    return settings


def _sources(results) -> set[str]:
    return {hit.source for hit in results.hits}


def test_corpus_narrows_the_sources_read(both) -> None:
    with Memory(settings=both) as memory:
        assert _sources(memory.search("gate code 4471")) == {"memory", "sessions"}
        assert _sources(memory.search("gate code 4471", corpus="all")) == {"memory", "sessions"}
        assert _sources(memory.search("gate code 4471", corpus="memory")) == {"memory"}
        assert _sources(memory.search("gate code 4471", corpus="sessions")) == {"sessions"}
        wiki = memory.search("gate code 4471", corpus="wiki")
        assert wiki.hits == [] and "Wiki corpus is not registered" in wiki.warning
        for bad in ("Memory", "session", "", "memory,sessions"):
            with pytest.raises(RequestRefused, match="corpus must be one of: memory, wiki, "
                                                     "all, sessions"):
                memory.search("gate code", corpus=bad)


def test_sessions_corpus_without_session_search_is_refused_with_advice(
        workspace: Path, make_settings) -> None:
    (workspace / "MEMORY.md").write_text("- The gate code is 4471.\n")
    settings = make_settings(workspace, provider="none", sources=["memory"],
                             rememberAcrossConversations=False)
    assert settings.sources == ("memory",)
    with Memory(settings=settings) as memory:
        memory.index()
        out = memory.search("gate code", corpus="sessions")
        assert out.mode == "unavailable" and out.error == SESSIONS_DISABLED
        assert "memory.search.experimental.sessionMemory" in out.action
        assert [h.path for h in memory.search("gate code", corpus="memory").hits] == ["MEMORY.md"]
    done = run_memq("search", "gate code", "--corpus", "sessions", "--workspace",
                    str(settings.workspace), "--config", str(settings.config_file))
    assert done.returncode == 2 and SESSIONS_DISABLED in done.stderr, done.stderr


def test_cli_and_mcp_take_the_corpus(both) -> None:
    args = ("--workspace", str(both.workspace), "--config", str(both.config_file), "--json")
    for corpus, sources in (("memory", {"memory"}), ("sessions", {"sessions"}),
                            ("all", {"memory", "sessions"})):
        done = run_memq("search", "gate code 4471", "--corpus", corpus, *args)
        assert done.returncode == 0, done.stderr
        assert {h["source"] for h in json.loads(done.stdout)["results"]} == sources
    typo = run_memq("search", "gate code", "--corpus", "memories", *args)
    assert typo.returncode == 2 and "invalid choice: 'memories'" in typo.stderr

    async def scenario() -> None:
        async with session(both) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            schema = listed["memory_search"].input_schema["properties"]["corpus"]
            assert schema["enum"] == list(CORPORA)
            out = await call(client, "memory_search", {"query": "gate code 4471",
                                                       "corpus": "sessions"})
            assert {h["source"] for h in out["results"]} == {"sessions"}
            out = await call(client, "memory_search", {"query": "gate code 4471"})
            assert {h["source"] for h in out["results"]} == {"memory", "sessions"}
            text = await refused(client, "memory_search", {"query": "gate", "corpus": "x"})
            assert "corpus" in text

    anyio.run(scenario)


def test_a_reader_takes_the_corpus_in_a_query_message() -> None:
    request = QueryRequest.from_json(QueryRequest("main", "search", {
        "query": "gate", "corpus": "memory"}, 0).to_json())
    assert request.args["corpus"] == "memory"
