"""memory_search's result fields as OpenClaw 2026.9.6 gives them: per hit ``vectorScore``,
``textScore``, ``corpus``, ``provenance`` and the ``Source:`` footer; at the top ``citations``
(the configured mode) and ``debug``; the disabled answer ``{disabled, unavailable, error,
warning, action, debug}``; and, where memq deliberately answers from keywords when the
embedding provider is down, OpenClaw's ``unavailable``/``warning``/``action`` beside the
results. Each is checked against OpenClaw's own functions run under Node from the installed
package (``tests/openclaw_search_fields.mjs``), then end to end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.embeddings.registry import choose_provider
from pipeline.ingest.producer import sync_files
from pipeline.query import memory_search
from pipeline.results import (
    UNAVAILABLE_WARNING,
    Provenance,
    SearchHit,
    SearchResults,
    provider_down_action,
)
from pipeline.search.citations import apply_citations
from pipeline.search.corpus import SESSIONS_ACTION, SESSIONS_DISABLED, refusal
from pipeline.search.hybrid import search_store
from pipeline.search.provenance import origin_class
from pipeline.store.engine import connect
from tests.fakes.provider_doubles import Fault, ProviderDouble
from tests.searchkit import QueryVector, build
from tests.secrets_scan import SENTINEL
from tests.tools import run_oracle

ORACLE = Path(__file__).with_name("openclaw_search_fields.mjs")


def openclaw(cases: dict[str, Any]) -> dict[str, Any]:
    """OpenClaw's answers to ``cases`` (see the script's header)."""
    return run_oracle(ORACLE, cases)  # type: ignore[return-value]


# --- OpenClaw's answers that need no store: one Node run for the module -------------------------

MODES = [None, "auto", "on", "off"]
ERRORS = ["insufficient_quota: you exceeded your current quota", "HTTP 429 Too Many Requests",
          "Quota exceeded", "HTTP 401 invalid api key", "connection refused", ""]
CLASSIFIED = ["MEMORY.md", "memory.md", "USER.md", "DREAMS.md", "dreams.md", "memory/a.md",
              "memory/sub/deep/b.md", "memory/c.txt", "memory/dreaming/d.md",
              "memory/.dreams/e.md", "users/alice_1/USER.md", "users/-x/USER.md",
              "users/alice/notes.md", "notes/extra.md", "other/MEMORY.md", "Memory/f.md"]


#: OpenClaw's warning when session search is asked for and not enabled.
SESSIONS_WARNING = "Session transcript search is unavailable for this agent."


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """OpenClaw's presentation of :func:`_hits` (cited and not), its citations mode for each of
    :data:`MODES`, its unavailable answer for each of :data:`ERRORS` (then two with memq's
    own texts: the sessions refusal and a store error) and its provenance of each of
    :data:`CLASSIFIED` from either source, in a workspace (``workspace``) holding them."""
    ws = tmp_path_factory.mktemp("classified")
    for rel in CLASSIFIED:
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text("note\n")
    plain = [h.to_dict() for h in _hits()]
    for h in plain:  # OpenClaw's presentation adds it to the ranked hit
        h.pop("corpus")
    sessions = SearchResults(mode="unavailable", error=SESSIONS_DISABLED,
                             warning=SESSIONS_WARNING, action=SESSIONS_ACTION)
    asked = [{"path": p, "source": s, "startLine": 1, "endLine": 1}
             for p in CLASSIFIED for s in ("memory", "sessions")]
    out = openclaw({
        "presentation": [{"hits": plain, "include": True}, {"hits": plain, "include": False}],
        "citationsModes": MODES,
        "unavailable": [{"error": e} for e in ERRORS] + [
            {"error": sessions.error, "warning": sessions.warning, "action": sessions.action},
            {"error": "store unreadable", "warning": UNAVAILABLE_WARNING, "action": "rebuild"}],
        "provenance": {"workspace": str(ws), "hits": asked}})
    return {**out, "workspace": ws, "asked": asked}


# --- snippet, footer, corpus, citation --------------------------------------------------------

SNIPPETS = ["plain text", "ends with spaces   ", "ends with lines\n\n", "tab and space \t\n ",
            "ideographic space\u3000", "nbsp\u00a0", "line separator\u2028", "bom\ufeff",
            "not JS space\x1c", "next line\x85", "  leading kept", "", "   ",
            "# Heading\n- entry one\n- entry two  \n"]


def _hits() -> list[SearchHit]:
    prov = Provenance("agent", "unknown", 1_700_000_000_123)
    return [SearchHit(f"memory/n{i}.md", i + 1, i + 1 + i % 3, 0.5, text,
                      "sessions" if i % 5 == 4 else "memory", vector_score=0.4, text_score=0.9,
                      importance=7 if i % 4 == 0 else None, provenance=prov)
            for i, text in enumerate(SNIPPETS)]


def test_results_present_as_openclaws_with_and_without_citations(answers) -> None:
    hits = _hits()
    answer = answers
    cited = [h.to_dict() for h in apply_citations(hits, "on")]
    assert cited == answer["presentation"][0]
    assert [h.to_dict() for h in apply_citations(hits, "off")] == answer["presentation"][1]
    # the footer follows the trimmed snippet: no space before it, JavaScript's whitespace only
    assert cited[1]["snippet"] == "ends with spaces\n\nSource: memory/n1.md#L2-L3"
    assert cited[8]["snippet"].startswith("not JS space\x1c\n\nSource:")


def test_citations_names_the_configured_mode_as_openclaw(tmp_path: Path, make_settings,
                                                         answers) -> None:
    from memq.mcp_server import MemoryTools
    from pipeline.memory import Memory

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "ops.md").write_text("# Ops\n\n- the lantern by the gate   \n")
    for mode, want in zip(MODES, answers["citationsModes"], strict=True):
        keys: dict[str, Any] = {"provider": "none"}
        if mode is not None:
            keys["citations"] = mode
        settings = make_settings(ws, **keys)
        with Memory(settings=settings, in_memory=False) as memory:
            if mode is None:  # one store for all (the mode does not change the index)
                memory.index()
            out = MemoryTools(memory).search({"query": "lantern"})
        assert out["citations"] == want
        top = out["results"][0]
        if want == "off":
            assert "citation" not in top and "Source:" not in top["snippet"]
        else:  # an MCP client is one user's direct chat: auto cites
            assert top["snippet"] == ("# Ops\n\n- the lantern by the gate\n\n"
                                      "Source: memory/ops.md#L1-L4")
        assert top["corpus"] == "memory" and top["provenance"]["originClass"] == "agent"
        assert out["debug"]["backend"] == "builtin" and out["debug"]["hits"] == 1


# --- the disabled answer, and a provider that is down -----------------------------------------

def test_disabled_answer_has_openclaws_fields(make_settings, tmp_path: Path,
                                              answers) -> None:
    settings = make_settings(tmp_path, provider="none")
    sessions = refusal(settings, "sessions")
    assert sessions is not None
    store = SearchResults(mode="unavailable", error="store unreadable", action="rebuild")
    mine = [sessions.to_dict(), store.to_dict()]
    for ours, theirs in zip(mine, answers["unavailable"][len(ERRORS):], strict=True):
        assert {k: ours[k] for k in theirs} == theirs
        assert set(ours) - set(theirs) == {"provider", "model", "mode"}  # memq's own


def test_provider_down_action_is_openclaws(answers) -> None:
    for error, theirs in zip(ERRORS, answers["unavailable"][:len(ERRORS)], strict=True):
        assert provider_down_action(error) == theirs["action"], error


def test_a_down_provider_answers_from_keywords_with_openclaws_flags(tmp_path: Path,
                                                                     make_settings,
                                                                     answers) -> None:
    """Deliberately unlike OpenClaw (which answers nothing), memq answers from keywords; it
    says so with OpenClaw's fields, and keeps them through a host-to-host round trip."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "2026-01-02.md").write_text("# Garden\n\n- the lantern by the gate\n")
    with ProviderDouble("openai", api_key=SENTINEL, script=[Fault("401")] * 8) as double:
        settings = make_settings(ws, provider="openai",
                                 remote={"baseUrl": double.url, "apiKey": SENTINEL})
        db = connect(settings.store.path)
        sync_files(db, settings, choose_provider(settings, env={}))
        db.close()
        out = memory_search("lantern", settings=settings, sync=False, in_memory=False)
    assert out["mode"] == "keyword-only" and out["unavailable"] is True
    assert "disabled" not in out and "keyword results only" in out["warning"]
    # OpenClaw's action for a provider error that is not about quota (as this one is not)
    assert not any(word in out["warning"].lower() for word in ("quota", "429"))
    assert out["action"] == answers["unavailable"][ERRORS.index("connection refused")]["action"]
    top = out["results"][0]
    assert top["path"] == "memory/2026-01-02.md" and "vectorScore" not in top
    assert top["textScore"] == 1.0
    back = SearchResults.from_dict(out)
    assert back.vector_unavailable and back.to_dict() == out


# --- the two sides' scores, fused as OpenClaw fuses them --------------------------------------

NOTES = {
    "memory/router.md": "Configured the Omada router and set VLAN 10 for IoT devices.",
    "memory/dns.md": "AdGuard Home runs on 192.168.10.2 as the house DNS server.",
    "MEMORY.md": "- The home network uses an Omada router.\n",
    "memory/kettle.md": "Bought a new kettle; the old one leaked.",
}
SCORES = {"memory/router.md": 0.91, "memory/dns.md": 0.62, "MEMORY.md": 0.55,
          "memory/kettle.md": 0.12}


WEIGHTS = [(0.7, 0.3), (0.5, 0.5)]


def _side(h: dict[str, Any], key: str, n: int) -> dict[str, Any]:
    """Hit ``h`` as one side's candidate for OpenClaw's merge (its score there: ``key``)."""
    return {"id": n, "path": h["path"], "startLine": h["startLine"], "endLine": h["endLine"],
            "source": h["source"], "snippet": h["snippet"], key: h[key]}


def test_vector_and_text_scores_fuse_to_the_score_as_openclaw(tmp_path: Path,
                                                              make_settings) -> None:
    """Each hit's two scores, given to OpenClaw's ``mergeHybridResults`` (decay and MMR off),
    fuse to memq's score with the configured weights; and a real hit's provenance is the one
    OpenClaw gives its file."""
    runs, cases = [], []
    for n, (wv, wt) in enumerate(WEIGHTS):
        ws = tmp_path / f"ws{n}"
        db, settings = build(ws, make_settings, NOTES, SCORES, store={
            "path": str(tmp_path / f"{n}.sqlite")}, query={"hybrid": {
                "vectorWeight": wv, "textWeight": wt, "mmr": {"enabled": False},
                "temporalDecay": {"enabled": False}}})
        hits = [h.to_dict() for h in search_store(db, settings, "omada router network",
                                                  provider=QueryVector(), min_score=0)]
        db.close()
        assert len(hits) == len(NOTES) and all(h["textScore"] >= 0 for h in hits)
        assert any(h["textScore"] == 0 for h in hits) and any(h["textScore"] > 0 for h in hits)
        runs.append(hits)
        cases.append({"vector": [_side(h, "vectorScore", i) for i, h in enumerate(hits)
                                 if h["vectorScore"] > 0],
                      "keyword": [_side(h, "textScore", i) for i, h in enumerate(hits)
                                  if h["textScore"] > 0],
                      "vectorWeight": wv, "textWeight": wt})
    asked = [{"path": h["path"], "source": h["source"], "startLine": h["startLine"],
              "endLine": h["endLine"]} for h in runs[0]]
    answer = openclaw({"merge": cases, "provenance": {"workspace": str(tmp_path / "ws0"),
                                                      "hits": asked}})
    assert [h["provenance"] for h in runs[0]] == answer["provenance"]
    for hits, merged in zip(runs, answer["merge"], strict=True):
        theirs = {(h["path"], h["startLine"]): h for h in merged}
        for hit in hits:
            other = theirs[(hit["path"], hit["startLine"])]
            assert set(other) <= set(hit)  # every field OpenClaw's ranked hit has, memq's has
            assert (other["vectorScore"], other["textScore"]) == (hit["vectorScore"],
                                                                  hit["textScore"])
            assert hit["score"] == pytest.approx(other["score"], abs=1e-6)
    assert runs[0] != runs[1]  # the weights did change the scores


# --- provenance -------------------------------------------------------------------------------

def test_provenance_is_openclaws_for_each_kind_of_path(answers) -> None:
    ws = answers["workspace"]
    for case, other in zip(answers["asked"], answers["provenance"], strict=True):
        observed = (ws / case["path"]).stat().st_mtime_ns // 1_000_000
        mine = Provenance(origin_class(case["path"], case["source"]), "unknown", observed)
        assert mine.to_dict() == other, case
    assert {o["originClass"] for o in answers["provenance"]} == {"agent", "system", "untrusted"}
