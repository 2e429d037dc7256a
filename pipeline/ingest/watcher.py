"""Follow the memory files as they change: watchdog events → debounced batches → callbacks.

The watcher knows nothing of queues or stores: it hands each settled batch of changed paths to
``on_batch`` (a targeted producer pass) and calls ``on_tick`` on every loop turn (periodic
reconcile, rebuild steps). Its rules:

- **Debounce.** A batch is handed over once no event arrived for ``debounce_s`` (writes have
  settled: an editor's save-rename dance or a ``git checkout`` of 500 files is one batch), or
  ``max_wait_s`` after its first event, so a file written forever still gets indexed.
- **Few watches.** Only the workspace folder itself (for ``MEMORY.md`` and ``USER.md``),
  ``memory/`` and the extra paths are watched. With inotify a recursive watch is one watch per
  folder on a single descriptor, never one descriptor per file.
- **Polling fallback** (``watch.polling``): ``true`` swaps in watchdog's polling observer,
  ``false`` insists on native events, and ``auto`` (the default) polls when a watched folder
  sits on a file system whose changes made elsewhere raise no local events (NFS, SMB/CIFS,
  9p as in WSL2's ``/mnt/c``, sshfs, VirtualBox shares), or when native watches cannot be set
  up at all (inotify's watch or instance limit reached).
- **Ignore lists and symlinks.** Events inside :data:`pipeline.ingest.sources.IGNORED_DIRS` are
  dropped here; the targeted sync skips symlinks, exactly as the full scan does.
- **Globbed extra paths.** A file event below an ``extraPaths`` ``{path, pattern}`` folder
  that the pattern does not select is dropped here too (:mod:`pipeline.ingest.globs`);
  folder events pass (the targeted sync filters what it finds below them).
- **Moves** count for both ends: the old path is deleted from the index, the new one added.
- **Live transcripts.** With session memory on, the folder of OpenClaw's agent database
  (``agent/`` beside the sessions folder, :mod:`pipeline.ingest.live_sessions`) is watched too:
  a change of ``openclaw-agent.sqlite`` or of its ``-wal`` (every transaction OpenClaw commits
  lands there first) hands the database over, and the targeted pass re-reads the transcripts
  whose size or last change moved. Other files there, ``-shm`` included (readers write it,
  memq too), are dropped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch
from watchdog.observers.polling import PollingObserver

from pipeline.config import Settings
from pipeline.ingest.globs import PathPatterns
from pipeline.ingest.live_sessions import agent_database, is_agent_folder_noise
from pipeline.ingest.sources import IGNORED_DIRS
from pipeline.ingest.transcripts import SESSIONS_SOURCE

log = logging.getLogger(__name__)

DEFAULT_DEBOUNCE_S = 1.5
MAX_WAIT_FACTOR = 20  # a batch waits at most this many debounce periods
IGNORED_EVENTS = frozenset({"opened", "closed_no_write"})
#: File systems on which a change made by another machine raises no local inotify event.
NO_EVENT_FILE_SYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "drvfs", "vboxsf", "afs", "ceph",
    "glusterfs", "lustre", "davfs", "fuse.sshfs", "fuse.rclone", "fuse.s3fs",
    "fuse.glusterfs", "fuse.davfs2",
})
MOUNTINFO = Path("/proc/self/mountinfo")


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
    def __init__(self, batcher: ChangeBatcher, patterns: PathPatterns | None = None,
                 noise: Callable[[Path], bool] | None = None) -> None:
        self.batcher = batcher
        self.patterns = patterns
        self.noise = noise  # paths whose changes say nothing (the agent database's -shm…)

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in IGNORED_EVENTS:
            return
        paths = [Path(os.fsdecode(event.src_path))]
        if getattr(event, "dest_path", ""):
            paths.append(Path(os.fsdecode(event.dest_path)))
        kept = [p for p in paths if not ignored(p) and not (self.noise and self.noise(p))]
        if self.patterns and not event.is_directory:
            kept = [p for p in kept if not self.patterns.excludes(p)]
        if kept:
            self.batcher.add(*kept)


def watch_targets(settings: Settings) -> list[tuple[Path, bool]]:
    """(folder, recursive) pairs to watch; folders that do not exist (yet, or any more: a
    deleted workspace) are skipped."""
    workspace = settings.workspace
    targets: list[tuple[Path, bool]] = [(workspace, False)] if workspace.is_dir() else []
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
    if SESSIONS_SOURCE in settings.sources:
        live = agent_database(settings).parent
        targets += [(folder, False) for folder in (settings.sessions_dir, live)
                    if folder.is_dir()]
    seen: dict[Path, bool] = {}
    for folder, recursive in targets:
        seen[folder] = seen.get(folder, False) or recursive
    return list(seen.items())


def _unescape(field: str) -> str:
    """mountinfo writes a space, tab, newline or backslash in a path as ``\\ooo`` octal."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def file_system_of(path: Path, mountinfo: str) -> str | None:
    """The type of the file system ``path`` lives on, from ``/proc/self/mountinfo`` text."""
    best, kind = "", None
    target = str(path)
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if " - " not in line or len(fields) < 5:
            continue
        mount = _unescape(fields[4])
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, line.split(" - ", 1)[1].split(" ", 1)[0]
    return kind


def polling_needed(folders: list[Path], mountinfo: str | None = None) -> str | None:
    """Why ``auto`` must poll these folders (a file system without remote events), or None."""
    if mountinfo is None:
        try:
            mountinfo = MOUNTINFO.read_text()
        except OSError:
            return None  # not Linux: native events are all there is to know
    for folder in folders:
        kind = file_system_of(folder, mountinfo)
        if kind in NO_EVENT_FILE_SYSTEMS:
            return f"{folder} is on {kind}, which raises no events for changes made elsewhere"
    return None


class Watcher:
    """Runs an observer and the debounce loop; ``run`` blocks until ``stop`` is called."""

    def __init__(self, settings: Settings, on_batch: Callable[[set[Path]], None], *,
                 on_tick: Callable[[], None] | None = None, debounce_s: float | None = None,
                 polling: bool | None = None, poll_interval_s: float | None = None,
                 tick_s: float = 0.1) -> None:
        """``polling`` None means ``auto``; both polling arguments default to ``watch.*``."""
        self.settings = settings
        self.on_batch, self.on_tick = on_batch, on_tick
        if debounce_s is None:
            debounce_s = settings.sync.watch_debounce_ms / 1000
        self.batcher = ChangeBatcher(debounce_s)
        chosen = settings.watch.polling if polling is None else polling
        self.auto = chosen is None
        self.poll_interval_s = (settings.watch.poll_interval_ms / 1000 if poll_interval_s is None
                                else poll_interval_s)
        why = polling_needed([f for f, _ in watch_targets(settings)]) if self.auto else None
        if why:
            log.warning("polling for changes: %s", why)
        self.polling = bool(chosen) or why is not None
        #: Why this watcher polls (None while it gets native events).
        self.polling_reason: str | None = why or ("watch.polling is true" if chosen else None)
        self.observer: BaseObserver = (PollingObserver(timeout=self.poll_interval_s)
                                       if self.polling else Observer())
        self.tick_s = tick_s
        self._handler = _Handler(self.batcher, PathPatterns.of(settings),
                                 lambda path: is_agent_folder_noise(settings, path))
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
            try:
                self._watched[folder] = self.observer.schedule(self._handler, str(folder),
                                                               recursive=recursive)
            except FileNotFoundError:  # deleted since it was listed: the next turn sees
                continue
            added.append(folder)
        return added

    def start(self) -> None:
        try:
            self._schedule()
            self.observer.start()
        except OSError as exc:
            self._fall_back(exc)

    def _fall_back(self, exc: OSError) -> None:
        """``auto``: native watches could not be set up (inotify limits): poll instead."""
        if not self.auto or self.polling:
            raise exc
        log.warning("native file events unavailable (%s): polling every %g s instead",
                    exc.strerror or exc, self.poll_interval_s)
        with contextlib.suppress(Exception):
            self.observer.stop()
        self.polling = True
        self.polling_reason = f"native file events unavailable ({exc.strerror or exc})"
        self.observer = PollingObserver(timeout=self.poll_interval_s)
        self._watched.clear()
        self._schedule()
        self.observer.start()

    def step(self) -> None:
        """One loop turn: pick up new folders, hand over a settled batch, run the tick."""
        try:
            added = self._schedule()
        except OSError as exc:  # a new folder past inotify's watch limit
            self._fall_back(exc)
            added = list(self._watched)
        for folder in added:
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
