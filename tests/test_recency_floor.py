"""Recency that does not bury (issue 36 item 3): dated notes in which a fact changes, next to an
old note that alone answers another question. Real stores (the producer's chunks and FTS5 rows),
vector scores set per file (:mod:`tests.searchkit`), memory_search's default ranking path
(hybrid, MMR, temporal decay, ``minScore`` 0.35), asked on 2026-12-06.

With OpenClaw's decay (half-life 30 days, no floor) the newer note wins the changed fact, and the
old unique answer (218 days old: factor 2^(−218/30) ≈ 0.007) falls under ``minScore``: buried.
With memq's ``temporalDecay.minFactor`` 0.75 the newer note still wins, and the old answer keeps
three quarters of its score and stays in the results.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from pipeline.search import decay
from tests.searchkit import ranked

NOW = dt.datetime(2026, 12, 6, 12, tzinfo=dt.UTC).timestamp()
OLD_DB, NEW_DB = "memory/2026-06-10.md", "memory/2026-11-20.md"
LAKE = "memory/2026-05-02.md"
NOTES = {
    OLD_DB: "# 2026-06-10\n\nSet up the main database server: we run Postgres 14 on it, with "
            "nightly dumps to the backup bucket.\n",
    NEW_DB: "# 2026-11-20\n\nUpgraded the main database server to Postgres 16 today; the "
            "nightly dumps still go to the backup bucket.\n",
    LAKE: "# 2026-05-02\n\nWeekend at the lake house. The wifi password there is "
          "heron-7-tamarack, written on the fridge.\n",
    **{f"memory/2026-12-{day:02d}.md": f"# 2026-12-{day:02d}\n\nReviewed pull requests and "
       f"answered support mail (day {day}).\n" for day in range(1, 6)},
}
#: question -> (cosine per file: the two database notes near-equal, the old one a little
#: closer, as a note that states the fact plainly often is; the rest unrelated)
QUESTIONS = {
    "which Postgres version does the main database run":
        {OLD_DB: 0.62, NEW_DB: 0.60, LAKE: 0.10},
    "what is the wifi password at the lake house":
        {OLD_DB: 0.10, NEW_DB: 0.10, LAKE: 0.60},
}
CHANGED, UNIQUE = QUESTIONS


def _scores(tmp: Path, make_settings, question: str, decay_keys: dict) -> dict[str, float]:
    """Best score per path of a default search (minScore 0, so buried notes show)."""
    cosines = {path: 0.15 for path in NOTES} | QUESTIONS[question]
    scores: dict[str, float] = {}
    for path, score in ranked(tmp, make_settings, NOTES, question, cosines, decay_keys, NOW):
        scores.setdefault(path, score)
    return scores


OPENCLAW = {"enabled": True, "halfLifeDays": 30, "mode": "decay"}
FLOOR = {**OPENCLAW, "minFactor": 0.75}
OFF = {"enabled": False}
MIN_SCORE = 0.35  # the default


@pytest.mark.parametrize("question", list(QUESTIONS))
def test_undecayed_the_old_note_scores_at_least_as_high(tmp_path: Path, make_settings,
                                                        question: str) -> None:
    plain = _scores(tmp_path, make_settings, question, OFF)
    if question == CHANGED:
        assert plain[OLD_DB] >= plain[NEW_DB]  # without recency the stale value wins (or ties)
    else:
        assert max(plain, key=plain.__getitem__) == LAKE
        assert plain[LAKE] >= MIN_SCORE


def test_openclaw_decay_picks_the_new_value_but_buries_the_old_unique_answer(
        tmp_path: Path, make_settings) -> None:
    changed = _scores(tmp_path / "a", make_settings, CHANGED, OPENCLAW)
    assert max(changed, key=changed.__getitem__) == NEW_DB
    assert changed.get(OLD_DB, 0.0) < MIN_SCORE
    unique = _scores(tmp_path / "b", make_settings, UNIQUE, OPENCLAW)
    assert LAKE in unique
    plain = _scores(tmp_path / "c", make_settings, UNIQUE, OFF)
    assert unique[LAKE] == pytest.approx(plain[LAKE] * 0.5 ** (218.5 / 30), abs=1e-5)
    assert unique[LAKE] < MIN_SCORE  # the only note that answers is cut by default
    assert max(unique, key=unique.__getitem__) != LAKE  # and ranks under unrelated new notes


def test_a_floor_keeps_the_new_value_first_and_the_old_unique_answer_in_reach(
        tmp_path: Path, make_settings) -> None:
    changed = _scores(tmp_path / "a", make_settings, CHANGED, FLOOR)
    assert max(changed, key=changed.__getitem__) == NEW_DB
    assert changed[OLD_DB] >= MIN_SCORE  # the old value still shows, second (its history)
    unique = _scores(tmp_path / "b", make_settings, UNIQUE, FLOOR)
    plain = _scores(tmp_path / "c", make_settings, UNIQUE, OFF)
    factor = 0.75 + 0.25 * 0.5 ** (218.5 / 30)
    assert unique[LAKE] == pytest.approx(plain[LAKE] * factor, abs=1e-5)
    assert max(unique, key=unique.__getitem__) == LAKE
    assert unique[LAKE] >= MIN_SCORE


def test_the_floor_formula_and_its_openclaw_default() -> None:
    day = 86400.0
    assert decay.multiplier(NOW - 60 * day, NOW, 30) == pytest.approx(0.25)
    assert decay.multiplier(NOW - 60 * day, NOW, 30, 0.0) == pytest.approx(0.25)
    assert decay.multiplier(NOW - 60 * day, NOW, 30, 0.75) == pytest.approx(0.8125)
    assert decay.multiplier(NOW, NOW, 30, 0.75) == pytest.approx(1.0)
    assert decay.multiplier(None, NOW, 30, 0.75) == 1.0  # evergreen
    assert decay.multiplier(NOW - 10_000 * day, NOW, 30, 0.75) == pytest.approx(0.75)
