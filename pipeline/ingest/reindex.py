"""Safe reindex: build a new index beside the live one, and swap it in when it is complete.

A fingerprint change (model, provider key, chunking, scope; see
:func:`pipeline.ingest.producer.index_identity`) or ``memq reindex`` never touches the live store:
searches keep answering from it. A new store file (a *generation*) is created next to it,
seeded with the live store's embedding cache (so texts embedded before cost nothing), filled by
ordinary producer passes through the ordinary queues, and swapped in when a disk pass leaves
nothing pending.

The swap is one atomic ``rename(2)`` of a symlink: ``store.path`` becomes a link to the new
generation. SQLite follows the link when it opens the file, so its ``-wal``/``-shm`` files sit
next to the generation, never next to the link, and a connection opened before the swap keeps
reading its own (old) generation to the end. Both generations are checkpointed first, so a
reader that opens the old file in the instant of the swap still sees all of its data.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.config import Settings
from pipeline.embeddings.registry import ProviderChoice
from pipeline.ingest.producer import (
    REQUEUE_AFTER_S,
    IndexReport,
    index_fingerprint,
    index_identity,
    index_once,
)
from pipeline.store import cache, reads, schema
from pipeline.store.engine import Database, connect
from pipeline.store.reads import REINDEX_META, rebuild_info

if TYPE_CHECKING:
    from pipeline.messages import EmbedJob  # pydantic: for the pass that builds one

SIDE_FILES = ("-wal", "-shm")


@dataclass
class RebuildProgress:
    """Where a rebuild stands: its target file, chunk counts, and whether it was swapped in."""

    target: str
    reason: str
    started_at: float
    chunks: int = 0
    ready: int = 0
    pending: int = 0
    queued: int = 0  # chunks sent to the embedding queues so far
    cached: int = 0  # chunks served from the (seeded) embedding cache so far
    done: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "reason": self.reason, "startedAt": self.started_at,
                "chunks": self.chunks, "ready": self.ready, "pending": self.pending,
                "chunksQueued": self.queued, "chunksFromCache": self.cached, "done": self.done}


def generation_path(store_path: Path) -> Path:
    """A fresh file name for a new generation, in the live store's folder."""
    return store_path.with_name(f"{store_path.name}.gen-{time.time_ns():x}")


def is_generation_of(store_path: Path, candidate: str | os.PathLike[str]) -> bool:
    """Whether ``candidate`` is the store at ``store_path`` or one of its generations (what a
    writer checks before it writes a message's results into a file)."""
    other = Path(candidate)
    if os.path.realpath(other.parent) != os.path.realpath(store_path.parent):
        return False
    return other.name == store_path.name or other.name.startswith(f"{store_path.name}.gen-")


def remove_store_file(path: Path) -> None:
    """Delete a store file with its WAL and shared-memory files (open handles keep working)."""
    for suffix in ("", *SIDE_FILES):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


@contextlib.contextmanager
def rebuild_lock(store_path: Path) -> Iterator[None]:
    """One rebuild step at a time per store, across processes (watcher, CLI, writer task)."""
    store_path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{store_path}.rebuild.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _open(settings: Settings, path: Path | str) -> Database:
    db = connect(path, want_vectors=settings.store.want_vectors)
    schema.ensure_schema(db)
    return db


def start_rebuild(settings: Settings, choice: ProviderChoice, reason: str) -> Path:
    """Create (or keep) the generation that will replace the live store; returns its path.

    A rebuild already under way for the same fingerprint is kept; one for an older fingerprint
    is abandoned and its file deleted.
    """
    with rebuild_lock(settings.store.path):
        live = _open(settings, settings.store.path)
        try:
            return _start_locked(live, settings, choice, reason)
        finally:
            live.close()


def _start_locked(live: Database, settings: Settings, choice: ProviderChoice,
                  reason: str) -> Path:
    store_path = settings.store.path
    identity = index_identity(choice.spec, settings)
    info = rebuild_info(live)
    if info is not None and Path(info["target"]).exists():
        target = _open(settings, info["target"])
        try:
            built_for = schema.get_meta(target, "index")
            if built_for is not None and (index_fingerprint(built_for)
                                          == index_fingerprint(identity)):
                return Path(info["target"])
        finally:
            target.close()
        remove_store_file(Path(info["target"]))
    path = generation_path(store_path)
    new = _open(settings, path)
    try:
        cache.seed_from(new, os.path.realpath(store_path), meta={"index": identity})
    finally:
        new.close()
    with schema.transaction(live):
        schema.set_meta(live, REINDEX_META, {"target": str(path), "reason": reason,
                                             "started_at": time.time()})
    return path


def progress_of(info: dict[str, Any], settings: Settings) -> RebuildProgress:
    """Chunk counts of a rebuild's target (zeros when the file is not there yet)."""
    progress = RebuildProgress(info["target"], info.get("reason", ""), info.get("started_at", 0.0))
    if not Path(info["target"]).exists():
        return progress
    db = _open(settings, info["target"])
    try:
        has_provider = bool((schema.get_meta(db, "index") or {}).get("provider"))
        states = reads.state_counts(db)
        progress.chunks = sum(states.values())
        progress.ready = states.get("ready", 0)
        progress.pending = states.get("pending", 0) if has_provider else 0
        work = schema.get_meta(db, "rebuild_work") or {}
        progress.queued, progress.cached = work.get("queued", 0), work.get("cached", 0)
    finally:
        db.close()
    return progress


def rebuild_step(settings: Settings, choice: ProviderChoice,
                 submit: Callable[[EmbedJob], None] | None, *,
                 requeue_after_s: float | None = None) -> RebuildProgress | None:
    """One producer pass over the rebuild's target; swaps it in when it has converged.

    Converged means: after a full disk pass, no chunk is waiting for a vector (the target then
    holds everything on disk as of that pass, like any freshly synced index). While vectors
    are still pending a step only counts them, so polling is cheap. Returns None when no
    rebuild is under way. ``requeue_after_s`` (a reconcile that found the queues empty) forces
    a pass that queues again the target's chunks whose messages were lost.
    """
    store_path = settings.store.path
    with rebuild_lock(store_path):
        live = _open(settings, store_path)
        try:
            info = rebuild_info(live)
            if info is None:
                return None
            # The configuration may have changed again since the rebuild started: then the
            # target is for a fingerprint nobody wants any more, and a new one replaces it.
            _start_locked(live, settings, choice, info.get("reason", "configuration changed"))
            info = rebuild_info(live)
            target = _open(settings, info["target"])
            try:
                progress = progress_of(info, settings)
                synced = schema.get_meta(target, "last_index_at") is not None
                if (progress.pending and synced and requeue_after_s is None
                        and not reads.unsent_count(target)):
                    return progress  # vectors still coming: a disk pass now would be wasted
                report = index_once(target, settings, choice, submit,
                                    requeue_after_s=REQUEUE_AFTER_S if requeue_after_s is None
                                    else requeue_after_s)
                _count_work(target, report)
                progress = progress_of(info, settings)
                if progress.pending:
                    return progress
                swap_in(store_path, live, target)
                progress.done = True
                return progress
            finally:
                target.close()
        finally:
            live.close()


def _count_work(target: Database, report: IndexReport) -> None:
    """Add a pass's queue and cache figures to the target's running totals."""
    totals = schema.get_meta(target, "rebuild_work") or {"queued": 0, "cached": 0}
    totals["queued"] += report.chunks_queued
    totals["cached"] += report.chunks_cached
    with schema.transaction(target):
        schema.set_meta(target, "rebuild_work", totals)


def swap_in(store_path: Path, live: Database, new: Database) -> None:
    """Make ``store_path`` name ``new`` in one atomic rename, then delete the old generation."""
    schema.checkpoint(new)
    schema.checkpoint(live)
    old_real = Path(os.path.realpath(store_path))
    legacy = not store_path.is_symlink()  # a plain file: the store before its first rebuild
    link = store_path.with_name(f"{store_path.name}.swap")
    link.unlink(missing_ok=True)
    link.symlink_to(new.path.name)  # relative: the generations live in one folder
    os.replace(link, store_path)
    # Side files named after the link itself are never used again (SQLite names them after
    # the file the link points to): left by the store before its first rebuild, or re-created
    # by a connection to it that was opened just before the swap.
    for suffix in SIDE_FILES:
        Path(f"{store_path}{suffix}").unlink(missing_ok=True)
    if not legacy and old_real != Path(os.path.realpath(new.path)):
        remove_store_file(old_real)
