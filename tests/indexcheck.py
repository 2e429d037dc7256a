"""Compare an index with the disk it claims to mirror (shared by the watcher and reindex tests)."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from pipeline.config import Settings, load_settings
from pipeline.ingest.sources import memory_files
from pipeline.store import schema
from pipeline.store.engine import connect
from pipeline.store.vectors import count_vectors


def index_vs_disk(settings: Settings) -> list[str]:
    """Every way the store differs from the disk (empty when the index is true)."""
    problems: list[str] = []
    disk = {f.path: hashlib.sha256(f.abs_path.read_bytes()).hexdigest()
            for f in memory_files(settings.workspace, settings.extra_paths)}
    if not settings.store.path.exists():
        return ["no store yet"]
    db = connect(settings.store.path)
    try:
        schema.ensure_schema(db)
        stored = dict(db.conn.execute("SELECT path, hash FROM files WHERE error IS NULL"))
        if stored.keys() != disk.keys():
            problems.append(f"paths: missing {sorted(disk.keys() - stored.keys())[:5]}, "
                            f"extra {sorted(stored.keys() - disk.keys())[:5]}")
        changed = [p for p in disk.keys() & stored.keys() if disk[p] != stored[p]]
        if changed:
            problems.append(f"{len(changed)} files hold old content, e.g. {changed[:3]}")
        states = dict(db.conn.execute("SELECT state, count(*) FROM chunks GROUP BY state"))
        chunks = sum(states.values())
        if states.get("ready", 0) != chunks:
            problems.append(f"chunk states {states}")
        vectors = count_vectors(db)
        if vectors != chunks:
            problems.append(f"{vectors} vectors for {chunks} chunks")
        orphans = db.conn.execute("SELECT count(*) FROM chunks WHERE path NOT IN "
                                  "(SELECT path FROM files)").fetchone()[0]
        if orphans:
            problems.append(f"{orphans} orphan chunks")
    finally:
        db.close()
    return problems


def wait_until(check: Callable[[], list[str]], timeout: float, what: str = "") -> None:
    """Poll ``check`` until it reports no problem; fail with its last report otherwise."""
    deadline = time.monotonic() + timeout
    problems = check()
    while problems and time.monotonic() < deadline:
        time.sleep(0.3)
        problems = check()
    assert not problems, f"{what}: {problems}"


def chunks(config: Path, memory: str, env: dict[str, str]) -> int:
    """How many chunks memory ``memory``'s store holds (0 without a store)."""
    return store_chunks(load_settings(config_file=config, agent=memory, env=env).store.path)


def store_chunks(path: Path) -> int:
    """How many chunks the store at ``path`` holds (0 without a store, or one being made)."""
    if not path.exists():
        return 0
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    except sqlite3.OperationalError:  # its schema is not written yet
        return 0
    finally:
        conn.close()
