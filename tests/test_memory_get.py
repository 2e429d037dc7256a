"""memory_get reads only memory files, inside the memory roots, with OpenClaw's line window."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import MemoryPathError
from pipeline.query import memory_get, memory_search


def test_reads_line_windows(workspace: Path, make_settings) -> None:
    settings = make_settings(workspace, provider="none")
    out = memory_get("memory/2026-11-18.md", 3, 1, settings=settings)
    assert out == {"path": "memory/2026-11-18.md", "from": 3, "lines": 1,
                   "text": "- Flight to Berlin for the payments conference: LH1169, departs 07:05"
                           " from Lisbon, seat 14C."}
    whole = memory_get(str(workspace / "MEMORY.md"), settings=settings)
    assert whole["text"] == (workspace / "MEMORY.md").read_text()
    assert memory_get("MEMORY.md", 10_000, 5, settings=settings)["text"] == ""
    assert memory_get("MEMORY.md", -4, 0, settings=settings)["lines"] == 0


def test_missing_memory_file_is_empty_text(workspace: Path, make_settings) -> None:
    settings = make_settings(workspace, provider="none")
    assert memory_get("memory/2031-01-01.md", settings=settings) == {
        "path": "memory/2031-01-01.md", "text": ""}


@pytest.mark.parametrize("path", [
    "../outside.md", "/etc/passwd", "/proc/self/environ", "memory/../../outside.md",
    "memory/notes.txt", "README.md", "", "memory/link.md", "memory/\x00.md",
    "memory/node_modules/x.md",
])
def test_escapes_are_refused(workspace: Path, make_settings, tmp_path: Path, path: str) -> None:
    (tmp_path / "outside.md").write_text("secret")
    (workspace / "README.md").write_text("not memory")
    (workspace / "memory" / "notes.txt").write_text("not markdown")
    (workspace / "memory" / "link.md").symlink_to(tmp_path / "outside.md")
    (workspace / "memory" / "node_modules").mkdir()
    (workspace / "memory" / "node_modules" / "x.md").write_text("ignored")
    settings = make_settings(workspace, provider="none")
    with pytest.raises(MemoryPathError, match="path required"):
        memory_get(path, settings=settings)


def test_search_before_any_index_says_so(workspace: Path, make_settings) -> None:
    settings = make_settings(workspace, provider="none")
    out = memory_search("anything", settings=settings)
    assert out["results"] == [] and "memq index" in out["warning"]


def test_search_citations_point_memory_get_at_the_lines(workspace: Path, make_settings,
                                                        tmp_path: Path) -> None:
    from pipeline.embeddings.registry import ProviderChoice
    from pipeline.ingest.producer import sync_files
    from pipeline.store.engine import connect

    settings = make_settings(workspace, provider="none")
    db = connect(settings.store.path)
    sync_files(db, settings, ProviderChoice(None, None, "test"))
    db.close()
    out = memory_search("Berlin flight", settings=settings, max_results=1)
    (hit,) = out["results"]
    assert out["citations"] == "auto"
    assert hit["citation"] == f"{hit['path']}#L{hit['startLine']}-L{hit['endLine']}"
    assert hit["snippet"].endswith(f"\n\nSource: {hit['citation']}")
    path, lines = hit["citation"].split("#L")
    start, end = (int(x.lstrip("L")) for x in lines.split("-"))
    window = memory_get(path, start, end - start + 1, settings=settings)
    assert "Berlin" in window["text"]
    off = memory_search("Berlin flight", settings=settings, max_results=1, citations="off")
    assert "citation" not in off["results"][0] and "Source:" not in off["results"][0]["snippet"]
    with pytest.raises(ValueError, match="citations"):
        memory_search("x", settings=settings, citations="sometimes")
