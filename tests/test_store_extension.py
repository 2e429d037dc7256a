"""``store.vector.extensionPath``: sqlite-vec is loaded from the configured file, and a path
that does not load falls back to in-process vectors (as OpenClaw does) with a note naming it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import sqlite_vec

from memq import Memory
from pipeline.status import index_status
from pipeline.store.engine import connect


def _copy_of_sqlite_vec(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    source = Path(sqlite_vec.loadable_path())
    if not source.exists():  # loadable_path() may omit the suffix, as SQLite allows
        source = next(source.parent.glob(source.name + ".*"))
    target = folder / source.name  # SQLite derives the entry point (sqlite3_vec_init) from it
    shutil.copyfile(source, target)
    return target


def test_sqlite_vec_is_loaded_from_the_configured_file(tmp_path: Path) -> None:
    """A fresh process that opens a store with the copied library has that very file mapped."""
    copy = _copy_of_sqlite_vec(tmp_path / "ext")
    script = textwrap.dedent(f"""
        from pipeline.store.engine import connect
        db = connect({str(tmp_path / 's.sqlite')!r}, want_vectors={str(copy)!r})
        assert db.vector_ok, db.vector_error
        db.conn.execute("CREATE VIRTUAL TABLE v USING vec0(e float[2])")
        maps = open("/proc/self/maps").read()
        print("MAPPED" if {str(copy)!r} in maps else "NOT MAPPED")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "MAPPED"


def test_a_missing_extension_path_falls_back_to_in_process_vectors(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "vec0.so"
    db = connect(tmp_path / "s.sqlite", want_vectors=str(missing))
    try:
        assert db.vector_ok is False
        assert str(missing) in (db.vector_error or "")
        assert "store.vector.extensionPath" in (db.vector_error or "")
    finally:
        db.close()


@pytest.mark.parametrize("good", [True, False], ids=["copied", "missing"])
def test_settings_carry_the_path_to_every_store_connection(
        tmp_path: Path, workspace: Path, make_settings, tiny_model: Path, good: bool) -> None:
    """memq index and memq status open the store with the configured library; a missing one
    leaves vector search working (in-process vectors) and status says why, naming the path."""
    path = _copy_of_sqlite_vec(tmp_path / "ext") if good else tmp_path / "gone" / "vec0.so"
    settings = make_settings(workspace, provider="local", local={"modelPath": str(tiny_model)},
                             store={"path": str(tmp_path / "st" / "m.sqlite"),
                                    "vector": {"extensionPath": str(path)}})
    assert settings.store.want_vectors == str(path)
    with Memory(settings=settings) as memory:
        memory.index()
        found = memory.search("project", min_score=0)
        assert found.mode == "hybrid" and len(found) > 0
    status = index_status(settings)
    assert status["vectors"] == status["chunks"] > 0
    if good:
        assert status["vectorBackend"] == "sqlite-vec"
        assert status["vectorBackendReason"] is None
    else:
        assert status["vectorBackend"] == "in-process (numpy)"
        assert str(path) in status["vectorBackendReason"]


def test_vector_enabled_false_wins_over_an_extension_path(tmp_path: Path, workspace: Path,
                                                          make_settings) -> None:
    settings = make_settings(workspace, provider="none",
                             store={"path": str(tmp_path / "m.sqlite"),
                                    "vector": {"enabled": False, "extensionPath": "/x/vec0.so"}})
    assert settings.store.want_vectors is False
