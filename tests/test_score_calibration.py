"""Keyword scores calibrated across chunk sizes (issue 36 item 2): a one-line MEMORY.md entry
that holds the query's words outscores every paragraph in BM25, and must not push a daily note
that answers the question under ``minScore``; nor may a note that matches one of the query's
words score above the entry that holds them all. Real stores (the producer's chunks and FTS5
rows), vector scores set per file (:mod:`tests.searchkit`), memory_search's ranking path.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.search import calibration, fusion
from pipeline.search.hybrid import HeldCopies, search_store
from pipeline.search.retrievers import keyword_hits
from pipeline.store import postings
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
#: The rule under test (``query.hybrid.keywordScore``), MMR off so scores decide the order.
LENGTH = {"hybrid": {"mmr": {"enabled": False}, "keywordScore": "length"}}


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


def _search(tmp: Path, make_settings, notes: dict[str, str], cosines: dict[str, float],
            query: str, keys: dict | None = None) -> tuple[dict[str, float], dict]:
    """Scores by path (best chunk) of a hybrid search with minScore 0, and the keyword ranks."""
    db, settings = build(tmp, make_settings, notes, cosines,
                         store={"path": str(tmp / "store" / "memq.sqlite")},
                         query=keys or LENGTH)
    try:
        hits = search_store(db, settings, query, provider=QueryVector(), min_score=0,
                            max_results=20)
        ranks = keyword_hits(db, query, 200, None)
        paths = dict(db.conn.execute("SELECT rowid, path FROM chunks"))
        scores = calibration.keyword_scores(db, query, ranks, rule="length")
    finally:
        db.close()
    best: dict[str, float] = {}
    for hit in hits:
        best.setdefault(hit.path, hit.score)
    return best, {"ranks": ranks, "paths": paths, "scores": scores,
                  "min_score": settings.query.min_score, "settings": settings}


def test_a_one_line_entry_does_not_push_the_answering_note_under_min_score(
        tmp_path: Path, make_settings) -> None:
    cosines = {path: 0.2 for path in _notes()} | {ANSWER: 0.3, "MEMORY.md": 0.25}
    before, _ = _search(tmp_path / "a", make_settings, {**_notes(), "MEMORY.md": ENTRIES},
                        cosines, QUERY)
    after, seen = _search(tmp_path / "b", make_settings,
                          {**_notes(), "MEMORY.md": ENTRIES + NEW_ENTRY}, cosines, QUERY)
    min_score = seen["min_score"]
    assert min_score == 0.35
    assert before[ANSWER] >= min_score
    assert after[ANSWER] >= min_score
    # The entry is now the best keyword match, and the plain share of the best (memq before
    # this change) would have pushed the answering note under minScore: the case is real.
    ranks, paths = seen["ranks"], seen["paths"]
    best = min(ranks, key=lambda r: (ranks[r], r))
    assert paths[best] == "MEMORY.md"
    note = min((r for r in ranks if paths[r] == ANSWER), key=lambda r: ranks[r])
    assert 0.7 * 0.3 + 0.3 * fusion.share_of_best(ranks)[note] < min_score
    # The entry still ranks first among the keyword scores: its shortness raises its own.
    assert seen["scores"][best] == 1.0 > seen["scores"][note]
    # memq's default keyword score (query.hybrid.keywordScore "best") is that share of the best.
    default, seen = _search(tmp_path / "c", make_settings,
                            {**_notes(), "MEMORY.md": ENTRIES + NEW_ENTRY}, cosines, QUERY,
                            {"hybrid": {"mmr": {"enabled": False}}})
    assert seen["settings"].query.hybrid.keyword_score == "best"
    assert default[ANSWER] < min_score


def test_a_note_matching_one_word_stays_under_the_entry_holding_all(
        tmp_path: Path, make_settings) -> None:
    """The order the reverted "entries apart" rule broke (tests/test_any_host.py): a note
    that holds one of the query's words does not outscore the entry that holds all three."""
    notes = _notes() | {
        "memory/2026-11-12.md": "# 2026-11-12\n\nCleaned the garden shed, found the old "
                                "lantern behind the bicycles and put it on the shelf by the "
                                "door, next to the paint tins and the spare fuses.\n",
        "MEMORY.md": ENTRIES + "- The lantern budget is 40 euros.\n"}
    cosines = {path: 0.2 for path in notes} | {"memory/2026-11-12.md": 0.45, "MEMORY.md": 0.4}
    found, seen = _search(tmp_path, make_settings, notes, cosines, "lantern budget euros")
    assert found["MEMORY.md"] > found["memory/2026-11-12.md"]
    ranks, paths, scores = seen["ranks"], seen["paths"], seen["scores"]
    note = next(r for r in ranks if paths[r] == "memory/2026-11-12.md")
    entry = next(r for r in ranks if paths[r] == "MEMORY.md")
    assert scores[entry] == 1.0 and scores[note] < 0.5


def test_each_hit_is_measured_against_the_others_at_its_length(tmp_path: Path,
                                                               make_settings) -> None:
    """A longer hit is measured against each shorter one put at its length (FTS5's formula:
    the same counts, the same IDF), so the note and the entry that hold "Hetzner" once each
    both score 1; the entry, shorter, keeps the higher BM25 and the first place. Where the
    best hit is no shorter than any other, the scores are the share of the best."""
    db, _ = build(tmp_path, make_settings, {**_notes(), "MEMORY.md": ENTRIES + NEW_ENTRY},
                  store={"path": str(tmp_path / "store" / "memq.sqlite")})
    try:
        paths = dict(db.conn.execute("SELECT rowid, path FROM chunks"))
        ranks = keyword_hits(db, "hetzner", 10, None)
        assert {paths[r] for r in ranks} == {ANSWER, "MEMORY.md"}
        entry, note = sorted(ranks, key=lambda r: ranks[r])
        assert paths[entry] == "MEMORY.md" and ranks[entry] < ranks[note]
        assert fusion.share_of_best(ranks)[note] < 0.8
        assert calibration.keyword_scores(db, "hetzner", ranks, rule="length") == {
            entry: 1.0, note: pytest.approx(1.0)}
        ranks = keyword_hits(db, "backlog onboarding", 20, None)  # ten notes, one length each
        _, norms = postings.row_norms(db, list(ranks))
        best = min(ranks, key=lambda r: (ranks[r], r))
        assert all(norms[best] >= n for n in norms.values())
        assert calibration.keyword_scores(db, "backlog onboarding", ranks, rule="length") == \
            pytest.approx(fusion.share_of_best(ranks))
        # A phrase that is not one token: no per-token counts, the share of the best.
        phrase = '"cluster is on hetzner"'
        ranks = keyword_hits(db, phrase, 10, None)
        assert ranks and calibration.keyword_scores(db, phrase, ranks, rule="length") == \
            fusion.share_of_best(ranks)
    finally:
        db.close()


def test_scores_without_a_reference_are_the_share_of_the_best(tmp_path: Path,
                                                               make_settings) -> None:
    db, _ = build(tmp_path, make_settings, _notes(),
                  store={"path": str(tmp_path / "store" / "memq.sqlite")})
    try:
        assert calibration.keyword_scores(db, "anything", {}, rule="length") == {}
        assert calibration.keyword_scores(db, "x", {1: 0.5}, rule="length") == \
            fusion.share_of_best({1: 0.5})
    finally:
        db.close()


def _loop(magnitude: list[float], norm: list[float], idf: list[float],
          tf: list[list[float]]) -> list[float]:
    """The rule written out hit by hit (b46ec25's loop), to check the array form against."""
    def at(j: int, n: float) -> float:
        return sum(w * c * (postings.K1 + 1.0) / (c + n)
                   for w, c in zip(idf, tf[j], strict=True) if c)

    out = []
    for i, mine in enumerate(magnitude):
        ref = max(magnitude[j] if norm[j] >= norm[i] else at(j, norm[i])
                  for j in range(len(magnitude)))
        out.append(mine / ref)
    return out


def test_the_array_form_is_the_rule_hit_by_hit() -> None:
    """Random hits: the same scores as the loop, the best scores 1, none above 1, and rows
    whose counts are not needed (:func:`calibration.needs_counts`) change nothing."""
    rng = np.random.default_rng(36)
    for _ in range(200):
        n, t = int(rng.integers(2, 25)), int(rng.integers(1, 6))
        idf = rng.uniform(1e-6, 8.0, t)
        tf = rng.integers(0, 4, (n, t)).astype(float)
        tf[tf.sum(axis=1) == 0, 0] = 1.0
        norm = postings.length_norm(rng.integers(1, 400, n).astype(float), 60.0)
        magnitude = ((idf * tf * (postings.K1 + 1.0)) / (tf + norm[:, None])).sum(axis=1)
        hits = calibration.HitStats(magnitude, norm, idf, tf)
        scores = calibration.at_their_length(hits)
        assert scores.tolist() == pytest.approx(_loop(magnitude.tolist(), norm.tolist(),
                                                      idf.tolist(), tf.tolist()))
        assert scores.max() == 1.0 and scores[np.argmax(magnitude)] == 1.0
        assert np.all(scores <= 1.0)
        unneeded = ~calibration.needs_counts(magnitude, norm)
        blanked = tf.copy()
        blanked[unneeded] = 0.0
        assert calibration.at_their_length(
            calibration.HitStats(magnitude, norm, idf, blanked)).tolist() == scores.tolist()


def _refused(*args: object) -> None:
    raise AssertionError("FTS5's tables were read although the held copy is current")


def test_the_held_copy_gives_the_scores_fts5_gives(tmp_path: Path, make_settings,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The held BM25 copy keeps each term's weight per row, not its count: the count recovered
    from the weight gives the same scores, to the bit, as FTS5's own tables; and a hybrid
    search with held copies answers as one without."""
    notes = _notes() | {"MEMORY.md": ENTRIES + NEW_ENTRY + "- Hetzner hetzner hetzner.\n",
                        "memory/ops.md": "# Ops\n\n" + "the cluster runs kubernetes. " * 9 +
                                         "Hetzner Hetzner and the cluster again.\n"}
    cosines = {path: 0.2 for path in notes} | {ANSWER: 0.3, "MEMORY.md": 0.25}
    db, settings = build(tmp_path, make_settings, notes, cosines,
                         store={"path": str(tmp_path / "store" / "memq.sqlite")},
                         query=LENGTH)
    held = HeldCopies()
    try:
        stats = postings.load(db)
        assert stats is not None
        for query in (QUERY, "hetzner", "cluster hetzner kubernetes", "backlog wiki day",
                      "the the cluster", "Hetzner hetzner cluster"):
            ranks = keyword_hits(db, query, 200, None)
            assert len(ranks) > 1
            by_fts5 = calibration.keyword_scores(db, query, ranks, rule="length")
            with monkeypatch.context() as held_only:  # the held copy answers, not FTS5
                held_only.setattr(calibration, "_from_fts", _refused)
                assert calibration.keyword_scores(db, query, ranks, stats,
                                                  rule="length") == by_fts5
        search_store(db, settings, QUERY, provider=QueryVector(), held=held)
        held.wait(30)
        assert held.text_stats.current(db) is not None
        for query in (QUERY, "hetzner", "cluster hetzner kubernetes"):
            with_copies = search_store(db, settings, query, provider=QueryVector(), held=held,
                                       min_score=0, max_results=20)
            without = search_store(db, settings, query, provider=QueryVector(), min_score=0,
                                   max_results=20)
            assert [(h.path, h.start_line, h.score) for h in with_copies] == \
                [(h.path, h.start_line, h.score) for h in without]
    finally:
        held.close()
        db.close()
