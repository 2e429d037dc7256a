"""Per-process copies of a store's data, each tied to the version it was read at.

A long-running reader keeps what it searches (the vectors, :mod:`pipeline.store.matrix`; the
BM25 statistics, :mod:`pipeline.store.postings`) in memory. Each copy carries the version the
store had when it was read, a random value that every transaction changing that data rewrites
in ``meta``; a search reads the store's version first (one point query) and uses the held copy
only when the two agree. Otherwise the search answers from SQLite, which is always current,
while a fresh copy loads in the background on a connection of its own: no search waits for a
load, and none answers from stale data.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from pipeline.store.engine import Database, connect

log = logging.getLogger(__name__)
MAX_STORES = 4  # stores whose copy one process keeps; the least recently used goes first


class Snapshot(Protocol):
    @property
    def version(self) -> str | None: ...


S = TypeVar("S", bound=Snapshot)


class SnapshotCache(Generic[S]):
    """The current copy of each store a process searches (thread-safe).

    ``version_of`` reads the store's current version; ``load`` reads a copy in one read
    transaction (None when the store has nothing to hold, or no version to check it by).
    """

    def __init__(self, what: str, version_of: Callable[[Database], str | None],
                 load: Callable[[Database], S | None], max_stores: int = MAX_STORES) -> None:
        self.what = what
        self.version_of = version_of
        self.load = load
        self.max_stores = max_stores
        self._lock = threading.Lock()
        self._held: OrderedDict[str, S] = OrderedDict()
        self._loading: dict[str, threading.Thread] = {}

    def held(self, key: str) -> S | None:
        """The copy held for ``key`` (a store's :attr:`~pipeline.store.engine.Database.key`),
        current or not."""
        with self._lock:
            return self._held.get(key)

    def _current(self, key: str, version: str | None) -> S | None:
        with self._lock:
            held = self._held.get(key)
            if held is None or held.version != version:
                return None
            self._held.move_to_end(key)
            return held

    def _keep(self, key: str, copy: S) -> None:
        with self._lock:
            old = self._held.get(key)
            self._held[key] = copy
            self._held.move_to_end(key)
            gone = [] if old is None or old is copy else [old]
            while len(self._held) > self.max_stores:
                gone.append(self._held.popitem(last=False)[1])
        for dropped in gone:
            self.dropped(dropped)

    def dropped(self, copy: S) -> None:
        """Called for a copy no longer held (replaced, evicted, cleared): nothing to release
        here; a copy that keeps a resource (:mod:`pipeline.store.rows`) releases it."""

    def _fresh(self, key: str, path: Path, want_vectors: bool | str) -> S | None:
        """A fresh copy of the store at ``path`` (``key``), read on a connection of its
        own."""
        db = connect(path, want_vectors=want_vectors)
        try:
            return self.load(db)
        finally:
            db.close()

    def get(self, db: Database) -> S | None:
        """The store's copy as of now: the held one if current, else a fresh load (waited
        for; tests, benchmarks and callers that would rather wait than ask SQLite)."""
        key = db.key
        held = self._current(key, self.version_of(db))
        if held is not None:
            return held
        fresh = self.load(db)
        if fresh is not None:
            self._keep(key, fresh)
        return fresh

    def current(self, db: Database) -> S | None:
        """The held copy if its version is the store's; else None at once, and a fresh copy
        loads in the background. A store with no version is never held: nothing would tell
        when its copy goes stale."""
        return self.current_at(db, self.version_of(db))

    def current_at(self, db: Database, version: str | None) -> S | None:
        """As :meth:`current`, the store's version (``version_of``) already read."""
        if version is None:
            return None
        key = db.key
        held = self._current(key, version)
        if held is None and self._may_load(key):
            with self._lock:
                if key not in self._loading:
                    loader = threading.Thread(target=self._load_apart, daemon=True,
                                              args=(key, db.path, db.vector_library),
                                              name=f"memq-load-{self.what}")
                    self._loading[key] = loader
                    loader.start()
        return held

    def _may_load(self, key: str) -> bool:
        """Whether a background load of ``key``'s copy may start now (always, here)."""
        return True

    def _load_apart(self, key: str, path: Path, want_vectors: bool | str) -> None:
        try:
            fresh = self._fresh(key, path, want_vectors)
            if fresh is not None:
                self._keep(key, fresh)
        except Exception:  # the search goes on with SQLite, and the next one tries again
            log.exception("loading the %s of %s into memory failed", self.what, path)
        finally:
            with self._lock:
                self._loading.pop(key, None)

    def wait(self, timeout: float | None = None) -> None:
        """Wait for background loads started so far (tests and benchmarks)."""
        with self._lock:
            loaders = list(self._loading.values())
        for loader in loaders:
            loader.join(timeout)

    def clear(self) -> None:
        with self._lock:
            gone = list(self._held.values())
            self._held.clear()
        for dropped in gone:
            self.dropped(dropped)
