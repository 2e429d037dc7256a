"""Bad queries, tool calls and file names: results or a clear error, never a crash (part of the
fault suite; property-based with hypothesis plus a fixed hostile list)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.embeddings.registry import choose_provider
from pipeline.errors import MemoryPathError
from pipeline.ingest.producer import index_once
from pipeline.query import memory_get, memory_search
from pipeline.store.engine import connect

HOSTILE_QUERIES = ["", " ", '"', '""""', "*", "AND OR NOT", "NEAR(", "body:x", "c++", "\x00",
                   "\u202e\u200b", "x" * 100_000, "🙂" * 5000, "a\nb\rc\td",
                   "'; DROP TABLE chunks;", "日本語 中文 한국어", "-" * 1000, "\\", "%_%", "^$"]
RELAXED = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture]}


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory):
    """The sample workspace, keyword-only, plus odd file names."""
    import shutil

    from pipeline.config import load_settings
    from tests.conftest import EXAMPLE_WORKSPACE, write_config

    root = tmp_path_factory.mktemp("hostile")
    ws = root / "ws"
    shutil.copytree(EXAMPLE_WORKSPACE, ws)
    odd = ["new\nline.md", "tab\tname.md", "ünïcødé 日本.md", "-leading-dash.md", " space .md",
           "semi;colon.md", "quote'\".md"]
    for name in odd:
        (ws / "memory" / name).write_text(f"# {name!r}\n\nodd filename marker\n")
    cfg = write_config(root / "memq.json", provider="none",
                       store={"path": str(root / "s.sqlite")})
    s = load_settings(config_file=cfg, workspace=ws, env={})
    db = connect(s.store.path)
    report = index_once(db, s, choose_provider(s), None)
    db.close()
    assert report.errors == [] and report.files == 5 + len(odd)
    return s, odd


@pytest.mark.parametrize("query", HOSTILE_QUERIES)
def test_hostile_queries_give_lists(indexed, query: str) -> None:
    s, _ = indexed
    out = memory_search(query, settings=s)
    assert isinstance(out["results"], list)
    assert all(len(r["snippet"]) <= 700 for r in out["results"])


@settings(max_examples=150, **RELAXED)
@given(query=st.text(max_size=300), max_results=st.integers(-5, 50),
       min_score=st.floats(-10, 10, allow_nan=False))
def test_any_query_any_limits(indexed, query: str, max_results: int, min_score: float) -> None:
    s, _ = indexed
    out = memory_search(query, settings=s, max_results=max_results, min_score=min_score)
    assert len(out["results"]) <= max(0, max_results)


def test_odd_file_names_are_indexed_and_readable(indexed) -> None:
    s, odd = indexed
    hits = memory_search("odd filename marker", settings=s, max_results=50)["results"]
    assert {Path(h["path"]).name for h in hits} >= set(odd)
    for name in odd:
        assert "odd filename marker" in memory_get(f"memory/{name}", settings=s)["text"]


@settings(max_examples=200, **RELAXED)
@given(path=st.text(max_size=120), start=st.one_of(st.none(), st.integers(-10**9, 10**9)),
       lines=st.one_of(st.none(), st.integers(-10**9, 10**9)))
def test_memory_get_is_a_result_or_a_path_error(indexed, path: str, start, lines) -> None:
    s, _ = indexed
    try:
        out = memory_get(path, start, lines, settings=s)
    except MemoryPathError:
        return
    assert set(out) >= {"path", "text"}
    resolved = (s.workspace / out["path"]).resolve()
    assert resolved.suffix == ".md"
    assert resolved.is_relative_to(s.workspace.resolve() / "memory") or \
        resolved.parent == s.workspace.resolve()
