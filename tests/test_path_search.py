"""Files found by words of their name (OpenClaw 2026.9.6's path index, issue 35 item 2).

The path side of a search (:mod:`pipeline.search.paths`) and the keywords it looks up one by
one (:mod:`pipeline.search.keywords`) are compared with OpenClaw's own ``searchPathKeyword``,
``extractKeywords`` and its keyword merge, run under Node from the installed package on
OpenClaw's own schema (``tests/openclaw_paths.mjs``), for the same files and queries. Then,
end to end: "kubernetes" finds ``memory/kubernetes-upgrade.md`` in keyword, vector and hybrid
search, through ``Memory`` and the CLI; path hits rank against text hits as OpenClaw ranks
them; and a schema-7 store gains the index when opened, nothing embedded again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.memory import Memory
from pipeline.search import keywords, paths
from pipeline.search.hybrid import search_store
from pipeline.store import reads, schema
from pipeline.store.engine import connect
from pipeline.store.schema import open_store
from tests.conftest import run_memq
from tests.searchkit import QueryVector, build
from tests.tools import run_oracle

ORACLE = Path(__file__).with_name("openclaw_paths.mjs")


def openclaw(cases: dict[str, Any]) -> dict[str, Any]:
    """OpenClaw's answers to ``cases`` (see the script's header)."""
    return run_oracle(ORACLE, cases)  # type: ignore[return-value]


KEYWORD_CASES = [
    "that thing we discussed about the API", "kubernetes upgrade", "how do we upgrade k8s?",
    "之前讨论的那个方案", "会议记录", "プロジェクトの会議メモ", "회의에서 결정한 내용",
    "qué pasó con el despliegue", "o que aconteceu ontem", "ما هو الخادم", "2024 10 ab abc",
    "rate-limit, retries & back-off!", "Über die Ideen", "   ", "---", "e-mail_setup v2.1",
]


def test_keywords_are_openclaws() -> None:
    expected = openclaw({"keywords": KEYWORD_CASES})["keywords"]
    assert [keywords.extract_keywords(q) for q in KEYWORD_CASES] == expected
    assert ["discussed", "api"] in expected  # stop words dropped, as OpenClaw does


FILES = {
    "MEMORY.md": "- The gateway listens on loopback.\n",
    "memory/kubernetes-upgrade.md": "# Plan\n\nDrain the nodes one at a time.\n",
    "memory/2026-01-02.md": "# Day\n\nLunch with Sam.\n",
    "memory/notes/café-plans.md": "# Plans\n\nOpen on Mondays.\n",
    "memory/projects/deploy-notes.md": "# Deploy\n\nRoll back with the previous tag.\n",
    "memory/deploy.md": "# Notes\n\nSee the checklist.\n",
    "memory/ops/k8s_cluster.md": "# Cluster\n\nThree control nodes.\n",
    "memory/会议记录.md": "# 记录\n\n周一开会。\n",
    "memory/Über-Ideen.md": "# Ideen\n\nMehr schlafen.\n",
    "memory/docs/4983.md": "# Doc\n\nAn abstract.\n",
    "memory/rate-limit.md": "# Limits\n\n100 requests a minute.\n",
    "memory/notes.md": "# Notes\n\nMisc.\n",
}
QUERIES = [
    ("kubernetes", 24), ("Kubernetes upgrade", 24), ("how do we upgrade kubernetes", 24),
    ("upgrade kubernetes checklist", 24), ("café", 24), ("cafe", 24), ("CAFÉ plans", 24),
    ("deploy notes", 24), ("deploy-notes.md", 24), ("notes", 24), ("notes", 1),
    ("k8s_cluster", 24), ("cluster", 24), ("会议", 24), ("会议记录", 24), ("über", 24),
    ("ideen", 24), ("4983", 24), ("rate limit", 24), ("memory", 24), ("memory", 3),
    ("MEMORY.md", 24), ("nothing here", 24), ("the", 24), ("memory/deploy.md", 24),
    ("Über-Ideen.md", 24), ("./memory/notes.md", 24), ("plans for the café", 2),
]


@pytest.fixture
def named(tmp_path: Path, make_settings: Any) -> Any:
    """A keyword-only store of :data:`FILES` (one chunk each), indexed by the producer."""
    db, settings = build(tmp_path / "ws", make_settings, FILES)
    yield db, settings
    db.close()


def test_the_path_side_is_openclaws(named: Any) -> None:
    """Which files a query names, how exactly, and their path scores (BM25 of the path as
    ``r/(1+r)``, 1 for a non-ASCII word found inside the path), with OpenClaw's per-keyword
    lookups and its cut to ``limit`` files that are not exact matches."""
    db, _ = named
    cases = {"workspaces": [{"files": [[p, "memory"] for p in FILES],
                             "queries": [{"query": q, "limit": n} for q, n in QUERIES]}]}
    theirs = openclaw(cases)["workspaces"][0]
    for (query, limit), want in zip(QUERIES, theirs, strict=True):
        got = paths.path_matches(db, query, limit, None)
        assert {m.path: m.specificity for m in got} == {
            h["path"]: h["exactPathSpecificity"] for h in want}, query
        for m in got:
            score = next(h["pathScore"] for h in want if h["path"] == m.path)
            assert m.score == pytest.approx(score, rel=1e-9, abs=1e-15), (query, m.path)
    by_query = dict(zip([q for q, _ in QUERIES], theirs, strict=False))
    kube = by_query["kubernetes"]
    assert [h["path"] for h in kube] == ["memory/kubernetes-upgrade.md"]
    assert by_query["café"][0]["pathScore"] == 1  # a substring match of a non-ASCII word
    assert by_query["nothing here"] == [] and by_query["the"] == []
    assert {h["exactPathSpecificity"] for q in theirs for h in q} == {0, 1, 2, 3}


def test_a_query_naming_no_file_asks_the_store_once(named: Any) -> None:
    """One statement tells whether a file has the query's name and which path-index lookups
    can find a file; those that cannot are not made, and a statement the store refuses sends
    every lookup to ask alone (as before)."""
    db, _ = named
    asked: list[str] = []
    db.conn.set_trace_callback(asked.append)
    try:
        assert paths.path_matches(db, "how do we migrate the postgres cluster", 24, None) == [
            m for m in paths.path_matches(db, "cluster", 24, None)]
        asked.clear()
        assert paths.path_matches(db, "postgres migration runbook", 24, None) == []
        mine = [sql for sql in asked if not sql.startswith("--")]  # not FTS5's own
        assert len(mine) == 1 and mine[0].count("paths_fts MATCH") == 4  # the probe alone
    finally:
        db.conn.set_trace_callback(None)
    assert reads.path_probe(db, "deploy.md", ['"kubernetes"', '"postgres"'], None) == (
        True, {'"kubernetes"'})
    assert reads.path_probe(db, "deploy", ['"kubernetes"'], ["sessions"]) == (False, set())
    assert reads.path_probe(db, "nothing", [], None) == (False, set())
    assert reads.path_probe(db, None, ['"kubernetes"', "AND AND"], None) is None


# --- end to end -------------------------------------------------------------------------------

NOTES = {
    "memory/kubernetes-upgrade.md": "# Plan\n\nDrain the nodes one at a time, then bump the "
                                    "control plane.\n",
    "memory/2026-01-02.md": "# Day\n\nLunch with Sam about the garden.\n",
    "MEMORY.md": "- The gateway listens on loopback port 18789.\n",
    "memory/ops.md": "# Ops\n\nRotate the API keys every quarter.\n",
}


def _oracle_score(query: str) -> float:
    """OpenClaw's keyword score of the kubernetes note for ``query`` over :data:`NOTES`."""
    out = openclaw({"workspaces": [{"files": [[p, "memory"] for p in NOTES],
                                    "queries": [{"query": query, "limit": 24}]}]})
    return next(h["score"] for h in out["workspaces"][0][0]
                if h["path"] == "memory/kubernetes-upgrade.md")


def test_kubernetes_finds_the_note_by_its_name_in_every_mode(tmp_path: Path,
                                                            make_settings: Any) -> None:
    """The word is only in the file name. Keyword-only (no provider): the path score,
    OpenClaw's 0.44 on these four files, above minScore; hybrid and vector-only (a provider):
    found too (below minScore, in a free slot, as OpenClaw fills them with keyword hits)."""
    want = round(_oracle_score("kubernetes"), 6)
    db, settings = build(tmp_path / "ws", make_settings, NOTES,
                         dict(zip(NOTES, (0.1, 0.2, 0.3, 0.25), strict=True)))
    try:
        keyword = search_store(db, settings, "kubernetes")
        assert [(h.path, h.score) for h in keyword] == [("memory/kubernetes-upgrade.md", want)]
        hybrid = search_store(db, settings, "kubernetes", provider=QueryVector())
        assert "memory/kubernetes-upgrade.md" in [h.path for h in hybrid]
        kube = next(h for h in hybrid if h.path == "memory/kubernetes-upgrade.md")
        assert kube.score == pytest.approx(0.7 * 0.1 + 0.3 * want, abs=2e-6)
        vector_only = make_settings(settings.workspace, provider="none",
                                    query={"hybrid": {"enabled": False}})
        vector = search_store(db, vector_only, "kubernetes", provider=QueryVector())
        assert [h.path for h in vector] == ["memory/kubernetes-upgrade.md"]
        assert vector[0].score == pytest.approx(0.1, abs=2e-6)  # its cosine: a vector search
        # a longer question still names it (one of its keywords), and a text hit outranks it
        both = search_store(db, settings, "kubernetes garden", min_score=0)
        assert [h.path for h in both][:2] == ["memory/2026-01-02.md",
                                              "memory/kubernetes-upgrade.md"]
    finally:
        db.close()


def test_memory_and_cli_find_it(tmp_path: Path, make_settings: Any) -> None:
    """Through the front door and the real CLI, keyword-only (no provider configured)."""
    db, settings = build(tmp_path / "ws", make_settings, NOTES)
    db.close()
    with Memory(settings=settings) as memory:
        hits = memory.search("kubernetes", sync=False).to_dict()["results"]
    assert [h["path"] for h in hits] == ["memory/kubernetes-upgrade.md"]
    done = run_memq("search", "kubernetes", "--json", "--config", str(settings.config_file),
                    "--workspace", str(settings.workspace), timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)["results"]
    assert [(h["path"], h["score"]) for h in out] == [(hits[0]["path"], hits[0]["score"])]


def test_an_older_store_gains_the_path_index_without_embedding_again(
        tmp_path: Path, make_settings: Any) -> None:
    """A schema-7 store (no ``paths_fts``) is given the index when opened, filled from its
    files in place: every chunk keeps its row and vector, nothing is marked changed, and the
    index follows later writes (a new file, a deleted one)."""
    db, settings = build(tmp_path / "ws", make_settings, NOTES,
                         {p: 0.5 for p in NOTES})
    try:
        db.conn.executescript("DROP TRIGGER paths_fts_insert; DROP TRIGGER paths_fts_update; "
                              "DROP TRIGGER paths_fts_delete; DROP TABLE paths_fts; "
                              "UPDATE meta SET value = '7' WHERE key = 'schema_version';")
        rows = db.conn.execute("SELECT id, rowid, state FROM chunks ORDER BY rowid").fetchall()
        files = db.conn.execute("SELECT path, hash, size FROM files ORDER BY path").fetchall()
    finally:
        db.close()
    db = open_store(settings.store.path)
    try:
        assert schema.get_meta(db, "schema_version") == schema.SCHEMA_VERSION == 8
        assert db.conn.execute("SELECT id, rowid, state FROM chunks ORDER BY rowid"
                               ).fetchall() == rows
        assert db.conn.execute("SELECT path, hash, size FROM files ORDER BY path"
                               ).fetchall() == files
        assert sorted(p for (p,) in db.conn.execute("SELECT path FROM paths_fts")) == sorted(
            p for p, _, _ in files)
        assert [m.path for m in paths.path_matches(db, "kubernetes", 6, None)] == [
            "memory/kubernetes-upgrade.md"]
        from pipeline.store import writer
        writer.delete_file(db, "memory/kubernetes-upgrade.md")
        assert paths.path_matches(db, "kubernetes", 6, None) == []
        assert db.conn.execute("SELECT count(*) FROM paths_fts").fetchone()[0] == len(files) - 1
    finally:
        db.close()


def test_no_fts5_keeps_exact_names_and_drops_the_index_triggers(tmp_path: Path,
                                                              make_settings: Any) -> None:
    """Where SQLite has no FTS5 the path index is left out (its triggers would fail every
    write): exact names still find files by their keys."""
    db, settings = build(tmp_path / "ws", make_settings, NOTES)
    db.close()
    db = connect(settings.store.path)
    try:
        db.fts_ok = False
        schema.ensure_schema(db)
        triggers = {n for (n,) in db.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        assert not any(n.startswith("paths_fts") for n in triggers)
        found = paths.path_matches(db, "kubernetes-upgrade", 6, None)
        assert [(m.path, m.specificity) for m in found] == [("memory/kubernetes-upgrade.md", 1)]
        assert paths.path_matches(db, "kubernetes", 6, None) == []
    finally:
        db.close()


# --- path hits against text hits: OpenClaw's merge on the same inputs -------------------------

MERGE_NOTES = {**NOTES, "memory/garden-plans.md": "# Spring\n\nTomatoes by the fence.\n",
               "memory/drain-checklist.md": "# Drain\n\nCordon first, then drain the node.\n"}
#: The kubernetes note is orthogonal to the query: outside the vector side's top 3.
COSINES = dict(zip(MERGE_NOTES, (0.0, 0.2, 0.3, 0.25, 0.55, 0.15), strict=True))
MERGE_QUERIES = ["kubernetes", "kubernetes garden", "kubernetes drain", "garden",
                 "garden-plans", "ops.md", "rotate keys kubernetes", "drain node checklist"]


def _openclaw_inputs(db: Any, query: str, candidates: int) -> tuple[list, list]:
    """The vector and keyword hits memq's retrievers give for ``query``, in OpenClaw's shape
    (keyword hits as its ``mergeKeywordSearchHits`` leaves them: a chunk's score is its text
    score when its text matched, else its path score, 1 for an exact name). The vector hits
    include the cosines memq looks up for keyword hits the vector side did not return (memq's
    documented difference: OpenClaw scores their vector side 0)."""
    from pipeline.search import fusion, retrievers
    from pipeline.store import reads

    query_vector = QueryVector().embed_query(query)
    vector = retrievers.rescored(db, retrievers.vector_hits(db, query_vector, candidates, None),
                                 query_vector)
    body = fusion.share_of_best(retrievers.keyword_hits(db, query, candidates, None))
    named = {m.rowid: m for m in paths.path_matches(db, query, candidates, None)}
    vector.update(retrievers.cosine_for(db, [r for r in body.keys() | named.keys()
                                             if r not in vector], query_vector))
    rows = reads.chunk_rows(db, list(vector.keys() | body.keys() | named.keys()))

    def hit(rowid: int) -> dict[str, Any]:
        path, start, end, _, _ = rows[rowid]
        return {"id": str(rowid), "path": path, "startLine": start, "endLine": end}

    keyword = []
    for rowid in body.keys() | named.keys():
        m = named.get(rowid)
        path_score = m.score if m else 0.0
        if rowid in body:
            entry = {"textScore": body[rowid], "score": body[rowid], "hasBodyMatch": True}
        else:
            entry = {"textScore": 0, "score": 1 if m and m.specificity else path_score,
                     "hasBodyMatch": False}
        keyword.append({**hit(rowid), **entry, "pathScore": path_score,
                        "exactPathSpecificity": paths.exact_path_specificity(
                            query, rows[rowid][0])})
    return [{**hit(r), "score": s} for r, s in vector.items()], keyword


def test_path_hits_rank_against_text_hits_as_openclaws_merge_ranks_them(
        tmp_path: Path, make_settings: Any) -> None:
    """Hybrid (0.7/0.3, minScore 0.35, 3 results from 3 candidates a side, MMR and decay
    off): memq's answer equals
    OpenClaw's ``mergeHybridResults`` + ``selectHybridSearchResults`` given the same vector and
    keyword hits: a path hit's keyword score is its path score unless its text matched, exact
    names lead, and hits under minScore fill free slots."""
    plain = {"hybrid": {"mmr": {"enabled": False}, "temporalDecay": {"enabled": False},
                        "candidateMultiplier": 1}}
    db, settings = build(tmp_path / "ws", make_settings, MERGE_NOTES, COSINES, query=plain)
    try:
        cases, ours = [], []
        for query in MERGE_QUERIES:
            vector, keyword = _openclaw_inputs(db, query, 3)
            cases.append({"query": query, "vector": vector, "keyword": keyword,
                          "vectorWeight": 0.7, "textWeight": 0.3, "minScore": 0.35,
                          "maxResults": 3})
            ours.append([(h.path, h.start_line, h.score) for h in search_store(
                db, settings, query, provider=QueryVector(), max_results=3)])
    finally:
        db.close()
    theirs = openclaw({"merges": cases})["merges"]
    for query, mine, want in zip(MERGE_QUERIES, ours, theirs, strict=True):
        assert [(p, s) for p, s, _ in mine] == [(h["path"], h["startLine"]) for h in want], query
        assert [sc for _, _, sc in mine] == pytest.approx([h["score"] for h in want],
                                                          abs=2e-6), query
    answers = {q: [h["path"] for h in t] for q, t in zip(MERGE_QUERIES, theirs, strict=True)}
    # the cases do cover: a name-only hit filling a free slot, under a text hit, an exact name
    assert answers["kubernetes"] == ["memory/garden-plans.md", "memory/kubernetes-upgrade.md"]
    assert answers["kubernetes garden"][1:] == ["memory/2026-01-02.md",
                                                "memory/kubernetes-upgrade.md"]
    assert answers["garden-plans"][0] == "memory/garden-plans.md"
