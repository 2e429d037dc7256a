"""USER.md and the legacy memory.md, as OpenClaw 2026.9.6 lists, chunks and decays them.

USER.md is memory at the workspace root only, as a regular file (a symlink is skipped), chunked
one entry per chunk like MEMORY.md, and never decayed. The lower-case memory.md is no longer
memory at all (not listed, not admitted, not a path ``memory_get`` accepts).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.errors import MemoryPathError
from pipeline.ingest.admission import refused_path
from pipeline.ingest.sources import memory_files, memory_files_at, resolve_memory_path
from pipeline.query import memory_get
from pipeline.search import decay
from tests.searchkit import build
from tests.test_search_ranking import search

TODAY = decay.DAY_S * 20_500  # 2026-02-16
USER_NOTE = ("# About me\nName: Ada\n- Prefers green tea <!-- importance: 9 -->\n"
             "- Lives in Lisbon <!-- trigger: home, city -->\n## Work\n- Writes compilers\n")


def _paths(workspace: Path, *extra: Path) -> list[str]:
    return [f.path for f in memory_files(workspace, tuple(extra))]


def test_user_md_is_listed_at_the_root_only(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "USER.md").write_text(USER_NOTE)
    (ws / "sub" / "USER.md").write_text("not memory")
    assert _paths(ws) == ["USER.md"]
    (ws / "MEMORY.md").write_text("- a\n")
    assert _paths(ws) == ["MEMORY.md", "USER.md"]


def test_user_md_names_are_exact(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "user.md").write_text("lower case")
    (ws / "User.md").write_text("mixed case")
    assert _paths(ws) == []


def test_a_symlinked_user_md_is_skipped(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    target = tmp_path / "elsewhere.md"
    target.write_text("- secret profile\n")
    (ws / "USER.md").symlink_to(target)
    assert _paths(ws) == []
    found, scopes = memory_files_at(ws, (), [ws / "USER.md"])
    assert found == [] and scopes == {"USER.md"}


def test_a_user_md_that_is_a_folder_is_skipped(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "USER.md").mkdir(parents=True)
    assert _paths(ws) == []


def test_the_watcher_sync_finds_user_md(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "USER.md").write_text(USER_NOTE)
    found, scopes = memory_files_at(ws, (), [ws / "USER.md"])
    assert [f.path for f in found] == ["USER.md"] and scopes == {"USER.md"}


def test_legacy_memory_md_is_not_memory_even_through_extra_paths(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory.md").write_text("- legacy\n")
    (ws / "memory" / "memory.md").write_text("- a note named memory.md in memory/\n")
    (ws / ".openclaw-repair" / "root-memory").mkdir(parents=True)
    (ws / ".openclaw-repair" / "root-memory" / "memory.md").write_text("- moved aside\n")
    assert _paths(ws) == ["memory/memory.md"]
    assert _paths(ws, ws / "memory.md") == ["memory/memory.md"]
    assert _paths(ws, ws) == ["memory/memory.md"]  # the workspace itself as an extra path
    # A watcher event on it: nothing found, and a stored copy counts as gone.
    found, scopes = memory_files_at(ws, (), [ws / "memory.md"])
    assert found == [] and scopes == {"memory.md"}
    # A legacy memory.md that links to a real note does not hide that note.
    (ws / "memory.md").unlink()
    (ws / "memory.md").symlink_to(ws / "memory" / "memory.md")
    assert _paths(ws) == ["memory/memory.md"]


def test_admission_and_memory_get_paths(tmp_path: Path, make_settings) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "USER.md").write_text(USER_NOTE)
    (ws / "memory.md").write_text("- legacy\n")
    settings = make_settings(ws, provider="none")
    assert refused_path(settings, "USER.md", "memory") is None
    assert refused_path(settings, "MEMORY.md", "memory") is None
    assert refused_path(settings, "memory.md", "memory") is not None
    assert refused_path(settings, "sub/USER.md", "memory") is not None
    assert resolve_memory_path(settings, "USER.md") == ws / "USER.md"
    with pytest.raises(MemoryPathError):
        resolve_memory_path(settings, "memory.md")


def test_user_md_is_indexed_per_entry_without_annotations(tmp_path: Path,
                                                          make_settings) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    db, _ = build(ws, make_settings, {"USER.md": USER_NOTE, "memory.md": "- legacy tea\n"})
    try:
        rows = db.conn.execute(
            "SELECT path, start_line, end_line, text FROM chunks ORDER BY path, start_line"
        ).fetchall()
    finally:
        db.close()
    assert [tuple(r) for r in rows] == [
        ("USER.md", 1, 2, "# About me\nName: Ada"),
        ("USER.md", 3, 3, "- Prefers green tea"),
        ("USER.md", 4, 4, "- Lives in Lisbon"),
        ("USER.md", 5, 5, "## Work"),
        ("USER.md", 6, 7, "- Writes compilers\n"),
    ]


def test_user_md_is_never_decayed(tmp_path: Path, make_settings) -> None:
    assert decay.note_time("USER.md", mtime_ns=123) is None
    assert decay.note_time("MEMORY.md", mtime_ns=123) is None
    assert decay.note_time("user.md", mtime_ns=123 * 10**9) == 123.0  # not exactly USER.md
    scores = []
    years_ago = TODAY - 3 * 365 * decay.DAY_S
    for enabled in (False, True):
        ws = tmp_path / f"ws-{enabled}"
        (ws / "notes").mkdir(parents=True)
        for rel in ("USER.md", "notes/old.md"):  # same text, same age
            (ws / rel).write_text("- gearbox oil change every year\n")
            os.utime(ws / rel, (years_ago, years_ago))
        db, settings = build(ws, make_settings, {}, extraPaths=[str(ws / "notes")],
                             store={"path": str(ws / "s.sqlite")},
                             query={"hybrid": {"temporalDecay": {"enabled": enabled}}})
        try:
            out = search(db, settings, "gearbox oil change", now=TODAY, min_score=0)
        finally:
            db.close()
        scores.append({r["path"]: r["score"] for r in out["results"]})
    plain, decayed = scores
    assert set(plain) == {"USER.md", "notes/old.md"}
    assert decayed["USER.md"] == plain["USER.md"]  # evergreen
    assert decayed["notes/old.md"] < plain["notes/old.md"] / 1000  # ages by mtime


def test_dreams_md_is_readable_but_not_indexed(tmp_path: Path, make_settings) -> None:
    """OpenClaw's ``isMemoryPath`` lets ``memory_get`` read dreams.md (any case) at the root;
    ``listMemoryFiles`` never lists it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "DREAMS.md").write_text("- flying over Lisbon\n")
    settings = make_settings(ws, provider="none")
    assert _paths(ws) == []
    assert memory_get("DREAMS.md", settings=settings)["text"] == "- flying over Lisbon"
    assert refused_path(settings, "DREAMS.md", "memory") is not None
    (ws / "sub").mkdir()
    (ws / "sub" / "dreams.md").write_text("x")
    with pytest.raises(MemoryPathError):
        resolve_memory_path(settings, "sub/dreams.md")


def test_a_pattern_on_the_workspace_keeps_user_md(tmp_path: Path, make_settings) -> None:
    """USER.md is a plain root like MEMORY.md: a globbed extra path over the workspace (what
    OpenClaw's doctor writes for QMD collections) does not filter it out."""
    from pipeline.ingest.globs import PathPatterns

    ws = tmp_path / "ws"
    (ws / "notes").mkdir(parents=True)
    (ws / "USER.md").write_text("- a\n")
    (ws / "notes" / "n.md").write_text("- b\n")
    (ws / "other.md").write_text("- c\n")
    settings = make_settings(ws, provider="none",
                             extraPaths=[{"path": str(ws), "pattern": "notes/*.md"}])
    patterns = PathPatterns.of(settings)
    assert not patterns.excludes(ws / "USER.md")
    assert patterns.excludes(ws / "other.md")
    listed = [f.path for f in memory_files(ws, settings.extra_paths, patterns=patterns)]
    assert "USER.md" in listed and not any(p.endswith("other.md") for p in listed)
