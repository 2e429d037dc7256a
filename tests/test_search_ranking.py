"""Ranking: fusion, score direction, minScore edges, MMR, temporal decay, source filter.

The two worked examples of OpenClaw's memory docs are acceptance tests here, with the vector
scores the docs give (controlled through :mod:`tests.searchkit`).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from pipeline.search import decay, fusion, retrievers
from pipeline.search.hybrid import HeldCopies, search_store
from pipeline.search.mmr import jaccard, mmr_order
from pipeline.store.vectors import put_vectors
from tests.searchkit import QueryVector, build, vector_with_cosine

#: Plain ranking, MMR and temporal decay (on by default) off: what the fusion tests measure.
PLAIN = {"mmr": {"enabled": False}, "temporalDecay": {"enabled": False}}
VECTOR_ONLY = {"hybrid": {"enabled": False, **PLAIN}}

#: The copies this module's searches hold, as a long-running reader's ``Memory`` does.
HELD = HeldCopies()
MATRICES, TEXT_STATS = HELD.matrices, HELD.text_stats


def search(db, settings, query: str, *, in_memory: bool = True, **kwargs) -> dict:
    """``search_store``'s hits as OpenClaw's JSON results, through this module's held copies
    (``in_memory``) or SQLite alone."""
    hits = search_store(db, settings, query, held=HELD if in_memory else None, **kwargs)
    return {"results": [h.to_dict() for h in hits]}


def paths(out: dict) -> list[str]:
    return [r["path"] for r in out["results"]]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


# ---------------------------------------------------------------------------------------------
# Fusion


def test_weighted_fusion_direction_and_weights() -> None:
    ranked = fusion.weighted({1: 0.9, 2: 0.5, 3: 0.1}, {2: 1.0, 3: 0.8}, (0.7, 0.3))
    by_id = {c.rowid: c for c in ranked}
    assert by_id[1].score == pytest.approx(0.63)
    assert by_id[2].score == pytest.approx(0.35 + 0.3)
    assert by_id[3].score == pytest.approx(0.07 + 0.24)
    assert [c.rowid for c in ranked] == [2, 1, 3]


def test_weighted_fusion_scores_a_chunk_without_vector_by_its_text_alone() -> None:
    # OpenClaw #25183: wT x text caps such a hit at 0.3, under minScore 0.35.
    (only,) = fusion.weighted({}, {7: 0.9}, (0.7, 0.3))
    assert only.score == pytest.approx(0.9)
    (vector_only,) = fusion.weighted({}, {7: 0.9}, (1.0, 0.0))
    assert vector_only.score == 0.0


def test_rrf_rank_one_on_both_sides_scores_one_and_order_follows_ranks() -> None:
    ranked = fusion.rrf({1: 0.9, 2: 0.8, 3: 0.1}, {2: 0.99, 1: 0.5}, (0.5, 0.5), k=60)
    by_id = {c.rowid: c for c in ranked}
    assert by_id[2].score == pytest.approx(61 * (0.5 / 62 + 0.5 / 61))
    assert by_id[1].score == by_id[2].score  # mirror ranks, equal scores; tie by rowid
    assert [c.rowid for c in ranked] == [1, 2, 3]
    top = fusion.rrf({5: 0.2}, {5: 0.1}, (0.7, 0.3), k=60)[0]
    assert top.score == pytest.approx(1.0)
    assert top.vector_score == 0.2 and top.text_score == 0.1


def test_relative_scores_keep_order_and_handle_empty() -> None:
    assert fusion.relative({1: 0.4, 2: 0.2}) == {1: 1.0, 2: 0.5}
    assert fusion.relative({}) == {}


def test_the_fused_keyword_score_is_a_share_of_the_best_bm25() -> None:
    """BM25 20 vs 10 must count as 1.0 vs 0.5, not 0.95 vs 0.91 as r/(1+r) made it."""
    assert fusion.share_of_best({1: -20.0, 2: -10.0, 3: -2.0}) == {1: 1.0, 2: 0.5, 3: 0.1}
    assert fusion.share_of_best({}) == {}
    saturated = fusion.text_scores({1: -20.0, 2: -10.0})
    assert saturated == pytest.approx({1: 20 / 21, 2: 10 / 11})
    assert fusion.share_of_best({1: 0.5}) == {1: 1.0}  # not a BM25 magnitude: OpenClaw's map


def test_bm25_order_decides_between_equally_similar_chunks(ws: Path, make_settings) -> None:
    """Equal cosines: the chunk BM25 ranks far higher comes first, by a real margin."""
    notes = {"memory/strong.md": "kestrel kestrel nesting kestrel",
             "memory/weak.md": "a long note that mentions nesting once among many other words "
                               "about gardens boats cars and weather",
             **{f"memory/filler{i}.md": f"filler note {i}" for i in range(20)}}
    scores = {"memory/strong.md": 0.5, "memory/weak.md": 0.5}
    db, settings = build(ws, make_settings, notes, scores)
    out = search(db, settings, "kestrel nesting", provider=QueryVector(), min_score=0)
    assert paths(out)[:2] == ["memory/strong.md", "memory/weak.md"]
    strong, weak = (r["score"] for r in out["results"][:2])
    assert strong == pytest.approx(0.7 * 0.5 + 0.3, abs=1e-5)
    assert weak < 0.7 * 0.5 + 0.3 * 0.5  # its BM25 is under half the best's
    db.close()


# ---------------------------------------------------------------------------------------------
# minScore / maxResults edges, through the real store


NOTES = {"memory/a.md": "alpha note about gardens", "memory/b.md": "bravo note about boats",
         "memory/c.md": "charlie note about cars"}
SCORES = {"memory/a.md": 0.9, "memory/b.md": 0.35, "memory/c.md": 0.2}


def test_min_score_is_inclusive_and_max_results_cuts(ws: Path, make_settings) -> None:
    db, settings = build(ws, make_settings, NOTES, SCORES, query=VECTOR_ONLY)
    out = search(db, settings, "anything", provider=QueryVector())
    assert paths(out) == ["memory/a.md", "memory/b.md"]  # 0.35 == minScore is kept
    assert [r["score"] for r in out["results"]] == [pytest.approx(0.9), pytest.approx(0.35)]
    out = search(db, settings, "anything", provider=QueryVector(), min_score=0,
                       max_results=2)
    assert paths(out) == ["memory/a.md", "memory/b.md"]
    assert paths(search(db, settings, "x", provider=QueryVector(), max_results=0)) == []
    db.close()


def test_vector_only_scores_are_raw_cosine_not_scaled_by_the_weight(ws: Path,
                                                                    make_settings) -> None:
    db, settings = build(ws, make_settings, NOTES, SCORES, query=VECTOR_ONLY)
    out = search(db, settings, "q", provider=QueryVector(), min_score=0)
    assert [r["score"] for r in out["results"]] == pytest.approx([0.9, 0.35, 0.2], abs=1e-5)
    db.close()


def test_relaxed_fallback_returns_keyword_hits_when_nothing_clears(ws: Path,
                                                                   make_settings) -> None:
    db, settings = build(ws, make_settings, NOTES, SCORES)
    out = search(db, settings, "boats", provider=QueryVector(), min_score=0.99)
    assert paths(out) == ["memory/b.md"]
    db.close()


def test_keyword_hit_without_a_vector_survives_min_score_in_hybrid(ws: Path,
                                                                   make_settings) -> None:
    notes = {**NOTES, "memory/pending.md": "the zeppelin hangar code is 4471"}
    db, settings = build(ws, make_settings, notes, SCORES)  # pending.md gets no vector
    out = search(db, settings, "zeppelin hangar", provider=QueryVector())
    assert paths(out)[0] == "memory/pending.md"
    assert out["results"][0]["score"] >= settings.query.min_score
    db.close()


def test_free_slots_are_filled_with_keyword_only_matches_below_min_score(
        ws: Path, make_settings) -> None:
    """OpenClaw 2026.9 (selectHybridSearchResults): what clears minScore first, then free slots
    filled with keyword matches the vector side did not return, even below minScore; a chunk
    the vector side returned with a low score is not a filler."""
    notes = {**NOTES, "memory/b.md": "bravo boats boats boats about boats",
             "memory/log.md": "a long log " + "of many unrelated words " * 40 + "boats",
             "memory/d.md": "delta note about boats once and gardens"}
    scores = {**SCORES, "memory/d.md": 0.01}  # log.md has no vector: keyword-only
    db, settings = build(ws, make_settings, notes, scores)
    out = search(db, settings, "boats", provider=QueryVector())
    by_path = {r["path"]: r["score"] for r in out["results"]}
    assert paths(out)[:2] == ["memory/a.md", "memory/b.md"]  # both clear 0.35
    assert "memory/log.md" in by_path and by_path["memory/log.md"] < 0.35
    assert paths(out)[-1] == "memory/log.md"  # fillers come after what cleared
    assert "memory/d.md" not in by_path  # the vector side returned it: not a keyword-only match
    assert "memory/c.md" not in by_path  # no keyword match at all
    one = search(db, settings, "boats", provider=QueryVector(), max_results=2)
    assert paths(one) == ["memory/a.md", "memory/b.md"]  # no free slot, no filler
    keyword_only = search(db, settings, "boats", provider=None)
    assert "memory/log.md" not in paths(keyword_only)  # OpenClaw's keyword path: no filling
    # Nothing clears: every keyword match answers (2026.9 dropped the textWeight floor).
    nothing = search(db, settings, "boats", provider=QueryVector(), min_score=0.99)
    assert sorted(paths(nothing)) == ["memory/b.md", "memory/d.md", "memory/log.md"]
    db.close()


def test_rrf_mode_through_the_store(ws: Path, make_settings) -> None:
    db, settings = build(ws, make_settings, NOTES, SCORES, query={"hybrid": {"fusion": "rrf"}})
    out = search(db, settings, "boats", provider=QueryVector(), min_score=0)
    # b.md: vector rank 2 + text rank 1; a.md: vector rank 1 only.
    assert paths(out)[:2] == ["memory/b.md", "memory/a.md"]
    assert out["results"][0]["score"] == pytest.approx(61 * (0.7 / 62 + 0.3 / 61), abs=1e-6)
    db.close()


@pytest.mark.parametrize("text", ['"', "AND", "NEAR(a b)", "c++", "rate-limit", "col:val*",
                                  "'; DROP TABLE chunks; --", "\x00", "", "   ", "日本語",
                                  "🙂", "a" * 5000])
@pytest.mark.parametrize("fusion_mode", ["weighted", "rrf"])
def test_hostile_queries_in_every_mode(ws: Path, make_settings, text: str,
                                       fusion_mode: str) -> None:
    db, settings = build(ws, make_settings, NOTES, SCORES, query={
        "hybrid": {"fusion": fusion_mode, "mmr": {"enabled": True},
                   "temporalDecay": {"enabled": True}}})
    for provider in (QueryVector(), None):
        out = search(db, settings, text, provider=provider)
        assert isinstance(out["results"], list)
    db.close()


# ---------------------------------------------------------------------------------------------
# MMR: OpenClaw's worked example ("home network setup", lambda 0.7)

NETWORK = {
    "memory/2026-02-10.md": "Configured Omada router, set VLAN 10 for IoT devices.",
    "memory/2026-02-08.md": "Configured Omada router, set VLAN 10 for the IoT devices.",
    "memory/network.md": "Router: Omada ER605. AdGuard Home runs on 192.168.10.2.",
    "memory/2026-02-05.md": "Set up AdGuard Home as the DNS server for the house.",
    "memory/2026-01-20.md": "Bought a new kettle; the old one leaked.",
    "memory/2026-01-21.md": "Dentist appointment moved to Thursday.",
}
NETWORK_SCORES = {"memory/2026-02-10.md": 0.92, "memory/2026-02-08.md": 0.89,
                  "memory/network.md": 0.85, "memory/2026-02-05.md": 0.78,
                  "memory/2026-01-20.md": 0.40, "memory/2026-01-21.md": 0.38}


def test_mmr_worked_example_drops_the_near_duplicate_from_the_top_3(ws: Path,
                                                                    make_settings) -> None:
    db, settings = build(ws, make_settings, NETWORK, NETWORK_SCORES, query=VECTOR_ONLY)
    plain = paths(search(db, settings, "home network setup", provider=QueryVector()))
    assert plain[:3] == ["memory/2026-02-10.md", "memory/2026-02-08.md", "memory/network.md"]
    db.close()
    db, settings = build(ws, make_settings, NETWORK, NETWORK_SCORES, query={
        "hybrid": {"enabled": False, "mmr": {"enabled": True, "lambda": 0.7},
                   "temporalDecay": {"enabled": False}}})
    out = search(db, settings, "home network setup", provider=QueryVector())
    diverse = paths(out)
    assert diverse[:3] == ["memory/2026-02-10.md", "memory/network.md", "memory/2026-02-05.md"]
    assert "memory/2026-02-08.md" not in diverse[:3]
    # MMR re-orders; the scores themselves are the fused ones.
    assert out["results"][1]["score"] == pytest.approx(0.85, abs=1e-5)
    db.close()


def test_mmr_applies_in_keyword_only_mode(ws: Path, make_settings) -> None:
    notes = {"memory/x.md": "kettle descaling with citric acid every month kettle",
             "memory/y.md": "kettle descaling with citric acid every month",
             "memory/z.md": "kettle warranty card is in the blue folder"}
    on = {"hybrid": {"mmr": {"enabled": True, "lambda": 0.5}}}
    db, settings = build(ws, make_settings, notes, query=on)
    ranked = paths(search(db, settings, "kettle descaling", min_score=0))
    assert ranked[:2] == ["memory/x.md", "memory/z.md"] or ranked[:2] == ["memory/y.md",
                                                                          "memory/z.md"]
    db.close()


def test_jaccard_uses_unicode_tokens_and_empty_sets_are_not_similar() -> None:
    from pipeline.store.tokens import words

    a, b = frozenset(words("会议纪要在周一")), frozenset(words("预算审批流程"))
    assert a and b and jaccard(a, b) == 0.0  # ASCII-only tokens made these identical
    assert jaccard(frozenset(), frozenset()) == 0.0
    assert jaccard(frozenset(words("Café über")), frozenset(words("café ÜBER"))) == 1.0


def test_mmr_with_lambda_one_keeps_relevance_order() -> None:
    items = ["a", "b", "c"]
    assert mmr_order(items, [0.9, 0.8, 0.7], ["same text", "same text", "other"], 1.0) == items


# ---------------------------------------------------------------------------------------------
# Temporal decay: OpenClaw's worked example ("Rod's schedule", half-life 30 days)

ROD = {
    "memory/2025-09-15.md": "Rod works Monday to Friday; standup at 10:00.",
    "memory/2026-02-10.md": "Rod has standup at 14:15 and a 1:1 with Zeb at 14:45.",
    "MEMORY.md": "Rod is the team lead; his schedule lives in the shared calendar.",
}
ROD_SCORES = {"memory/2025-09-15.md": 0.91, "memory/2026-02-10.md": 0.82, "MEMORY.md": 0.80}
TODAY = dt.datetime(2026, 2, 10, tzinfo=dt.UTC).timestamp()


def test_decay_worked_example_sinks_the_148_day_old_note(ws: Path, make_settings) -> None:
    db, settings = build(ws, make_settings, ROD, ROD_SCORES, query=VECTOR_ONLY)
    plain = search(db, settings, "Rod's schedule", provider=QueryVector(), now=TODAY)
    assert paths(plain) == ["memory/2025-09-15.md", "memory/2026-02-10.md", "MEMORY.md"]
    db.close()
    db, settings = build(ws, make_settings, ROD, ROD_SCORES, query={
        "hybrid": {"enabled": False, "mmr": {"enabled": False},
                   "temporalDecay": {"enabled": True, "halfLifeDays": 30, "mode": "decay"}}})
    out = search(db, settings, "Rod's schedule", provider=QueryVector(), now=TODAY,
                       min_score=0)
    assert paths(out) == ["memory/2026-02-10.md", "MEMORY.md", "memory/2025-09-15.md"]
    scores = [r["score"] for r in out["results"]]
    assert scores[:2] == pytest.approx([0.82, 0.80], abs=1e-5)  # today and evergreen: intact
    assert scores[2] == pytest.approx(0.91 * 0.5 ** (148 / 30), abs=1e-5)  # about 0.03
    # With the default minScore the stale note does not make the cut at all.
    cut = search(db, settings, "Rod's schedule", provider=QueryVector(), now=TODAY)
    assert paths(cut) == ["memory/2026-02-10.md", "MEMORY.md"]
    db.close()


def test_decay_applies_in_keyword_only_mode(ws: Path, make_settings) -> None:
    notes = {"memory/2025-01-01.md": "passport renewal passport renewal form",
             "memory/2026-02-09.md": "passport renewal form"}
    on = {"hybrid": {"temporalDecay": {"enabled": True}}}
    db, settings = build(ws, make_settings, notes, query=on)
    assert paths(search(db, settings, "passport renewal", now=TODAY))[0] == \
        "memory/2026-02-09.md"
    db.close()


@pytest.mark.parametrize(("path", "expected"), [
    ("memory/2026-02-10.md", "2026-02-10"),
    ("memory/work/2026-02-10.md", "2026-02-10"),  # nested (OpenClaw: evergreen, #121103)
    ("memory/a/b/c/2026-02-10.md", "2026-02-10"),
    ("memory/2026-02-10-standup.md", "2026-02-10"),  # suffixed (#151914)
    ("memory/2026-02-30.md", "1970-01-01"),  # dated name, no date: mtime (OpenClaw 2026.9.6)
    ("memory/people.md", None),
    ("MEMORY.md", None),
    ("USER.md", None),
])
def test_note_dates(path: str, expected: str | None) -> None:
    when = decay.note_time(path, mtime_ns=123)
    got = None if when is None else dt.datetime.fromtimestamp(when, dt.UTC).strftime("%Y-%m-%d")
    assert got == expected


def test_files_outside_memory_age_by_mtime(tmp_path: Path, make_settings) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    note = extra / "2020-01-01.md"  # the name is not trusted outside memory/
    note.write_text("gearbox oil change")
    os.utime(note, (TODAY - 30 * 86400, TODAY - 30 * 86400))
    scores = []
    for enabled in (False, True):
        folder = tmp_path / f"ws-{enabled}"
        folder.mkdir()
        db, settings = build(folder, make_settings,
                             {"memory/2026-02-10.md": "gearbox oil change done"},
                             extraPaths=[str(extra)], store={"path": str(folder / "s.sqlite")},
                             query={"hybrid": {"temporalDecay": {"enabled": enabled,
                                                                 "mode": "decay"}}})
        out = search(db, settings, "gearbox oil change", now=TODAY, min_score=0)
        scores.append({Path(r["path"]).name: r["score"] for r in out["results"]})
        db.close()
    plain, decayed = scores
    assert decayed["2026-02-10.md"] == plain["2026-02-10.md"]  # dated today: no decay
    assert decayed["2020-01-01.md"] == pytest.approx(plain["2020-01-01.md"] * 0.5, abs=1e-5)


# ---------------------------------------------------------------------------------------------
# Source filter and sqlite-vec parity


def add_session_chunks(db, count: int) -> None:
    """``count`` session chunks, each nearer to the query (cosine 0.99) than any memory note."""
    for i in range(count):
        cur = db.conn.execute(
            "INSERT INTO chunks(id, path, source, start_line, end_line, hash, text, state, "
            "updated_at) VALUES (?, ?, 'sessions', 1, 1, ?, 'session talk', 'ready', 0)",
            (f"s{i}", f"sessions/s{i}.jsonl", f"h{i}"))
        put_vectors(db, [cur.lastrowid], vector_with_cosine(0.99, 5 + (i % 20))[None, :])


def hold_in_memory(db) -> None:
    """Load the store's vectors and BM25 statistics into this process, as a long-running
    reader has them."""
    assert MATRICES.get(db) is MATRICES.current(db)
    TEXT_STATS.current(db)
    TEXT_STATS.wait()
    assert TEXT_STATS.current(db) is not None


@pytest.mark.parametrize("cached", [True, False], ids=["in-memory", "sqlite"])
def test_source_filter_does_not_starve_the_wanted_source(ws: Path, make_settings,
                                                         cached: bool) -> None:
    notes = {f"memory/n{i}.md": f"memory note number {i}" for i in range(4)}
    scores = {p: 0.5 + i / 100 for i, p in enumerate(sorted(notes))}
    db, settings = build(ws, make_settings, notes, scores, query=VECTOR_ONLY)
    add_session_chunks(db, 30)
    if cached:
        hold_in_memory(db)
    out = search(db, settings, "q", provider=QueryVector(), max_results=4,
                       min_score=0, in_memory=cached)
    assert sorted(paths(out)) == sorted(notes)
    assert all(r["source"] == "memory" for r in out["results"])
    assert paths(search(db, settings, "session talk", min_score=0)) == []
    assert len(paths(search(db, settings, "memory note", min_score=0))) == 4
    db.close()


@pytest.mark.parametrize("options", [
    {"hybrid": {"enabled": False}},
    {"hybrid": {"fusion": "weighted", "mmr": {"enabled": True}}},
    {"hybrid": {"fusion": "rrf", "temporalDecay": {"enabled": True}}},
])
def test_results_identical_with_and_without_sqlite_vec_and_the_in_memory(
        tmp_path: Path, make_settings, options: dict) -> None:
    outs = []
    for want in (True, False):
        folder = tmp_path / f"ws-{want}"
        folder.mkdir()
        db, settings = build(folder, make_settings, NETWORK, NETWORK_SCORES, want_vectors=want,
                             query=options, store={"path": str(tmp_path / f"{want}.sqlite")})
        assert db.vector_ok is want or not want
        for cached in (True, False):
            if cached:  # load the in-memory copies first: without them vec0 and FTS5 answer
                hold_in_memory(db)
            outs.append(_observed_checked(folder, search(
                db, settings, "home network setup", provider=QueryVector(), now=TODAY,
                min_score=0, in_memory=cached)["results"]))
        db.close()
    assert all(out == outs[0] for out in outs[1:]) and len(outs[0]) == len(NETWORK)


def _observed_checked(folder: Path, results: list[dict]) -> list[dict]:
    """``results`` with each provenance's ``observedAt`` checked against its file's mtime (in
    ms, as OpenClaw gives it) and then blanked: the two folders' files differ in mtime only."""
    for hit in results:
        mtime_ns = (folder / hit["path"]).stat().st_mtime_ns
        assert hit["provenance"]["observedAt"] == mtime_ns // 1_000_000
        hit["provenance"]["observedAt"] = "checked"
    return results


def test_large_wanted_source_over_fetches_then_falls_back_to_a_scan(
        ws: Path, make_settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retrievers, "EXACT_SCAN_MAX", 2)  # 4 memory notes count as "large"
    notes = {f"memory/n{i}.md": f"memory note number {i}" for i in range(4)}
    scores = {p: 0.5 + i / 100 for i, p in enumerate(sorted(notes))}
    db, settings = build(ws, make_settings, notes, scores, query=VECTOR_ONLY)
    add_session_chunks(db, 40)  # crowd the over-fetched top k
    out = search(db, settings, "q", provider=QueryVector(), max_results=3, min_score=0,
                       in_memory=False)  # the over-fetch is vec0's; the cache scans exactly
    assert paths(out) == ["memory/n3.md", "memory/n2.md", "memory/n1.md"]
    db.close()
