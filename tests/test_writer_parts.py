"""A producer pass that arrives in parts (:mod:`pipeline.ingest.transfer`), as the writer
records it (:func:`workers.shard_side.apply_changes`): the errors of every part reach the
job's record, and a part that failed leaves the job failed whatever later parts do."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.config.settings import Settings
from pipeline.fleet.job_log import JobLog
from pipeline.local import LocalMemory
from pipeline.messages import FileChange, FileChanges
from pipeline.routing import new_job_id
from workers import shard_side


def _write(path: str, text: str) -> FileChange:
    body = text.encode()
    return FileChange(path, "memory", "write", 1, len(body), hashlib.sha256(body).hexdigest(),
                      text=text)


def _part(job: str, part: int, changes: tuple[FileChange, ...], *, last: bool,
          errors: tuple[str, ...] = ()) -> FileChanges:
    return FileChanges("main", job, changes, part=part, last=last, files=3, errors=errors)


@pytest.fixture
def memory(tmp_path: Path, make_settings: Callable[..., Settings]) -> LocalMemory:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    settings = make_settings(ws, provider="none")
    jobs = JobLog(settings.result_backend, store=settings.store.path)
    with LocalMemory(settings, in_memory=False, jobs=jobs) as local:
        yield local
    jobs.close()


def test_the_errors_of_every_part_reach_the_jobs_record(memory: LocalMemory) -> None:
    job = new_job_id("main")
    shard_side.apply_changes(memory, _part(job, 0, (_write("memory/a.md", "# A\n\nherons\n"),
                                                    _write("../evil.md", "no")),
                                           last=False, errors=("memory/x.md: unreadable",)))
    shard_side.apply_changes(memory, _part(job, 1, (_write("memory/b.md", "# B\n\negrets\n"),),
                                           last=True))
    done = memory.jobs.get(job)
    assert done is not None and done.state == "done"
    assert done.result["errors"][0] == "memory/x.md: unreadable"
    assert any("../evil.md" in e and "refused" in e for e in done.result["errors"])
    assert done.result["changed"] == 2


def test_a_failed_part_leaves_the_job_failed_and_later_parts_written(
        memory: LocalMemory, monkeypatch: pytest.MonkeyPatch) -> None:
    job = new_job_id("main")
    shard_side.apply_changes(memory, _part(job, 0, (_write("memory/a.md", "# A\n\nherons\n"),),
                                           last=False))
    real = shard_side._write_changes

    def breaks(*args: object) -> object:
        raise OSError("disk went away")

    monkeypatch.setattr(shard_side, "_write_changes", breaks)
    with pytest.raises(OSError):
        shard_side.apply_changes(memory, _part(job, 1, (_write("memory/b.md", "# B\n\nb\n"),),
                                               last=False))
    monkeypatch.setattr(shard_side, "_write_changes", real)
    shard_side.apply_changes(memory, _part(job, 2, (_write("memory/c.md", "# C\n\ncranes\n"),),
                                           last=True))
    ended = memory.jobs.get(job)
    assert ended is not None and ended.state == "failed" and "disk went away" in ended.error
    assert {hit.path for hit in memory.search("cranes").hits} == {"memory/c.md"}
