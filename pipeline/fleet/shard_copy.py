"""Moving a shard's stores to another host through the broker, with no hand copy.

``memq shard copy --shard N`` runs on the host that is to hold shard N's stores. For each
memory of the shard it asks the reader that serves the memory now (on the old host) for a
copy of its store: the reader writes a consistent snapshot (SQLite's online backup, so the
old writer may still be writing) into the data dir of the memory's settings
(:func:`exports_of`), and serves it in parts of :data:`PART_BYTES` (:func:`export_step`);
the new host writes the parts, checks the whole against the snapshot's sha256 and makes it
its store (:func:`pull_store`). Chunks, vectors, the embedding cache and the files' records
travel whole: nothing is lost and nothing is embedded again. The same reads give a standby
host a copy to start from if the old host is lost; without one, the producers send every
file again and the new host embeds it.

A reader serves a snapshot of a memory only to a request for that memory on its shard (the
reader's usual checks), under a token it made; a snapshot no one finished reading is removed
after :data:`ABANDONED_AFTER_S`.
"""

from __future__ import annotations

import base64
import os
import re
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

from pipeline.config import Settings
from pipeline.errors import FleetError, MessageRefused
from pipeline.messages import QueryRequest
from pipeline.store import copies, schema

#: How much of a snapshot one answer carries.
PART_BYTES = 4 * 1024 * 1024
ABANDONED_AFTER_S = 3600.0
EXPORTS_FOLDER = "exports"
_TOKEN = re.compile(r"[0-9a-f]{32}")


def exports_of(settings: Settings) -> Path:
    """Where a reader of ``settings``' memory writes its snapshots: ``<data dir>/exports`` of
    the settings' own data dir (``Settings.data_dir``), not the process's."""
    return settings.data_dir / EXPORTS_FOLDER


def _snapshot_path(settings: Settings, token: str) -> Path:
    if not _TOKEN.fullmatch(token):
        raise MessageRefused("export: not a token this host made")
    return exports_of(settings) / f"{settings.agent_id}-{token}.sqlite"


def _remove_abandoned(folder: Path) -> None:
    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        try:
            if now - entry.stat().st_mtime > ABANDONED_AFTER_S:
                os.unlink(entry.path)
        except OSError:
            pass


def export_step(settings: Settings, args: dict[str, Any]) -> dict[str, Any]:
    """A reader's side of a copy of ``settings``' store: without a token, make a snapshot
    and describe it (token, bytes, sha256, chunks, vectors); with one, a part of it
    (``offset``, ``size``), or ``close`` it."""
    token = args.get("token")
    if token is None:
        _remove_abandoned(exports_of(settings))
        db = schema.open_store(settings.store.path, want_vectors=False)
        if db is None:
            return {"token": None, "bytes": 0}
        token = secrets.token_hex(16)
        path = _snapshot_path(settings, token)
        try:
            copies.snapshot(db, path)
        finally:
            db.close()
        return {"token": token, "bytes": path.stat().st_size, "sha256": copies.digest(path),
                **copies.sizes(path)}
    path = _snapshot_path(settings, token)
    if args.get("close"):
        path.unlink(missing_ok=True)
        return {"closed": True}
    offset, size = int(args.get("offset") or 0), min(int(args.get("size") or 0), PART_BYTES)
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            part = fh.read(size)
    except FileNotFoundError:
        raise MessageRefused(f"export: no snapshot {token} of memory {settings.agent_id!r} "
                             "here (closed, or removed after an hour unread)") from None
    os.utime(path)  # still being read: not abandoned
    return {"offset": offset, "data": base64.b64encode(part).decode("ascii")}


def pull_store(reader: Any, memory: str, shard: int, target: Path) -> dict[str, Any]:
    """Copy ``memory``'s store from the reader of ``shard`` (a
    :class:`~pipeline.fleet.reader.ShardReader`) to ``target`` on this host; what was copied
    (bytes, chunks, vectors, seconds), or ``{"bytes": 0}`` when the memory has no store there.
    """
    started = time.monotonic()

    def ask(**args: Any) -> dict[str, Any]:
        return reader.answer(QueryRequest(memory, "export", args, shard))

    described = ask()
    token = described.get("token")
    if not token:
        return {"bytes": 0, "chunks": 0, "vectors": 0, "seconds": 0.0}
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".copy")
    partial = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            offset = 0
            while offset < described["bytes"]:
                part = base64.b64decode(ask(token=token, offset=offset, size=PART_BYTES)["data"])
                if not part:
                    raise FleetError(f"the copy of {memory}'s store ended early at byte "
                                     f"{offset} of {described['bytes']}")
                out.write(part)
                offset += len(part)
        if copies.digest(partial) != described["sha256"]:
            raise FleetError(f"the copy of {memory}'s store does not match its snapshot")
        held = copies.adopt(partial, target)
    finally:
        partial.unlink(missing_ok=True)
        ask(token=token, close=True)
    if (held["chunks"], held["vectors"]) != (described["chunks"], described["vectors"]):
        raise FleetError(f"the copy of {memory}'s store holds {held} instead of "
                         f"{described['chunks']} chunks and {described['vectors']} vectors")
    return {"bytes": described["bytes"], **held, "seconds": time.monotonic() - started}
