"""``extraPaths`` entries ``{path, pattern}`` (OpenClaw 2026.9's doctor writes them): only the
files below ``path`` that match ``pattern`` are memory, in the full scan, the watcher's
targeted syncs and its events, and ``memory_get``; plain entries keep indexing everything."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pipeline.embeddings.registry import choose_provider
from pipeline.errors import MemoryPathError
from pipeline.ingest.globs import PathPatterns, glob_matches
from pipeline.ingest.producer import index_once
from pipeline.ingest.watcher import Watcher
from pipeline.memory import Memory
from pipeline.query import memory_get, memory_search
from pipeline.store.engine import connect
from tests.conftest import run_memq


@pytest.mark.parametrize(("pattern", "yes", "no"), [
    ("**/*.md", ["a.md", "x/a.md", "x/y/z/a.md"], ["a.txt", "x/a.mdx", "amd"]),
    ("*.md", ["a.md", ".hidden.md"], ["x/a.md"]),
    ("projects/**/*.md", ["projects/a.md", "projects/x/y/a.md"], ["a.md", "other/projects/a.md"]),
    ("notes/**", ["notes/a.md", "notes/x/b.md"], ["notes.md", "x/notes/a.md"]),
    ("**", ["a.md", "x/y/a.md"], []),
    ("{daily,weekly}/*.{md,markdown}", ["daily/a.md", "weekly/b.markdown"],
     ["monthly/a.md", "daily/x/a.md", "daily/a.txt"]),
    ("20??-*.md", ["2026-11-03.md"], ["1999-11-03.md", "2026_11.md"]),
    ("[ab]*.md", ["a.md", "beta.md"], ["c.md"]),
    ("[!ab]*.md", ["c.md"], ["a.md"]),
    ("./docs/*.md", ["docs/a.md"], ["a.md"]),
    ("a+b (1).md", ["a+b (1).md"], ["aab (1).md"]),
    ("**/ops/**/*.md", ["ops/a.md", "x/ops/y/a.md"], ["ops.md", "xops/a.md"]),
])
def test_glob_language(pattern: str, yes: list[str], no: list[str]) -> None:
    for path in yes:
        assert glob_matches(pattern, path), (pattern, path)
    for path in no:
        assert not glob_matches(pattern, path), (pattern, path)


def test_empty_pattern_is_refused() -> None:
    with pytest.raises(ValueError, match="empty glob"):
        glob_matches("  ", "a.md")


def _shared(tmp_path: Path) -> Path:
    shared = tmp_path / "shared"
    for rel, text in {
        "projects/apollo/plan.md": "- Apollo launch window: the nebula quokka plan.\n",
        "projects/readme.md": "- Projects index mentions the tangerine quokka.\n",
        "archive/old.md": "- Archived note about the obsolete quokka.\n",
        "top.md": "- A top-level note about the lonely quokka.\n",
    }.items():
        (shared / rel).parent.mkdir(parents=True, exist_ok=True)
        (shared / rel).write_text(text)
    plain = tmp_path / "plain"
    (plain / "deep").mkdir(parents=True)
    (plain / "deep" / "p.md").write_text("- The plain folder keeps its carmine quokka.\n")
    return shared


def _indexed(settings) -> list[str]:
    """Index (a changed extraPaths list rebuilds the index) and list the indexed files."""
    with Memory(settings=settings, in_memory=False) as memory:
        memory.index()
    db = connect(settings.store.path, want_vectors=False)
    try:
        return sorted(r[0] for r in db.conn.execute("SELECT path FROM files"))
    finally:
        db.close()


def test_full_scan_indexes_only_matching_files(workspace: Path, tmp_path: Path,
                                               make_settings) -> None:
    _shared(tmp_path)
    settings = make_settings(workspace, provider="none", extraPaths=[
        {"path": "../shared", "pattern": "projects/**/*.md"}, "../plain"])
    extras = [p for p in _indexed(settings) if p.startswith("../")]
    assert extras == ["../plain/deep/p.md", "../shared/projects/apollo/plan.md",
                      "../shared/projects/readme.md"]
    hits = memory_search("quokka", settings=settings, min_score=0)["results"]
    assert {h["path"] for h in hits} >= {"../shared/projects/apollo/plan.md"}
    assert not {h["path"] for h in hits} & {"../shared/archive/old.md", "../shared/top.md"}

    # Two patterns for one folder add up; the files no longer selected leave the index.
    settings = make_settings(workspace, provider="none", extraPaths=[
        {"path": "../shared", "pattern": "*.md"}, {"path": "../shared", "pattern": "archive/*"}])
    assert [p for p in _indexed(settings) if p.startswith("../")] == [
        "../shared/archive/old.md", "../shared/top.md"]

    # The same folder listed plainly too: all of it.
    settings = make_settings(workspace, provider="none", extraPaths=[
        {"path": "../shared", "pattern": "*.md"}, "../shared"])
    assert len([p for p in _indexed(settings) if p.startswith("../shared/")]) == 4


def test_memory_get_follows_the_patterns(workspace: Path, tmp_path: Path, make_settings) -> None:
    shared = _shared(tmp_path)
    settings = make_settings(workspace, provider="none", extraPaths=[
        {"path": str(shared), "pattern": "projects/**/*.md"}])
    got = memory_get("../shared/projects/apollo/plan.md", settings=settings)
    assert "nebula quokka" in got["text"]
    for path in ("../shared/archive/old.md", str(shared / "top.md"),
                 "../shared/archive/not-yet.md"):
        with pytest.raises(MemoryPathError):
            memory_get(path, settings=settings)
    assert memory_get("../shared/projects/new.md", settings=settings)["text"] == ""


def test_openclaw_json_entries_through_the_cli(workspace: Path, tmp_path: Path) -> None:
    _shared(tmp_path)
    config = tmp_path / "openclaw.json"
    config.write_text(json.dumps({"memory": {"search": {
        "provider": "none", "store": {"path": str(tmp_path / "ignored.sqlite")},
        "extraPaths": [{"path": "../shared", "pattern": "projects/*/*.md"}]}},
        "agents": {"defaults": {"workspace": str(workspace)}}}))
    env = {"MEMQ_STORE_PATH": str(tmp_path / "cli.sqlite")}
    done = run_memq("index", "--config", str(config), "--json", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    found = run_memq("search", "quokka", "--config", str(config), "--json", "--min-score", "0",
                     env=env, timeout=120)
    assert found.returncode == 0, found.stderr
    paths = {h["path"] for h in json.loads(found.stdout)["results"]}
    assert paths == {"../shared/projects/apollo/plan.md"}


def test_targeted_sync_and_watcher_events_follow_the_patterns(workspace: Path, tmp_path: Path,
                                                              make_settings) -> None:
    shared = _shared(tmp_path)
    settings = make_settings(workspace, provider="none", extraPaths=[
        {"path": "../shared", "pattern": "projects/**/*.md"}])
    patterns = PathPatterns.of(settings)
    assert patterns.excludes(shared / "top.md") and patterns.excludes(shared / "archive/x.md")
    assert not patterns.excludes(shared / "projects/x.md")
    assert not patterns.excludes(workspace / "memory" / "x.md")
    _indexed(settings)

    batches: list[set[Path]] = []
    watcher = Watcher(settings, batches.append, debounce_s=0.3)
    watcher.start()
    try:
        time.sleep(0.3)
        (shared / "archive" / "new.md").write_text("- Archived yak.\n")
        (shared / "projects" / "new.md").write_text("- Project yak.\n")
        (shared / "top.md").write_text("- Changed top yak.\n")
        deadline = time.monotonic() + 10
        wanted = shared / "projects" / "new.md"
        while time.monotonic() < deadline and not any(wanted in b for b in batches):
            time.sleep(0.1)
            watcher.step()
        time.sleep(0.5)  # anything else the observer would hand over
        watcher.step()
    finally:
        watcher.stop()
        watcher.observer.stop()
        watcher.observer.join(timeout=5)
    seen = set().union(*batches)
    assert shared / "projects" / "new.md" in seen
    assert not seen & {shared / "archive" / "new.md", shared / "top.md"}

    # A targeted sync handed a non-matching path (a folder event) indexes only what matches.
    db = connect(settings.store.path, want_vectors=False)
    try:
        index_once(db, settings, choose_provider(settings), None, paths=[shared, *seen])
        paths = sorted(r[0] for r in db.conn.execute("SELECT path FROM files"))
    finally:
        db.close()
    extras = [p for p in paths if p.startswith("../")]
    assert extras == ["../shared/projects/apollo/plan.md", "../shared/projects/new.md",
                      "../shared/projects/readme.md"]
