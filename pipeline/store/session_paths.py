"""Transcript files renamed in place: ``sessions/<file>`` rows moved to ``sessions/<agentId>/…``.

memq stored the transcript files of a sessions folder as ``sessions/<file>``; OpenClaw
2026.9.6 names those of an agent's folder ``sessions/<agentId>/<file>``
(:func:`pipeline.ingest.sessions.session_file_path`). A store written before keeps its
transcripts: each such row is renamed where it is (its ``files`` row, its chunks with their
ids, which hash the path, the provider batch jobs holding those ids, the path index through its
trigger), so the chunks keep their rowids, vectors and states and nothing is read or embedded
again. When the new path is already indexed (a live transcript of the same session), that row
is the transcript and the old one goes. Idempotent: a store with nothing to move is left as is
(one query).
"""

from __future__ import annotations

import hashlib

from pipeline.store.engine import Database
from pipeline.store.path_keys import name_keys
from pipeline.store.schema import TEXT_VERSION_KEY, transaction
from pipeline.store.vectors import delete_vectors

SESSIONS = "sessions"


def _chunk_id(source: str, path: str, start: int, end: int, digest: str) -> str:
    """:func:`pipeline.store.writer.chunk_id` of a stored chunk."""
    return hashlib.sha256(f"{source}:{path}:{start}:{end}:{digest}".encode()).hexdigest()


def move_session_rows(db: Database, prefix: str) -> int:
    """Rename the store's ``sessions/<file>`` transcript rows to ``<prefix>/<file>`` (``prefix``:
    the sessions folder's memory path, ``sessions/<agentId>``); returns how many moved. With
    ``prefix`` ``sessions`` (a folder that is no agent's) there is nothing to do."""
    if prefix == SESSIONS or not prefix.startswith(SESSIONS + "/"):
        return 0
    old_paths = [p for (p,) in db.conn.execute(
        "SELECT path FROM files WHERE source = ? AND path LIKE 'sessions/%' "
        "AND instr(substr(path, 10), '/') = 0", (SESSIONS,))]
    if not old_paths:
        return 0
    with transaction(db) as conn:
        for old in old_paths:
            new = f"{prefix}/{old.removeprefix(SESSIONS + '/')}"
            chunks = conn.execute("SELECT rowid, id, source, start_line, end_line, hash "
                                  "FROM chunks WHERE path = ?", (old,)).fetchall()
            if conn.execute("SELECT 1 FROM files WHERE path = ?", (new,)).fetchone():
                delete_vectors(db, [row[0] for row in chunks])
                conn.execute("DELETE FROM chunks WHERE path = ?", (old,))
                conn.execute("DELETE FROM files WHERE path = ?", (old,))
                continue
            for rowid, cid, source, start, end, digest in chunks:
                new_id = _chunk_id(source, new, start, end, digest)
                conn.execute("UPDATE chunks SET path = ?, id = ? WHERE rowid = ?",
                             (new, new_id, rowid))
                conn.execute("UPDATE batch_chunks SET chunk_id = ? WHERE chunk_id = ?",
                             (new_id, cid))
            conn.execute("UPDATE file_texts SET path = ? WHERE path = ?", (new, old))
            conn.execute("UPDATE files SET path = ?, name_key = ?, stem_key = ? WHERE path = ?",
                         (new, *name_keys(new), old))
        # Readers holding postings in memory (they carry paths) load them again.
        conn.execute("UPDATE meta SET value = json_quote(hex(randomblob(8))) WHERE key = ?",
                     (TEXT_VERSION_KEY,))
    return len(old_paths)
