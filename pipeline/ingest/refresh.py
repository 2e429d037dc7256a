"""Keep the index following the disk from a long-running reader (the MCP server).

A search must never wait for indexing: the reader asks which files are stale
(:func:`find_stale`), answers from the index as it is, and leaves the sync to a background
thread (:class:`BackgroundRefresher`, which runs :meth:`memq.Memory.sync`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

from pipeline.config import Settings
from pipeline.ingest.globs import PathPatterns
from pipeline.ingest.safety import reads_own_files
from pipeline.ingest.sources import (
    MEMORY_SOURCE,
    SourceFile,
    in_scope,
    memory_files,
    relative_path,
)
from pipeline.store import reads, schema
from pipeline.store.engine import Database

log = logging.getLogger(__name__)
T = TypeVar("T")


def stat_memory_files(settings: Settings, unreadable: list[tuple[str, str]]
                      ) -> Iterator[tuple[SourceFile, os.stat_result]]:
    """Each memory file on disk (session transcripts left out) with its stat; a file gone
    while listed is skipped, a folder that could not be listed is added to ``unreadable``."""
    for file in memory_files(settings.workspace, settings.extra_paths, settings.multimodal,
                             unreadable=unreadable, patterns=PathPatterns.of(settings)):
        try:
            yield file, os.stat(file.file)  # a str, not a Path: Path objects cost more
        except OSError:
            continue


def stale_memory_paths(db: Database, settings: Settings) -> list[Path]:
    """Memory files that are new, gone, or whose stat moved since the store saw them.

    Read-only and stat-only (no hashing): the cheap check a search makes before answering, so
    a long-running reader can tell whether the index is behind the disk without syncing it.
    Session transcripts are left out: they change on every turn and have their own delta
    thresholds.
    """
    known = reads.file_stats(db, MEMORY_SOURCE)
    stale: list[Path] = []
    unreadable: list[tuple[str, str]] = []
    for file, stat in stat_memory_files(settings, unreadable):
        if known.pop(file.path, None) != (stat.st_mtime_ns, stat.st_size):
            stale.append(file.abs_path)
    hidden = {folder for folder, _ in unreadable}  # their files are unknown, not gone
    stale += [Path(os.path.normpath(settings.workspace / path)) for path in known
              if not in_scope(path, hidden)]
    return stale


def find_stale(settings: Settings) -> list[str]:
    """Memory files the index does not reflect yet (all of them when nothing is indexed);
    none when the store's files are sent from another host's folder
    (:mod:`pipeline.ingest.safety`): this host cannot tell."""
    db = schema.open_store(settings.store.path, want_vectors=False)
    if db is None:
        return [f.path for f in memory_files(settings.workspace, settings.extra_paths,
                                             settings.multimodal,
                                             patterns=PathPatterns.of(settings))]
    try:
        if not reads_own_files(db, settings):  # sent from another host's folder: not this one
            return []
        return [relative_path(settings.workspace, p) for p in stale_memory_paths(db, settings)]
    finally:
        db.close()


class BackgroundRefresher(Generic[T]):
    """Runs ``refresh`` one at a time; triggers that arrive during a run coalesce into one
    more run after it."""

    def __init__(self, refresh: Callable[[], T]) -> None:
        self.refresh = refresh
        self.last_error: str | None = None
        self._run_lock = threading.Lock()
        self._state = threading.Lock()
        self._again = False
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        with self._state:
            return self._thread is not None

    def refresh_now(self) -> T:
        """A synchronous run (after an append); waits for a background run in flight."""
        with self._run_lock:
            try:
                outcome = self.refresh()
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                raise
            self.last_error = None
            return outcome

    def trigger(self) -> None:
        """Start a background run unless one is running (which then runs once more)."""
        with self._state:
            self._again = True
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._loop, name="memq-refresh", daemon=True)
            self._thread.start()

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the background run in flight, if any (tests, and closing)."""
        with self._state:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self._state:
                if not self._again:
                    self._thread = None
                    return
                self._again = False
            try:
                self.refresh_now()
            except Exception:  # a background run has no caller: its error is kept and logged
                log.exception("background index refresh failed")
