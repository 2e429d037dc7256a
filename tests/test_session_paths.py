"""Transcript files named as OpenClaw 2026.9.6 names them, and ``rememberAcrossConversations``
as it decides it: memq's :func:`pipeline.ingest.sessions.session_file_path`, the default of
:func:`pipeline.config.remember.remembers_by_default` and the indexed / searched sources are
compared with OpenClaw's own ``sessionPathForFile``, ``resolveRememberAcrossConversations``
and ``resolveMemorySearchSourcePolicy``, run by Node on the installed package
(tests/openclaw_session_paths.mjs). A store that named transcript files ``sessions/<file>``
renames its rows in place (no chunk read or embedded again, nothing deleted)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import Settings, load_settings
from pipeline.embeddings.registry import choose_provider
from pipeline.ingest.producer import index_once
from pipeline.ingest.sessions import session_file_path, session_files
from pipeline.memory import Memory
from pipeline.search.corpus import corpus_sources, search_sources
from pipeline.store.engine import connect
from pipeline.store.session_paths import move_session_rows
from pipeline.store.writer import chunk_id
from tests.test_sessions import msg
from tests.tools import node_env, tool, tools_dir

SCRIPT = Path(__file__).with_name("openclaw_session_paths.mjs")

FILES = [
    "/h/.openclaw/agents/main/sessions/abc.jsonl",
    "/h/.openclaw/agents/Ops/sessions/abc.jsonl.reset.2026-09-19T08-30-00.123Z.zst",
    "/h/.openclaw/agents/My Agent/sessions/x.jsonl.deleted.2026-09-19T09-00-00Z",
    "/tmp/x/sessions/abc.jsonl",  # memq's own sessionsDir: no agent
    "/tmp/agents/x/sessions/sub/abc.jsonl",  # the nearest agents/<id>/sessions above
    "/a/agents/one/sessions/agents/two/sessions/f.jsonl",
    "/home/u/sessions/agents/main/other/f.jsonl",
    "/agents/sessions/f.jsonl",
    "/sessions/f.jsonl",
    "/x/agents/main/sessions/../sessions/f.jsonl",
    "/x/agents/main/sessions/./f.jsonl",
    "relative/agents/rel/sessions/f.jsonl",
    "f.jsonl",
]

CONFIGS: list[dict[str, Any]] = [
    {},
    {"session": {"dmScope": "main"}},
    {"session": {"dmScope": "per-peer"}},
    {"session": {"dmScope": "per-channel-peer"}},
    {"session": {"dmScope": None}},
    {"session": {}},
    {"session": "main"},
    {"bindings": []},
    {"bindings": [{"session": {"dmScope": "main"}}]},
    {"bindings": [{"session": {}}, {}, None, "x", {"session": None}, {"session": ["main"]}]},
    {"bindings": [{"agentId": "main", "session": {"dmScope": "per-peer"}}],
     "session": {"dmScope": "main"}},
    {"memory": {"search": {"rememberAcrossConversations": False}}},
    {"memory": {"search": {"rememberAcrossConversations": True}},
     "session": {"dmScope": "per-peer"}},
    {"agents": {"list": [{"id": "main",
                          "memory": {"search": {"rememberAcrossConversations": False}}}]}},
    {"agents": {"list": [{"id": "main",
                          "memory": {"search": {"rememberAcrossConversations": True}}}]},
     "memory": {"search": {"rememberAcrossConversations": False}}},
]

POLICIES = [
    {"configuredSources": sources, "rememberAcrossConversations": remember,
     "configuredSessionMemory": session_memory}
    for sources in (None, ["memory"], ["memory", "sessions"], ["sessions"])
    for remember in (False, True)
    for session_memory in (False, True)
]


@pytest.fixture(scope="module")
def theirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("openclaw_paths")
    dist = tools_dir() / "openclaw/node_modules/openclaw/dist"
    tool("openclaw")
    home = folder / "home"
    env = node_env({**node_env(), "HOME": str(home), "OPENCLAW_HOME": str(home),
                    "OPENCLAW_STATE_DIR": str(home / ".openclaw"),
                    "OPENCLAW_CONFIG_PATH": str(home / ".openclaw" / "openclaw.json")})
    done = subprocess.run([str(tool("node")), str(SCRIPT), str(dist)], cwd=folder,
                          input=json.dumps({"files": FILES, "configs": CONFIGS,
                                            "policies": POLICIES}),
                          capture_output=True, text=True, env=env, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    return {**json.loads(done.stdout), "cwd": folder}


def test_file_paths_as_openclaw_names_them(theirs, monkeypatch) -> None:
    monkeypatch.chdir(theirs["cwd"])  # the relative ones resolve where Node ran
    ours = [session_file_path(f) for f in FILES]
    assert ours == theirs["paths"]
    assert ours[:4] == ["sessions/main/abc.jsonl",
                        "sessions/Ops/abc.jsonl.reset.2026-09-19T08-30-00.123Z.zst",
                        "sessions/My Agent/x.jsonl.deleted.2026-09-19T09-00-00Z",
                        "sessions/abc.jsonl"]


def test_remember_default_as_openclaw(theirs, tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "OPENCLAW_STATE_DIR": str(tmp_path / "state")}
    ours = []
    for n, config in enumerate(CONFIGS):
        path = tmp_path / f"c{n}" / "openclaw.json"
        path.parent.mkdir()
        path.write_text(json.dumps(config))
        ours.append(load_settings(config_file=path, workspace=tmp_path, env=env)
                    .remember_across_conversations)
    assert ours == theirs["remember"]
    assert ours[:3] == [True, True, False]  # a personal install remembers
    # memq's own file knows nothing of OpenClaw's sessions: off unless set
    own = tmp_path / "memq.toml"
    own.write_text("")
    assert not load_settings(config_file=own, workspace=tmp_path, env=env) \
        .remember_across_conversations


def test_indexed_and_searched_sources_as_openclaw(theirs, tmp_path: Path) -> None:
    for policy, want in zip(POLICIES, theirs["policies"], strict=True):
        keys: dict[str, Any] = {"remember_across_conversations":
                                policy["rememberAcrossConversations"],
                                "session_memory": policy["configuredSessionMemory"]}
        if policy["configuredSources"] is not None:
            keys["sources"] = tuple(policy["configuredSources"])
        s = Settings(workspace=tmp_path, **keys)
        assert (list(s.sources), list(search_sources(s)), s.session_memory) == (
            want["sources"], want["searchSources"], want["sessionMemory"]), policy


def _transcript(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("\n".join([msg("user", [{"type": "text", "text": text}]),
                               msg("assistant", [{"type": "text", "text": "Noted."}])]) + "\n")
    return path


def test_remembered_transcripts_are_indexed_not_searched(workspace: Path, tmp_path: Path,
                                                         make_settings) -> None:
    folder = tmp_path / "sessions"
    _transcript(folder, "trip.jsonl", "The gate code is 4471.")
    (workspace / "MEMORY.md").write_text("# Facts\n\n- The gate code is 4471.\n")
    settings = make_settings(workspace, provider="none", rememberAcrossConversations=True,
                             sessionsDir=str(folder))
    assert settings.sources == ("memory", "sessions")
    assert corpus_sources(settings, None) == corpus_sources(settings, "all") == ("memory",)
    with Memory(settings=settings) as memory:
        memory.index()
        assert {h.source for h in memory.search("gate code 4471").hits} == {"memory"}
        assert {h.source for h in memory.search("gate code 4471", corpus="all").hits} == {
            "memory"}
        hits = memory.search("gate code 4471", corpus="sessions").hits
        assert [(h.source, h.path) for h in hits] == [("sessions", "sessions/trip.jsonl")]
    # sources listing sessions: searched too, as OpenClaw does
    listed = make_settings(workspace, provider="none", rememberAcrossConversations=True,
                           sources=["memory", "sessions"], sessionsDir=str(folder))
    assert corpus_sources(listed, None) is None
    with Memory(settings=listed) as memory:
        assert {h.source for h in memory.search("gate code 4471").hits} == {"memory",
                                                                             "sessions"}


def test_a_store_of_sessions_slash_file_rows_renames_them_in_place(
        workspace: Path, tmp_path: Path, make_settings) -> None:
    """A store written when transcript files were ``sessions/<file>``: the same transcripts in
    OpenClaw's folder of agent ``main`` move to ``sessions/main/<file>`` with their chunk rows
    (rowids, states), nothing read, chunked, embedded or deleted again."""
    plain = tmp_path / "plain" / "sessions"
    for n in range(3):
        _transcript(plain, f"s{n}.jsonl", f"Conversation number {n} about otters.")
    _transcript(plain, "s0.jsonl.reset.2026-09-19T08-30-00.123Z", "An archived one.")
    (workspace / "MEMORY.md").write_text("- A note.\n")
    before = make_settings(workspace, provider="none", sources=["memory", "sessions"],
                           experimental={"sessionMemory": True}, sessionsDir=str(plain))
    canonical = tmp_path / "state" / "agents" / "main" / "sessions"
    canonical.parent.mkdir(parents=True)
    shutil.copytree(plain, canonical)  # copy2: the same bytes and times
    after = make_settings(workspace, provider="none", sources=["memory", "sessions"],
                          experimental={"sessionMemory": True}, sessionsDir=str(canonical),
                          store={"path": str(before.store.path)})
    db = connect(before.store.path)
    try:
        index_once(db, before, choose_provider(before), None)
        db.conn.execute("UPDATE chunks SET state = 'ready'")  # as if embedded
        db.conn.commit()
        old = db.conn.execute("SELECT rowid, path, start_line, end_line, hash, text FROM chunks "
                              "WHERE source = 'sessions' ORDER BY rowid").fetchall()
        assert {r[1] for r in old} == {f.path for f in session_files(before)}
        assert all(p.count("/") == 1 for p in {r[1] for r in old})
        report = index_once(db, after, choose_provider(after), None)
        assert (report.changed, report.deleted, report.errors) == (0, 0, [])
        new = db.conn.execute("SELECT rowid, path, start_line, end_line, hash, text, id, state "
                              "FROM chunks WHERE source = 'sessions' ORDER BY rowid").fetchall()
        assert [(r[0], f"sessions/main/{r[1].split('/')[1]}", *r[2:]) for r in old] == [
            r[:6] for r in new]
        assert {r[1] for r in new} == {f.path for f in session_files(after)}
        assert all(r[7] == "ready" for r in new)

        class _C:  # the writer's chunk id of the renamed row
            def __init__(self, row: tuple) -> None:
                self.start_line, self.end_line, self.hash = row[2], row[3], row[4]

        assert all(r[6] == chunk_id("sessions", r[1], _C(r)) for r in new)
        files = {p for (p,) in db.conn.execute("SELECT path FROM files WHERE source = "
                                               "'sessions'")}
        assert files == {r[1] for r in new}
        assert move_session_rows(db, "sessions/main") == 0  # idempotent
        again = index_once(db, after, choose_provider(after), None)
        assert (again.changed, again.deleted) == (0, 0)
    finally:
        db.close()
    with Memory(settings=after) as memory:
        hits = memory.search("otters conversation", corpus="sessions").hits
        assert hits and all(h.path.startswith("sessions/main/s") for h in hits)


def test_a_renamed_row_gives_way_to_the_live_one(tmp_path: Path, workspace: Path,
                                                 make_settings) -> None:
    """An old ``sessions/<id>.jsonl`` row whose new path is already indexed (the live copy of
    that session) goes: the transcript is there once."""
    folder = tmp_path / "plain" / "sessions"
    _transcript(folder, "abc.jsonl", "Pick PostgreSQL.")
    settings = make_settings(workspace, provider="none", sources=["memory", "sessions"],
                             experimental={"sessionMemory": True}, sessionsDir=str(folder))
    db = connect(settings.store.path)
    try:
        index_once(db, settings, choose_provider(settings), None)
        db.conn.execute("INSERT INTO files(path, source, hash, mtime_ns, size, indexed_at) "
                        "VALUES ('sessions/main/abc.jsonl', 'sessions', 'h', 1, 1, 0)")
        db.conn.commit()
        assert move_session_rows(db, "sessions/main") == 1
        paths = {p for (p,) in db.conn.execute("SELECT path FROM files")}
        chunks = db.conn.execute("SELECT count(*) FROM chunks WHERE path = 'sessions/abc.jsonl'"
                                 ).fetchone()[0]
    finally:
        db.close()
    assert "sessions/abc.jsonl" not in paths and "sessions/main/abc.jsonl" in paths
    assert chunks == 0
    assert os.path.exists(folder / "abc.jsonl")  # the file itself is never touched
