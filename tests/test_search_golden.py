"""Ranking pinned end to end: every mode's hits on a generated store, against recorded output.

A store of 90 generated notes (dated memory notes, evergreen ones, files whose names the
queries mention, annotated entries, a few long enough for several chunks) gets seeded random
vectors; 14 queries run in each search mode (weighted hybrid with MMR and temporal decay, the
same down to ``minScore`` 0, reciprocal rank fusion, vector-only, keyword-only), through the
in-memory copies and through SQLite alone. Every hit's path, lines, score, the two sides'
scores and snippet length must equal ``data/search_golden.json``, recorded from the
implementation before the hot path was reworked for speed (commit 5fcdcd4): a change to the
order, the choice or the scores of hits fails here, whichever stage it comes from.
"""

from __future__ import annotations

import json
import os
import random
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.config import Settings, load_settings
from pipeline.embeddings.registry import ProviderChoice
from pipeline.ingest.producer import sync_files
from pipeline.search.hybrid import HeldCopies, search_store
from pipeline.store.engine import Database, connect
from pipeline.store.vectors import put_vectors

GOLDEN = Path(__file__).parent / "data" / "search_golden.json"
DIMS = 24
NOW = 1_790_000_000.0  # 2026-09-21: what decay measures ages from
WORDS = ["postgres", "migration", "berlin", "latency", "outage", "alice", "licence", "flight",
         "kafka", "dashboard", "holiday", "credentials", "disk", "invalidation", "rotation",
         "runbook", "budget", "osaka", "vacuum", "spike", "cache", "deploy", "review", "team"]
QUERIES = ["postgres migration", "kafka outage runbook", "Berlin flight holiday", "latency",
           "disk vacuum spike", "alice budget review", "credentials rotation", "kafka",
           "runbook.md", "memory/topics/kafka.md", "deploy", "cache invalidation latency team",
           "osaka", "licence dashboard"]
MODES: dict[str, dict[str, Any]] = {
    "weighted": {},
    "weighted-min0": {"minScore": 0},
    "rrf": {"hybrid": {"fusion": "rrf"}},
    "vector-only": {"hybrid": {"enabled": False}},
    "plain": {"hybrid": {"mmr": {"enabled": False}, "temporalDecay": {"enabled": False}},
              "minScore": 0.1},
}


class SeededQueries:
    """Query embeddings: a unit vector per query text, seeded by the text, no model."""

    name = "stub"
    model = "stub"

    def embed_query(self, text: str) -> np.ndarray:
        rng = np.random.default_rng(zlib.crc32(text.encode()))
        vector = rng.standard_normal(DIMS).astype(np.float32)
        return vector / np.linalg.norm(vector)


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) + "."


def write_notes(ws: Path) -> None:
    """90 notes under ``ws`` with fixed modification times (see module doc)."""
    rng = random.Random(37)
    notes: dict[str, str] = {"MEMORY.md": "\n".join(_sentence(rng) for _ in range(6))}
    for i in range(40):
        notes[f"memory/2026-{1 + i % 9:02d}-{1 + i % 27:02d}-n{i}.md"] = "\n".join(
            f"- {_sentence(rng)}" for _ in range(rng.randint(2, 8)))
    for word in WORDS[:12]:
        notes[f"memory/topics/{word}.md"] = f"# {word}\n\n" + "\n".join(
            _sentence(rng) for _ in range(3))
    for i in range(30):
        notes[f"memory/people/p{i}.md"] = "\n".join(_sentence(rng) for _ in range(4))
    for i in range(5):  # several chunks each
        notes[f"memory/long/l{i}.md"] = "\n\n".join(
            f"## part {j}\n" + "\n".join(_sentence(rng) for _ in range(12)) for j in range(12))
    notes["memory/runbook.md"] = "# runbook\n<!-- importance: 5 -->\n" + _sentence(rng)
    notes["memory/deploy-notes.md"] = "<!-- importance: 1 -->\n" + _sentence(rng)
    for n, (rel, text) in enumerate(sorted(notes.items())):
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
        stamp = NOW - 86400.0 * (3 + 11 * n % 200)
        os.utime(path, (stamp, stamp))


def build(tmp: Path) -> tuple[Database, dict[str, Settings]]:
    """The synced store with a seeded vector per chunk, and settings per mode."""
    ws = tmp / "ws"
    write_notes(ws)
    settings: dict[str, Settings] = {}
    for mode, query in MODES.items():
        cfg = tmp / f"memq-{mode}.json"
        hybrid = query.get("hybrid", {})
        # recorded with OpenClaw's decay, the default until superseded recency (issue 36)
        pinned = {**query, "hybrid": {**hybrid, "temporalDecay": {
            "mode": "decay", **hybrid.get("temporalDecay", {})}}}
        cfg.write_text(json.dumps({"provider": "none", "store": {"path": str(tmp / "s.sqlite")},
                                   "query": pinned}), encoding="utf-8")
        settings[mode] = load_settings(config_file=cfg, workspace=ws, env={})
    db = connect(settings["weighted"].store.path)
    sync_files(db, settings["weighted"], ProviderChoice(None, None, "test"))
    rowids = [r for (r,) in db.conn.execute("SELECT rowid FROM chunks ORDER BY path, start_line")]
    vectors = np.random.default_rng(11).standard_normal((len(rowids), DIMS)).astype(np.float32)
    put_vectors(db, rowids, vectors)
    db.conn.execute("UPDATE chunks SET state = 'ready'")
    return db, settings


def observed(tmp: Path) -> dict[str, list[list[Any]]]:
    """Every query's hits in every mode, keyed ``mode|path|query`` (path: held or sqlite)."""
    db, settings = build(tmp)
    held = HeldCopies()
    held.matrices.get(db)
    held.text_stats.current(db)
    held.text_stats.wait()
    assert held.text_stats.current(db) is not None
    held.rows.get(db)  # the chunk rows too: the held searches touch no chunk row in SQLite
    assert held.current_rows(db, held.versions(db)) is not None
    out: dict[str, list[list[Any]]] = {}
    try:
        for mode, chosen in settings.items():
            for copies in (held, None):
                for query in QUERIES:
                    for provider in (SeededQueries(), None) if mode == "weighted" else (
                            SeededQueries(),):
                        hits = search_store(db, chosen, query, provider=provider, now=NOW,
                                            held=copies)
                        key = (f"{mode if provider else 'keyword-only'}|"
                               f"{'held' if copies else 'sqlite'}|{query}")
                        out[key] = [[h.path, h.start_line, h.end_line, h.score, h.vector_score,
                                     h.text_score, len(h.snippet)] for h in hits]
    finally:
        held.close()
        db.close()
    return out


def _same(got: list[Any], want: list[Any]) -> bool:
    """One hit: equal places and snippet length, scores equal to float noise."""
    if got[:3] != want[:3] or got[6] != want[6]:
        return False
    return all((g is None) == (w is None) and (g is None or abs(g - w) <= 2e-6)
               for g, w in zip(got[3:6], want[3:6], strict=True))


def test_every_mode_ranks_as_recorded(tmp_path: Path) -> None:
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    got = observed(tmp_path)
    assert sorted(got) == sorted(want)
    assert sum(len(hits) for hits in want.values()) > 500  # the record is not empty
    for key, hits in want.items():
        assert len(got[key]) == len(hits), key
        assert all(_same(g, w) for g, w in zip(got[key], hits, strict=True)), (key, got[key],
                                                                             hits)
