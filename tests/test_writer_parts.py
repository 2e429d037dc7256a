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


class _Fleet:
    """What a producer sends, kept instead of sent."""

    def __init__(self) -> None:
        self.sent: list[FileChanges] = []

    def file_changes(self, message: FileChanges) -> None:
        self.sent.append(message)


def test_a_pass_that_stops_after_its_first_part_ends_its_job_and_says_why(
        tmp_path: Path, make_settings: Callable[..., Settings],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A producer whose read raises after the first part left (the first part is sent as soon
    as it is full): a last, empty part ends the job on the writer with the reason, and the
    error reaches the caller as itself, not as a broker that "did not take" the changes."""
    from pipeline import remote
    from pipeline.remote import RemoteMemory

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    settings = make_settings(ws, provider="none", brokerUrl="redis://127.0.0.1:1/0")
    real = remote.changes_of

    def breaks_late(*args: object, **kwargs: object):
        sent = 0
        for change in real(*args, **kwargs):
            yield change
            sent += change.weight
            if sent > 600 * 1024:  # past the first part
                raise OSError("the disk went away")

    for n in range(12):
        (ws / "memory" / f"note-{n:02d}.md").write_text(f"# Note {n}\n\n" + "words " * 20_000)
    monkeypatch.setattr(remote, "changes_of", breaks_late)
    fleet = _Fleet()
    monkeypatch.setattr(RemoteMemory, "fleet", property(lambda self: fleet))
    monkeypatch.setattr(RemoteMemory, "manifest", lambda self: {})
    with pytest.raises(OSError, match="the disk went away"):
        RemoteMemory(settings).produce()
    parts = [(m.part, m.last, len(m.changes)) for m in fleet.sent]
    assert len(parts) >= 2 and parts[0][2] > 0
    assert [p for p, _, _ in parts] == list(range(len(parts)))
    assert parts[-1][1:] == (True, 0) and not any(last for _, last, _ in parts[:-1])
    assert "the disk went away" in fleet.sent[-1].errors[0]
    assert len({m.job for m in fleet.sent}) == 1
