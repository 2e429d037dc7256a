"""The single writer's side: embedding results into a store, on connections it keeps open.

A result names its store generation by real path; a generation deleted after a rebuild was
swapped in must not be re-created empty by a late result, nor keep its cached connection.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

from pipeline.messages import EmbedResult
from pipeline.store import schema, writer
from pipeline.store.engine import Database, as_store_error, connect

#: How many store files a pool keeps open at most (a writer shard may serve thousands of
#: memories; each open store holds a few file descriptors and its page cache).
MAX_OPEN_STORES = int(os.environ.get("MEMQ_MAX_OPEN_STORES") or 64)


class StorePool:
    """One open connection per store file (thread-safe); closed when the file goes away or
    is replaced (another inode), when ``max_open`` others were used more recently, and all at
    once by :meth:`close`."""

    def __init__(self, *, want_vectors: bool | str = True, max_open: int = MAX_OPEN_STORES) -> None:
        self.want_vectors = want_vectors
        self.max_open = max(1, max_open)
        self._stores: OrderedDict[str, Database] = OrderedDict()
        self._inodes: dict[str, int] = {}
        self._lock = threading.Lock()

    def get(self, path: str | Path) -> Database | None:
        """The open store at ``path``, or None when the file is gone (never re-created)."""
        key = str(path)
        with self._lock:
            try:
                inode = os.stat(key).st_ino
            except FileNotFoundError:
                stale = self._stores.pop(key, None)
                if stale is not None:
                    stale.close()
                return None
            db = self._stores.get(key)
            if db is not None and self._inodes.get(key) != inode:
                db.close()
                db = None
            if db is None:
                db = connect(key, want_vectors=self.want_vectors)
                schema.ensure_schema(db)
                self._stores[key], self._inodes[key] = db, inode
            self._stores.move_to_end(key)
            while len(self._stores) > self.max_open:
                oldest, idle = self._stores.popitem(last=False)
                self._inodes.pop(oldest, None)
                idle.close()
            return db

    def __len__(self) -> int:
        """How many stores are open."""
        return len(self._stores)

    def close(self) -> None:
        with self._lock:
            stores, self._stores = list(self._stores.values()), {}
            self._inodes.clear()
        for db in stores:
            db.close()


def apply_result(db: Database, result: EmbedResult, *, cache: bool = True
                 ) -> writer.WriteOutcome:
    """Attach a result's vectors (idempotently) and record its failures and held chunks.

    A result from another model than the index's (a late message from before a model switch)
    is refused whole and reported in the outcome; the chunks stay pending for the new model.
    ``cache``: also keep the vectors in the embedding cache (``cache.enabled``).
    """
    try:
        outcome = writer.WriteOutcome()
        if result.vectors:
            outcome = writer.write_vectors(
                db, provider=result.spec.name, model=result.spec.model,
                provider_key=result.spec.provider_key,
                items=[(v.id, v.hash, v.vector) for v in result.vectors], cache=cache)
        if result.failed:
            outcome = replace(outcome, failed=writer.mark_failed(db, list(result.failed)))
        if result.held:
            writer.mark_held(db, list(result.held))
        return outcome
    except db.operational_error as exc:
        raise as_store_error(exc, db.path) or exc from exc


def gone(result: EmbedResult) -> writer.WriteOutcome:
    """The outcome of a result whose store generation no longer exists."""
    return writer.WriteOutcome(refused=f"store {result.store} no longer exists (replaced by a "
                                        "rebuild)")

