"""Whole copies of a store, for moving a shard to another host.

:func:`snapshot` writes a consistent copy of a live store (SQLite's online backup: pages
copied under a read transaction, so the writer keeps writing meanwhile and the copy is the
store as of one moment); :func:`adopt` makes a received copy a store of this host, forgetting
which of its chunks had embedding jobs in flight on the old host (the next pass queues them
again here).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pipeline.store import reads
from pipeline.store.engine import Database, connect
from pipeline.store.vectors import count_vectors


def snapshot(db: Database, target: Path) -> None:
    """Write a consistent copy of the open store ``db`` to ``target`` (a new file)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    copy = connect(target, want_vectors=False)
    try:
        db.conn.backup(copy.conn)
    finally:
        copy.close()


def digest(path: Path) -> str:
    """The sha256 of a file (to check a copy that travelled in parts)."""
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            sha.update(block)
    return sha.hexdigest()


def sizes(path: Path) -> dict[str, int]:
    """What a store holds: chunks and vectors."""
    db = connect(path, want_vectors=True)
    try:
        return {"chunks": sum(reads.state_counts(db).values()), "vectors": count_vectors(db)}
    finally:
        db.close()


def adopt(copy: Path, store: Path) -> dict[str, int]:
    """Make the received ``copy`` the store at ``store`` (replacing the file there, with its
    WAL), its in-flight marks forgotten; what it holds."""
    db = connect(copy, want_vectors=False)
    try:
        reads.forget_queued(db)
        db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    for leftover in (store.with_name(store.name + "-wal"), store.with_name(store.name + "-shm")):
        leftover.unlink(missing_ok=True)
    for leftover in (copy.with_name(copy.name + "-wal"), copy.with_name(copy.name + "-shm")):
        leftover.unlink(missing_ok=True)
    os.replace(copy, store)
    return sizes(store)
