"""The embedding cache: vectors keyed by (provider, model, provider key, chunk text hash).

A chunk whose text was embedded before by the same model never goes to a queue again, even after
the file moved, was deleted and restored, or the index was rebuilt. Vectors are float32 blobs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from pipeline.store.engine import Database
from pipeline.store.schema import set_meta, transaction
from pipeline.store.vectors import from_blob, to_blob

LOOKUP_BATCH = 400


def get_cached(
    db: Database, provider: str, model: str, provider_key: str, hashes: Iterable[str]
) -> dict[str, np.ndarray]:
    """Cached vectors for the given text hashes (missing hashes are simply absent)."""
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
    return found


def put_cached(
    db: Database, provider: str, model: str, provider_key: str, vectors: Mapping[str, np.ndarray]
) -> None:
    """Upsert vectors by text hash; refreshes ``updated_at`` so pruning drops the least recent."""
    now = time.time()
    db.conn.executemany(
        "INSERT INTO embedding_cache(provider, model, provider_key, hash, embedding, dims, "
        "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET "
        "embedding = excluded.embedding, dims = excluded.dims, updated_at = excluded.updated_at",
        [
            (provider, model, provider_key, h, to_blob(v), int(np.asarray(v).shape[-1]), now)
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
        "ORDER BY updated_at LIMIT ?)",
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
            conn.execute("INSERT OR IGNORE INTO main.embedding_cache "
                         "SELECT * FROM seed.embedding_cache")
    finally:
        db.conn.execute("DETACH DATABASE seed")
