"""Appending a note writes it whole inside the memory roots, and the index can tell it is
behind (``Memory.stale_files``) and catch up (``Memory.sync``) without any broker."""

from __future__ import annotations

import threading
from datetime import date
from pathlib import Path

import pytest

from memq import Memory
from pipeline.errors import AppendError, MemoryPathError
from pipeline.ingest import append as append_module
from pipeline.ingest.append import append_note
from pipeline.memory import VECTORS_NONE
from pipeline.query import memory_get, memory_search
from pipeline.results import Appended
from pipeline.store.engine import connect

DAY = date(2026, 12, 2)


def test_daily_note_creates_the_folder_and_reports_its_lines(tmp_path: Path,
                                                             make_settings) -> None:
    ws = tmp_path / "fresh"
    ws.mkdir()
    settings = make_settings(ws, provider="none")
    first = append_note("- one\n- two\n", settings=settings, today=DAY)
    assert first == Appended("memory/2026-12-02.md", "daily", 1, 2, len(b"- one\n- two\n"))
    second = append_note("three", settings=settings, today=DAY)
    assert (second.start_line, second.end_line) == (3, 3)
    assert (ws / "memory" / "2026-12-02.md").read_text() == "- one\n- two\nthree\n"
    got = memory_get(second.path, second.start_line, 1, settings=settings)
    assert got["text"] == "three"


def test_longterm_note_completes_a_missing_final_newline(workspace: Path, make_settings) -> None:
    settings = make_settings(workspace, provider="none")
    memory = workspace / "MEMORY.md"
    memory.write_text("# Memory\n- last line without newline")
    out = append_note("- Prefers tea.", "longterm", settings=settings)
    assert out.path == "MEMORY.md" and (out.start_line, out.end_line) == (3, 3)
    assert memory.read_text() == "# Memory\n- last line without newline\n- Prefers tea.\n"


def test_longterm_notes_go_to_memory_md_even_beside_a_legacy_lowercase_file(
        tmp_path: Path, make_settings) -> None:
    """The legacy memory.md is no longer memory (OpenClaw 2026.9): it is left alone."""
    ws = tmp_path / "lower"
    ws.mkdir()
    (ws / "memory.md").write_text("old\n")
    out = append_note("new", "longterm", settings=make_settings(ws, provider="none"))
    assert out.path == "MEMORY.md" and (ws / "MEMORY.md").read_text() == "new\n"
    assert (ws / "memory.md").read_text() == "old\n"


@pytest.mark.parametrize("text", ["", "  \n\n", None, 3, "a\x00b", "\ud800", "x" * 70_000])
def test_bad_notes_are_refused_and_nothing_is_written(workspace: Path, make_settings,
                                                      text: object) -> None:
    settings = make_settings(workspace, provider="none")
    with pytest.raises(AppendError):
        append_note(text, settings=settings, today=DAY)  # type: ignore[arg-type]
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
        append_note("x", "../etc", settings=settings)
    with pytest.raises(MemoryPathError):
        append_note("x", settings=settings, today=DAY)
    (ws / "MEMORY.md").symlink_to(outside / "target.md")
    with pytest.raises(MemoryPathError):
        append_note("x", "longterm", settings=settings)
    assert list(outside.iterdir()) == []


def test_a_file_about_to_outgrow_the_indexer_is_refused(workspace: Path, make_settings,
                                                        monkeypatch) -> None:
    settings = make_settings(workspace, provider="none")
    size = (workspace / "MEMORY.md").stat().st_size
    monkeypatch.setattr(append_module, "MAX_FILE_BYTES", size + 10)
    with pytest.raises(AppendError, match="would grow past"):
        append_note("a note longer than ten bytes", "longterm", settings=settings)
    assert (workspace / "MEMORY.md").stat().st_size == size


def test_concurrent_appends_keep_every_note_whole(workspace: Path, make_settings) -> None:
    settings = make_settings(workspace, provider="none")
    notes = [f"- note {i}: " + "x" * 2000 for i in range(40)]
    threads = [threading.Thread(target=append_note, args=(n,),
                                kwargs={"settings": settings, "today": DAY}) for n in notes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = (workspace / "memory" / "2026-12-02.md").read_text().splitlines()
    assert sorted(lines) == sorted(notes)


def test_stale_paths_then_sync_without_a_broker(workspace: Path, make_settings) -> None:
    # onSearch off: searches answer from the index as it is, so Memory.sync is what syncs.
    settings = make_settings(workspace, provider="none", sync={"onSearch": False})
    with Memory(settings=settings) as memory:
        assert len(memory.stale_files()) == 5  # nothing indexed yet: every memory file
        run = memory.sync()
        assert run.report.changed == 5 and run.vectors == VECTORS_NONE
        assert memory.stale_files() == []

        append_note("- The capybara fund.", settings=settings, today=DAY)
        (workspace / "memory" / "2026-11-03.md").unlink()
        db = connect(settings.store.path, want_vectors=False)
        try:
            assert memory.stale_files() == ["memory/2026-12-02.md", "memory/2026-11-03.md"]
        finally:
            db.close()
        assert memory_search("capybara", settings=settings)["results"] == []
        run = memory.sync()
        assert (run.report.changed, run.report.deleted) == (1, 1)
        assert memory.stale_files() == []
        hits = memory.search("capybara")
        assert hits[0].path == "memory/2026-12-02.md"
        assert memory_search("capybara", settings=settings)["results"][0]["path"] == hits[0].path
