"""How soon a producer pass on the files' host sees its job end on the shard's host
(:meth:`pipeline.remote.RemoteMemory.ended_soon`): a job of a fraction of a second is seen
ending within a few hundredths of a second, at a bounded number of looks; a job that has
not ended is left to the usual pace after ``within_s``."""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.fleet.job_log import JobRecord
from pipeline.remote import QUICK_JOB_S, RemoteMemory


class Ends(RemoteMemory):
    """A remote memory whose job log says job ``j`` runs until ``ends_at`` (monotonic)."""

    ends_at = 0.0
    looks = 0

    def job(self, job_id: str) -> JobRecord | None:
        self.looks += 1
        state = "done" if time.monotonic() >= self.ends_at else "running"
        return JobRecord(job_id, "m", state, "SUCCESS" if state == "done" else "STARTED")


def test_a_short_job_is_seen_ending_soon(tmp_path: Path, make_settings) -> None:
    memory = Ends(make_settings(tmp_path, provider="none"))
    for length in (0.05, 0.3, 0.7):
        memory.looks = 0
        started = time.monotonic()
        memory.ends_at = started + length
        assert memory.ended_soon("m:j") is True
        late = time.monotonic() - memory.ends_at
        assert 0 <= late <= max(0.03, length / 10) + 0.05, (length, late)  # +scheduling slack
        assert memory.looks <= 30, memory.looks


def test_a_long_job_is_left_to_the_usual_pace(tmp_path: Path, make_settings) -> None:
    memory = Ends(make_settings(tmp_path, provider="none"))
    memory.ends_at = time.monotonic() + 60
    started = time.monotonic()
    assert memory.ended_soon("m:j", within_s=0.5) is False
    assert 0.5 <= time.monotonic() - started < 0.8
    assert memory.looks <= 25  # ~10 looks at 20 ms, then ~10 at a tenth of the wait
    assert QUICK_JOB_S <= 2.0  # the quick pace is short: its looks stay few
