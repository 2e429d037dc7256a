"""Entry annotations weigh scores (importance, project keys) and path queries rank files first,
as OpenClaw 2026.9.6 does: each rule checked against OpenClaw's own functions, run under Node
from the installed package (``tests/openclaw_entry_weights.mjs``), then end to end in a store.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from pipeline.config import Settings
from pipeline.embeddings.registry import choose_provider
from pipeline.ingest.chunking import chunk_markdown, memory_chunks
from pipeline.ingest.producer import index_once
from pipeline.memory import Memory
from pipeline.search import paths, weights
from pipeline.search.hybrid import search_store
from pipeline.store.engine import connect
from pipeline.store.schema import open_store
from tests.conftest import run_memq
from tests.searchkit import QueryVector, build
from tests.test_mcp import call, session
from tests.tools import run_oracle

ORACLE = Path(__file__).with_name("openclaw_entry_weights.mjs")


def openclaw(cases: dict[str, Any]) -> dict[str, Any]:
    """OpenClaw's answers to ``cases`` (see the script's header)."""
    return run_oracle(ORACLE, cases)  # type: ignore[return-value]


# --- chunk metadata ---------------------------------------------------------------------------

INDEX_CASES = [
    ("MEMORY.md", "# Notes\n- fact one <!-- importance: 9 --> <!-- trigger: a, b; c -->\n"
                  "  more text\n- two <!-- project: GitHub.com/x/y -->\n"
                  "- three <!-- project: a;<b> -->\n"),
    ("MEMORY.md", "- Keep the gateway on loopback. <!-- trigger: gateway setup, network safety -->"
                  " <!-- importance: 9 -->\n- plain entry\n"),
    ("MEMORY.md", "intro <!-- importance: 4 -->\n- a <!-- importance: 11 -->\n"
                  "- b <!-- importance: 03 --> <!-- importance: 7 -->\n"
                  "- c <!-- importance: 5 --> trailing text\n- d <!-- IMPORTANCE :2-->\n"),
    ("MEMORY.md", "- a <!-- project: one; two -->\n- b <!-- project: ; -->\n"
                  "- c <!-- project: path:/Repo/X -->\n- d <!-- project: Org/Repo -->\n"
                  "  <!-- project: org/repo -->\n- e <!-- project: x\nstill -->\n"
                  "- f <!-- project: unclosed\n"),
    ("USER.md", "- about me <!-- importance: 8 --> <!-- project: a/b -->\n- second\n"),
    ("memory.md", "- lower-case root <!-- importance: 6 --> <!-- trigger: one -->\n"),
    ("memory/2026-02-10.md", "# Day\nnote <!-- importance: 9 --> <!-- project: a/B -->\n\nmore\n"),
    ("memory/ops.md", "first <!-- trigger: x -->\r\nsecond <!-- project: k1;k2 -->\r\n"),
    ("MEMORY.md", "- one\n<!-- importance: 3 -->- two\n  - nested <!-- trigger: t -->\n# H\n"
                  "- three   \n"),
    ("notes/extra.md", "# H\n" + "\n".join(f"- item {i} <!-- project: p{i % 3} -->"
                                             for i in range(60)) + "\n"),
]


@pytest.mark.parametrize("tokens,overlap", [(400, 80), (24, 8)])
def test_chunks_carry_their_entrys_values_as_openclaw_indexes_them(tokens: int,
                                                                   overlap: int) -> None:
    """Importance, triggers and project key of every chunk: what ``prepareMemoryIndexChunks``
    gives (curated root only for importance/triggers; never a project key in USER.md; the
    invalid marker for a refused or unclosed project comment)."""
    cases = [{"path": p, "content": c, "tokens": tokens, "overlap": overlap,
              "curatedRoot": p in ("MEMORY.md", "memory.md", "USER.md")}
             for p, c in INDEX_CASES]
    expected = openclaw({"index": cases})["index"]
    for (path, content), want in zip(INDEX_CASES, expected, strict=True):
        got = [[c.start_line, c.end_line, c.importance, c.triggers, c.project_key]
               for c in memory_chunks(path, content, tokens, overlap)]
        assert got == want, path
    assert any(row[2] == 9 for row in expected[0])  # the cases do exercise every value
    assert any(row[4] == "!invalid-project-annotation" for row in expected[3])


# --- the multipliers --------------------------------------------------------------------------


def test_importance_multiplier_is_openclaws() -> None:
    values = [None, 0, 1, 2, 5, 5.7, 9, 10, 11, 100, -4]
    expected = openclaw({"importance": values})["importance"]
    assert [weights.importance_multiplier(v) for v in values] == expected
    assert weights.importance_multiplier(10) == 1.25 and weights.importance_multiplier(1) == 0.8


PROJECT_CASES = [
    ("a", ["a"]), ("a", ["b"]), ("a; b", ["a", "b"]), ("a; b", ["a"]), (None, ["a"]),
    ("a", None), ("a", []), ("!invalid-project-annotation", ["a"]),
    ("!invalid-project-annotation", None), ("x; !invalid-project-annotation", None),
    ("github.com/o/r", ["github.com/o/r", "other"]), (" ; a ;", ["a"]),
]


def test_project_multiplier_and_invalid_entries_are_openclaws() -> None:
    expected = openclaw({"projects": [{"projectKey": k, "active": a}
                                      for k, a in PROJECT_CASES]})["projects"]
    for (key, active), want in zip(PROJECT_CASES, expected, strict=True):
        keys = weights.active_keys(active)
        assert weights.project_multiplier(key, keys) == want["multiplier"], (key, active)
        assert weights.project_eligible(key) == want["kept"], (key, active)
    assert {w["multiplier"] for w in expected} == {1, 1.15, 0.9}


PATH_CASES = [
    ("memory/notes.md", "memory/notes.md"), ("notes.md", "memory/notes.md"),
    ("notes", "memory/notes.md"), ("memory/notes", "memory/notes.md"),
    ("Notes.MD", "memory/notes.md"), ("./MEMORY.md", "MEMORY.md"), ("memory", "MEMORY.md"),
    ("memory\\notes.md", "memory/notes.md"), ("  notes.md ", "memory/notes.md"),
    ("notes.md", "memory/notes.md.bak"), (".", "memory/x.md"), ("", "memory/x.md"),
    (".hidden", "memory/.hidden"), ("archive.tar", "memory/archive.tar.gz"),
    ("cafe\u0301.md", "memory/caf\u00e9.md"), ("notes about cats", "memory/notes.md"),
]


def test_exact_path_specificity_is_openclaws() -> None:
    expected = openclaw({"paths": [{"query": q, "path": p} for q, p in PATH_CASES]})["paths"]
    got = [paths.exact_path_specificity(q, p) for q, p in PATH_CASES]
    assert got == expected
    assert {3, 2, 1, 0} <= set(expected)


# --- end to end: a real store -----------------------------------------------------------------

TWIN = "The gateway listens on loopback port 18789."


def _hits(memory: Memory, query: str, **kwargs: Any) -> list[dict[str, Any]]:
    return memory.search(query, sync=False, min_score=0, **kwargs).to_dict()["results"]


def indexed(ws: Path, make_settings) -> Settings:
    """Keyword-only settings for ``ws``, its files synced into a real store."""
    db, settings = build(ws, make_settings, {})
    db.close()
    return settings


@pytest.fixture
def weighed(tmp_path: Path, make_settings) -> Memory:
    """A keyword-only memory, indexed by the producer: twin entries (the same words) with and
    without importance, project-annotated entries, and files a path query can name."""
    ws = tmp_path / "ws"
    (ws / "memory" / "projects").mkdir(parents=True)
    (ws / "MEMORY.md").write_text(
        f"# Facts\n\n- {TWIN}\n- {TWIN} <!-- importance: 10 --> <!-- trigger: gateway port -->\n"
        "- Release builds use the nightly toolchain. <!-- project: github.com/acme/alpha -->\n"
        "- Release builds use the stable toolchain. <!-- project: github.com/acme/beta -->\n"
        "- Release builds are signed. <!-- project: <broken> -->\n")
    (ws / "memory" / "projects" / "deploy-notes.md").write_text(
        "# Deploy\n\nRoll back with the previous image tag.\n")
    (ws / "memory" / "deploy.md").write_text("# Notes\n\nThe deploy notes live elsewhere.\n")
    (ws / "memory" / "ops.md").write_text(
        "# Ops\n\nSee deploy-notes.md for the deploy notes and the deploy checklist.\n"
        "deploy-notes deploy-notes deploy notes.\n")
    settings = indexed(ws, make_settings)
    with Memory(settings=settings) as memory:
        yield memory


def test_importance_10_outranks_an_equal_unannotated_entry(weighed: Memory) -> None:
    hits = [h for h in _hits(weighed, "gateway loopback port") if TWIN in h["snippet"]]
    assert len(hits) == 2
    top, other = hits
    assert top["importance"] == 10 and top["triggers"] == "gateway port"
    assert "importance" not in other and "triggers" not in other
    assert top["startLine"] > other["startLine"]  # not first by position: by its weight
    assert top["score"] == pytest.approx(other["score"] * 1.25, abs=2e-6)
    assert "<!--" not in top["snippet"]  # the annotation is not part of the text


def test_active_projects_rank_their_entries_and_unreadable_ones_are_never_returned(
        weighed: Memory) -> None:
    def builds(**kwargs: Any) -> list[dict[str, Any]]:
        return [h for h in _hits(weighed, "release builds toolchain", **kwargs)
                if "Release builds" in h["snippet"]]

    plain = builds()
    assert {h.get("projectKey") for h in plain} == {"github.com/acme/alpha",
                                                    "github.com/acme/beta"}
    assert not any("signed" in h["snippet"] for h in plain + builds(projects=["x"]))
    base = {h["projectKey"]: h["score"] for h in plain}
    for active, boosted, lowered in (("github.com/acme/beta", "github.com/acme/beta",
                                      "github.com/acme/alpha"),
                                     ("github.com/acme/alpha", "github.com/acme/alpha",
                                      "github.com/acme/beta")):
        hits = builds(projects=[active])
        assert hits[0]["projectKey"] == boosted
        scores = {h["projectKey"]: h["score"] for h in hits}
        assert scores[boosted] == pytest.approx(base[boosted] * 1.15, abs=2e-6)
        assert scores[lowered] == pytest.approx(base[lowered] * 0.9, abs=2e-6)


def test_a_path_query_ranks_the_named_file_first(weighed: Memory) -> None:
    """The exact path, then a basename, then a stem match come before every content match
    (here a note that mentions the name more often than the file itself)."""
    for query, first in (("memory/projects/deploy-notes.md", "memory/projects/deploy-notes.md"),
                         ("deploy-notes.md", "memory/projects/deploy-notes.md"),
                         ("deploy-notes", "memory/projects/deploy-notes.md"),
                         ("deploy.md", "memory/deploy.md")):
        hits = _hits(weighed, query)
        assert hits[0]["path"] == first, (query, [h["path"] for h in hits])
        assert hits[0]["score"] == 1.0  # OpenClaw shows an exact path match as 1
    content = _hits(weighed, "deploy notes checklist")
    assert content[0]["path"] == "memory/ops.md"  # not a path: content ranks as before


def test_the_values_follow_an_edit_that_leaves_the_text_alone(weighed: Memory) -> None:
    """Changing only ``<!-- importance: N -->`` keeps the chunk row (and its vector) and
    updates the value."""
    path = weighed.workspace / "MEMORY.md"
    path.write_text(path.read_text().replace("importance: 10", "importance: 2"))
    db = connect(weighed.settings.store.path)
    try:
        before = dict(db.conn.execute("SELECT id, rowid FROM chunks WHERE path = 'MEMORY.md'"))
        index_once(db, weighed.settings, choose_provider(weighed.settings), None)
        after = dict(db.conn.execute("SELECT id, rowid FROM chunks WHERE path = 'MEMORY.md'"))
    finally:
        db.close()
    assert before == after
    hits = [h for h in _hits(weighed, "gateway loopback port") if TWIN in h["snippet"]]
    assert "importance" not in hits[0] and hits[1]["importance"] == 2
    assert hits[1]["score"] == pytest.approx(hits[0]["score"] * 0.85, abs=2e-6)


def test_an_older_store_gains_the_columns_and_fills_them_without_embedding_again(
        weighed: Memory) -> None:
    """A schema-5 store (no value columns, no path keys) is migrated in place; its files are
    keyed by name at once, its memory files read again by the next pass, and every chunk keeps
    its row."""
    db = connect(weighed.settings.store.path)
    try:
        conn = db.conn
        for column in ("importance", "triggers", "project_key"):
            conn.execute(f"ALTER TABLE chunks DROP COLUMN {column}")
        for column in ("name_key", "stem_key"):
            conn.execute(f"DROP INDEX idx_files_{column}")
            conn.execute(f"ALTER TABLE files DROP COLUMN {column}")
        conn.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
        conn.commit()
        rows = dict(conn.execute("SELECT id, rowid FROM chunks"))
        mtimes = dict(conn.execute("SELECT path, mtime_ns FROM files"))
    finally:
        db.close()
    db = open_store(weighed.settings.store.path)
    try:
        # the files' times stay (decay dates extra-path notes by them until the next pass)
        assert dict(db.conn.execute("SELECT path, mtime_ns FROM files")) == mtimes
        assert db.conn.execute("SELECT count(*) FROM chunks WHERE importance IS NOT NULL"
                               ).fetchone() == (0,)
        assert db.conn.execute("SELECT name_key, stem_key FROM files WHERE path = "
                               "'memory/projects/deploy-notes.md'").fetchone() == (
            "deploy-notes.md", "deploy-notes")  # keyed when opened, before any pass
        report = index_once(db, weighed.settings, choose_provider(weighed.settings), None)
        assert dict(db.conn.execute("SELECT id, rowid FROM chunks")) == rows
        assert db.conn.execute("SELECT count(*) FROM chunks WHERE importance = 10"
                               ).fetchone() == (1,)
        assert report.changed == 4  # the memory files, read again
    finally:
        db.close()


def test_cli_and_mcp_take_active_projects(weighed: Memory) -> None:
    settings = weighed.settings
    done = run_memq("search", "release builds toolchain", "--json", "--min-score", "0",
                    "--project", "github.com/acme/beta", "--config", str(settings.config_file),
                    "--workspace", str(settings.workspace), timeout=120)
    assert done.returncode == 0, done.stderr
    hits = [h for h in json.loads(done.stdout)["results"] if "Release" in h["snippet"]]
    assert hits[0]["projectKey"] == "github.com/acme/beta"

    async def over_mcp() -> dict[str, Any]:
        async with session(settings) as client:
            return await call(client, "memory_search", {
                "query": "release builds toolchain", "minScore": 0,
                "projects": ["github.com/acme/alpha"]})

    out = anyio.run(over_mcp)
    hits = [h for h in out["results"] if "Release" in h["snippet"]]
    assert hits[0]["projectKey"] == "github.com/acme/alpha"


def test_path_tiers_basename_before_stem_and_content_backed_first(tmp_path: Path,
                                                                   make_settings) -> None:
    """``notes.md`` names two files by basename and one by stem: the basename tier comes
    first, and inside it (decay off) the file whose text also matches comes before the one
    matched by its name alone; then the stem tier; then content matches."""
    ws = tmp_path / "ws"
    for rel, text in {"memory/a/notes.md": "# A\n\nRoll back the gateway.\n",
                      "memory/b/notes.md": "# B\n\nThese notes cover the release.\n",
                      "memory/c/notes.md.md": "# C\n\nNothing here.\n",
                      "memory/other.md": "# O\n\nnotes notes notes md md\n"}.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    settings = indexed(ws, make_settings)
    with Memory(settings=settings) as memory:
        hits = _hits(memory, "notes.md")
    assert [h["path"] for h in hits] == ["memory/b/notes.md", "memory/a/notes.md",
                                         "memory/c/notes.md.md", "memory/other.md"]
    assert [h["score"] for h in hits[:3]] == [1.0, 1.0, 1.0]


def test_a_shards_reader_takes_active_projects_in_a_query_message(weighed: Memory) -> None:
    """A search from another host carries the keys (checked like every message field)."""
    from pipeline.errors import MessageRefused
    from pipeline.messages import QueryRequest
    from workers.reader import Reader

    sent = QueryRequest(weighed.name, "search", {"query": "release builds toolchain",
                                                 "minScore": 0,
                                                 "projects": ["github.com/acme/beta"]}, 0)
    with Reader() as reader:
        out = reader.answer(weighed, QueryRequest.from_json(sent.to_json()))
    hits = [h for h in out["results"] if "Release" in h["snippet"]]
    assert hits[0]["projectKey"] == "github.com/acme/beta"
    for bad in ("github.com/acme/beta", [1], ["k"] * 65):
        message = QueryRequest(weighed.name, "search", {"query": "q", "projects": bad}).to_json()
        with pytest.raises(MessageRefused, match="projects"):
            QueryRequest.from_json(message)


def test_hybrid_with_decay_importance_multiplies_and_a_named_old_note_still_leads(
        tmp_path: Path, make_settings) -> None:
    """With vectors and temporal decay on: importance multiplies the decayed hybrid score;
    a query naming a 6-year-old note puts it first (its ranking score is
    ``(1 + score) / 2`` decayed, but exact matches lead whatever it is) and it shows 1."""
    ws = tmp_path / "ws"
    now = dt.datetime(2026, 2, 10, 12, tzinfo=dt.UTC).timestamp()
    notes = {"MEMORY.md": "- Alpha fact about ports.\n- Alpha fact about ports. "
                          "<!-- importance: 10 -->\n",
             "memory/2020-01-01.md": "# Old\n\nBeta note.\n",
             "memory/fresh.md": "# Fresh\n\nGamma note.\n"}
    decay_on = {"hybrid": {"temporalDecay": {"enabled": True}, "mmr": {"enabled": False}}}
    db, settings = build(ws, make_settings, notes, {"MEMORY.md": 0.6, "memory/2020-01-01.md":
                                                    0.5, "memory/fresh.md": 0.9},
                         query=decay_on)
    try:
        hits = search_store(db, settings, "zzzz", provider=QueryVector(), now=now, min_score=0)
        twins = [h for h in hits if h.path == "MEMORY.md"]
        assert [h.importance for h in twins] == [10, None]
        assert twins[0].score == pytest.approx(twins[1].score * 1.25, abs=2e-6)
        named = search_store(db, settings, "2020-01-01.md", provider=QueryVector(), now=now,
                             min_score=0)
        assert [h.path for h in named[:2]] == ["memory/2020-01-01.md", "memory/fresh.md"]
        assert named[0].score == 1.0 and named[1].score < 1.0
    finally:
        db.close()


def test_another_chunkers_chunks_get_the_values_too() -> None:
    """A benchmark swaps in an older chunker whose chunks have no value fields; they become
    this version's chunks, with the values."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class OldChunk:
        start_line: int
        end_line: int
        text: str
        hash: str

    def old(text: str, tokens: int, overlap: int, **_: Any) -> list[OldChunk]:
        return [OldChunk(c.start_line, c.end_line, c.text, c.hash)
                for c in chunk_markdown(text, tokens, overlap, per_entry=True)]

    chunks = memory_chunks("MEMORY.md", "- a <!-- importance: 7 -->\n- b\n", chunker=old)
    assert [(c.text, c.importance) for c in chunks] == [("- a", 7), ("- b\n", None)]
