"""SQLite without FTS5: the store works, search falls back to vectors only (OpenClaw: "fall back
to pure vector"), and status and results say keyword search is unavailable.

The machine's SQLite has FTS5, so a build without it is stood in for by
``MEMQ_SQLITE_WITHOUT_FTS5=1``: every connection memq opens then refuses to create FTS5 tables
(an SQLite authorizer), which is what the availability probe runs into, as it would on a build
compiled without FTS5."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memq import Memory
from pipeline.status import index_status
from pipeline.store.engine import connect
from tests.conftest import run_memq

OFF = "MEMQ_SQLITE_WITHOUT_FTS5"


def test_the_probe_reports_fts5(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = connect(tmp_path / "a.sqlite")
    assert db.fts_ok is True and db.fts_error is None
    db.close()
    monkeypatch.setenv(OFF, "1")
    db = connect(tmp_path / "b.sqlite")
    assert db.fts_ok is False and "FTS5" in db.fts_error
    db.close()


def test_fts5_is_probed_once_per_process(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """FTS5 is a property of the SQLite library, not of a file: a process opening many stores
    probes it once (per driver and ``MEMQ_SQLITE_WITHOUT_FTS5`` setting)."""
    from pipeline.store import engine

    probes: list[object] = []
    real = engine._probe_fts5
    monkeypatch.setattr(engine, "_probe_fts5", lambda conn: (probes.append(conn), real(conn))[1])
    monkeypatch.setattr(engine, "_fts_probes", {})  # as in a process that probed nothing yet
    for name in "abc":
        db = connect(tmp_path / f"{name}.sqlite")
        assert db.fts_ok is True
        db.close()
    assert len(probes) == 1
    monkeypatch.setenv(OFF, "1")
    for name in "de":
        db = connect(tmp_path / f"{name}.sqlite")
        assert db.fts_ok is False and "FTS5" in db.fts_error
        db.close()
    assert len(probes) == 2


def test_index_and_search_are_vector_only(tmp_path: Path, workspace: Path, make_settings,
                                          tiny_model: Path, monkeypatch) -> None:
    monkeypatch.setenv(OFF, "1")
    settings = make_settings(workspace, provider="local", local={"modelPath": str(tiny_model)})
    with Memory(settings=settings) as memory:
        memory.index()
        found = memory.search("project", min_score=0)
    assert found.mode == "hybrid" and len(found) > 0
    assert "keyword search unavailable" in found.warning and "FTS5" in found.warning
    assert all(hit.score > 0 for hit in found)
    status = index_status(settings)
    assert status["vectors"] == status["chunks"] > 0
    assert status["keywordSearch"] == "unavailable"
    assert "FTS5" in status["keywordSearchReason"]
    db = connect(settings.store.path)
    try:
        names = {r[0] for r in db.conn.execute("SELECT name FROM sqlite_master")}
    finally:
        db.close()
    assert not any(name.startswith("chunks_fts") for name in names)


def test_keyword_only_without_fts5_answers_nothing_and_says_why(
        tmp_path: Path, workspace: Path, make_settings, monkeypatch) -> None:
    monkeypatch.setenv(OFF, "1")
    settings = make_settings(workspace, provider="none")
    with Memory(settings=settings) as memory:
        memory.index()
        found = memory.search("project")
    assert len(found) == 0 and "keyword search unavailable" in found.warning


def test_fts5_coming_back_fills_the_keyword_index(tmp_path: Path, workspace: Path,
                                                  make_settings, monkeypatch) -> None:
    settings = make_settings(workspace, provider="none")
    monkeypatch.setenv(OFF, "1")
    with Memory(settings=settings) as memory:
        memory.index()
    monkeypatch.delenv(OFF)
    with Memory(settings=settings) as memory:
        found = memory.search("project")
    assert len(found) > 0 and found.warning is None
    assert index_status(settings)["keywordSearch"] == "fts5"


def test_the_cli_works_without_fts5(tmp_path: Path, workspace: Path, make_settings,
                                    tiny_model: Path) -> None:
    settings = make_settings(workspace, provider="local", local={"modelPath": str(tiny_model)})
    args = ("--workspace", str(workspace), "--config", str(settings.config_file))
    env = {OFF: "1"}
    done = run_memq("index", *args, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    searched = run_memq("search", "project", "--json", *args, env=env, timeout=120)
    assert searched.returncode == 0, searched.stderr
    out = json.loads(searched.stdout)
    assert out["mode"] == "hybrid" and out["results"]
    assert "keyword search unavailable" in out["warning"]
    status = run_memq("status", *args, env=env, timeout=120)
    assert status.returncode == 0, status.stderr
    assert "keyword search: unavailable" in status.stdout


def test_a_store_made_with_fts5_keeps_working_without_it(tmp_path: Path, workspace: Path,
                                                         make_settings, monkeypatch) -> None:
    """Its index triggers would fail every write on a SQLite without FTS5: they are dropped
    there, and when FTS5 is back the keyword index is refilled with what changed meanwhile."""
    settings = make_settings(workspace, provider="none")
    with Memory(settings=settings) as memory:
        memory.index()
    monkeypatch.setenv(OFF, "1")
    note = workspace / "memory" / "2026-12-01.md"
    note.write_text("# December\n\nThe zanzibar migration finished on time.\n")
    with Memory(settings=settings) as memory:
        memory.index()
        assert len(memory.search("zanzibar")) == 0
    db = connect(settings.store.path)
    try:
        triggers = {r[0] for r in db.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    finally:
        db.close()
    assert not any(name.startswith("chunks_fts") for name in triggers)
    monkeypatch.delenv(OFF)
    with Memory(settings=settings) as memory:
        found = memory.search("zanzibar")
    assert [hit.path for hit in found] == ["memory/2026-12-01.md"]
