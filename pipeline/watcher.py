"""Follow the memory files as they change: watchdog events → debounced batches → callbacks.

The watcher knows nothing of queues or stores: it hands each settled batch of changed paths to
``on_batch`` (a targeted producer pass) and calls ``on_tick`` on every loop turn (periodic
reconcile, rebuild steps). Its rules:

- **Debounce.** A batch is handed over once no event arrived for ``debounce_s`` (writes have
  settled: an editor's save-rename dance or a ``git checkout`` of 500 files is one batch), or
  ``max_wait_s`` after its first event, so a file written forever still gets indexed.
- **Few watches.** Only the workspace folder itself (for ``MEMORY.md``), ``memory/`` and the
  extra paths are watched. With inotify a recursive watch is one watch per folder on a single
  descriptor, never one descriptor per file; ``polling`` swaps in watchdog's polling observer
  for file systems without native events (network mounts, some containers).
- **Ignore lists and symlinks.** Events inside :data:`pipeline.sources.IGNORED_DIRS` are dropped
  here; the targeted sync skips symlinks, exactly as the full scan does.
- **Moves** count for both ends: the old path is deleted from the index, the new one added.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch
from watchdog.observers.polling import PollingObserver

from pipeline.config import Settings
from pipeline.sessions import SESSIONS_SOURCE
from pipeline.sources import IGNORED_DIRS

DEFAULT_DEBOUNCE_S = 1.5
MAX_WAIT_FACTOR = 20  # a batch waits at most this many debounce periods
IGNORED_EVENTS = frozenset({"opened", "closed_no_write"})


class ChangeBatcher:
    """Collects changed paths from the observer thread until writes settle."""

    def __init__(self, debounce_s: float, max_wait_s: float | None = None) -> None:
        self.debounce_s = debounce_s
        self.max_wait_s = max_wait_s if max_wait_s is not None else debounce_s * MAX_WAIT_FACTOR
        self._paths: set[Path] = set()
        self._first = self._last = 0.0
        self._lock = threading.Lock()

    def add(self, *paths: Path, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            if not self._paths:
                self._first = now
            self._paths.update(paths)
            self._last = now

    def take(self, now: float | None = None) -> set[Path] | None:
        """The batch, if it has settled (or waited long enough); None otherwise."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if not self._paths:
                return None
            if now - self._last < self.debounce_s and now - self._first < self.max_wait_s:
                return None
            batch, self._paths = self._paths, set()
            return batch


def ignored(path: Path) -> bool:
    return any(part in IGNORED_DIRS for part in path.parts)


class _Handler(FileSystemEventHandler):
    def __init__(self, batcher: ChangeBatcher) -> None:
        self.batcher = batcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in IGNORED_EVENTS:
            return
        paths = [Path(os.fsdecode(event.src_path))]
        if getattr(event, "dest_path", ""):
            paths.append(Path(os.fsdecode(event.dest_path)))
        kept = [p for p in paths if not ignored(p)]
        if kept:
            self.batcher.add(*kept)


def watch_targets(settings: Settings) -> list[tuple[Path, bool]]:
    """(folder, recursive) pairs to watch; folders that do not exist yet are skipped."""
    workspace = settings.workspace
    targets: list[tuple[Path, bool]] = [(workspace, False)]
    memory = workspace / "memory"
    if memory.is_dir() and not memory.is_symlink():
        targets.append((memory, True))
    for extra in settings.extra_paths:
        extra = extra if extra.is_absolute() else workspace / extra
        if extra.is_symlink():
            continue
        if extra.is_dir():
            targets.append((extra, True))
        elif extra.parent.is_dir():
            targets.append((extra.parent, False))
    if SESSIONS_SOURCE in settings.sources and settings.sessions_dir.is_dir():
        targets.append((settings.sessions_dir, False))
    seen: dict[Path, bool] = {}
    for folder, recursive in targets:
        seen[folder] = seen.get(folder, False) or recursive
    return list(seen.items())


class Watcher:
    """Runs an observer and the debounce loop; ``run`` blocks until ``stop`` is called."""

    def __init__(self, settings: Settings, on_batch: Callable[[set[Path]], None], *,
                 on_tick: Callable[[], None] | None = None, debounce_s: float | None = None,
                 polling: bool = False, poll_interval_s: float = 1.0,
                 tick_s: float = 0.1) -> None:
        self.settings = settings
        self.on_batch, self.on_tick = on_batch, on_tick
        if debounce_s is None:
            debounce_s = settings.sync.watch_debounce_ms / 1000
        self.batcher = ChangeBatcher(debounce_s)
        self.observer: BaseObserver = (PollingObserver(timeout=poll_interval_s) if polling
                                       else Observer())
        self.tick_s = tick_s
        self._handler = _Handler(self.batcher)
        self._watched: dict[Path, ObservedWatch] = {}
        self._stop = threading.Event()

    def _schedule(self) -> list[Path]:
        """Watch every target not watched yet (``memory/`` may appear after start, or vanish
        and come back: a watch on a deleted folder is dead and is dropped here)."""
        for folder, watch in list(self._watched.items()):
            if not folder.is_dir():
                with contextlib.suppress(KeyError):  # its emitter may have gone on its own
                    self.observer.unschedule(watch)
                del self._watched[folder]
        added: list[Path] = []
        if not self.settings.sync.watch:  # sync.watch = false: reconcile ticks only
            return added
        for folder, recursive in watch_targets(self.settings):
            if folder in self._watched:
                continue
            self._watched[folder] = self.observer.schedule(self._handler, str(folder),
                                                           recursive=recursive)
            added.append(folder)
        return added

    def start(self) -> None:
        self._schedule()
        self.observer.start()

    def step(self) -> None:
        """One loop turn: pick up new folders, hand over a settled batch, run the tick."""
        for folder in self._schedule():
            if folder != self.settings.workspace:
                self.batcher.add(folder)  # files written before the watch started
        batch = self.batcher.take()
        if batch:
            self.on_batch(batch)
        if self.on_tick is not None:
            self.on_tick()

    def run(self) -> None:
        self.start()
        try:
            while not self._stop.wait(self.tick_s):
                self.step()
        finally:
            self.observer.stop()
            self.observer.join(timeout=5)

    def stop(self) -> None:
        self._stop.set()
