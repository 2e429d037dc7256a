"""The held hybrid search's ranking over arrays (:mod:`pipeline.search.fused`) gives the hits
and scores the general path gives (fusion, decay, entry weights, the selection and MMR one
candidate at a time), on random stores, for many queries and settings."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from pipeline.results import INVALID_PROJECT_KEY
from pipeline.search import fused
from pipeline.search.hybrid import HeldCopies, search_store
from pipeline.store import schema, writer
from pipeline.store.engine import connect
from pipeline.store.topk import kth_largest
from tests.searchkit import DIMS, build

WORDS = ["garden", "tomato", "basil", "invoice", "kafka", "postgres", "berlin", "osaka",
         "flight", "budget", "runbook", "outage", "latency", "vacuum", "spike", "rotation",
         "holiday", "licence", "dashboard", "credentials", "migration", "deploy", "alice",
         "bob", "carol", "meeting", "review", "sprint"]
NOW = 1_796_000_000.0  # 2026-11-30


class RandomQueries:
    """An embedding provider for queries only: a fixed random unit vector per query text."""

    name = "stub"
    model = "stub"

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.vectors: dict[str, np.ndarray] = {}

    def embed_query(self, text: str) -> np.ndarray:
        if text not in self.vectors:
            v = self.rng.standard_normal(DIMS).astype(np.float32)
            self.vectors[text] = v / np.linalg.norm(v)
        return self.vectors[text]


def _paragraph(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9)))


def _notes(rng: random.Random) -> dict[str, str]:
    """Dated notes (decay by name), notes named like a date that is none (decay by mtime),
    evergreen notes and MEMORY.md; paragraphs repeated across notes (near duplicates for
    MMR)."""
    shared = [_paragraph(rng) for _ in range(6)]
    paths = ([f"memory/2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}-{i}.md"
              for i in range(14)]
             + [f"memory/2026-02-{30 + i % 2}-x{i}.md" for i in range(6)]
             + [f"memory/topic-{i}.md" for i in range(8)] + ["MEMORY.md"])
    notes = {}
    for n, path in enumerate(paths):
        parts = [rng.choice(shared) if rng.random() < 0.3 else _paragraph(rng)
                 for _ in range(rng.randint(1, 4))]
        notes[path] = "\n\n".join(parts) + f"\n\nnote {n}\n"
    return notes


def _store(ws: Path, make_settings, seed: int, **config: object):
    rng = random.Random(seed)
    notes = _notes(rng)
    db, settings = build(ws, make_settings, notes, chunking={"tokens": 24, "overlap": 0},
                         **config)
    rows = db.conn.execute("SELECT rowid, id, hash, text FROM chunks").fetchall()
    vectors = np.random.default_rng(seed).standard_normal((len(rows), DIMS)).astype(np.float32)
    writer.attach_cached(db, [writer.PendingChunk(r, i, h, t) for r, i, h, t in rows],
                         {h: v for (_, _, h, _), v in zip(rows, vectors, strict=True)})
    with schema.transaction(db) as conn:
        conn.execute(  # modification times over the past year
            "UPDATE files SET mtime_ns = ? - rowid * ?",
                     (int(NOW * 1e9), 86400 * 10**9 * 11))
        for rowid, *_ in rows:
            roll = rng.random()
            if roll < 0.2:
                conn.execute("UPDATE chunks SET importance = ? WHERE rowid = ?",
                             (rng.randint(1, 10), rowid))
            elif roll < 0.3:
                conn.execute("UPDATE chunks SET project_key = ? WHERE rowid = ?",
                             (rng.choice(["alpha", "alpha; beta", "beta"]), rowid))
            elif roll < 0.33:
                conn.execute("UPDATE chunks SET project_key = ? WHERE rowid = ?",
                             (INVALID_PROJECT_KEY, rowid))
    return db, settings


def _queries(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.sample(WORDS, rng.randint(1, 3))) for _ in range(count)]


CONFIGS = [
    {"temporalDecay": {"enabled": True, "halfLifeDays": 30, "mode": "decay"},
     "mmr": {"enabled": True}},
    {"temporalDecay": {"enabled": True, "halfLifeDays": 90, "minFactor": 0.3, "mode": "decay"},
     "mmr": {"enabled": True, "lambda": 0.5}},
    {"temporalDecay": {"enabled": False}, "mmr": {"enabled": False}},
    # superseded recency (the default mode), at a threshold random vectors clear often
    {"temporalDecay": {"enabled": True, "mode": "superseded", "similarity": 0.1},
     "mmr": {"enabled": False}},
]


def _hits(db, settings, query, provider, held, **kw):
    return [(h.path, h.start_line, h.score, h.vector_score, h.text_score)
            for h in search_store(db, settings, query, provider=provider, held=held, now=NOW,
                                  **kw)]


@pytest.mark.parametrize("seed", [1, 2])
def test_the_fused_ranking_is_the_general_one(tmp_path: Path, make_settings, monkeypatch,
                                              seed: int) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    db, _ = _store(ws, make_settings, seed)
    calls = []
    rank = fused.rank
    monkeypatch.setattr(fused, "rank", lambda *a, **k: calls.append(1) or rank(*a, **k))
    fast, general = HeldCopies(), HeldCopies(fused=False)
    provider = RandomQueries(seed)
    decayed = compared = 0
    superseded = 0  # searches where superseded recency changed the scores
    try:
        for held in (fast, general):
            held.matrices.get(db)
            held.text_stats.get(db)
            held.rows.get(db)
        for config in CONFIGS:
            settings = make_settings(ws, provider="none", query={"hybrid": config},
                                     chunking={"tokens": 24, "overlap": 0})
            plain = make_settings(ws, provider="none", query={"hybrid": {
                **config, "mmr": {"enabled": False}, "temporalDecay": {"enabled": False}}},
                chunking={"tokens": 24, "overlap": 0})
            for n, query in enumerate(_queries(seed, 60)):
                kw = {"min_score": [0.0, 0.2, None][n % 3],
                      "projects": [None, ["alpha"]][n % 2], "max_results": 4 + n % 5}
                before = len(calls)
                got = _hits(db, settings, query, provider, fast, **kw)
                assert len(calls) == before + 1, "the fused ranking did not run"
                want = _hits(db, settings, query, provider, general, **kw)
                assert len(calls) == before + 1
                assert got == want, query
                compared += bool(got)
                bare = _hits(db, plain, query, provider, general, **kw)
                changed = [h[2] for h in bare] != [h[2] for h in want]
                decayed += changed
                superseded += changed and config["temporalDecay"].get("mode") == "superseded"
        # the comparisons covered what decay, superseded recency, weights and MMR change
        assert compared > 100 and decayed > 20 and superseded > 5
    finally:
        fast.close()
        general.close()
        db.close()


def test_mmr_and_decay_change_the_fused_hits(tmp_path: Path, make_settings) -> None:
    """The fused path applies MMR and decay: switching either off changes its hits."""
    ws = tmp_path / "ws"
    ws.mkdir()
    db, _ = _store(ws, make_settings, 3)
    held = HeldCopies()
    provider = RandomQueries(3)
    try:
        held.matrices.get(db)
        held.text_stats.get(db)
        held.rows.get(db)
        hybrid = {"temporalDecay": {"enabled": True, "halfLifeDays": 30, "mode": "decay"},
                  "mmr": {"enabled": True, "lambda": 0.3}}
        both = make_settings(ws, provider="none", query={"hybrid": hybrid},
                             chunking={"tokens": 24, "overlap": 0})
        no_mmr = make_settings(ws, provider="none", chunking={"tokens": 24, "overlap": 0},
                               query={"hybrid": {**hybrid, "mmr": {"enabled": False}}})
        no_decay = make_settings(ws, provider="none", chunking={"tokens": 24, "overlap": 0},
                                 query={"hybrid": {**hybrid,
                                                   "temporalDecay": {"enabled": False}}})
        queries = _queries(3, 40)
        runs = {name: [_hits(db, s, q, provider, held, min_score=0.0) for q in queries]
                for name, s in (("both", both), ("no_mmr", no_mmr), ("no_decay", no_decay))}
        assert sum(a != b for a, b in zip(runs["both"], runs["no_mmr"], strict=True)) > 3
        assert sum(a != b for a, b in zip(runs["both"], runs["no_decay"], strict=True)) > 10
    finally:
        held.close()
        db.close()


def test_kth_largest_is_the_partitions() -> None:
    rng = np.random.default_rng(5)
    for trial in range(2000):
        n = int(rng.integers(1, 3000))
        k = int(rng.integers(1, n + 1))
        values = [rng.standard_normal(n).astype(np.float32),
                  np.where(rng.random(n) < 0.3, rng.uniform(0, 5, n), 0.0),
                  rng.integers(0, 4, n).astype(np.float64), np.full(n, 0.5)][trial % 4]
        assert kth_largest(values, k) == np.partition(values, n - k)[n - k]


def test_a_copy_is_prepared_as_it_loads(tmp_path: Path, make_settings) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    db, _ = _store(ws, make_settings, 4)
    held = HeldCopies()
    try:
        copy = held.rows.get(db)
        arrays = copy.derived[fused.ARRAYS]
        assert arrays.ids.tolist() == sorted(copy.rows)
        assert fused.arrays_of(copy) is arrays
    finally:
        held.close()
        db.close()


def test_a_connection_with_no_commit_since_reuses_its_versions(tmp_path: Path, make_settings,
                                                               monkeypatch) -> None:
    """A search on a connection that saw no commit since its last search (its
    ``data_version`` and ``total_changes`` unchanged) reads no versions; a commit on another
    connection, or a write on its own, is seen by the next search."""
    ws = tmp_path / "ws"
    ws.mkdir()
    db, settings = _store(ws, make_settings, 5)
    held = HeldCopies()
    provider = RandomQueries(5)
    reads = []
    versions = HeldCopies.versions
    monkeypatch.setattr(HeldCopies, "versions",
                        lambda self, d: reads.append(1) or versions(self, d))
    query = "garden tomato"
    try:
        held.matrices.get(db)
        held.text_stats.get(db)
        held.rows.get(db)
        first = _hits(db, settings, query, provider, held, min_score=0.0)
        assert len(reads) == 1
        assert _hits(db, settings, query, provider, held, min_score=0.0) == first
        assert len(reads) == 1  # nothing committed: the versions stand
        top = db.conn.execute("SELECT rowid FROM chunks WHERE path = ? AND start_line = ?",
                              first[0][:2]).fetchone()[0]
        other = connect(db.path)
        with schema.transaction(other):  # another connection: no version changes
            other.conn.execute("UPDATE chunks SET importance = 1 WHERE rowid = ?", (top,))
        other.close()
        after = _hits(db, settings, query, provider, None, min_score=0.0)
        assert after != first
        assert _hits(db, settings, query, provider, held, min_score=0.0) == after
        assert len(reads) == 2
        held.wait()
        held.rows.get(db)  # the rows reloaded: current again
        assert _hits(db, settings, query, provider, held, min_score=0.0) == after
        assert len(reads) == 3
        with schema.transaction(db):  # the searching connection's own write
            db.conn.execute("UPDATE chunks SET importance = 10 WHERE rowid = ?", (top,))
        mine = _hits(db, settings, query, provider, None, min_score=0.0)
        assert mine != after
        assert _hits(db, settings, query, provider, held, min_score=0.0) == mine
        assert len(reads) == 4
    finally:
        held.close()
        db.close()
