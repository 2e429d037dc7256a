"""The in-memory vector matrix of long-running readers: same answers as vec0, never stale."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from pipeline.search.hybrid import HeldCopies, search_store
from pipeline.search.retrievers import chunk_vectors, cosine_for
from pipeline.store import schema
from pipeline.store.engine import connect
from pipeline.store.matrix import MatrixCache
from pipeline.store.vectors import (
    delete_vectors,
    drop_vectors,
    knn,
    knn_among,
    put_vectors,
    vectors_version,
)
from tests.searchkit import QueryVector, build, rowid_of, vector_with_cosine

VECTOR_ONLY = {"hybrid": {"enabled": False}}
NOTES = {f"memory/n{i}.md": f"garden note number {i}" for i in range(4)}
SCORES = {p: 0.5 + i / 100 for i, p in enumerate(sorted(NOTES))}


#: The copies this module's searches hold, as a long-running reader's ``Memory`` does.
HELD = HeldCopies()
MATRICES = HELD.matrices


def top(db, settings) -> list[str]:
    hits = search_store(db, settings, "garden", provider=QueryVector(), min_score=0, held=HELD)
    return [h.path for h in hits]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


@pytest.mark.parametrize("reloaded", [False, True], ids=["vec0-meanwhile", "reloaded"])
def test_a_write_after_the_matrix_is_loaded_is_seen_by_the_next_search(
        ws: Path, make_settings, reloaded: bool) -> None:
    """Right after a write the search answers from vec0; once the background load is done,
    from the new copy: the same answers either way."""
    notes = {**NOTES, "memory/late.md": "a garden note whose vector comes later"}
    db, settings = build(ws, make_settings, notes, SCORES, query=VECTOR_ONLY)
    MATRICES.get(db)
    assert top(db, settings)[0] == "memory/n3.md"
    late = rowid_of(db, "memory/late.md")
    writer = connect(db.path)  # another process: the writer

    def search() -> list[str]:
        if reloaded:
            assert MATRICES.current(db) is None  # behind the store: not used
            MATRICES.wait()
            assert MATRICES.current(db) is not None
        return top(db, settings)

    with schema.transaction(writer):
        put_vectors(writer, [late], vector_with_cosine(0.99, 9)[None, :])
    assert search()[0] == "memory/late.md"
    with schema.transaction(writer):
        delete_vectors(writer, [late])
    assert "memory/late.md" not in search()
    with schema.transaction(writer):
        drop_vectors(writer)
    assert search() == []
    writer.close()
    db.close()


def test_the_matrix_is_reused_until_the_vectors_change(ws: Path, make_settings) -> None:
    db, settings = build(ws, make_settings, NOTES, SCORES, query=VECTOR_ONLY)
    cache = MatrixCache()
    first = cache.get(db)
    version = vectors_version(db)
    assert first.version == version and len(first.ids) == len(NOTES)
    top(db, settings)  # reading changes nothing
    assert cache.get(db) is first and vectors_version(db) == version
    with schema.transaction(db):
        put_vectors(db, [rowid_of(db, "memory/n0.md")], vector_with_cosine(0.1, 7)[None, :])
    second = cache.get(db)
    assert second is not first and second.version == vectors_version(db) != version
    db.close()


def test_a_store_swapped_in_at_the_same_path_is_reloaded(tmp_path: Path, make_settings) -> None:
    """A rebuild swaps a new store file in: its vectors must replace the held ones."""
    paths = {}
    for name, score in (("old", 0.3), ("new", 0.9)):
        folder = tmp_path / name
        folder.mkdir()
        store = tmp_path / f"{name}.sqlite"
        db, _ = build(folder, make_settings, {"memory/a.md": "alpha"}, {"memory/a.md": score},
                      store={"path": str(store)})
        db.close()
        paths[name] = store
    live = tmp_path / "live.sqlite"
    os.replace(paths["old"], live)
    db = connect(live)
    assert MATRICES.get(db).cosines([1], QueryVector().embed_query("")) == pytest.approx(
        {1: 0.3})
    db.close()
    os.replace(paths["new"], live)
    db = connect(live)
    assert MATRICES.get(db).cosines([1], QueryVector().embed_query("")) == pytest.approx(
        {1: 0.9})
    db.close()


@pytest.mark.parametrize("want_vectors", [True, False], ids=["vec0", "blob"])
def test_matrix_answers_as_the_store_on_random_vectors(tmp_path: Path,
                                                       want_vectors: bool) -> None:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((400, 24)).astype(np.float32) * rng.uniform(0.5, 3, (400, 1))
    db = connect(tmp_path / "r.sqlite", want_vectors=want_vectors)
    schema.ensure_schema(db)
    rowids = list(range(5, 805, 2))  # gaps, as deletes leave them
    with schema.transaction(db):
        put_vectors(db, rowids, vectors)
    matrix = MatrixCache().get(db)
    among = rowids[::3]
    for query in rng.standard_normal((5, 24)).astype(np.float32):
        want, got = knn(db, query, 10), matrix.knn(query, 10)
        assert [r for r, _ in got] == [r for r, _ in want]
        assert [d for _, d in got] == pytest.approx([d for _, d in want], abs=1e-5)
        assert ([r for r, _ in matrix.knn(query, 7, among)]
                == [r for r, _ in knn_among(db, query, 7, among)])
        asked = [rowids[4], rowids[100], 2, rowids[4]]  # 2 has no vector; duplicates once
        cos = matrix.cosines(asked, query)
        assert list(cos) == [rowids[4], rowids[100]]
        assert cos == pytest.approx(cosine_for(db, asked, query), abs=1e-5)
    held, stored = matrix.vectors(asked), chunk_vectors(db, asked)  # superseded recency's
    assert list(held) == list(stored) == [rowids[4], rowids[100]]
    for rowid, vector in stored.items():  # the held rows are the stored ones, unit length
        assert held[rowid] == pytest.approx(vector / np.linalg.norm(vector), abs=1e-6)
    with pytest.raises(ValueError, match="dimensions"):
        matrix.knn(np.ones(3, np.float32), 5)
    db.close()


def test_ties_at_the_cut_are_broken_by_row_order(tmp_path: Path) -> None:
    db = connect(tmp_path / "t.sqlite")
    schema.ensure_schema(db)
    same = np.tile(np.eye(8, dtype=np.float32)[0], (6, 1))  # six identical vectors
    with schema.transaction(db):
        put_vectors(db, [9, 3, 7, 1, 5, 11], same)
    hits = MatrixCache().get(db).knn(np.eye(8, dtype=np.float32)[0], 4)
    assert [r for r, _ in hits] == [1, 3, 5, 7]
    db.close()


def test_a_store_without_vectors_gives_an_empty_matrix(ws: Path, make_settings) -> None:
    db, settings = build(ws, make_settings, NOTES)  # keyword-only: no vector table at all
    matrix = MatrixCache().get(db)
    assert len(matrix.ids) == 0 and matrix.knn(np.ones(4, np.float32), 3) == []
    hits = search_store(db, settings, "garden", provider=QueryVector(), min_score=0, held=HELD)
    assert sorted(h.path for h in hits) == sorted(NOTES)  # keyword side still
    db.close()


def test_vectors_without_a_version_are_never_held(ws: Path, make_settings) -> None:
    """Vectors written by a memq that kept no version: nothing would say when a copy went
    stale, so the search keeps asking vec0."""
    db, settings = build(ws, make_settings, NOTES, SCORES, query=VECTOR_ONLY)
    db.conn.execute("DELETE FROM meta WHERE key = 'vectors_version'")
    assert MATRICES.current(db) is None
    MATRICES.wait()
    assert MATRICES.current(db) is None  # nothing was loaded meanwhile
    assert top(db, settings)[0] == "memory/n3.md"
    db.close()
