"""Superseded recency (``query.hybrid.temporalDecay.mode: "superseded"``, issue 36 goal 4): an
older note is demoted only under a newer candidate like it. Real stores (the producer's chunks
and FTS5 rows), vectors set per file (:mod:`tests.searchkit`; the two database notes share
their vectors' rest, so their chunks resemble each other), memory_search's default ranking
path (hybrid, MMR, ``minScore`` 0.35), asked on 2026-12-06.

OpenClaw's decay buries the lake-house note, the only one that answers (218 days old); the
superseded rule leaves it its whole score, and still puts the newer Postgres note first.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.search import superseded
from pipeline.search.fusion import Candidate
from pipeline.search.hybrid import HeldCopies, search_store
from tests.searchkit import QueryVector, build, ranked
from tests.test_recency_floor import LAKE, NEW_DB, NOW, OLD_DB
from tests.test_recency_floor import NOTES as FLOOR_NOTES

DAY = 86400.0
EVERGREEN = "MEMORY.md"
NOTES = {**FLOOR_NOTES,
         EVERGREEN: "# Memory\n\nThe main database server keeps its nightly dumps for 30 days.\n"}
SHARED = 30  # the axis the two database notes' vectors share (cosine of the two about 1)
QUESTIONS = {
    "which Postgres version does the main database run":
        {OLD_DB: 0.62, NEW_DB: 0.60, LAKE: 0.10, EVERGREEN: 0.30},
    "what is the wifi password at the lake house":
        {OLD_DB: 0.10, NEW_DB: 0.10, LAKE: 0.60, EVERGREEN: 0.10},
}
CHANGED, UNIQUE = QUESTIONS
SUPERSEDED = {"enabled": True, "halfLifeDays": 30, "mode": "superseded", "similarity": 0.5}
OPENCLAW = {"enabled": True, "halfLifeDays": 30, "mode": "decay"}
OFF = {"enabled": False}
MIN_SCORE = 0.35  # the default


def _scores(tmp: Path, make_settings, question: str, decay_keys: dict,
            cosines: dict[str, float] | None = None) -> list[tuple[str, float]]:
    """(path, score) of a default search, best first (minScore 0, so buried notes show)."""
    cosines = {path: 0.15 for path in NOTES} | (cosines or QUESTIONS[question])
    return ranked(tmp, make_settings, NOTES, question, cosines, decay_keys, NOW,
                  axes={OLD_DB: SHARED, NEW_DB: SHARED})


def test_the_old_note_that_alone_answers_keeps_its_score_and_rank(
        tmp_path: Path, make_settings) -> None:
    plain = dict(_scores(tmp_path / "off", make_settings, UNIQUE, OFF))
    openclaw = _scores(tmp_path / "openclaw", make_settings, UNIQUE, OPENCLAW)
    assert openclaw[0][0] != LAKE and dict(openclaw)[LAKE] < MIN_SCORE  # buried by decay
    kept = _scores(tmp_path / "superseded", make_settings, UNIQUE, SUPERSEDED)
    assert kept[0] == (LAKE, plain[LAKE])  # first, with its undecayed score
    assert plain[LAKE] >= MIN_SCORE


def test_the_newer_near_duplicate_wins_and_the_old_value_stays_just_under_it(
        tmp_path: Path, make_settings) -> None:
    plain = dict(_scores(tmp_path / "off", make_settings, CHANGED, OFF))
    assert plain[OLD_DB] > plain[NEW_DB]  # undecayed, the stale value comes first
    hits = _scores(tmp_path / "superseded", make_settings, CHANGED, SUPERSEDED)
    paths = [p for p, _ in hits]
    assert paths.index(NEW_DB) < paths.index(OLD_DB)
    scores = dict(hits)
    assert scores[NEW_DB] == plain[NEW_DB]  # the newest is not decayed
    assert scores[OLD_DB] == pytest.approx(scores[NEW_DB] - superseded.STEP, abs=1e-9)
    assert scores[OLD_DB] >= MIN_SCORE  # its history is still shown
    assert scores[EVERGREEN] == plain[EVERGREEN]  # MEMORY.md never decays nor is demoted


def test_a_newer_look_alike_under_the_band_or_under_min_score_does_not_demote(
        tmp_path: Path, make_settings) -> None:
    weaker_new = {OLD_DB: 0.62, NEW_DB: 0.45, LAKE: 0.10, EVERGREEN: 0.30}
    plain = dict(_scores(tmp_path / "off", make_settings, CHANGED, OFF, weaker_new))
    assert MIN_SCORE <= plain[NEW_DB] < 0.8 * plain[OLD_DB]
    banded = _scores(tmp_path / "band", make_settings, CHANGED, {**SUPERSEDED, "band": 0.8},
                     weaker_new)
    assert banded[0] == (OLD_DB, plain[OLD_DB])
    unbanded = dict(_scores(tmp_path / "any", make_settings, CHANGED, SUPERSEDED, weaker_new))
    assert unbanded[OLD_DB] < unbanded[NEW_DB]  # band 0: any newer look-alike shown demotes
    unseen_new = {**weaker_new, NEW_DB: 0.20}  # under minScore: it would not be shown
    plain = dict(_scores(tmp_path / "off2", make_settings, CHANGED, OFF, unseen_new))
    assert plain[NEW_DB] < MIN_SCORE
    hits = _scores(tmp_path / "unseen", make_settings, CHANGED, SUPERSEDED, unseen_new)
    assert hits[0] == (OLD_DB, plain[OLD_DB])


def _vector(*parts: float) -> np.ndarray:
    return np.asarray(parts, dtype=np.float32)


def test_supersede_places_an_old_chunk_under_the_best_newer_look_alike_only() -> None:
    a, b, c, d, e, f = (Candidate(i, score=s) for i, s in
                        enumerate((0.5, 0.6, 0.9, 0.8, 0.95, 0.3), start=1))
    written = {1: NOW, 2: NOW - 10 * DAY, 3: NOW - 100 * DAY, 4: NOW - 300 * DAY, 5: None,
               6: NOW - DAY}
    same = _vector(1, 0)
    vectors = {1: same, 2: same, 3: same, 4: _vector(0, 1), 5: same, 6: same}
    factors = superseded.supersede([a, b, c, d, e, f], written, vectors, similarity=0.9,
                                   band=0.0, shown=0.35)
    assert b.score == pytest.approx(0.5 - superseded.STEP)  # under a; f is under minScore
    assert c.score == pytest.approx(0.5 - 2 * superseded.STEP)  # under a, and under b there
    assert (a.score, d.score, e.score, f.score) == (0.5, 0.8, 0.95, 0.3)  # newest; unlike;
    assert set(factors) == {2, 3}  # evergreen; the newest of all (nothing newer)
    assert factors[3] == pytest.approx((0.5 - 2 * superseded.STEP) / 0.9)


def test_supersede_leaves_the_same_day_and_the_lower_scored_alone() -> None:
    new, same_day, low = Candidate(1, score=0.6), Candidate(2, score=0.7), Candidate(3, score=0.4)
    written = {1: NOW, 2: NOW, 3: NOW - 50 * DAY}
    vectors = {r: _vector(1, 0) for r in written}
    assert superseded.supersede([new, same_day, low], written, vectors, similarity=0.5,
                                band=0.0, shown=0.35) == {}
    assert (new.score, same_day.score, low.score) == (0.6, 0.7, 0.4)


def test_the_held_copies_supersede_as_the_store_does(tmp_path: Path, make_settings) -> None:
    cosines = {path: 0.15 for path in NOTES} | QUESTIONS[CHANGED]
    db, settings = build(tmp_path, make_settings, NOTES, cosines,
                         axes={OLD_DB: SHARED, NEW_DB: SHARED},
                         store={"path": str(tmp_path / "store" / "memq.sqlite")},
                         query={"hybrid": {"temporalDecay": SUPERSEDED}})
    held = HeldCopies()
    try:
        def hits() -> list[tuple[str, float]]:
            return [(h.path, h.score) for h in search_store(
                db, settings, CHANGED, provider=QueryVector(), min_score=0, now=NOW, held=held)]

        from_store = hits()  # the copies load in the background meanwhile
        held.wait()
        assert held.current(db, text=False, vectors=True)[1] is not None
        assert hits() == from_store
        assert [p for p, _ in from_store].index(NEW_DB) < [p for p, _ in from_store].index(OLD_DB)
    finally:
        held.close()
        db.close()
