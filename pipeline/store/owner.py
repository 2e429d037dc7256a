"""Which memory a store belongs to: ``meta.owner`` = ``{"memory": name, "workspace": real path}``.

Two memories must never share a store (one's search would return the other's text). The first
write claims an unclaimed store (stores made before owners were recorded included); a store
claimed by another memory is refused, for reading and writing, with
:class:`~pipeline.errors.StoreOwnedElsewhere`. ``memq memories --prune`` trusts the owner to
tell a store memq made, and whether its workspace is gone.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import StoreOwnedElsewhere
from pipeline.store.engine import Database
from pipeline.store.schema import get_meta, set_meta

OWNER_KEY = "owner"


def owner_of(memory: str, workspace: str | os.PathLike[str]) -> dict[str, str]:
    """The owner record of ``memory`` at ``workspace`` (its real path: a symlinked way to the
    same folder is the same owner)."""
    return {"memory": memory, "workspace": os.path.realpath(os.path.abspath(workspace))}


def recorded_owner(db: Database) -> dict[str, str] | None:
    """The owner the store records (None: never claimed)."""
    value = get_meta(db, OWNER_KEY)
    if isinstance(value, dict) and isinstance(value.get("memory"), str) \
            and isinstance(value.get("workspace"), str):
        return {"memory": value["memory"], "workspace": value["workspace"]}
    return None


def check_owner(db: Database, owner: dict[str, str], *, claim: bool) -> None:
    """Refuse the store when another memory owns it; with ``claim``, record ``owner`` in a
    store nobody claimed yet (the caller's transaction, or autocommit, keeps it)."""
    current = recorded_owner(db)
    if current is None:
        if claim:
            set_meta(db, OWNER_KEY, owner)
        return
    if current != owner:
        raise StoreOwnedElsewhere(
            f"store {Path(db.path)} belongs to memory {current['memory']!r} (workspace "
            f"{current['workspace']}), not to memory {owner['memory']!r} (workspace "
            f"{owner['workspace']}): give each memory its own store.path (put {{agentId}} in "
            "it), or move that store aside to rebuild it for this memory")


@dataclass(frozen=True)
class StoreFacts:
    """What a store file says about itself, read without writing: its owner, when it was last
    indexed, and whether it could be read at all (``error`` says why not)."""

    owner: dict[str, str] | None
    last_index_at: float | None
    error: str | None = None


def peek(path: Path) -> StoreFacts:
    """The :class:`StoreFacts` of the store at ``path``, opened read-only (no schema upgrade,
    no claim: listing stores never changes them)."""
    try:
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as exc:
        return StoreFacts(None, None, str(exc))
    try:
        rows = dict(conn.execute(
            "SELECT key, value FROM meta WHERE key IN ('owner', 'last_index_at')").fetchall())
    except sqlite3.Error as exc:
        return StoreFacts(None, None, str(exc))
    finally:
        conn.close()
    values = {}
    for key, text in rows.items():
        try:
            values[key] = json.loads(text)
        except (TypeError, ValueError):
            values[key] = None
    owner = values.get(OWNER_KEY)
    valid = isinstance(owner, dict) and all(isinstance(owner.get(k), str)
                                            for k in ("memory", "workspace"))
    last = values.get("last_index_at")
    return StoreFacts({"memory": owner["memory"], "workspace": owner["workspace"]}
                      if valid else None,
                      float(last) if isinstance(last, int | float) else None)
