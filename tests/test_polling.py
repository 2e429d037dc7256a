"""A wait for another process's work checks soon at first, then at a steady pace."""

from __future__ import annotations

import itertools

import pytest

from pipeline import polling
from pipeline.polling import FIRST_POLL_S, POLL_S, Poll


def test_a_poll_doubles_from_its_first_wait_up_to_its_cap(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    slept: list[float] = []
    monkeypatch.setattr(polling.time, "sleep", slept.append)
    poll = Poll()
    for _ in range(7):
        poll.wait()
    assert slept[0] == FIRST_POLL_S and slept[-1] == POLL_S
    assert all(b == min(a * 2, POLL_S) for a, b in itertools.pairwise(slept))
    capped = Poll(first_s=1.0, cap_s=0.5)
    capped.wait()
    assert slept[-1] == 0.5
