"""What keeps an index pass from emptying a memory by an accident of the host.

Two guards, both checked before anything is written:

- **Whose files.** When a producer on another host feeds a store (the memory's Markdown lives
  on an agent's gateway, the store on its shard's host), the store records which folder the
  files came from: the producing host and the device and inode of its workspace folder
  (:func:`folder_identity`). A pass on any host whose folder at the workspace's path is not
  that folder (the store host's empty mount point, a stale copy) is refused
  (:class:`~pipeline.errors.FilesElsewhere`) unless the user makes this folder the memory's
  files (``files_here``); a search there never syncs it, and its readers answer ``get`` from
  the text the producer sent (:func:`pipeline.store.reads.kept_text`). On one machine, or
  where every host sees the same folder, the identities match and nothing changes.
- **How much.** A pass that would remove every file of a memory, or most of them, because its
  folder is empty, missing or unmounted, is refused (:class:`~pipeline.errors.DeletionRefused`)
  unless the user says the files were deleted on purpose (``allow_deletions``). Memory files
  and session transcripts are judged apart: OpenClaw prunes old transcripts on its own, so
  for them only the loss of every one counts.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pipeline.config import Settings
from pipeline.errors import DeletionRefused, FilesElsewhere
from pipeline.ingest.transcripts import SESSIONS_SOURCE
from pipeline.store import schema
from pipeline.store.engine import Database

#: The store's ``meta`` key naming the folder a producer on another host sent its files from.
FILES_FROM_KEY = "files_from"
#: A pass removing more than this share of a memory's files (at least two) is refused.
MASS_DELETION_SHARE = 0.5


def folder_identity(folder: Path) -> str | None:
    """``host:device:inode`` of ``folder`` on this host (None when it is not there): equal on
    two processes exactly when they look at the same folder."""
    try:
        stat = os.stat(folder)
    except OSError:
        return None
    return f"{socket.gethostname()}:{stat.st_dev}:{stat.st_ino}"


def files_from(db: Database) -> dict[str, Any] | None:
    """Where a producer on another host sent the store's files from (``folder``, ``job``,
    ``at``), or None when the store is fed by passes over its own host's folder."""
    value = schema.get_meta(db, FILES_FROM_KEY)
    return value if isinstance(value, dict) else None


def record_files_from(db: Database, folder: str | None, job: str) -> None:
    """The store was just fed by a producer on another host, from ``folder``
    (:func:`folder_identity` there; None from a producer too old to say)."""
    with schema.transaction(db):
        schema.set_meta(db, FILES_FROM_KEY, {"folder": folder, "job": job, "at": time.time()})


def reads_own_files(db: Database, settings: Settings) -> bool:
    """Whether the folder at the memory's workspace path on this host is the memory's files
    (no producer elsewhere feeds the store, or it sends them from this very folder)."""
    source = files_from(db)
    return source is None or source.get("folder") == folder_identity(settings.workspace)


def check_files_here(db: Database, settings: Settings, *, files_here: bool = False) -> None:
    """Refuse a pass over this host's folder when the store's files come from another folder
    (:class:`~pipeline.errors.FilesElsewhere`); with ``files_here`` this folder becomes the
    memory's files (the store forgets the other producer and the text it kept)."""
    if reads_own_files(db, settings):
        return
    if files_here:
        from pipeline.store import writer  # a one-shot search never writes: loaded here

        with schema.transaction(db):
            schema.delete_meta(db, FILES_FROM_KEY)
            writer.forget_kept_texts(db)
        return
    source = files_from(db) or {}
    host = str(source.get("folder") or "another host").split(":", 1)[0]
    raise FilesElsewhere(
        f"the files of memory {settings.agent_id!r} are sent by a producer on {host} (last "
        f"job {source.get('job')}); the folder {settings.workspace} on this host is not "
        "them, so it is not read and nothing is deleted. Index from the host of the files "
        "(memq index / memq watch there), or run `memq index --files-here` on this host to "
        "make this folder the memory's files")


def check_deletions(settings: Settings, known: Collection[str], gone: Collection[str],
                    found: int, *, allow: bool = False) -> None:
    """Refuse a pass that would remove ``gone`` of the ``known`` files of a memory when that
    looks like a folder that is empty, missing or unmounted rather than files deleted one by
    one (``found``: how many files the pass found on disk); ``allow`` lets it through."""
    if allow or not gone:
        return
    for source, label in (("memory", "memory files"), (SESSIONS_SOURCE, "session transcripts")):
        held = [p for p in known if _source(p) == source]
        lost = [p for p in gone if _source(p) == source]
        if not lost:
            continue
        why = _why_refused(settings, len(held), len(lost), found, share=source == "memory")
        if why is not None:
            raise DeletionRefused(
                f"memory {settings.agent_id!r}: this pass would remove {len(lost)} of the "
                f"{len(held)} {label} its index holds, because {why}; nothing was deleted. "
                "If they were deleted on purpose, run `memq index --allow-deletions`",
                deleted=len(lost), known=len(held))


def _why_refused(settings: Settings, held: int, lost: int, found: int, *, share: bool
                 ) -> str | None:
    workspace = settings.workspace
    if not workspace.is_dir():
        return f"the workspace {workspace} is not on this host"
    if _empty(workspace):
        return f"the workspace folder {workspace} is empty (an unmounted disk?)"
    if lost >= held and found == 0:
        return "not one of them is left on disk"
    if lost >= held and lost >= 2:
        return "not one of them is left"
    if share and lost >= 2 and lost > held * MASS_DELETION_SHARE:
        return f"{lost} of its {held} files are missing at once (a folder unmounted?)"
    return None


def _empty(folder: Path) -> bool:
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is None
    except OSError:
        return False


def _source(path: str) -> str:
    return SESSIONS_SOURCE if path.startswith(f"{SESSIONS_SOURCE}/") else "memory"
