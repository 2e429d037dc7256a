"""A reader's search answer (:func:`workers.reading.search_answer`): the files check the asking
host sends (``filesDigest``) is answered alongside the hits, computed beside the search."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.config.settings import Settings
from pipeline.ingest.transfer import disk_stats, stats_digest
from pipeline.memory import Memory
from workers.reading import search_answer


@pytest.fixture
def indexed(workspace: Path, make_settings: Callable[..., Settings]) -> Settings:
    """Keyword-only settings for the sample workspace, indexed in this process."""
    settings = make_settings(workspace, provider="none")
    with Memory(settings=settings) as memory:
        memory.index()
    return settings


def test_files_match_when_the_digest_is_the_stores_and_not_otherwise(indexed: Settings) -> None:
    """The same hits with or without the check; ``filesMatch`` is true for the digest of the
    files the store reflects, false after a file changed, and absent when none was sent."""
    with Memory(settings=indexed) as memory:
        plain = search_answer(memory, {"query": "Zigbee"})
        assert "filesMatch" not in plain and plain["results"]
        here = stats_digest(disk_stats(indexed) or {})
        checked = search_answer(memory, {"query": "Zigbee", "filesDigest": here})
        assert checked.pop("filesMatch") is True
        assert checked["results"] == plain["results"]
        note = next((indexed.workspace / "memory").glob("*.md"))
        note.write_text(note.read_text() + "\nOne more line.\n")
        changed = stats_digest(disk_stats(indexed) or {})
        assert search_answer(memory, {"query": "Zigbee",
                                      "filesDigest": changed})["filesMatch"] is False


def test_a_failed_search_still_fails_with_the_digest_asked(indexed: Settings,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """A search that raises raises to the reply (never a filesMatch without hits)."""
    with Memory(settings=indexed) as memory:
        def broken(*_: object, **__: object) -> None:
            raise RuntimeError("disk gone")

        monkeypatch.setattr(memory, "search", broken)
        with pytest.raises(RuntimeError, match="disk gone"):
            search_answer(memory, {"query": "Zigbee", "filesDigest": "0" * 64})
