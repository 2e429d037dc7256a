"""How soon a producer pass on the files' host sees its job end on the shard's host
(:meth:`pipeline.remote.RemoteMemory.ended_soon`): a job of a fraction of a second is seen
ending within a few hundredths of a second, at a bounded number of looks; a job that has
not ended is left to the usual pace after ``within_s``."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from pipeline.fleet.broker import FleetDispatcher
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


def test_the_writers_word_that_a_job_ended_is_noticed_at_once(
        tmp_path: Path, make_settings, broker_url: str) -> None:
    """A job that ends after a second or more of waiting is looked at every tenth or fifth of
    a second; the writer's word (:meth:`FleetDispatcher.job_ended`) makes the producer look
    again at once, a few milliseconds after the job ended."""
    settings = make_settings(tmp_path, provider="none", brokerUrl=broker_url)
    with Ends(settings) as memory, FleetDispatcher(broker_url) as writer:
        for length in (1.3, 2.6):
            memory.looks = 0
            memory.ends_at = time.monotonic() + length

            def say() -> None:
                time.sleep(max(0.0, memory.ends_at - time.monotonic()))
                writer.job_ended("m:j")

            saying = threading.Thread(target=say)
            saying.start()
            assert memory.ended_soon("m:j", within_s=5.0) is True
            late = time.monotonic() - memory.ends_at
            saying.join()
            assert 0 <= late <= 0.03, (length, late)  # the pace alone: up to 0.13 / 0.2 s late
            assert memory.looks <= 30, memory.looks


def test_without_the_writers_word_the_pace_is_kept(broker_url: str) -> None:
    """No word (a writer of an older memq): the wait lasts its full time and says so; a word
    is taken once."""
    with FleetDispatcher(broker_url) as fleet:
        started = time.monotonic()
        assert fleet.await_job_end("m:none", 0.3) is False
        assert 0.3 <= time.monotonic() - started < 0.6
        fleet.job_ended("m:once")
        assert fleet.await_job_end("m:once", 1.0) is True
        started = time.monotonic()
        assert fleet.await_job_end("m:once", 0.2) is False
        assert time.monotonic() - started >= 0.2
