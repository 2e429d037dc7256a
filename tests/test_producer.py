"""The producer follows the disk: new, edited, deleted and broken files; cache hits skip the
queue; keyword search works before any vector exists. Jobs run through the plain functions the
Celery tasks wrap (the real queue is exercised in test_pipeline_integration.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.dispatch import InlineDispatcher
from pipeline.embeddings.providers import ProviderPool
from pipeline.embeddings.registry import ProviderChoice, choose_provider
from pipeline.ingest.producer import MAX_FILE_BYTES, index_once
from pipeline.ingest.reindex import rebuild_step, start_rebuild
from pipeline.messages import EmbedJob, pack
from pipeline.query import memory_search
from pipeline.status import index_status
from pipeline.store.engine import connect
from pipeline.store.writer import PendingChunk


def run(db, settings, choice: ProviderChoice):
    """One producer pass whose jobs are embedded in this process as they are sent."""
    queued: list[EmbedJob] = []
    inline = InlineDispatcher(settings, ProviderPool())

    def submit(job: EmbedJob) -> None:
        queued.append(job)
        inline.embed(job)

    try:
        report = index_once(db, settings, choice, submit)
    finally:
        inline.close()
    return report, queued


@pytest.fixture
def keyword_only(workspace, make_settings):
    settings = make_settings(workspace, provider="none")
    db = connect(settings.store.path)
    yield settings, db
    db.close()


def test_keyword_only_index_and_search(keyword_only, workspace: Path) -> None:
    settings, db = keyword_only
    choice = choose_provider(settings)
    assert choice.mode == "keyword-only" and "none" in choice.reason
    report, queued = run(db, settings, choice)
    assert (report.files, report.changed, queued) == (5, 5, [])
    out = memory_search("Zigbee coordinator antenna", settings=settings)
    assert out["mode"] == "keyword-only" and out["reason"]
    assert out["results"][0]["path"] == "memory/2026-11-10.md"
    assert set(out["results"][0]) >= {"path", "startLine", "endLine", "score", "snippet", "source"}


def test_edit_delete_and_noop(keyword_only, workspace: Path) -> None:
    settings, db = keyword_only
    choice = choose_provider(settings)
    run(db, settings, choice)
    (workspace / "memory" / "2026-11-10.md").write_text("# 2026-11-10\n\n- Adopted a tortoise.\n")
    (workspace / "memory" / "2026-11-18.md").unlink()
    report, _ = run(db, settings, choice)
    assert (report.changed, report.deleted) == (1, 1)
    assert memory_search("coordinator antenna", settings=settings)["results"] == []
    assert memory_search("LH1169 flight", settings=settings)["results"] == []
    assert memory_search("tortoise", settings=settings)["results"][0]["path"].endswith("11-10.md")
    again, _ = run(db, settings, choice)
    assert (again.changed, again.deleted) == (0, 0)


def test_bad_files_are_reported_not_fatal(keyword_only, workspace: Path) -> None:
    settings, db = keyword_only
    mem = workspace / "memory"
    (mem / "latin1.md").write_bytes("café au lait".encode("latin-1"))
    (mem / "binary.md").write_bytes(b"hello\x00world")
    (mem / "empty.md").write_bytes(b"")
    with open(mem / "huge.md", "wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)
    report, _ = run(db, settings, choose_provider(settings))
    reasons = " ".join(report.errors)
    assert "not valid UTF-8" in reasons and "NUL" in reasons and "byte limit" in reasons
    status = index_status(settings)
    assert status["filesWithErrors"] == 3
    assert {e["path"] for e in status["fileErrors"]} == {
        "memory/latin1.md", "memory/binary.md", "memory/huge.md"}
    # The good files are all searchable.
    assert memory_search("PostgreSQL", settings=settings)["results"]
    # Fixing the file clears its error on the next pass.
    (mem / "latin1.md").write_text("café au lait", encoding="utf-8")
    run(db, settings, choose_provider(settings))
    assert index_status(settings)["filesWithErrors"] == 2


def test_symlinks_and_ignored_folders_are_skipped(keyword_only, workspace: Path, tmp_path) -> None:
    settings, db = keyword_only
    outside = tmp_path / "outside.md"
    outside.write_text("secret outside text")
    (workspace / "memory" / "link.md").symlink_to(outside)
    (workspace / "memory" / "loop").symlink_to(workspace / "memory")
    (workspace / "memory" / "node_modules").mkdir()
    (workspace / "memory" / "node_modules" / "x.md").write_text("ignored module notes")
    report, _ = run(db, settings, choose_provider(settings))
    assert report.files == 5
    assert memory_search("secret outside", settings=settings)["results"] == []


def test_lowercase_memory_md_is_not_memory(workspace: Path, make_settings) -> None:
    """OpenClaw 2026.9 no longer indexes the legacy lower-case memory.md, even alone."""
    from pipeline.ingest.sources import memory_files

    (workspace / "memory.md").write_text("lower")
    paths = [f.path for f in memory_files(workspace)]
    assert "MEMORY.md" in paths and "memory.md" not in paths
    (workspace / "MEMORY.md").unlink()
    assert "memory.md" not in [f.path for f in memory_files(workspace)]


def test_files_reached_twice_are_listed_once_with_workspace_paths(workspace: Path,
                                                                   tmp_path: Path) -> None:
    """Dedup is by real path even when the workspace is reached through a symlink."""
    from pipeline.ingest.sources import memory_files

    (workspace / "memory" / "deep" / "er").mkdir(parents=True)
    (workspace / "memory" / "deep" / "er" / "n.md").write_text("nested")
    via_link = tmp_path / "ws-link"
    via_link.symlink_to(workspace)
    listed = memory_files(via_link, (workspace.resolve() / "memory", Path("memory/deep")))
    paths = [f.path for f in listed]
    assert len(paths) == len(set(paths)) == 6
    assert "memory/deep/er/n.md" in paths and "MEMORY.md" in paths
    assert all(not p.startswith("..") for p in paths)
    nested = next(f for f in listed if f.path == "memory/deep/er/n.md")
    assert nested.abs_path.read_text() == "nested"


def test_packing_bounds_count_and_bytes() -> None:
    chunks = [PendingChunk(i, f"id{i}", f"h{i}", "x" * 1000) for i in range(100)]
    groups = pack(chunks, max_chunks=32, max_bytes=10_000)
    assert all(len(g) <= 10 for g in groups)
    assert [c for g in groups for c in g] == chunks
    big = [PendingChunk(0, "a", "h", "y" * 50_000)]
    assert pack(big, max_bytes=10_000) == [big]


def test_local_model_index_cache_and_model_switch(workspace, make_settings, tiny_model) -> None:
    settings = make_settings(workspace, provider="local", local={"modelPath": str(tiny_model)})
    db = connect(settings.store.path)
    choice = choose_provider(settings)
    assert choice.mode == "hybrid" and choice.spec.model == "tiny-bert"
    report, queued = run(db, settings, choice)
    assert report.chunks_queued > 0 and report.chunks_cached == 0
    assert index_status(settings)["vectors"] == report.chunks_queued
    assert index_status(settings)["pending"] == 0
    # Delete and restore a file: its chunks come back from the cache, no queue involved.
    note = workspace / "memory" / "2026-11-25.md"
    text = note.read_text()
    note.unlink()
    run(db, settings, choice)
    note.write_text(text)
    report, queued = run(db, settings, choice)
    assert report.chunks_cached >= 1 and queued == []
    # Switching to keyword-only leaves the live index alone and asks for a rebuild; the
    # rebuilt index (swapped in) has no vectors: models never mix.
    none = make_settings(workspace, provider="none")
    vectors = index_status(settings)["vectors"]
    report, queued = run(db, none, choose_provider(none))
    assert report.rebuild_needed and queued == [] and report.changed == 0
    assert index_status(none)["vectors"] == vectors > 0
    db.close()
    start_rebuild(none, choose_provider(none), "test")
    progress = rebuild_step(none, choose_provider(none), None)
    assert progress.done and progress.chunks > 0
    assert settings.store.path.is_symlink()
    s = index_status(none)
    assert (s["provider"], s["vectors"], s["chunks"], s["reindex"]) == (
        None, 0, progress.chunks, None)
