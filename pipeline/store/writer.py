"""Every write the pipeline makes to the store, each one transaction and each one idempotent.

Celery redelivers messages (acks late, lost workers), so applying the same result twice must
change nothing, and a result for a chunk that no longer exists (its file changed again) is
dropped rather than attached to newer text.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pipeline.store.cache import put_cached
from pipeline.store.engine import Database
from pipeline.store.path_keys import name_keys
from pipeline.store.schema import get_meta, transaction
from pipeline.store.vectors import delete_vectors, put_vectors, vector_dims

# Files and chunk rows are written without NumPy: only the functions that attach vectors
# import it, so an index pass that writes no vector (keyword-only) never loads it.
if TYPE_CHECKING:
    import numpy as np


class Chunk(Protocol):
    """What the writer stores of a chunk (:class:`pipeline.ingest.chunking.Chunk` has it)."""

    @property
    def start_line(self) -> int: ...
    @property
    def end_line(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def hash(self) -> str: ...
    @property
    def importance(self) -> int | None: ...
    @property
    def triggers(self) -> str | None: ...
    @property
    def project_key(self) -> str | None: ...


@dataclass(frozen=True)
class PendingChunk:
    """A chunk row that still needs a vector."""

    rowid: int
    id: str
    hash: str
    text: str


@dataclass(frozen=True)
class FileRecord:
    path: str
    source: str
    hash: str
    mtime_ns: int
    size: int
    error: str | None = None


@dataclass(frozen=True)
class WriteOutcome:
    written: int = 0
    stale: int = 0
    failed: int = 0
    refused: str | None = None


def chunk_id(source: str, path: str, chunk: Chunk) -> str:
    key = f"{source}:{path}:{chunk.start_line}:{chunk.end_line}:{chunk.hash}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def replace_file(db: Database, record: FileRecord, chunks: Sequence[Chunk]) -> None:
    """Make the store hold exactly ``chunks`` for ``record.path``.

    Chunks that did not change keep their rows (and vectors) and take their entry's current
    annotation values (an edited ``<!-- importance: N -->`` leaves the text alone); chunks that
    vanished are deleted with their vectors; new chunks are inserted as ``pending`` and are
    keyword-searchable at once.
    """
    now = time.time()
    wanted = {chunk_id(record.source, record.path, c): c for c in chunks}
    with transaction(db) as conn:
        existing = dict(
            conn.execute("SELECT id, rowid FROM chunks WHERE path = ?", (record.path,)).fetchall()
        )
        gone = [rowid for cid, rowid in existing.items() if cid not in wanted]
        if gone:
            delete_vectors(db, gone)
            conn.executemany("DELETE FROM chunks WHERE rowid = ?", [(r,) for r in gone])
        conn.executemany(
            "INSERT INTO chunks(id, path, source, start_line, end_line, hash, text, state, "
            "updated_at, importance, triggers, project_key) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?)",
            [
                (cid, record.path, record.source, c.start_line, c.end_line, c.hash, c.text, now,
                 c.importance, c.triggers, c.project_key)
                for cid, c in wanted.items()
                if cid not in existing
            ],
        )
        conn.executemany(
            "UPDATE chunks SET importance = ?, triggers = ?, project_key = ? WHERE rowid = ? "
            "AND (importance IS NOT ? OR triggers IS NOT ? OR project_key IS NOT ?)",
            [
                (c.importance, c.triggers, c.project_key, existing[cid], c.importance,
                 c.triggers, c.project_key)
                for cid, c in wanted.items()
                if cid in existing
            ],
        )
        conn.execute(
            "INSERT INTO files(path, source, hash, mtime_ns, size, error, indexed_at, name_key, "
            "stem_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET "
            "source = excluded.source, hash = excluded.hash, mtime_ns = excluded.mtime_ns, "
            "size = excluded.size, error = excluded.error, indexed_at = excluded.indexed_at",
            (record.path, record.source, record.hash, record.mtime_ns, record.size, record.error,
             now, *name_keys(record.path)),
        )


def record_file_error(db: Database, record: FileRecord) -> None:
    """Remember a file that could not be indexed (and drop its old chunks: they are stale)."""
    with transaction(db) as conn:
        _delete_path(db, record.path)
        conn.execute(
            "INSERT INTO files(path, source, hash, mtime_ns, size, error, indexed_at, name_key, "
            "stem_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET "
            "hash = excluded.hash, mtime_ns = excluded.mtime_ns, size = excluded.size, "
            "error = excluded.error, indexed_at = excluded.indexed_at",
            (record.path, record.source, record.hash, record.mtime_ns, record.size, record.error,
             time.time(), *name_keys(record.path)),
        )


def delete_file(db: Database, path: str) -> None:
    """Forget a file that vanished from disk, with its chunks and vectors."""
    with transaction(db) as conn:
        _delete_path(db, path)
        conn.execute("DELETE FROM files WHERE path = ?", (path,))


def _delete_path(db: Database, path: str) -> None:
    rowids = [r for (r,) in db.conn.execute("SELECT rowid FROM chunks WHERE path = ?", (path,))]
    delete_vectors(db, rowids)
    db.conn.execute("DELETE FROM chunks WHERE path = ?", (path,))


def touch_file(db: Database, path: str, mtime_ns: int, size: int) -> None:
    """The file's bytes are unchanged (same hash) but its stat moved: remember the new stat."""
    db.conn.execute(
        "UPDATE files SET mtime_ns = ?, size = ? WHERE path = ?", (mtime_ns, size, path)
    )


def write_vectors(
    db: Database,
    *,
    provider: str,
    model: str,
    provider_key: str,
    items: Sequence[tuple[str, str, np.ndarray]],
    cache: bool = True,
) -> WriteOutcome:
    """Attach embedded vectors to their chunks: items are (chunk id, text hash, vector).

    Refuses the whole message when it was embedded by another model than the index's (vectors
    of two models never mix); drops items whose chunk is gone or already changed.
    """
    import numpy as np

    index = get_meta(db, "index") or {}
    if (index.get("provider"), index.get("model"), index.get("provider_key")) != (
        provider, model, provider_key
    ):
        return WriteOutcome(refused=f"index is for {index.get('provider')}/{index.get('model')}, "
                                    f"result came from {provider}/{model}")
    dims = vector_dims(db)
    widths = {int(np.asarray(v).shape[-1]) for _, _, v in items}
    if dims is not None and widths - {dims}:
        return WriteOutcome(refused=f"index holds {dims}-dimensional vectors, got {sorted(widths)}")
    with transaction(db) as conn:
        live: list[int] = []
        vectors: list[np.ndarray] = []
        by_hash: dict[str, np.ndarray] = {}
        for cid, text_hash, vector in items:
            row = conn.execute(
                "SELECT rowid FROM chunks WHERE id = ? AND hash = ?", (cid, text_hash)
            ).fetchone()
            by_hash[text_hash] = vector
            if row is not None:
                live.append(row[0])
                vectors.append(vector)
        if live:
            put_vectors(db, live, np.stack(vectors))
        conn.executemany(
            "UPDATE chunks SET state = 'ready', error = NULL, updated_at = ? WHERE rowid = ?",
            [(time.time(), r) for r in live],
        )
        if cache and by_hash:
            put_cached(db, provider, model, provider_key, by_hash)
    return WriteOutcome(written=len(live), stale=len(items) - len(live))


def attach_cached(db: Database, pending: Sequence[PendingChunk], cached: dict[str, np.ndarray]
                  ) -> list[PendingChunk]:
    """Give pending chunks their cached vectors; return the ones the cache could not serve."""
    import numpy as np

    hits = [p for p in pending if p.hash in cached]
    if hits:
        with transaction(db) as conn:
            put_vectors(db, [p.rowid for p in hits], np.stack([cached[p.hash] for p in hits]))
            conn.executemany(
                "UPDATE chunks SET state = 'ready', error = NULL, updated_at = ? WHERE rowid = ?",
                [(time.time(), p.rowid) for p in hits],
            )
    return [p for p in pending if p.hash not in cached]


def mark_queued(db: Database, rowids: Sequence[int], *, sent_at: float | None = None) -> None:
    """Remember when chunks were handed to a queue, so a later pass does not queue them twice.

    ``sent_at`` (epoch seconds, taken before the job was sent): a chunk whose row changed since
    then already has its job's verdict (a vector, or held with a reason, written by an
    in-process dispatcher) and is left as it is."""
    now = time.time()
    with transaction(db) as conn:
        if sent_at is None:
            conn.executemany("UPDATE chunks SET queued_at = ? WHERE rowid = ?",
                             [(now, r) for r in rowids])
        else:
            conn.executemany("UPDATE chunks SET queued_at = ? WHERE rowid = ? "
                             "AND state = 'pending' AND updated_at < ?",
                             [(now, r, sent_at) for r in rowids])


def mark_held(db: Database, items: Sequence[tuple[str, str]]) -> None:
    """Leave chunks (id, reason) pending with the reason shown, and no longer in flight, so
    the next producer pass queues them again (after the configuration was fixed)."""
    with transaction(db) as conn:
        conn.executemany(
            "UPDATE chunks SET error = ?, queued_at = NULL, updated_at = ? "
            "WHERE id = ? AND state = 'pending'",
            [(reason[:500], time.time(), cid) for cid, reason in items],
        )


def mark_failed(db: Database, items: Sequence[tuple[str, str]]) -> int:
    """Mark chunks (id, reason) as failed: keyword-searchable, no vector, shown in status."""
    with transaction(db) as conn:
        cur = conn.executemany(
            "UPDATE chunks SET state = 'failed', error = ?, updated_at = ? "
            "WHERE id = ? AND state = 'pending'",
            [(reason[:500], time.time(), cid) for cid, reason in items],
        )
    return cur.rowcount


def keep_text(db: Database, path: str, text: str) -> None:
    """Keep the text of memory file ``path`` that a producer on another host sent, for
    ``memory_get`` on hosts without the files (its row goes when the file's row goes)."""
    db.conn.execute("INSERT INTO file_texts(path, text) VALUES (?, ?) ON CONFLICT(path) DO "
                    "UPDATE SET text = excluded.text", (path, text))


def forget_kept_texts(db: Database) -> None:
    """Drop every kept text (the store's files are read on this host from now on)."""
    db.conn.execute("DELETE FROM file_texts")
