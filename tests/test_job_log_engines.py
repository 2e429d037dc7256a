"""The job log keeps one SQLAlchemy engine per database per process (Celery's session manager
builds a new engine, connection and compiled statements for every result it stores outside a
forked pool child), and never uses a parent's engine in a forked child."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.fleet.job_log import JobLog


def _engine_of(log: JobLog):
    backend = log.backend
    return backend.session_manager.get_engine(backend.url)


def test_job_logs_of_one_database_share_one_engine_and_children_get_their_own(
        tmp_path: Path) -> None:
    url = f"db+sqlite:///{tmp_path / 'jobs.sqlite'}"
    first, second = JobLog(url), JobLog(url)
    other = JobLog(f"db+sqlite:///{tmp_path / 'other.sqlite'}")
    try:
        first.started("main:aa", memory="main", origin="test")
        second.started("main:bb", memory="main", origin="test")
        assert _engine_of(first) is _engine_of(second)
        assert _engine_of(other) is not _engine_of(first)
        assert [r.id for r in first.recent("main")] and {r.id for r in second.recent("main")} \
            == {"main:aa", "main:bb"}
        parent = id(_engine_of(first))
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: a fresh engine, and it can write
            try:
                child = JobLog(url)
                child.started("main:cc", memory="main", origin="child")
                ok = id(_engine_of(child)) != parent
                os.write(write, b"1" if ok else b"0")
            finally:
                os._exit(0)
        os.close(write)
        assert os.read(read, 1) == b"1"
        os.waitpid(pid, 0)
        first.close()  # disposes the pool; the engine connects again when next used
        assert {r.id for r in second.recent("main")} == {"main:aa", "main:bb", "main:cc"}
    finally:
        for log in (first, second, other):
            log.close()
