"""The embedding cache as OpenClaw's docs describe it: ``cache.enabled = false`` neither reads
nor writes it, and ``cache.maxEntries`` keeps the *least recently used* rows out (a hit
counts as a use), on a real store and through real index passes."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from pipeline.memory import Memory
from pipeline.store import cache, schema
from pipeline.store.engine import connect


def unit(seed: int, dims: int = 8) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(dims).astype(np.float32)
    return v / np.linalg.norm(v)


def cached_rows(path: Path) -> int:
    db = connect(path, want_vectors=False)
    try:
        return db.conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]
    finally:
        db.close()


def test_a_hit_counts_as_a_use_when_pruning(tmp_path: Path) -> None:
    db = connect(tmp_path / "s.sqlite", want_vectors=False)
    schema.ensure_schema(db)
    with schema.transaction(db):
        for i in range(10):
            cache.put_cached(db, "p", "m", "k", {f"h{i}": unit(i)})
            time.sleep(0.002)
    # h0 and h1 are the oldest writes, but a lookup uses them now.
    assert sorted(cache.get_cached(db, "p", "m", "k", ["h0", "h1", "nope"])) == ["h0", "h1"]
    with schema.transaction(db):
        assert cache.prune_cache(db, 4) == 6
    left = cache.get_cached(db, "p", "m", "k", [f"h{i}" for i in range(10)])
    assert sorted(left) == ["h0", "h1", "h8", "h9"]
    np.testing.assert_array_equal(left["h0"], unit(0))
    db.close()


def test_a_version_4_store_gains_last_used_from_updated_at(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    db = connect(path, want_vectors=False)
    schema.ensure_schema(db)
    with schema.transaction(db):
        cache.put_cached(db, "p", "m", "k", {"old": unit(1)})
    # What a version 4 store looked like: no last_used column.
    db.conn.executescript(
        "DROP INDEX IF EXISTS idx_embedding_cache_last_used;"
        "ALTER TABLE embedding_cache DROP COLUMN last_used;"
        "UPDATE embedding_cache SET updated_at = 1000;"
        "UPDATE meta SET value = '4' WHERE key = 'schema_version';")
    db.close()
    db = schema.open_store(path, want_vectors=False)
    assert db is not None
    assert schema.get_meta(db, "schema_version") == schema.SCHEMA_VERSION >= 5
    assert db.conn.execute("SELECT last_used FROM embedding_cache").fetchone() == (1000.0,)
    with schema.transaction(db):
        cache.put_cached(db, "p", "m", "k", {"new": unit(2)})
        assert cache.prune_cache(db, 1) == 1
    assert sorted(cache.get_cached(db, "p", "m", "k", ["old", "new"])) == ["new"]
    db.close()


def test_disabled_cache_is_neither_read_nor_written(workspace: Path, make_settings,
                                                    tiny_model: Path) -> None:
    local = {"modelPath": str(tiny_model), "threads": 1}
    note = workspace / "memory" / "cache-probe.md"
    first = "- The probe text that goes away and comes back: amber lighthouse.\n"
    note.write_text(first)
    on = make_settings(workspace, provider="local", local=local)
    with Memory(settings=on, in_memory=False) as memory:
        run = memory.index()
    assert run.failed_chunks == 0 and run.report.chunks_queued > 0
    filled = cached_rows(on.store.path)
    assert filled >= run.report.chunks_queued  # the cache holds every text embedded

    off = make_settings(workspace, provider="local", local=local, cache={"enabled": False})
    assert off.store.path == on.store.path
    with Memory(settings=off, in_memory=False) as memory:
        note.write_text("- Something else entirely: a violet submarine.\n")
        changed = memory.index()
        note.write_text(first)  # back to text whose vector the cache holds
        back = memory.index()
    assert changed.report.chunks_cached == 0 and changed.report.chunks_queued == 1
    # Not read: the vector is computed again although the cache has it.
    assert back.report.chunks_cached == 0 and back.report.chunks_queued == 1
    # Not written: the new text's vector did not go into the cache.
    assert cached_rows(off.store.path) == filled

    with Memory(settings=on, in_memory=False) as memory:
        note.write_text("- Something else entirely: a violet submarine.\n")
        again = memory.index()
    assert again.report.chunks_queued == 1  # off wrote nothing, so this is new to the cache
    with Memory(settings=on, in_memory=False) as memory:
        note.write_text(first)
        cached = memory.index()
    assert cached.report.chunks_cached == 1 and cached.report.chunks_queued == 0
