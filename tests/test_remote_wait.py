"""How soon a producer pass on the files' host sees its job end on the shard's host
(:meth:`pipeline.remote.RemoteMemory.ended_soon`): a job of a fraction of a second is seen
ending within a few hundredths of a second, at a bounded number of looks; a job that has
not ended is left to the usual pace after ``within_s``."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pipeline.fleet.broker import FleetDispatcher
from pipeline.fleet.job_log import JobRecord
from pipeline.remote import QUICK_JOB_S, RemoteMemory


class Ends(RemoteMemory):
    """A remote memory whose job log says job ``j`` runs until ``ends_at`` (monotonic)."""

    ends_at = 0.0
    looks = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: For each pause between two looks: whether the writer's word ended it.
        self.woken: list[bool] = []

    def job(self, job_id: str) -> JobRecord | None:
        self.looks += 1
        state = "done" if time.monotonic() >= self.ends_at else "running"
        return JobRecord(job_id, "m", state, "SUCCESS" if state == "done" else "STARTED")

    def pause_for_job(self, job_id: str, seconds: float) -> bool:
        woken = super().pause_for_job(job_id, seconds)
        self.woken.append(woken)
        return woken


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
    assert 0.5 <= time.monotonic() - started < 1.0  # its time, and at most one look more
    assert memory.looks <= 25  # ~10 looks at 20 ms, then ~10 at a tenth of the wait
    assert QUICK_JOB_S <= 2.0  # the quick pace is short: its looks stay few


def test_the_writers_word_that_a_job_ended_is_noticed_at_once(
        tmp_path: Path, make_settings, broker_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer's word (:meth:`FleetDispatcher.job_ended`) ends the pause it comes in, and
    the look right after it sees the job ended: the producer does not wait out its pace. The
    pace is stretched to 5 s here so that only the word can end a pause within the test, and
    the check is what ended each pause, not the clock (a busy machine stretches both sides:
    the writer's thread wakes late too)."""
    monkeypatch.setattr("pipeline.remote.QUICK_POLL_S", 5.0)
    monkeypatch.setattr("pipeline.remote.POLL_S", 5.0)
    settings = make_settings(tmp_path, provider="none", brokerUrl=broker_url)
    with Ends(settings) as memory, FleetDispatcher(broker_url) as writer:
        for length in (1.0, 2.0):  # the word after the first look, even on a busy machine
            memory.looks, memory.woken = 0, []
            memory.ends_at = time.monotonic() + length

            def say() -> None:
                time.sleep(max(0.0, memory.ends_at - time.monotonic()))
                writer.job_ended("m:j")

            saying = threading.Thread(target=say)
            saying.start()
            started = time.monotonic()
            assert memory.ended_soon("m:j", within_s=30.0) is True
            waited = time.monotonic() - started
            saying.join()
            assert memory.woken == [True], memory.woken  # one pause, ended by the word
            assert memory.looks == 2  # the look before it, and the one that saw the end
            assert waited < 5.0, waited  # not the stretched pace


def test_without_the_writers_word_the_pace_is_kept(broker_url: str) -> None:
    """No word (a writer of an older memq): the wait lasts its full time and says so; a word
    is taken once."""
    with FleetDispatcher(broker_url) as fleet:
        started = time.monotonic()
        assert fleet.await_job_end("m:none", 1.0) is False
        assert 1.0 <= time.monotonic() - started < 2.0  # its time once, not twice
        fleet.job_ended("m:once")
        assert fleet.await_job_end("m:once", 1.0) is True
        started = time.monotonic()
        assert fleet.await_job_end("m:once", 0.2) is False
        assert time.monotonic() - started >= 0.2
