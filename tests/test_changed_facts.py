"""The changed-facts cases (issue 36 item 3, :mod:`memq.evaluation.changed_facts`): their layout as
dated notes, how a result list is scored, and keyword-only runs through the real pipeline
(``run_index``, FTS5, ``search_store`` with the default ranking; in process and through
``memq eval``) in which OpenClaw's decay puts every newer value first and buries the old unique
answers, while a floor keeps them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memq.evaluation import changed_facts as cf
from pipeline.search import decay
from tests.conftest import run_memq


@pytest.fixture(scope="module")
def data() -> dict:
    return cf.load()


def test_the_set_is_large_and_every_note_is_dated_by_its_name(data: dict) -> None:
    files, cases = cf.layout(data)
    changed = [c for c in cases if c.kind == "changed"]
    unique = [c for c in cases if c.kind == "unique"]
    assert len(changed) >= 30 and len(unique) >= 15
    assert len({c.slug for c in cases}) == len(cases)
    now = cf.NOW.timestamp()
    for path in files:
        assert decay.note_date(path) is not None, path  # temporal decay ages it by its name
        assert path.removeprefix("memory/")[:10].replace("-", "").isdigit()
    for c in changed:
        assert decay.note_date(c.answer) > decay.note_date(c.stale)  # the answer is newer
        assert now - decay.note_date(c.answer) < 45 * decay.DAY_S <= now - decay.note_date(c.stale)
    ages = [cf.unique_age(i) for i in range(len(unique))]
    assert min(ages) >= 60  # two half-lives and more: OpenClaw's decay leaves a quarter or less


def test_the_layout_is_the_same_every_time(data: dict) -> None:
    assert cf.layout(data) == cf.layout(data)
    files, cases = cf.layout(data, limit=2)
    assert sum(c.kind == "changed" for c in cases) == 2
    assert sum(c.kind == "unique" for c in cases) == 2
    assert len(files) == 2 * 2 + 2 * 2 + len(data["filler"])


def test_outcomes_by_hand() -> None:
    changed = cf.Case("changed", "x", "q?", answer="memory/new.md", stale="memory/old.md")
    unique = cf.Case("unique", "y", "q?", answer="memory/only.md")
    assert cf.outcome(changed, ["memory/a.md", "memory/new.md", "memory/old.md"]) == "new first"
    assert cf.outcome(changed, ["memory/new.md"]) == "new first"
    assert cf.outcome(changed, ["memory/old.md", "memory/new.md"]) == "old first"
    assert cf.outcome(changed, ["memory/old.md"]) == "old first"
    assert cf.outcome(changed, ["memory/a.md"]) == "neither"
    # a file shown twice (two of its chunks) counts at its first place
    assert cf.outcome(changed, ["memory/old.md", "memory/new.md", "memory/old.md"]) \
        == "old first"
    assert cf.outcome(unique, ["memory/a.md", "memory/only.md"]) == "kept"
    assert cf.outcome(unique, ["memory/a.md"]) == "buried"
    figures = cf.score([(changed, "new first"), (changed, "old first"), (unique, "kept"),
                        (unique, "buried")])
    assert figures == {"newFirst": 0.5, "oldFirst": 0.5, "kept": 0.5, "both": 0.5,
                       "changed": 2, "unique": 2}


def test_keyword_only_run_openclaw_buries_the_old_answers_a_floor_keeps_them(
        tmp_path: Path, data: dict) -> None:
    figures = cf.run(tmp_path / "work", {"provider": "none"}, data, limit=4,
                     log=lambda _m: None)
    assert list(figures) == list(cf.DECAYS)
    openclaw, floor, off = (figures[n] for n in ("OpenClaw decay", "minFactor 0.5",
                                                   "decay off"))
    assert openclaw["newFirst"] == 1.0 and openclaw["kept"] == 0.0
    assert floor["kept"] == 1.0
    assert off["kept"] == 1.0 and off["newFirst"] < 1.0  # undecayed, an old value can win
    # keyword-only: no chunk vectors to compare, so superseded recency is OpenClaw's decay
    assert figures["superseded 0.4"] == openclaw
    assert set(openclaw["outcomes"]) == {c["slug"] for c in data["changed"][:4]} | {
        c["slug"] for c in data["unique"][:4]}


def test_memq_eval_runs_the_changed_facts_cases(tmp_path: Path, data: dict) -> None:
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps({**data, "changed": data["changed"][:3],
                                 "unique": data["unique"][:3]}))
    cfg = tmp_path / "none.json"
    cfg.write_text(json.dumps({"provider": "none"}))
    env = {"MEMQ_HOME": str(tmp_path / "home"), "MEMQ_BROKER_URL": "", "REDIS_URL": ""}
    done = run_memq("eval", "--collection", str(cases), "--work-dir", str(tmp_path / "work"),
                    "--config", str(cfg), "--json", env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["kind"] == "changed-facts" and list(out["figures"]) == list(cf.DECAYS)
    assert out["figures"]["OpenClaw decay"]["changed"] == 3
    assert out["figures"]["OpenClaw decay"]["kept"] == 0.0
    assert out["figures"]["minFactor 0.5"]["kept"] == 1.0
    assert "| OpenClaw decay | 1.000 | 0.000 | 0.000 |" in out["table"]
