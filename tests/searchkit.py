"""Build small real stores with controlled vector scores, for ranking tests.

Notes are real files synced by the producer (real chunk rows, FTS rows through the triggers).
Each note gets a unit vector whose cosine to the query vector ``e0`` is exactly the score the
test asks for, so vector scores are controlled while everything else runs for real.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from pipeline.config import Settings
from pipeline.embeddings.registry import ProviderChoice
from pipeline.ingest.producer import sync_files
from pipeline.search.hybrid import search_store
from pipeline.store import writer
from pipeline.store.engine import Database, connect

DIMS = 32


class QueryVector:
    """An embedding provider for queries only: every query embeds to ``e0``."""

    name = "stub"
    model = "stub"

    def embed_query(self, text: str) -> np.ndarray:
        vector = np.zeros(DIMS, dtype=np.float32)
        vector[0] = 1.0
        return vector


def vector_with_cosine(score: float, axis: int) -> np.ndarray:
    """A unit vector whose cosine to ``e0`` is ``score`` (the rest on its own ``axis``)."""
    vector = np.zeros(DIMS, dtype=np.float32)
    vector[0] = score
    vector[axis] = math.sqrt(max(0.0, 1.0 - score * score))
    return vector


def build(ws: Path, make_settings: Callable[..., Settings], notes: dict[str, str],
          scores: dict[str, float] | None = None, *, want_vectors: bool = True,
          axes: dict[str, int] | None = None, **config: object) -> tuple[Database, Settings]:
    """Write ``notes`` (path -> text) under ``ws``, sync them, give each a vector by ``scores``;
    ``axes`` puts some files' vectors' rest on a shared axis (path -> axis number, 1 up), so
    those chunks resemble each other; every other file has its own."""
    for rel, text in notes.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    config.setdefault("provider", "none")
    settings = make_settings(ws, **config)
    db = connect(settings.store.path, want_vectors=want_vectors)
    sync_files(db, settings, ProviderChoice(None, None, "test"))
    if scores:
        rows = db.conn.execute("SELECT rowid, id, hash, text, path FROM chunks").fetchall()
        axes = {path: n for n, path in enumerate(sorted(scores), 1)} | (axes or {})
        pending = [writer.PendingChunk(r, i, h, t) for r, i, h, t, p in rows if p in scores]
        by_hash = {h: vector_with_cosine(scores[p], axes[p]) for _, _, h, _, p in rows
                   if p in scores}
        writer.attach_cached(db, pending, by_hash)
    return db, settings


def rowid_of(db, path: str) -> int:
    """The rowid of ``path``'s first chunk in an open store."""
    return db.conn.execute("SELECT rowid FROM chunks WHERE path = ?", (path,)).fetchone()[0]


def ranked(tmp: Path, make_settings: Callable[..., Settings], notes: dict[str, str],
           question: str, cosines: dict[str, float], decay_keys: dict[str, object], now: float,
           axes: dict[str, int] | None = None) -> list[tuple[str, float]]:
    """(path, score) of every hit of a default search (minScore 0, so buried notes show; up
    to 20) for ``question`` (embedded to ``e0``) at ``now``, on a store of ``notes`` with the
    vector scores ``cosines`` (see :func:`build`) and ``query.hybrid.temporalDecay`` keys
    ``decay_keys``."""
    db, settings = build(tmp, make_settings, notes, cosines, axes=axes,
                         store={"path": str(tmp / "store" / "memq.sqlite")},
                         query={"hybrid": {"temporalDecay": decay_keys}})
    try:
        hits = search_store(db, settings, question, provider=QueryVector(), min_score=0,
                            max_results=20, now=now)
    finally:
        db.close()
    return [(hit.path, hit.score) for hit in hits]
