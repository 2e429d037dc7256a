"""Waiting for work another process does: asked again soon at first, then at a steady pace."""

from __future__ import annotations

import time

#: The steady pace: a long job is asked about this often.
POLL_S = 0.2
#: The first wait: a job that ends quickly is seen ending about this soon after it does.
FIRST_POLL_S = 0.02


class Poll:
    """The sleeps between checks of one wait: :data:`FIRST_POLL_S`, doubling up to ``cap_s``."""

    def __init__(self, first_s: float = FIRST_POLL_S, cap_s: float = POLL_S) -> None:
        self.cap_s = cap_s
        self._next_s = min(first_s, cap_s)

    def wait(self) -> None:
        """Sleep before the next check."""
        time.sleep(self._next_s)
        self._next_s = min(self._next_s * 2, self.cap_s)
