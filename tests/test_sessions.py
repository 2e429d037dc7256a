"""Session transcripts: OpenClaw's text extraction and line map, the delta thresholds, truncated
and rotated files, and transcripts embedded through real workers."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pipeline.embeddings.registry import choose_provider
from pipeline.errors import MemoryPathError
from pipeline.ingest.producer import index_once
from pipeline.ingest.sessions import transcript
from pipeline.query import memory_get, memory_search
from pipeline.store.engine import connect
from workers.indexing import run_index


def msg(role: str, content: object, kind: str = "message") -> str:
    return json.dumps({"type": kind, "message": {"role": role, "content": content}})


def test_transcript_keeps_user_and_assistant_text_only() -> None:
    raw = "\n".join([
        json.dumps({"type": "session", "id": "s1", "cwd": "/x"}),
        msg("user", [{"type": "text", "text": "Book   a table\n\nfor two"}]),
        msg("assistant", [{"type": "thinking", "thinking": "secret plan"},
                          {"type": "toolCall", "name": "search"},
                          {"type": "text", "text": "Done: Luigi's at 8."}]),
        msg("toolResult", [{"type": "text", "text": "raw tool output"}]),
        msg("assistant", "plain string content"),
        msg("user", [{"type": "image", "data": "…"}]),
        '{"type": "message", "message": {"role": "user", "content": [{"type": "te',
    ])
    t = transcript(raw)
    assert t.text.splitlines() == ["User: Book a table for two", "Assistant: Done: Luigi's at 8.",
                                   "Assistant: plain string content"]
    assert t.line_map == (2, 3, 5)


@pytest.fixture
def sessions(tmp_path: Path, workspace: Path, make_settings):
    folder = tmp_path / "sessions"
    folder.mkdir()

    def make(**keys: object):
        keys.setdefault("provider", "none")
        return make_settings(workspace, sources=["memory", "sessions"],
                             experimental={"sessionMemory": True}, sessionsDir=str(folder),
                             **keys)

    return folder, make


def _session_rows(db) -> list[tuple[str, str, int, int, str]]:
    return db.conn.execute("SELECT path, source, start_line, end_line, text FROM chunks "
                           "WHERE source = 'sessions' ORDER BY path, start_line").fetchall()


def test_sessions_indexed_with_jsonl_line_ranges(sessions) -> None:
    folder, make = sessions
    settings = make()
    (folder / "abc.jsonl").write_text("\n".join([
        json.dumps({"type": "session", "id": "abc"}),
        msg("user", [{"type": "text", "text": "What is the gate code?"}]),
        msg("assistant", [{"type": "text", "text": "The gate code is 4471."}]),
    ]) + "\n")
    (folder / "notes.txt").write_text("not a transcript\n")
    db = connect(settings.store.path)
    try:
        index_once(db, settings, choose_provider(settings), None)
        rows = _session_rows(db)
    finally:
        db.close()
    assert [(p, s, a, b) for p, s, a, b, _ in rows] == [("sessions/abc.jsonl", "sessions", 2, 3)]
    assert rows[0][4] == "User: What is the gate code?\nAssistant: The gate code is 4471."
    hit = memory_search("gate code 4471", settings=settings)["results"][0]
    assert (hit["path"], hit["source"], hit["startLine"], hit["endLine"]) == (
        "sessions/abc.jsonl", "sessions", 2, 3)
    # memory_get refuses session hits, as OpenClaw 2026.9.6 does (tests/test_openclaw_get.py)
    (folder / "evil.jsonl").symlink_to(folder / "abc.jsonl")
    for bad in (hit["path"], "sessions/gone.jsonl", "sessions/evil.jsonl",
                "sessions/../abc.jsonl", "sessions/notes.txt", "sessions/sub/abc.jsonl"):
        with pytest.raises(MemoryPathError):
            memory_get(bad, settings=settings)


def test_session_memory_off_means_no_transcripts(sessions, make_settings, workspace) -> None:
    folder, _ = sessions
    (folder / "abc.jsonl").write_text(msg("user", "hello there") + "\n")
    settings = make_settings(workspace, provider="none", sources=["memory", "sessions"],
                             sessionsDir=str(folder))  # experimental.sessionMemory is off
    db = connect(settings.store.path)
    try:
        index_once(db, settings, choose_provider(settings), None)
        assert _session_rows(db) == []
    finally:
        db.close()
    with pytest.raises(MemoryPathError):
        memory_get("sessions/abc.jsonl", settings=settings)


@contextmanager
def indexed_session_texts(settings) -> Iterator[Callable[[], str]]:
    """A function that runs one more producer pass over the store and returns the session
    chunks' text, joined (the store stays open while the block runs)."""
    choice = choose_provider(settings)
    db = connect(settings.store.path)

    def texts() -> str:
        index_once(db, settings, choice, None)
        return "\n".join(r[4] for r in _session_rows(db))

    try:
        yield texts
    finally:
        db.close()


def test_delta_thresholds_truncation_and_rotation(sessions) -> None:
    folder, make = sessions
    settings = make(sync={"sessions": {"deltaBytes": 10_000, "deltaMessages": 50}})
    path = folder / "s.jsonl"
    path.write_text(msg("user", "first words about kayaks") + "\n")
    with indexed_session_texts(settings) as texts:
        assert "kayaks" in texts()
        with path.open("a") as f:  # 49 short lines: under both thresholds
            f.writelines(msg("assistant", f"reply {i} mentions walrus") + "\n" for i in range(49))
        assert "walrus" not in texts()
        with path.open("a") as f:  # the 50th new line crosses deltaMessages
            f.write(msg("user", "fiftieth line") + "\n")
        assert "walrus" in texts() and "fiftieth" in texts()
        with path.open("a") as f:  # one long message crosses deltaBytes
            f.write(msg("assistant", "narwhal " * 1300) + "\n")
        assert "narwhal" in texts()
        path.write_text(msg("user", "truncated to one line about otters") + "\n")
        after = texts()
        assert "otters" in after and "walrus" not in after and "kayaks" not in after
        # Rotated: a different file, longer than the indexed one, is indexed in full.
        path.write_text(msg("user", "a brand new session about puffins " * 3) + "\n")
        assert "puffins" in texts() and "otters" not in texts()
        path.unlink()
        assert texts() == ""


@pytest.mark.integration
def test_sessions_embedded_through_real_workers(sessions, tiny_model, broker_url,
                                                fleet) -> None:
    folder, make = sessions
    settings = make(provider="local", local={"modelPath": str(tiny_model)}, brokerUrl=broker_url,
                    query={"minScore": 0.0})
    (folder / "trip.jsonl").write_text("\n".join([
        msg("user", [{"type": "text", "text": "Remind me which hotel we booked in Porto."}]),
        msg("assistant", [{"type": "text", "text": "You booked Casa do Rio in Porto."}]),
    ]) + "\n")
    fleet.start(["store.0", "embed.local"], "both")
    run = run_index(settings, wait=True)
    assert run.waited and run.failed_chunks == 0
    db = connect(settings.store.path)
    try:
        ready = db.conn.execute("SELECT count(*) FROM chunks WHERE source = 'sessions' "
                                "AND state = 'ready'").fetchone()[0]
    finally:
        db.close()
    assert ready == 1
    out = memory_search("Casa do Rio hotel Porto", settings=settings)
    assert out["mode"] == "hybrid" and out["results"][0]["path"] == "sessions/trip.jsonl"


def _compaction() -> str:
    """The record OpenClaw's agent appends to a transcript when it compacts the context."""
    return json.dumps({"type": "compaction", "id": "c1", "parentId": "m9",
                       "timestamp": "2026-11-20T10:00:00.000Z", "summary": "Talked about boats.",
                       "firstKeptEntryId": "m8", "tokensBefore": 120_000})


@pytest.mark.parametrize("force", [True, False])
def test_post_compaction_force_resyncs_under_the_thresholds(sessions, force: bool) -> None:
    """OpenClaw's ``sync.sessions.postCompactionForce`` (default true) syncs a transcript
    after a compaction whatever the deltas; memq sees the compaction record in the file."""
    folder, make = sessions
    keys: dict[str, object] = {"deltaBytes": 10_000, "deltaMessages": 50}
    if not force:
        keys["postCompactionForce"] = False
    settings = make(sync={"sessions": keys})
    assert settings.sync.sessions.post_compaction_force is force
    path = folder / "s.jsonl"
    path.write_text(msg("user", "first words about kayaks") + "\n")
    with indexed_session_texts(settings) as texts:
        assert "kayaks" in texts()
        with path.open("a") as f:  # a few lines, far under both thresholds
            f.write(msg("assistant", "the walrus joke") + "\n")
            f.write(_compaction() + "\n")
            f.write(msg("user", "after compaction: puffins") + "\n")
        after = texts()
        assert ("walrus" in after and "puffins" in after) is force
        assert "Talked about boats" not in after  # the summary is not conversation text
        with path.open("a") as f:  # more small growth without a compaction: no sync
            f.write(msg("assistant", "otters now") + "\n")
        assert "otters" not in texts()
