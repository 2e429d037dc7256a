"""``sync.onSearch``: a search first brings changed memory files' rows up to date, says so, and
never answers silently from old text; their vectors are marked pending until a pass queues
them."""

from __future__ import annotations

from pathlib import Path

from pipeline.dispatch import InlineDispatcher
from pipeline.embeddings.providers import ProviderPool
from pipeline.embeddings.registry import choose_provider
from pipeline.ingest.producer import index_once
from pipeline.query import memory_search
from pipeline.store.engine import connect


def _index(settings) -> None:
    db = connect(settings.store.path)
    inline = InlineDispatcher(settings, ProviderPool())
    try:
        index_once(db, settings, choose_provider(settings), inline.embed)
    finally:
        inline.close()
        db.close()


def test_search_syncs_edits_and_deletes_first(workspace: Path, make_settings) -> None:
    settings = make_settings(workspace, provider="none")
    _index(settings)
    assert "synced" not in memory_search("Zigbee", settings=settings)
    note = workspace / "memory" / "2026-11-10.md"
    note.write_text("# 2026-11-10\n\n- Bought a cargo bike called Ferdinand.\n")
    (workspace / "memory" / "2026-11-18.md").unlink()
    out = memory_search("cargo bike Ferdinand", settings=settings)
    assert out["synced"] == 2 and out["results"][0]["path"] == "memory/2026-11-10.md"
    assert memory_search("LH1169", settings=settings)["results"] == []
    assert "synced" not in memory_search("Ferdinand", settings=settings)


def test_vectors_of_synced_text_are_reported_pending(workspace: Path, make_settings,
                                                     tiny_model) -> None:
    settings = make_settings(workspace, provider="local", local={"modelPath": str(tiny_model)},
                             query={"minScore": 0.0})
    _index(settings)
    (workspace / "memory" / "new.md").write_text("# New\n\n- The quokka visits at dawn.\n")
    out = memory_search("quokka dawn", settings=settings)
    assert out["synced"] == 1 and out["pending"] == 1 and out["mode"] == "hybrid"
    assert "memory/new.md" in [r["path"] for r in out["results"]]  # by keyword, no vector yet
    _index(settings)  # the next pass queues (here: embeds) what the search synced
    assert "pending" not in memory_search("quokka dawn", settings=settings)


def test_on_search_off_answers_from_the_index_as_it_is(workspace: Path, make_settings) -> None:
    settings = make_settings(workspace, provider="none", sync={"onSearch": False})
    _index(settings)
    (workspace / "memory" / "2026-11-10.md").write_text("# 2026-11-10\n\n- Ferdinand.\n")
    out = memory_search("Ferdinand", settings=settings)
    assert out["results"] == [] and "synced" not in out
