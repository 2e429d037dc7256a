"""The embedding cache: vectors keyed by (provider, model, provider key, chunk text hash).

A chunk whose text was embedded before by the same model never goes to a queue again, even after
the file moved, was deleted and restored, or the index was rebuilt. Vectors are float32 blobs.

Every write and every hit sets the row's ``last_used``; :func:`prune_cache` keeps the
``cache.maxEntries`` most recently used rows (OpenClaw's docs: least recently used eviction).
With ``cache.enabled = false`` the callers neither look up nor store anything here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pipeline.store.engine import Database
from pipeline.store.schema import set_meta, transaction
from pipeline.store.vectors import from_blob, to_blob

# Pruning needs no NumPy (an index pass with nothing to embed prunes); storing does, through
# the vector codec (:func:`~pipeline.store.vectors.to_blob`), which imports it when it runs.
if TYPE_CHECKING:
    import numpy as np

LOOKUP_BATCH = 400


def get_cached(
    db: Database, provider: str, model: str, provider_key: str, hashes: Iterable[str]
) -> dict[str, np.ndarray]:
    """Cached vectors for the given text hashes (missing hashes are simply absent); the hits'
    ``last_used`` becomes now, so pruning keeps them over rows nobody asked for since."""
    wanted = list(dict.fromkeys(hashes))
    found: dict[str, np.ndarray] = {}
    for start in range(0, len(wanted), LOOKUP_BATCH):
        part = wanted[start : start + LOOKUP_BATCH]
        marks = ",".join("?" * len(part))
        rows = db.conn.execute(
            "SELECT hash, embedding FROM embedding_cache WHERE provider = ? AND model = ? "
            f"AND provider_key = ? AND hash IN ({marks})",
            (provider, model, provider_key, *part),
        ).fetchall()
        found.update((h, from_blob(blob)) for h, blob in rows)
    if found:
        _touch(db, provider, model, provider_key, list(found))
    return found


def _touch(db: Database, provider: str, model: str, provider_key: str, hashes: list[str]
           ) -> None:
    now = time.time()
    with transaction(db) as conn:
        for start in range(0, len(hashes), LOOKUP_BATCH):
            part = hashes[start : start + LOOKUP_BATCH]
            marks = ",".join("?" * len(part))
            conn.execute(
                "UPDATE embedding_cache SET last_used = ? WHERE provider = ? AND model = ? "
                f"AND provider_key = ? AND hash IN ({marks})",
                (now, provider, model, provider_key, *part))


def put_cached(
    db: Database, provider: str, model: str, provider_key: str, vectors: Mapping[str, np.ndarray]
) -> None:
    """Upsert vectors by text hash; ``updated_at`` and ``last_used`` become now."""
    import numpy as np

    now = time.time()
    db.conn.executemany(
        "INSERT INTO embedding_cache(provider, model, provider_key, hash, embedding, dims, "
        "updated_at, last_used) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET "
        "embedding = excluded.embedding, dims = excluded.dims, updated_at = excluded.updated_at, "
        "last_used = excluded.last_used",
        [
            (provider, model, provider_key, h, to_blob(v), int(np.asarray(v).shape[-1]), now,
             now)
            for h, v in vectors.items()
        ],
    )


def prune_cache(db: Database, max_entries: int | None) -> int:
    """Keep at most ``max_entries`` rows, dropping the least recently used; returns rows removed."""
    if max_entries is None:
        return 0
    total = db.conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]
    excess = total - max_entries
    if excess <= 0:
        return 0
    db.conn.execute(
        "DELETE FROM embedding_cache WHERE (provider, model, provider_key, hash) IN ("
        "SELECT provider, model, provider_key, hash FROM embedding_cache "
        "ORDER BY last_used LIMIT ?)",
        (excess,),
    )
    return excess


def seed_from(db: Database, source: str, *, meta: Mapping[str, Any]) -> None:
    """Copy every cached vector of the store file ``source`` into ``db`` (a new generation),
    with ``meta`` set, in one transaction: texts embedded before cost nothing again."""
    db.conn.execute("ATTACH DATABASE ? AS seed", (source,))
    try:
        with transaction(db) as conn:
            for key, value in meta.items():
                set_meta(db, key, value)
            columns = {row[1] for row in
                       conn.execute("PRAGMA seed.table_info(embedding_cache)")}
            last_used = "last_used" if "last_used" in columns else "updated_at"
            conn.execute("INSERT OR IGNORE INTO main.embedding_cache(provider, model, "
                         "provider_key, hash, embedding, dims, updated_at, last_used) "
                         "SELECT provider, model, provider_key, hash, embedding, dims, "
                         f"updated_at, {last_used} FROM seed.embedding_cache")
    finally:
        db.conn.execute("DETACH DATABASE seed")
