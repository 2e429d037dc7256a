"""The chunk rows a long-running reader holds (:mod:`pipeline.store.rows`): the same rows as
the store, never stale whoever writes, one store's never another's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.search.hybrid import HeldCopies, search_store
from pipeline.search.paths import names_nothing, path_matches
from pipeline.store import reads, rows, schema
from pipeline.store.engine import connect
from pipeline.store.path_keys import normalized_path
from tests.searchkit import QueryVector, build, rowid_of

NOTES = {f"memory/n{i}.md": f"garden note number {i}" for i in range(4)}
SCORES = {p: 0.5 + i / 100 for i, p in enumerate(sorted(NOTES))}
ROOT = Path(__file__).resolve().parents[1]


def ranked(db, settings, held: HeldCopies | None) -> list[tuple[str, float]]:
    hits = search_store(db, settings, "garden", provider=QueryVector(), min_score=0, held=held)
    return [(h.path, h.score) for h in hits]


def held_rows(db, held: HeldCopies):
    return held.current_rows(db, held.versions(db))


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


def test_the_held_rows_are_the_stores(ws: Path, make_settings) -> None:
    notes = {**NOTES, "MEMORY.md": "garden\n\n" * 400}  # several chunks of one file
    db, _ = build(ws, make_settings, notes, SCORES)
    held = HeldCopies()
    try:
        copy = held.rows.get(db)
        rowids = [r for (r,) in db.conn.execute("SELECT rowid FROM chunks")]
        assert len(rowids) > len(notes)
        assert [copy.rows[r] for r in rowids] == reads.chunk_weights(db, rowids)
        assert set(copy.rows) == set(rowids)
        assert copy.sources == reads.present_sources(db)
        assert copy.allowed(["memory"]).tolist() == reads.allowed_rowids(db, ["memory"])
        assert copy.allowed(["sessions"]).tolist() == reads.allowed_rowids(db, ["sessions"])
        assert not reads.allowed_rowids(db, ["sessions"])
    finally:
        held.close()
        db.close()


WRITE = """
import sys
import time
from pipeline.store import schema
from pipeline.store.engine import connect
from pipeline.store.path_keys import normalized_path
db = connect(sys.argv[1])
with schema.transaction(db):
    db.conn.execute("UPDATE chunks SET importance = 10 WHERE rowid = ?", (int(sys.argv[2]),))
db.close()
"""


def test_a_write_by_another_process_is_seen_by_the_next_search(ws: Path,
                                                              make_settings) -> None:
    """An entry value that no text or vector version covers changes in another process: the
    held rows are no longer used, SQLite answers, and the reloaded rows answer as it does."""
    db, settings = build(ws, make_settings, NOTES, SCORES)
    held = HeldCopies()
    try:
        held.matrices.get(db)
        held.text_stats.get(db)
        held.rows.get(db)
        before = ranked(db, settings, held)
        assert held_rows(db, held) is not None
        assert before == ranked(db, settings, None)
        assert before[0][0] == "memory/n3.md"
        subprocess.run([sys.executable, "-c", WRITE, str(db.path),
                        str(rowid_of(db, "memory/n0.md"))], check=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert held_rows(db, held) is None  # behind the store: not used
        after = ranked(db, settings, held)
        assert after[0][0] == "memory/n0.md"  # importance 10: x1.25
        assert after == ranked(db, settings, None)
        held.wait()
        assert held_rows(db, held) is not None
        assert ranked(db, settings, held) == after
    finally:
        held.close()
        db.close()


def test_a_write_on_the_searching_connection_is_seen(ws: Path, make_settings) -> None:
    """The search's own connection commits (a sync on search does): the copy's connection
    sees the commit as another's. Inside an open transaction the copy is not used at all."""
    db, settings = build(ws, make_settings, NOTES, SCORES)
    held = HeldCopies()
    try:
        held.rows.get(db)
        assert held_rows(db, held) is not None
        db.conn.execute("BEGIN")
        db.conn.execute("UPDATE chunks SET importance = 10 WHERE rowid = ?",
                        (rowid_of(db, "memory/n1.md"),))
        assert held_rows(db, held) is None  # uncommitted: only this connection sees it
        assert ranked(db, settings, held)[0][0] == "memory/n1.md"
        db.conn.execute("COMMIT")
        assert held_rows(db, held) is None
        assert ranked(db, settings, held)[0][0] == "memory/n1.md"
        with schema.transaction(db):
            db.conn.execute("UPDATE files SET path = path")  # a commit that changes nothing
        held.wait()
        held.rows.get(db)
        assert held_rows(db, held) is not None
        assert ranked(db, settings, held)[0][0] == "memory/n1.md"
    finally:
        held.close()
        db.close()


def test_one_memorys_rows_are_never_anothers(tmp_path: Path, make_settings) -> None:
    """Two memories searched through one set of held copies: each search sees its own
    store's rows only."""
    dbs = {}
    for name in ("a", "b"):
        folder = tmp_path / name
        folder.mkdir()
        notes = {f"memory/{name}{i}.md": f"garden note {name} {i}" for i in range(3)}
        scores = {p: 0.5 + i / 100 for i, p in enumerate(sorted(notes))}
        dbs[name] = build(folder, make_settings, notes, scores,
                          store={"path": str(tmp_path / f"{name}.sqlite")})
    held = HeldCopies()
    try:
        for db, _ in dbs.values():
            held.rows.get(db)
        for name, (db, settings) in dbs.items():
            copy = held_rows(db, held)
            assert copy is not None
            assert {row[1] for row in copy.rows.values()} == {
                f"memory/{name}{i}.md" for i in range(3)}
            hits = ranked(db, settings, held)
            assert hits and all(path.startswith(f"memory/{name}") for path, _ in hits)
            assert hits == ranked(db, settings, None)
    finally:
        held.close()
        for db, _ in dbs.values():
            db.close()


def _generations(tmp_path: Path, make_settings) -> dict[str, object]:
    """Two stores of one note each, ``old.sqlite`` and ``new.sqlite`` (a rebuild's two
    generations), open."""
    stores = {}
    for name in ("old", "new"):
        folder = tmp_path / name
        folder.mkdir()
        stores[name], _ = build(folder, make_settings, {f"memory/{name}.md": "garden"},
                                {f"memory/{name}.md": 0.5},
                                store={"path": str(tmp_path / f"{name}.sqlite")})
    return stores


def test_a_store_swapped_in_at_the_same_path_is_not_answered_from_the_old_rows(
        tmp_path: Path, make_settings) -> None:
    """A rebuild swaps a new store file in at the path: the copy's connection still reads the
    old file, so its versions tell the generations apart."""
    stores = {}
    for name, db in _generations(tmp_path, make_settings).items():
        db.close()
        stores[name] = tmp_path / f"{name}.sqlite"
    live = tmp_path / "live.sqlite"
    held = HeldCopies()
    try:
        os.replace(stores["old"], live)
        db = connect(live)
        assert {row[1] for row in held.rows.get(db).rows.values()} == {"memory/old.md"}
        db.close()
        os.replace(stores["new"], live)
        db = connect(live)
        assert held_rows(db, held) is None
        assert {row[1] for row in held.rows.get(db).rows.values()} == {"memory/new.md"}
        db.close()
    finally:
        held.close()


def test_a_query_the_held_names_rule_out_names_no_file(ws: Path, make_settings) -> None:
    """The file names a copy holds rule out the path lookups only where the store's own
    lookups find nothing: every query gives the same matches with and without them."""
    notes = {"memory/foo_bar.md": "alpha", "memory/Kafka-Notes.md": "beta", "MEMORY.md": "gamma",
             "memory/2026-01-02.md": "delta", "memory/über/café.md": "epsilon"}
    db, _ = build(ws, make_settings, notes)
    held = HeldCopies()
    try:
        names = held.rows.get(db).names
        assert names is not None and names.tokens is not None
        ruled_out = 0
        for query in ["foo", "bar", "foo_bar", "FOO_BAR.md", "kafka notes", "notes", "memory",
                      "MEMORY.md", "memory.md", "2026", "2026-01-02", "01", "garden lantern",
                      "lantern", "q17", "_", "md", "caf", "café", "über", "cafe", "kafka-notes",
                      "what did alice say about kafka", "budget review", "./MEMORY.md", ""]:
            key = normalized_path(query)
            key = key.rsplit("/", 1)[-1] if key and key != "." else None
            ruled_out += names_nothing(query, key, names)
            assert path_matches(db, query, 24, None, names) == path_matches(db, query, 24, None)
        assert ruled_out >= 4  # garden lantern, lantern, q17, budget review
    finally:
        held.close()
        db.close()


def test_reloads_are_spaced_while_a_writer_commits(ws: Path, make_settings) -> None:
    """Every commit makes the rows stale; a reload starts no sooner than RELOAD_SPACING times
    the last load's duration after it ended, SQLite answering meanwhile."""
    db, settings = build(ws, make_settings, NOTES, SCORES)
    held = HeldCopies()
    try:
        held.rows.get(db)
        with schema.transaction(db):
            db.conn.execute("UPDATE chunks SET importance = 10 WHERE rowid = ?",
                            (rowid_of(db, "memory/n2.md"),))
        held.rows._loads[db.key] = (time.monotonic(), 60.0)  # a load that took a minute
        assert held_rows(db, held) is None
        assert not held.rows._loading  # no reload started
        assert ranked(db, settings, held)[0][0] == "memory/n2.md"  # SQLite answers
        held.rows._loads[db.key] = (time.monotonic() - 5.0, 1.0)  # ended 5 s ago, took 1 s
        assert held_rows(db, held) is None  # stale: a reload starts now
        held.wait()
        assert held_rows(db, held) is not None
        assert ranked(db, settings, held)[0][0] == "memory/n2.md"
    finally:
        held.close()
        db.close()


def test_a_store_too_large_to_hold_is_answered_by_sqlite(ws: Path, make_settings,
                                                         monkeypatch) -> None:
    db, settings = build(ws, make_settings, NOTES, SCORES)
    need = rows.held_bytes(db)
    assert need == len(NOTES) * rows.ROW_BYTES + sum(
        len(t.encode()) for (t,) in db.conn.execute("SELECT text FROM chunks"))
    held = HeldCopies()
    try:
        monkeypatch.setattr(rows, "MAX_BYTES", need - 1)
        assert held.rows.get(db) is None
        assert held_rows(db, held) is None
        assert ranked(db, settings, held) == ranked(db, settings, None)
        monkeypatch.setattr(rows, "MAX_BYTES", need)
        assert held.rows.get(db) is not None
    finally:
        held.close()
        db.close()


def test_a_source_filter_answers_from_the_held_rows_as_from_the_store(
        ws: Path, make_settings) -> None:
    """Chunks of a source a search does not want (a transcript among memory notes): the held
    rows give the wanted chunks, and every search the same hits as SQLite alone."""
    db, settings = build(ws, make_settings, NOTES, SCORES)
    with schema.transaction(db):
        for n in range(3):
            db.conn.execute(
                "INSERT INTO chunks(id, path, source, start_line, end_line, hash, text, state, "
                "updated_at) VALUES (?, ?, 'sessions', 1, 1, ?, ?, 'ready', 0)",
                (f"s{n}", f"sessions/t{n}.jsonl", f"hs{n}", f"garden garden talk {n}"))
    held = HeldCopies()
    try:
        copy = held.rows.get(db)
        assert copy.sources == {"memory", "sessions"}
        both = copy.allowed(["sessions", "memory"]).tolist()
        assert both == reads.allowed_rowids(db, ["memory", "sessions"]) and len(both) == 7
        held.matrices.get(db)
        held.text_stats.get(db)
        for wanted in (["memory"], ["sessions"], ["memory", "sessions"]):
            for provider in (QueryVector(), None):
                hits = search_store(db, settings, "garden", provider=provider, min_score=0,
                                    held=held, sources=wanted)
                assert hits == search_store(db, settings, "garden", provider=provider,
                                            min_score=0, sources=wanted)
                assert hits and {h.source for h in hits} <= set(wanted)
        assert held_rows(db, held) is not None
    finally:
        held.close()
        db.close()


def test_the_rows_of_a_deleted_store_file_are_dropped_at_the_next_load(
        tmp_path: Path, make_settings) -> None:
    """A rebuild deletes the old generation's file: its copy's connection, which keeps the
    file open, is closed when the next copy loads."""
    stores = _generations(tmp_path, make_settings)
    held = HeldCopies()
    try:
        old = held.rows.get(stores["old"])
        assert old.db is not None
        stores["old"].close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{tmp_path / 'old.sqlite'}{suffix}").unlink(missing_ok=True)
        held.rows.get(stores["new"])
        assert old.db is None  # closed
        assert held.rows.held(str((tmp_path / "old.sqlite").resolve())) is None
        assert held_rows(stores["new"], held) is not None
    finally:
        held.close()
        stores["new"].close()
