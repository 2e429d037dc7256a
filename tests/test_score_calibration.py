"""Keyword scores calibrated across chunk sizes (issue 36 item 2): a one-line MEMORY.md entry
that holds the query's words outscores every paragraph in BM25, and must not push a daily note
that answers the question under ``minScore``. Real stores (the producer's chunks and FTS5
rows), vector scores set per file (:mod:`tests.searchkit`), memory_search's ranking path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.ingest.chunking import PER_ENTRY_PATHS
from pipeline.search import calibration, fusion
from pipeline.search.hybrid import search_store
from pipeline.search.retrievers import keyword_hits
from tests.searchkit import QueryVector, build

QUERY = "where does the kubernetes cluster run now"
ANSWER = "memory/2026-11-04.md"
ENTRIES = "".join(f"- {fact}\n" for fact in (
    "Prefers tea over coffee in the afternoon.",
    "The team standup is at 09:30 on weekdays.",
    "Backups are kept for thirty days.",
    "Uses British spelling in documents.",
    "The staging database is PostgreSQL 16.",
    "Invoices go out on the first Monday of the month.",
))
NEW_ENTRY = "- Kubernetes cluster now runs on Hetzner.\n"


def _notes() -> dict[str, str]:
    notes = {f"memory/2026-11-{day:02d}.md":
             f"# 2026-11-{day:02d}\n\nWorked through the backlog: reviewed pull requests, "
             f"answered support mail and tidied the wiki pages about onboarding (day {day}).\n"
             for day in range(1, 11)}
    notes[ANSWER] = (
        "# 2026-11-04\n\nLong migration day. After the cost review we moved everything off the "
        "old provider: the cluster is on Hetzner now, three dedicated machines in Falkenstein, "
        "with the ingress and the monitoring stack redeployed by hand. Kubernetes upgrades "
        "wait until the new year; the old machines are cancelled at the end of the month, "
        "and the DNS records point at the new load balancer since the afternoon.\n")
    return notes


def _search(tmp: Path, make_settings, memory_md: str) -> tuple[dict[str, float], dict]:
    """Scores by path (best chunk) of a hybrid search with minScore 0, and the keyword ranks."""
    notes = {**_notes(), "MEMORY.md": memory_md}
    cosines = {path: 0.2 for path in notes} | {ANSWER: 0.3, "MEMORY.md": 0.25}
    db, settings = build(tmp, make_settings, notes, cosines,
                         store={"path": str(tmp / "store" / "memq.sqlite")},
                         query={"hybrid": {"mmr": {"enabled": False}}})
    try:
        hits = search_store(db, settings, QUERY, provider=QueryVector(), min_score=0,
                            max_results=20)
        ranks = keyword_hits(db, QUERY, 200, None)
        entries = calibration.entry_rows(db, ranks)
        paths = dict(db.conn.execute("SELECT rowid, path FROM chunks"))
    finally:
        db.close()
    scores: dict[str, float] = {}
    for hit in hits:
        scores.setdefault(hit.path, hit.score)
    return scores, {"ranks": ranks, "entries": entries, "paths": paths,
                    "min_score": settings.query.min_score}


def test_a_one_line_entry_does_not_push_the_answering_note_under_min_score(
        tmp_path: Path, make_settings) -> None:
    before, unmatched = _search(tmp_path / "a", make_settings, ENTRIES)
    assert unmatched["entries"] == frozenset()  # a note is the best keyword hit: plain share
    after, seen = _search(tmp_path / "b", make_settings, ENTRIES + NEW_ENTRY)
    min_score = seen["min_score"]
    assert min_score == 0.35
    assert before[ANSWER] >= min_score
    assert after[ANSWER] >= min_score
    assert after[ANSWER] == pytest.approx(before[ANSWER], abs=1e-6)
    # The entry is now the best keyword match, and the plain share of the best (memq before
    # this change) would have pushed the answering note under minScore: the case is real.
    ranks, paths = seen["ranks"], seen["paths"]
    best = min(ranks, key=lambda r: (ranks[r], r))
    assert paths[best] == "MEMORY.md" and best in seen["entries"]
    note = min((r for r in ranks if paths[r] == ANSWER), key=lambda r: ranks[r])
    old_share = fusion.share_of_best(ranks)[note]
    assert 0.7 * 0.3 + 0.3 * old_share < min_score


def test_share_of_best_holds_entries_apart() -> None:
    ranks = {1: -12.0, 2: -4.0, 3: -2.0, 4: -6.0}  # 1 and 4 are entries
    assert fusion.share_of_best(ranks) == {1: 1.0, 2: 4 / 12, 3: 2 / 12, 4: 0.5}
    assert fusion.share_of_best(ranks, {1, 4}) == {1: 1.0, 2: 1.0, 3: 0.5, 4: 0.5}
    # A note ahead of every entry: the same as the plain share of the best.
    assert fusion.share_of_best({1: -3.0, 2: -6.0}, {1}) == {1: 0.5, 2: 1.0}
    assert fusion.share_of_best({1: -3.0, 2: -6.0}, {1, 2}) == {1: 0.5, 2: 1.0}
    assert fusion.share_of_best({}, {1}) == {}


def test_entry_paths_are_the_chunkers() -> None:
    assert calibration.ENTRY_PATHS == PER_ENTRY_PATHS
