"""The lean job log (:mod:`pipeline.fleet.sqlite_results`): a SQLite job log written with
``sqlite3`` holds the very rows Celery's own ``DatabaseBackend`` writes, so Celery
(``AsyncResult``, ``get_task_meta``), Flower and ``memq jobs`` read either alike; and a
single-host ``memq index`` with no broker records its job without importing Celery or
SQLAlchemy."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from uuid import UUID

import pytest
from celery.result import AsyncResult
from kombu.utils.json import dumps as kombu_dumps

from pipeline.errors import JobFailed
from pipeline.fleet.job_log import INDEX_JOB, TABLES, JobLog, sqlite_path
from pipeline.fleet.sqlite_results import SqliteResults, encode
from pipeline.store.engine import tune_connection
from tests.conftest import REPO, run_memq

META = {"memory": "alpha", "origin": "local", "host": "hostA", "startedAt": 1796587720.25,
        "store": "/data/alpha.sqlite"}


class Child:
    """A task's child result, as Celery's request holds one (``as_tuple``)."""

    def as_tuple(self) -> tuple[Any, ...]:
        return (("child-1", None), None)


def _requests() -> dict[str, SimpleNamespace]:
    """A job run in the CLI's process (memq's own request) and one a worker ran (a queue,
    retries, described arguments, a child, stamps)."""
    local = SimpleNamespace(task=INDEX_JOB, hostname="hostA", args=None, kwargs=None,
                            retries=0, delivery_info=None, chord=None, errbacks=None,
                            chain=None, group=None, parent_id=None, children=[], stamps=None)
    worker = SimpleNamespace(task="memq.apply_changes", hostname="writer-0@hostB",
                             args=["alpha: 3 files"], kwargs={}, retries=2,
                             delivery_info={"routing_key": "control.0"}, chord=None,
                             errbacks=None, chain=None, group=None, parent_id=None,
                             children=[Child()], stamps={"lane": "bulk"},
                             stamped_headers=["lane"])
    return {"local": local, "worker": worker}


def _celery_backend(path: Path) -> Any:
    """Celery's own DatabaseBackend on ``path``, as the job log configures it."""
    return JobLog(f"db+sqlite:///{path}").backend


def _lean(path: Path) -> SqliteResults:
    return SqliteResults(path, task_table=TABLES["task"], group_table=TABLES["group"],
                         keep_days=7, busy_ms=5000)


def _story(writer: Any) -> None:
    """The same states through either writer (``store_result`` / ``mark_as_failure``)."""
    requests = _requests()
    for name, request in requests.items():
        job = f"alpha:{name}"
        writer.store_result(job, META, "STARTED", request=request)
        writer.store_result(job, {**META, "vectors_done": 1}, "PROGRESS", request=request)
        writer.store_result(job, {**META, "files": 3, "finishedAt": 1796587721.5}, "SUCCESS",
                            request=request)
        # a late state after a success is ignored, as Celery ignores it
        writer.store_result(job, {**META, "vectors_done": 2}, "PROGRESS", request=request)
        failed = f"alpha:{name}-failed"
        writer.store_result(failed, META, "STARTED", request=request)
        writer.mark_as_failure(failed, JobFailed("ValueError: no model é", META),
                               request=request)
    # a first state that is a failure (a job refused before it started)
    writer.mark_as_failure("alpha:refused", JobFailed("refused", {"memory": "alpha"}),
                           request=requests["worker"])


def _rows(path: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(path) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(row) for row in conn.execute(f"SELECT * FROM {TABLES['task']} "
                                                  "ORDER BY id")]


def _schema(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                            "ORDER BY name").fetchall()


def test_lean_rows_are_the_rows_celery_writes(tmp_path: Path) -> None:
    celery_db, lean_db = tmp_path / "celery.sqlite", tmp_path / "lean.sqlite"
    _story(_celery_backend(celery_db))
    _story(_lean(lean_db))
    assert _schema(lean_db) == _schema(celery_db)  # same tables, columns, indexes
    theirs, ours = _rows(celery_db), _rows(lean_db)
    assert len(ours) == len(theirs) == 5
    for row in theirs + ours:  # a finished state's time, none for one under way
        assert (row.pop("date_done") is None) == (row["status"] not in ("SUCCESS", "FAILURE"))
    assert ours == theirs  # every other column, byte for byte
    assert json.loads(ours[1]["result"])["exc_message"][0] == "ValueError: no model é"
    assert ours[2]["queue"] == "control.0" and ours[2]["stamps"] is not None


def test_lean_encoding_is_kombus_json() -> None:
    value = {"a": [1, 2.5, None, True], "é": "ü", "when": __import__("datetime").datetime(
        2026, 12, 6, 20, 1, 2, 345), "day": __import__("datetime").date(2026, 12, 6),
        "d": Decimal("1.5"), "u": UUID(int=7), "b": b"ok", "raw": b"\xff\x00", "t": (1, 2)}
    assert encode(value) == kombu_dumps(value).encode("utf-8")


def test_celery_reads_what_the_lean_log_wrote(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite"
    lean = JobLog(f"db+sqlite:///{path}", lean=True)
    assert lean.lean
    meta = lean.started("alpha:aa", memory="alpha", origin="local", host="hostA")
    lean.finished("alpha:aa", {**meta, "files": 3})
    meta = lean.started("alpha:bb", memory="alpha", origin="local", host="hostA")
    lean.failed("alpha:bb", "ValueError: no model", meta)
    lean.close()
    assert lean._backend is None  # Celery's backend was never built

    backend = _celery_backend(path)
    done = backend.get_task_meta("alpha:aa")
    assert done["status"] == "SUCCESS" and done["result"]["files"] == 3
    assert (done["name"], done["worker"], done["retries"]) == (INDEX_JOB, "hostA", 0)
    result = AsyncResult("alpha:bb", backend=backend, app=backend.app)
    assert result.state == "FAILURE"
    assert isinstance(result.result, JobFailed)
    assert result.result.args[0] == "ValueError: no model"
    assert result.result.args[1]["origin"] == "local"
    # and Celery writes on where the lean log left off
    backend.store_result("alpha:cc", {"memory": "alpha", "origin": "remote"}, "STARTED")
    assert [job.id for job in JobLog(f"db+sqlite:///{path}").recent("alpha")] == [
        "alpha:cc", "alpha:bb", "alpha:aa"]


def test_memq_jobs_reads_rows_of_either_writer(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "jobs.sqlite"
    url = f"db+sqlite:///{path}"
    for lean, job in ((True, "alpha:lean"), (False, "alpha:celery")):
        log = JobLog(url, lean=lean)
        meta = log.started(job, memory="alpha", origin="local", host="hostA")
        log.finished(job, {**meta, "files": 2, "chunks_queued": 5})
        log.close()
    log = JobLog(url, lean=True)
    meta = log.started("alpha:failed", memory="alpha", origin="local", host="hostA")
    log.failed("alpha:failed", "boom", meta)
    # sqlite3 reads as SQLAlchemy Core does (a URL with options is read through SQLAlchemy)
    through_sqlalchemy = JobLog(f"{url}?timeout=30")
    assert sqlite_path(through_sqlalchemy.url) is None
    ours = [job.to_dict() for job in JobLog(url).recent("alpha")]
    assert ours == [job.to_dict() for job in through_sqlalchemy.recent("alpha")]
    assert [j["id"] for j in ours] == ["alpha:failed", "alpha:celery", "alpha:lean"]
    assert JobLog(url).last_error("alpha").to_dict() == \
        through_sqlalchemy.last_error("alpha").to_dict()

    listed = run_memq("jobs", "--agent", "alpha", "--json", "--workspace", str(tmp_path),
                      env={"MEMQ_CONFIG": "none", "MEMQ_RESULT_BACKEND": url,
                           "MEMQ_BROKER_URL": "", "REDIS_URL": "",
                           "MEMQ_STORE_PATH": str(tmp_path / "alpha.sqlite")}, timeout=120)
    assert listed.returncode == 0, listed.stderr
    jobs = {job["id"]: job for job in json.loads(listed.stdout)["jobs"]}
    assert set(jobs) == {"alpha:failed", "alpha:celery", "alpha:lean"}
    for job in ("alpha:celery", "alpha:lean"):
        assert (jobs[job]["state"], jobs[job]["files"], jobs[job]["chunksQueued"]) == (
            "done", 2, 5)
    assert (jobs["alpha:failed"]["state"], jobs["alpha:failed"]["error"]) == ("failed", "boom")


def test_lean_expiry_deletes_what_celerys_cleanup_deletes(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite"
    log = JobLog(f"db+sqlite:///{path}", lean=True, keep_days=1)
    for job in ("alpha:old", "alpha:new"):
        log.finished(job, log.started(job, memory="alpha", origin="local"))
    log.started("alpha:running", memory="alpha", origin="local")
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE {TABLES['task']} SET date_done = '2020-01-01 00:00:00.000000' "
                     "WHERE task_id = 'alpha:old'")
    log.expire()
    assert [job.id for job in log.recent()] == ["alpha:running", "alpha:new"]


def test_sqlite_paths_are_the_ones_sqlalchemy_opens() -> None:
    import sqlalchemy as sa

    for url in ("db+sqlite:////abs/jobs.sqlite", "db+sqlite:///rel/jobs.sqlite",
                "db+sqlite+pysqlite:////abs/a%20b.sqlite"):
        assert str(sqlite_path(url)) == sa.engine.make_url(url.removeprefix("db+")).database
    for url in ("db+sqlite://", "db+sqlite:///:memory:", "db+sqlite:////a.db?timeout=3",
                "db+postgresql+psycopg://u:p@h/db", "db+sqlite+pysqlcipher:////a.db"):
        assert sqlite_path(url) is None


def test_a_single_host_index_imports_neither_celery_nor_sqlalchemy(tmp_path: Path) -> None:
    """``memq index`` with no broker, keyword-only, in a fresh data dir: the pass is recorded
    (lean) and neither Celery, kombu, redis nor SQLAlchemy was imported."""
    notes = tmp_path / "ws" / "memory"
    notes.mkdir(parents=True)
    for n in range(3):
        (notes / f"2026-01-0{n + 1}.md").write_text(f"# Day {n}\n\n- note {n}\n")
    code = ("import sys\n"
            "from memq.cli import main\n"
            "try:\n"
            "    main(['index', '--workspace', sys.argv[1]])\n"
            "except SystemExit as exc:\n"
            "    assert not exc.code, exc.code\n"
            "heavy = ('celery', 'kombu', 'sqlalchemy', 'redis')\n"
            "print(sorted(m for m in heavy if m in sys.modules))\n")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("MEMQ_")}
    env.update(MEMQ_CONFIG="none", MEMQ_PROVIDER="none", MEMQ_HOME=str(tmp_path / "home"),
               MEMQ_STORE_PATH=str(tmp_path / "ws.sqlite"), MEMQ_BROKER_URL="", REDIS_URL="",
               PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ws")], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1] == "[]"
    rows = _rows(tmp_path / "home" / "jobs.sqlite")
    assert [(row["status"], row["name"]) for row in rows] == [("SUCCESS", INDEX_JOB)]
    assert json.loads(rows[0]["result"])["files"] == 3


@pytest.mark.parametrize("who", ["a job log read", "a connection the engines tune"])
def test_a_connection_beside_a_new_job_log_being_made_waits_its_turn(
        tmp_path: Path, who: str) -> None:
    """A new job log's first writer holds its write lock before the file is in WAL (the
    moment another host's `memq index` may look at it). Switching a file that is not in WAL
    yet to WAL takes a read lock and then a write lock, and SQLite refuses that upgrade at
    once, without its busy timeout, while another connection holds the write lock: a read
    failed with "database is locked" (seen in a fleet test). It now waits its turn."""
    path = tmp_path / "jobs.sqlite"
    first = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    first.execute("BEGIN IMMEDIATE")  # the new file's first writer, mid-creation
    release = threading.Timer(0.3, lambda: first.execute("COMMIT"))
    release.start()
    try:
        if who == "a job log read":
            log = JobLog(f"db+sqlite:///{path}")
            assert log.recent() == []
            log.close()
        else:  # what SQLAlchemy's connect hook runs (tune_engine) on each new connection
            conn = sqlite3.connect(path, isolation_level=None)
            tune_connection(conn, 30_000)
            conn.close()
    finally:
        release.join()
        first.close()
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
