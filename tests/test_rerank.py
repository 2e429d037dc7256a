"""The reranker stage (``rerank.*``): a real ``/rerank`` server on loopback re-orders the best
fused candidates; a failure leaves the fused order, says why in the answer, warns once per
outage, and never shows the key. Off by default, the answers are what they were.

The notes' vector scores are controlled (:mod:`tests.searchkit`), so the fused order is known;
the double scores by term overlap with the query, so the reranked order is too, and differs.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest

from memq import Memory
from pipeline.config import ConfigError, load_settings
from pipeline.errors import RerankFailed
from pipeline.results import SearchResults
from pipeline.search.fusion import Candidate
from pipeline.search.hybrid import HeldCopies, search, search_store
from pipeline.search.rerank import Reranker, build_reranker
from pipeline.search.rerank_wire import scores_from_answer
from tests.conftest import run_memq
from tests.fakes.provider_doubles import Fault
from tests.fakes.rerank_double import RerankDouble, overlap
from tests.searchkit import QueryVector, build

QUERY = "postgres billing decision"
#: Fused (vector-only) order a, b, c, d, e; by the double's overlap (3/3, 2/3, 1/3, 0, 0;
#: ties keep the fused order) e, c, d, a, b.
NOTES = {
    "memory/a.md": "We walked the dog in the park on Sunday.",
    "memory/b.md": "Lunch was pizza; the sales team joined us.",
    "memory/c.md": "Billing moves to postgres next quarter.",
    "memory/d.md": "The postgres upgrade is planned for the spring.",
    "memory/e.md": "Billing decision recorded: postgres for billing, final.",
}
SCORES = {"memory/a.md": 0.95, "memory/b.md": 0.9, "memory/c.md": 0.85, "memory/d.md": 0.8,
          "memory/e.md": 0.75}
FUSED = ["memory/a.md", "memory/b.md", "memory/c.md", "memory/d.md", "memory/e.md"]
VECTOR_ONLY = {"hybrid": {"enabled": False}, "minScore": 0.0, "maxResults": 5}
RERANKED = ["memory/e.md", "memory/c.md", "memory/d.md", "memory/a.md", "memory/b.md"]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


def _store(ws: Path, make_settings, double: RerankDouble | None = None, **rerank: object):
    config: dict[str, object] = {"query": VECTOR_ONLY}
    if double is not None:
        config["rerank"] = {"enabled": True, "baseUrl": double.url, "apiKey": double.api_key,
                            "model": "jina-reranker-v2-base-multilingual", **rerank}
    return build(ws, make_settings, NOTES, SCORES, **config)


def _paths(hits) -> list[str]:
    return [h.path for h in hits]


def test_overlap_orders_differ_from_the_fused_order() -> None:
    """The premise of every test here: the double's order is not the fused one."""
    by_overlap = sorted(FUSED, key=lambda p: -overlap(QUERY, NOTES[p]))
    assert by_overlap == RERANKED != FUSED


def test_reranker_reorders_by_relevance(ws: Path, make_settings) -> None:
    with RerankDouble() as double:
        db, settings = _store(ws, make_settings, double)
        assert _paths(search_store(db, settings, QUERY, provider=QueryVector())) == FUSED
        reranker = build_reranker(settings.rerank)
        assert reranker is not None
        answer = search(db, settings, QUERY, provider=QueryVector(), reranker=reranker)
        reranker.close()
    assert _paths(answer.hits) == RERANKED
    assert [h.score for h in answer.hits] == [
        round(overlap(QUERY, NOTES[p]), 6) for p in RERANKED]
    assert answer.rerank == {"provider": "http", "model": "jina-reranker-v2-base-multilingual",
                             "reranked": 5}
    (seen,) = double.requests
    assert seen.path == "/v1/rerank"
    assert seen.headers["authorization"] == f"Bearer {double.api_key}"
    assert seen.body["query"] == QUERY
    assert seen.body["model"] == "jina-reranker-v2-base-multilingual"
    assert seen.body["top_n"] == 5
    assert seen.body["documents"] == [NOTES[p] for p in FUSED]  # in the fused order


def test_top_n_bounds_what_the_reranker_sees(ws: Path, make_settings) -> None:
    with RerankDouble() as double:
        db, settings = _store(ws, make_settings, double, topN=3)
        reranker = build_reranker(settings.rerank)
        answer = search(db, settings, QUERY, provider=QueryVector(), reranker=reranker)
    (seen,) = double.requests
    assert seen.body["documents"] == [NOTES[p] for p in FUSED[:3]]
    # a, b, c reranked (c, then a and b tied at 0), then d and e in the fused order
    assert _paths(answer.hits) == ["memory/c.md", "memory/a.md", "memory/b.md",
                                   "memory/d.md", "memory/e.md"]
    assert answer.rerank["reranked"] == 3


def test_logits_are_read_as_probabilities(ws: Path, make_settings) -> None:
    with RerankDouble(logits=True) as double:
        db, settings = _store(ws, make_settings, double)
        answer = search(db, settings, QUERY, provider=QueryVector(),
                        reranker=build_reranker(settings.rerank))
    assert _paths(answer.hits) == RERANKED
    assert all(0.0 < h.score < 1.0 for h in answer.hits)
    assert answer.hits[0].score == pytest.approx(1 / (1 + math.exp(-5)), abs=1e-6)


def test_decay_still_weighs_the_reranked_scores(ws: Path, make_settings) -> None:
    """A dated note a half-life old keeps half its relevance: decay is not lost to the
    reranker."""
    notes = {"memory/2026-01-01.md": NOTES["memory/e.md"], "MEMORY.md": NOTES["memory/e.md"]}
    with RerankDouble() as double:
        db, settings = build(ws, make_settings, notes, {p: 0.9 for p in notes},
                             query={**VECTOR_ONLY, "hybrid": {
                                 "enabled": False,
                                 "temporalDecay": {"enabled": True, "halfLifeDays": 30,
                                                   "mode": "decay"}}},
                             rerank={"enabled": True, "baseUrl": double.url,
                                     "apiKey": double.api_key})
        now = 1767225600.0 + 30 * 86400  # 2026-01-31: the dated note is one half-life old
        answer = search(db, settings, QUERY, provider=QueryVector(), now=now,
                        reranker=build_reranker(settings.rerank))
    by_path = {h.path: h.score for h in answer.hits}
    assert by_path["memory/2026-01-01.md"] == pytest.approx(0.5, abs=1e-6)  # 1.0 x 0.5
    assert by_path["MEMORY.md"] == pytest.approx(1.0)  # evergreen, overlap 1.0
    assert _paths(answer.hits) == ["MEMORY.md", "memory/2026-01-01.md"]


def test_timeout_falls_back_and_warns_once_per_outage(ws: Path, make_settings,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pipeline.search.rerank")
    with RerankDouble(script=[Fault("stall", seconds=1.0), Fault("stall", seconds=1.0)]) as double:
        db, settings = _store(ws, make_settings, double, timeoutMs=200)
        reranker = build_reranker(settings.rerank)
        assert reranker is not None
        first = search(db, settings, QUERY, provider=QueryVector(), reranker=reranker)
        assert _paths(first.hits) == FUSED
        assert [h.to_dict() for h in first.hits] == [
            h.to_dict() for h in search_store(db, settings, QUERY, provider=QueryVector())]
        note = first.rerank
        assert (note["reranked"], note["fallback"], note["kind"]) == (0, "fused", "timeout")
        assert "200 ms" in note["reason"] and note["retryAt"] > note["since"]
        # within the retry window the endpoint is not asked again, and nobody is told twice
        second = search(db, settings, QUERY, provider=QueryVector(), reranker=reranker)
        assert len(double.requests) == 1
        assert _paths(second.hits) == FUSED and second.rerank["kind"] == "timeout"
        assert second.rerank["since"] == note["since"]
        # asked again (still stalling): the same outage, still one warning
        reranker.retry_s = 0.0
        reranker._outage["retryAt"] = 0.0  # the window has passed
        third = search(db, settings, QUERY, provider=QueryVector(), reranker=reranker)
        assert len(double.requests) == 2 and third.rerank["since"] == note["since"]
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "timeout" in warnings[0].getMessage()
        # recovered: reranked again, and the log says so
        fourth = search(db, settings, QUERY, provider=QueryVector(), reranker=reranker)
        reranker.close()
    assert _paths(fourth.hits) == RERANKED and fourth.rerank["reranked"] == 5
    assert "fallback" not in fourth.rerank
    assert "is back" in caplog.records[-1].getMessage()


def test_refused_key_falls_back_without_leaking_it(ws: Path, make_settings,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "jina_wrong_key_7f3a9c2e5b1d"
    with RerankDouble() as double:
        db, settings = _store(ws, make_settings, double, apiKey=wrong)
        with Memory(settings=settings) as memory:
            out = memory.search(QUERY, citations="off").to_dict()
    assert double.requests[0].status == 401
    assert wrong in double.requests[0].headers["authorization"]  # it was sent, and echoed
    fused = [h.to_dict() for h in search_store(db, settings, QUERY)]  # keyword-only, as Memory
    assert out["results"] == fused
    assert out["rerank"]["kind"] == "refused" and out["rerank"]["fallback"] == "fused"
    assert "rerank.apiKey" in out["rerank"]["reason"]
    assert wrong not in json.dumps(out)
    assert wrong not in caplog.text
    assert wrong.encode() not in settings.store.path.read_bytes()
    assert "refused" in caplog.text  # the warning was logged, without the key


@pytest.mark.parametrize("fault,kind", [(Fault("500"), "http"), (Fault("malformed"), "json"),
                                        (Fault("partial"), "json")])
def test_bad_answers_fall_back(ws: Path, make_settings, fault: Fault, kind: str) -> None:
    with RerankDouble(script=[fault]) as double:
        db, settings = _store(ws, make_settings, double)
        answer = search(db, settings, QUERY, provider=QueryVector(),
                        reranker=build_reranker(settings.rerank))
    assert _paths(answer.hits) == FUSED
    assert answer.rerank["kind"] == kind


def test_connection_refused_falls_back(ws: Path, make_settings) -> None:
    with RerankDouble() as double:
        url = double.url
    db, settings = build(ws, make_settings, NOTES, SCORES, query=VECTOR_ONLY,
                         rerank={"enabled": True, "baseUrl": url})
    answer = search(db, settings, QUERY, provider=QueryVector(),
                    reranker=build_reranker(settings.rerank))
    assert _paths(answer.hits) == FUSED and answer.rerank["kind"] == "connection"


def test_unset_key_variable_falls_back_naming_it(ws: Path, make_settings) -> None:
    with RerankDouble() as double:
        db, settings = _store(ws, make_settings, double, apiKey="${MEMQ_TEST_UNSET_RERANK_KEY}")
        answer = search(db, settings, QUERY, provider=QueryVector(),
                        reranker=build_reranker(settings.rerank, env={}))
    assert double.requests == []
    assert answer.rerank["kind"] == "key"
    assert "MEMQ_TEST_UNSET_RERANK_KEY" in answer.rerank["reason"]


def test_key_from_a_secret_ref(ws: Path, make_settings) -> None:
    with RerankDouble() as double:
        db, settings = _store(ws, make_settings, double,
                              apiKey={"source": "env", "id": "RERANK_KEY"})
        answer = search(db, settings, QUERY, provider=QueryVector(),
                        reranker=build_reranker(settings.rerank,
                                                env={"RERANK_KEY": double.api_key}))
    assert _paths(answer.hits) == RERANKED


def test_disabled_by_default_answers_as_before(ws: Path, make_settings) -> None:
    db, settings = _store(ws, make_settings)
    assert settings.rerank.enabled is False and build_reranker(settings.rerank) is None
    held = HeldCopies()
    try:
        plain = [h.to_dict() for h in search_store(db, settings, QUERY, provider=QueryVector(),
                                                   held=held)]
        answer = search(db, settings, QUERY, provider=QueryVector(), held=held)
    finally:
        held.close()
    assert [h.to_dict() for h in answer.hits] == plain and answer.rerank is None
    with Memory(settings=settings) as memory:
        out = memory.search(QUERY).to_dict()
    assert "rerank" not in out


def test_memory_search_carries_the_note_across_hosts(ws: Path, make_settings) -> None:
    """Through ``Memory`` (the MCP server's and CLI's path) the note is in the JSON answer,
    and survives a trip through ``SearchResults.from_dict`` (a reader on another host)."""
    with RerankDouble() as double:
        _db, settings = build(ws, make_settings, NOTES, None, provider="none",
                              query={"minScore": 0.0, "maxResults": 5},
                              rerank={"enabled": True, "baseUrl": double.url,
                                      "apiKey": double.api_key})
        with Memory(settings=settings) as memory:
            results = memory.search(QUERY)
    out = results.to_dict()
    assert out["rerank"] == {"provider": "http", "model": None, "reranked": len(out["results"])}
    scores = [overlap(QUERY, NOTES[r["path"]]) for r in out["results"]]
    assert scores == sorted(scores, reverse=True)
    assert SearchResults.from_dict(out).to_dict() == out


# ------------------------------------------------------------------------------- the pieces


def test_scores_from_answer_shapes() -> None:
    assert scores_from_answer({"results": [{"index": 1, "relevance_score": 0.2},
                                           {"index": 0, "relevance_score": 0.9}]}, 2) == [0.9, 0.2]
    assert scores_from_answer({"data": [{"index": 0, "relevance_score": 1}]}, 1) == [1.0]
    for bad in ({}, {"results": "x"}, {"results": [{"index": 0}]},
                {"results": [{"index": 0, "relevance_score": 0.1},
                             {"index": 0, "relevance_score": 0.2}]},
                {"results": [{"index": 2, "relevance_score": 0.1}]},
                {"results": [{"index": True, "relevance_score": 0.1}]},
                {"results": [{"index": 0, "relevance_score": float("nan")}]}):
        with pytest.raises(RerankFailed) as err:
            scores_from_answer(bad, 1)
        assert err.value.kind == "json"


def test_an_empty_query_or_pool_is_not_sent() -> None:
    calls: list[int] = []

    class Never:
        provider, model = "http", ""

        def scores(self, query: str, documents: list[str]) -> list[float]:
            calls.append(1)
            return [0.0] * len(documents)

        def close(self) -> None:
            pass

    reranker = Reranker(Never, provider="http", model="", top_n=5)
    ranked = [Candidate(1, score=0.5)]
    assert reranker.apply("   ", ranked, ["x"], {})[:2] == (ranked, 0)
    assert reranker.apply("q", [], [], {})[:2] == ([], 0)
    assert calls == []


def test_config_base_url_required(tmp_path: Path) -> None:
    """(``provider: "local"`` and its ``modelPath``: tests/test_rerank_local.py.)"""
    cfg = tmp_path / "memq.json"
    cfg.write_text(json.dumps({"rerank": {"enabled": True}}))
    with pytest.raises(ConfigError, match=r"rerank\.baseUrl: must be set"):
        load_settings(cfg, workspace=tmp_path, env={"HOME": str(tmp_path)})
    cfg.write_text(json.dumps({"rerank": {"topN": 0}}))
    with pytest.raises(ConfigError, match=r"rerank\.topN: must be a whole number from 1 to 200"):
        load_settings(cfg, workspace=tmp_path, env={"HOME": str(tmp_path)})


def test_config_from_openclaw_memory_search(tmp_path: Path) -> None:
    """In an openclaw.json the keys sit in ``memory.search.rerank``."""
    cfg = tmp_path / "openclaw.json"
    cfg.write_text(json.dumps({"memory": {"search": {"rerank": {
        "enabled": True, "baseUrl": "http://127.0.0.1:8080/v1", "topN": 40,
        "apiKey": {"source": "env", "id": "JINA_API_KEY"}}}}}))
    s = load_settings(cfg, workspace=tmp_path, env={"HOME": str(tmp_path)})
    assert (s.rerank.enabled, s.rerank.top_n, s.rerank.api_key_env) == (True, 40, "JINA_API_KEY")
    assert s.rerank.api_key is None and s.rerank.timeout_ms == 5000


def test_cli_search_reranks_and_says_so(tmp_path: Path, make_settings) -> None:
    """The one-shot ``memq search``: reranked through the real CLI (httpx imported only now
    that a reranker is configured), with the note in ``--json`` and in the text footer; the
    key is in neither, nor in stderr."""
    ws = tmp_path / "ws"
    for rel, text in NOTES.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text, encoding="utf-8")
    with RerankDouble() as double:
        settings = make_settings(ws, provider="none", query={"minScore": 0.0},
                                 rerank={"enabled": True, "baseUrl": double.url,
                                         "apiKey": "${MEMQ_TEST_RERANK_KEY}"})
        env = {"MEMQ_TEST_RERANK_KEY": double.api_key, "MEMQ_CONFIG": str(settings.config_file)}
        common = ("--workspace", str(ws), "--config", str(settings.config_file))
        assert run_memq("index", *common, env=env, timeout=120).returncode == 0
        as_json = run_memq("search", *common, "--json", QUERY, env=env, timeout=120)
        as_text = run_memq("search", *common, QUERY, env=env, timeout=120)
    assert as_json.returncode == 0, as_json.stderr
    out = json.loads(as_json.stdout)
    assert out["rerank"] == {"provider": "http", "model": None, "reranked": 3}
    assert [r["path"] for r in out["results"]] == ["memory/e.md", "memory/c.md", "memory/d.md"]
    assert "rerank http: 3 reranked" in as_text.stdout
    for text in (as_json.stdout, as_json.stderr, as_text.stdout, as_text.stderr):
        assert double.api_key not in text


def test_mmr_runs_on_the_reranked_scores_and_keeps_the_rest_behind(ws: Path,
                                                                   make_settings) -> None:
    """MMR after the reranker: a near-copy of the best reranked note gives way to a different
    one; and MMR stays among the reranked, the candidates beyond topN following in the fused
    order (their fused scores are another scale: e's 0.75 would otherwise jump ahead)."""
    notes = {**NOTES, "memory/f.md": NOTES["memory/e.md"] + " Signed."}
    scores = {**SCORES, "memory/f.md": 0.7}
    mmr = {**VECTOR_ONLY, "maxResults": 6,
           "hybrid": {"enabled": False, "mmr": {"enabled": True, "lambda": 0.5}}}
    with RerankDouble() as double:
        db, settings = build(ws, make_settings, notes, scores, query=mmr,
                             rerank={"enabled": True, "baseUrl": double.url,
                                     "apiKey": double.api_key, "topN": 6})
        every = search(db, settings, QUERY, provider=QueryVector(),
                       reranker=build_reranker(settings.rerank))
        db2, few = build(ws, make_settings, notes, scores, query=mmr,
                         rerank={"enabled": True, "baseUrl": double.url,
                                 "apiKey": double.api_key, "topN": 3})
        head = search(db2, few, QUERY, provider=QueryVector(), reranker=build_reranker(few.rerank))
    # reranked e, f (1.0), c (0.67), d (0.33), a, b (0): MMR puts c before e's near-copy f
    assert _paths(every.hits)[:2] == ["memory/e.md", "memory/c.md"]
    assert _paths(every.hits).index("memory/f.md") > 1
    assert set(_paths(head.hits)[:3]) == {"memory/a.md", "memory/b.md", "memory/c.md"}
    assert _paths(head.hits)[3:] == ["memory/d.md", "memory/e.md", "memory/f.md"]
