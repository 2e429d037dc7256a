"""Store round trips: chunk rows, vectors (vec0 and the in-process fallback), the cache, and the
writer's idempotence and stale-result rules."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.ingest.chunking import chunk_markdown
from pipeline.store import cache, schema, writer
from pipeline.store.engine import connect
from pipeline.store.vectors import count_vectors, get_vectors, knn, put_vectors

TEXT = "# Notes\n\n" + "\n".join(f"- line {i} about topic {i % 7}" for i in range(200))


def unit(seed: int, dims: int = 8) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(dims).astype(np.float32)
    return v / np.linalg.norm(v)


@pytest.fixture(params=[True, False], ids=["vec0", "numpy"])
def db(request, tmp_path):
    database = connect(tmp_path / "s.sqlite", want_vectors=request.param)
    assert database.vector_ok is request.param
    schema.ensure_schema(database)
    with schema.transaction(database):
        schema.set_meta(database, "index", {"provider": "p", "model": "m", "provider_key": "k"})
    yield database
    database.close()


def record(path: str = "memory/a.md", digest: str = "h1") -> writer.FileRecord:
    return writer.FileRecord(path, "memory", digest, 1, 1)


def pending(db) -> list[tuple[str, str]]:
    return db.conn.execute(
        "SELECT id, hash FROM chunks WHERE state = 'pending' ORDER BY start_line").fetchall()


def test_schema_is_idempotent_and_has_wal(db) -> None:
    schema.ensure_schema(db)
    schema.ensure_schema(db)
    assert db.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    names = {r[0] for r in db.conn.execute("SELECT name FROM sqlite_master")}
    assert {"files", "chunks", "embedding_cache", "meta", "chunks_fts"} <= names


def test_replace_file_keeps_unchanged_chunks_and_drops_vanished(db) -> None:
    chunks = chunk_markdown(TEXT, tokens=64, overlap=8)
    writer.replace_file(db, record(), chunks)
    first = pending(db)
    assert len(first) == len(chunks) > 3
    # Give every chunk a vector, then change only the last line of the file.
    writer.write_vectors(db, provider="p", model="m", provider_key="k",
                         items=[(cid, h, unit(i)) for i, (cid, h) in enumerate(first)])
    assert pending(db) == []
    edited = chunk_markdown(TEXT + "\n- a brand new line", tokens=64, overlap=8)
    writer.replace_file(db, record(digest="h2"), edited)
    ids_now = {r[0] for r in db.conn.execute("SELECT id FROM chunks")}
    assert ids_now == {writer.chunk_id("memory", "memory/a.md", c) for c in edited}
    assert len(pending(db)) == 1  # only the changed tail chunk needs a vector
    assert count_vectors(db) == len(edited) - 1  # the vanished chunk's vector went with it
    fts = db.conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'brand'")
    assert fts.fetchone()[0] == 1


def test_write_vectors_is_idempotent_and_fills_cache(db) -> None:
    writer.replace_file(db, record(), chunk_markdown("alpha\nbeta\n", tokens=400, overlap=80))
    (cid, digest), = pending(db)
    item = [(cid, digest, unit(1))]
    first = writer.write_vectors(db, provider="p", model="m", provider_key="k", items=item)
    again = writer.write_vectors(db, provider="p", model="m", provider_key="k", items=item)
    assert (first.written, again.written) == (1, 1)
    assert count_vectors(db) == 1
    assert pending(db) == []
    cached = cache.get_cached(db, "p", "m", "k", [digest])
    np.testing.assert_allclose(cached[digest], unit(1))


def test_result_for_changed_chunk_is_dropped(db) -> None:
    writer.replace_file(db, record(), chunk_markdown("old text\n", tokens=400, overlap=80))
    (old_id, old_hash), = pending(db)
    writer.replace_file(db, record(digest="h2"), chunk_markdown("new text\n", 400, 80))
    out = writer.write_vectors(db, provider="p", model="m", provider_key="k",
                               items=[(old_id, old_hash, unit(2))])
    assert (out.written, out.stale) == (0, 1)
    assert count_vectors(db) == 0
    assert len(pending(db)) == 1  # the new text still waits for its own vector


def test_result_from_another_model_is_refused(db) -> None:
    writer.replace_file(db, record(), chunk_markdown("text\n", 400, 80))
    (cid, digest), = pending(db)
    out = writer.write_vectors(db, provider="p", model="other", provider_key="k",
                               items=[(cid, digest, unit(3))])
    assert out.refused and "other" in out.refused
    assert count_vectors(db) == 0 and len(pending(db)) == 1


def test_vector_of_wrong_width_is_refused(db) -> None:
    writer.replace_file(db, record(), chunk_markdown("a\n\nb\n" * 300, 32, 0))
    rows = pending(db)
    writer.write_vectors(db, provider="p", model="m", provider_key="k",
                         items=[(rows[0][0], rows[0][1], unit(1, 8))])
    out = writer.write_vectors(db, provider="p", model="m", provider_key="k",
                               items=[(rows[1][0], rows[1][1], unit(1, 16))])
    assert out.refused and "8-dimensional" in out.refused
    assert count_vectors(db) == 1


def test_knn_orders_by_cosine_and_both_backends_agree(db) -> None:
    writer.replace_file(db, record(), chunk_markdown("\n".join(f"l{i}" for i in range(50)), 1, 0))
    rowids = [r for (r,) in db.conn.execute("SELECT rowid FROM chunks ORDER BY rowid")]
    vectors = np.stack([unit(i) for i in range(len(rowids))])
    with schema.transaction(db):
        put_vectors(db, rowids, vectors)
    query = unit(7)
    hits = knn(db, query, 5)
    expected = np.argsort(-(vectors @ query))[:5]
    assert [r for r, _ in hits] == [rowids[i] for i in expected]
    distances = [d for _, d in hits]
    assert distances == sorted(distances)
    np.testing.assert_allclose(distances[0], 1 - float(vectors[expected[0]] @ query), atol=1e-5)
    got = get_vectors(db, rowids[:3])
    np.testing.assert_allclose(got[rowids[2]], vectors[2], atol=1e-7)
    missing = max(rowids) + 1000
    got = get_vectors(db, [rowids[4], missing, rowids[4], rowids[0]])
    assert sorted(got) == sorted([rowids[4], rowids[0]])  # absent rowids absent, no duplicates
    np.testing.assert_allclose(got[rowids[4]], vectors[4], atol=1e-7)


def test_delete_file_removes_rows_vectors_and_fts(db) -> None:
    writer.replace_file(db, record(), chunk_markdown("zebra crossing\n", 400, 80))
    (cid, digest), = pending(db)
    writer.write_vectors(db, provider="p", model="m", provider_key="k",
                         items=[(cid, digest, unit(4))])
    writer.delete_file(db, "memory/a.md")
    assert db.conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == 0
    assert db.conn.execute("SELECT count(*) FROM files").fetchone()[0] == 0
    assert count_vectors(db) == 0
    assert db.conn.execute(
        "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'zebra'").fetchone()[0] == 0


def test_mark_failed_only_touches_pending(db) -> None:
    writer.replace_file(db, record(), chunk_markdown("one\n", 400, 80))
    (cid, _), = pending(db)
    assert writer.mark_failed(db, [(cid, "boom")]) == 1
    assert writer.mark_failed(db, [(cid, "again")]) == 0
    assert db.conn.execute("SELECT state, error FROM chunks").fetchone() == ("failed", "boom")


def test_cache_prune_keeps_most_recent(db) -> None:
    with schema.transaction(db):
        for i in range(10):
            cache.put_cached(db, "p", "m", "k", {f"h{i}": unit(i)})
        assert cache.prune_cache(db, 4) == 6
    left = cache.get_cached(db, "p", "m", "k", [f"h{i}" for i in range(10)])
    assert sorted(left) == ["h6", "h7", "h8", "h9"]


def test_write_batch_commits_in_groups_and_units_stay_atomic(db, tmp_path) -> None:
    other = connect(db.path, want_vectors=False)  # a second process's view: committed rows only
    chunks = chunk_markdown("# a\n\n- one line\n", 400, 80)

    def seen() -> int:
        return other.conn.execute("SELECT count(*) FROM files").fetchone()[0]

    with schema.WriteBatch(db, max_units=2, max_seconds=3600) as batch:
        with batch.unit():
            writer.replace_file(db, record("memory/1.md"), chunks)
        assert seen() == 0  # one unit written, not committed yet
        with batch.unit():
            writer.replace_file(db, record("memory/2.md"), chunks)
        assert seen() == 2  # max_units reached: committed
        with pytest.raises(RuntimeError), batch.unit():
            writer.replace_file(db, record("memory/3.md"), chunks)
            raise RuntimeError("boom mid-unit")
        with batch.unit():
            writer.replace_file(db, record("memory/4.md"), chunks)
    paths = [r[0] for r in other.conn.execute("SELECT path FROM files ORDER BY path")]
    assert paths == ["memory/1.md", "memory/2.md", "memory/4.md"]  # the failed unit left nothing
    assert other.conn.execute("SELECT count(*) FROM chunks WHERE path = 'memory/3.md'"
                              ).fetchone()[0] == 0
    with pytest.raises(RuntimeError), schema.WriteBatch(db) as batch:
        with batch.unit():
            writer.replace_file(db, record("memory/5.md"), chunks)
        raise RuntimeError("the pass dies before the batch commits")
    assert not db.conn.in_transaction
    assert seen() == 3  # the uncommitted unit was rolled back with the batch
    other.close()


def test_held_chunk_stays_pending_until_a_later_result(db) -> None:
    from pipeline.store.reads import waiting_count as pending_count

    writer.replace_file(db, record(), chunk_markdown("held text\n", 400, 80))
    (cid, digest), = pending(db)
    rowid = db.conn.execute("SELECT rowid FROM chunks").fetchone()[0]
    writer.mark_queued(db, [rowid])
    assert pending_count(db) == 1  # in flight
    writer.mark_held(db, [(cid, "HTTP 401: check the API key")])
    row = db.conn.execute("SELECT state, error, queued_at FROM chunks").fetchone()
    assert row == ("pending", "HTTP 401: check the API key", None)
    assert pending_count(db) == 0  # nobody is working on it: waiters stop waiting
    writer.write_vectors(db, provider="p", model="m", provider_key="k",
                         items=[(cid, digest, unit(5))])  # the next pass, after the fix
    assert db.conn.execute("SELECT state, error FROM chunks").fetchone() == ("ready", None)


def test_a_version_2_store_gains_the_source_index_and_keeps_its_full_text_rows(db) -> None:
    from pipeline.store.reads import present_sources

    with schema.transaction(db):
        writer.replace_file(db, record("memory/a.md"), chunk_markdown(TEXT, 400, 80))
        db.conn.execute("UPDATE chunks SET source = 'sessions' WHERE rowid = 1")
        db.conn.execute("DROP INDEX idx_chunks_source")
        schema.set_meta(db, "schema_version", 2)
    fts_rows = db.conn.execute("SELECT count(*) FROM chunks_fts_idx").fetchone()[0]
    data_before = db.conn.execute("SELECT count(*) FROM chunks_fts_data").fetchone()[0]
    schema.ensure_schema(db)
    assert schema.get_meta(db, "schema_version") == schema.SCHEMA_VERSION
    plan = " ".join(str(r) for r in db.conn.execute(
        "EXPLAIN QUERY PLAN SELECT min(source) FROM chunks WHERE source > 'a'"))
    assert "idx_chunks_source" in plan
    # Not rebuilt: the same full-text segments, and a search still finds the rows.
    assert db.conn.execute("SELECT count(*) FROM chunks_fts_idx").fetchone()[0] == fts_rows
    assert db.conn.execute("SELECT count(*) FROM chunks_fts_data").fetchone()[0] == data_before
    assert db.conn.execute(
        "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'topic'").fetchone()[0] > 0
    assert present_sources(db) == {"memory", "sessions"}
