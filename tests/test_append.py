"""``memory_append`` writes whole notes inside the memory roots, and the index can tell it is
behind (``find_stale``) and catch up (``refresh_index``) without any broker."""

from __future__ import annotations

import threading
from datetime import date
from pathlib import Path

import pytest

from pipeline.ingest import append as append_module
from pipeline.ingest.append import AppendError, memory_append
from pipeline.ingest.refresh import VECTORS_NONE, find_stale, refresh_index
from pipeline.query import MemoryPathError, memory_get, memory_search
from pipeline.store.engine import connect

DAY = date(2026, 12, 2)


def test_daily_note_creates_the_folder_and_reports_its_lines(tmp_path: Path,
                                                             make_settings) -> None:
    ws = tmp_path / "fresh"
    ws.mkdir()
    settings = make_settings(ws, provider="none")
    first = memory_append("- one\n- two\n", settings=settings, today=DAY)
    assert first == {"path": "memory/2026-12-02.md", "target": "daily", "startLine": 1,
                     "endLine": 2, "bytes": len(b"- one\n- two\n")}
    second = memory_append("three", settings=settings, today=DAY)
    assert (second["startLine"], second["endLine"]) == (3, 3)
    assert (ws / "memory" / "2026-12-02.md").read_text() == "- one\n- two\nthree\n"
    got = memory_get(second["path"], second["startLine"], 1, settings=settings)
    assert got["text"] == "three"


def test_longterm_note_completes_a_missing_final_newline(workspace: Path, make_settings) -> None:
    settings = make_settings(workspace, provider="none")
    memory = workspace / "MEMORY.md"
    memory.write_text("# Memory\n- last line without newline")
    out = memory_append("- Prefers tea.", "longterm", settings=settings)
    assert out["path"] == "MEMORY.md" and (out["startLine"], out["endLine"]) == (3, 3)
    assert memory.read_text() == "# Memory\n- last line without newline\n- Prefers tea.\n"


def test_lowercase_memory_md_is_the_longterm_file_when_it_is_the_only_one(
        tmp_path: Path, make_settings) -> None:
    ws = tmp_path / "lower"
    ws.mkdir()
    (ws / "memory.md").write_text("old\n")
    out = memory_append("new", "longterm", settings=make_settings(ws, provider="none"))
    assert out["path"] == "memory.md" and (ws / "memory.md").read_text() == "old\nnew\n"
    assert not (ws / "MEMORY.md").exists()


@pytest.mark.parametrize("text", ["", "  \n\n", None, 3, "a\x00b", "\ud800", "x" * 70_000])
def test_bad_notes_are_refused_and_nothing_is_written(workspace: Path, make_settings,
                                                      text: object) -> None:
    settings = make_settings(workspace, provider="none")
    with pytest.raises(AppendError):
        memory_append(text, settings=settings, today=DAY)  # type: ignore[arg-type]
    assert not (workspace / "memory" / "2026-12-02.md").exists()


def test_targets_and_symlinks_cannot_leave_the_memory_roots(tmp_path: Path,
                                                            make_settings) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "memory").symlink_to(outside)
    settings = make_settings(ws, provider="none")
    with pytest.raises(AppendError):
        memory_append("x", "../etc", settings=settings)
    with pytest.raises(MemoryPathError):
        memory_append("x", settings=settings, today=DAY)
    (ws / "MEMORY.md").symlink_to(outside / "target.md")
    with pytest.raises(MemoryPathError):
        memory_append("x", "longterm", settings=settings)
    assert list(outside.iterdir()) == []


def test_a_file_about_to_outgrow_the_indexer_is_refused(workspace: Path, make_settings,
                                                        monkeypatch) -> None:
    settings = make_settings(workspace, provider="none")
    size = (workspace / "MEMORY.md").stat().st_size
    monkeypatch.setattr(append_module, "MAX_FILE_BYTES", size + 10)
    with pytest.raises(AppendError, match="would grow past"):
        memory_append("a note longer than ten bytes", "longterm", settings=settings)
    assert (workspace / "MEMORY.md").stat().st_size == size


def test_concurrent_appends_keep_every_note_whole(workspace: Path, make_settings) -> None:
    settings = make_settings(workspace, provider="none")
    notes = [f"- note {i}: " + "x" * 2000 for i in range(40)]
    threads = [threading.Thread(target=memory_append, args=(n,),
                                kwargs={"settings": settings, "today": DAY}) for n in notes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = (workspace / "memory" / "2026-12-02.md").read_text().splitlines()
    assert sorted(lines) == sorted(notes)


def test_stale_paths_then_refresh_without_a_broker(workspace: Path, make_settings) -> None:
    # onSearch off: searches answer from the index as it is, so refresh_index is what syncs.
    settings = make_settings(workspace, provider="none", sync={"onSearch": False})
    assert len(find_stale(settings)) == 5  # nothing indexed yet: every memory file
    report, vectors = refresh_index(settings)
    assert report.changed == 5 and vectors == VECTORS_NONE
    assert find_stale(settings) == []

    memory_append("- The capybara fund.", settings=settings, today=DAY)
    (workspace / "memory" / "2026-11-03.md").unlink()
    db = connect(settings.store.path, want_vectors=False)
    try:
        assert find_stale(settings) == ["memory/2026-12-02.md", "memory/2026-11-03.md"]
    finally:
        db.close()
    assert memory_search("capybara", settings=settings)["results"] == []
    report, _ = refresh_index(settings)
    assert (report.changed, report.deleted) == (1, 1) and find_stale(settings) == []
    hits = memory_search("capybara", settings=settings)["results"]
    assert hits[0]["path"] == "memory/2026-12-02.md"
