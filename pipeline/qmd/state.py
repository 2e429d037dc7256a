"""memq's record of a QMD home, shared by every process that uses the memory.

One small JSON file (``memq-qmd-state.json`` in the home) holds:

- ``collections``: what memq bound each collection name to (path and mask), so a changed
  config rebinds a collection and an unchanged one costs nothing;
- ``lastUpdateAt``, ``lastEmbedAt`` (epoch seconds), ``embedFailures`` and
  ``embedBackoffUntil``: when the index was refreshed, for the update interval, the debounce
  and the embed back-off;
- ``down``: the current outage, ``{"since", "kind", "reason", "retryAt"}``, or absent.

A one-shot ``memq search`` process sees what a long-running server learnt (QMD is down, retry at
…), and ``status()`` shows it. Every change is a read-modify-write under an exclusive
``flock`` on ``<file>.lock``, held for milliseconds; the file is replaced atomically, so a
reader never sees half of it. A missing or unreadable file reads as empty.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class StateFile:
    """The JSON state of one QMD home; thread- and process-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def read(self) -> dict[str, Any]:
        """The current state (``{}`` when there is none yet)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def update(self, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Apply ``change`` to the state in place and save it; returns the new state."""
        with self._locked():
            state = self.read()
            change(state)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(state, indent=1, sort_keys=True), encoding="utf-8")
            os.replace(tmp, self.path)
            return state

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, open(self.path.with_name(self.path.name + ".lock"), "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


@contextmanager
def exclusive(path: Path, lock: threading.Lock) -> Iterator[None]:
    """Hold ``lock`` (this process's threads) and an ``flock`` on ``path`` (other processes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with lock, open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
