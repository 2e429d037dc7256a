"""Read OpenClaw's per-agent database (``openclaw-agent.sqlite``) without disturbing it.

OpenClaw 2026.9 keeps live session transcripts there (``agent schema`` 23,
``src/state/openclaw-agent-schema.ts``): ``session_nodes`` maps each session key to its
current ``session_id``; ``transcript_events`` holds that session's records in ``seq`` order, one
JSON object each, as its JSONL transcripts used to (``event_json``, or zstd-compressed in
``event_zstd`` with its UTF-8 size in ``event_utf8_bytes`` once a record is 1 KiB or more);
``session_windows.transcript_updated_at`` is the last change of a transcript;
``session_transcript_cold_archives`` marks transcripts moved out to cold storage;
``memory_session_tombstones`` lists the sessions ``openclaw memory forget`` purged.

OpenClaw writes the file all the time (WAL mode). memq only reads, and leaves no trace:

- The connection is read-only (``mode=ro``) and ``query_only``; every read is one short
  transaction, the rows fetched at once, and the connection is closed when the read is done,
  so no read mark stays behind to hold back OpenClaw's checkpoints.
- A ``mode=ro`` connection to a WAL database creates ``-wal``/``-shm`` files when they are
  missing (OpenClaw removes them when its last connection closes). So a WAL database without
  a ``-wal`` is read as ``immutable`` (nothing created, nothing locked), and the read is kept
  only if neither the file nor the absence of a ``-wal`` changed meanwhile (a writer in WAL
  mode creates the ``-wal`` before it changes anything); otherwise it is read again, the
  normal way once OpenClaw has the files open. A database in rollback mode is always read the
  normal way (its readers lock, and create nothing).
- A lock or a busy database raises :class:`AgentDatabaseBusy` (try again later); a file that
  is not an OpenClaw agent database raises :class:`AgentDatabaseUnreadable`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import zstandard

from pipeline.errors import AgentDatabaseBusy, AgentDatabaseUnreadable
from pipeline.store.engine import choose_driver, is_busy

AGENT_DB_NAME = "openclaw-agent.sqlite"
#: The tables a live transcript is read from (an older or foreign database lacks them).
REQUIRED_TABLES = frozenset({"session_nodes", "session_windows", "transcript_events"})
BUSY_TIMEOUT_MS = 250  # a reader in WAL mode waits only on recovery: never long
QUIET_READ_ATTEMPTS = 3
MAX_EVENT_BYTES = 4 * 1024 * 1024  # OpenClaw's own bound on one stored record

T = TypeVar("T")


@dataclass(frozen=True)
class LiveTranscript:
    """One session's current transcript, as the database lists it (no payload read)."""

    session_id: str
    session_key: str
    entry_json: str  # the session's entry record (OpenClaw's ``SessionEntry``), as stored
    #: The transcript's last change (ms since the epoch; ``transcript_updated_at``, which
    #: OpenClaw's writer moves strictly forward on every change), None when not recorded.
    updated_ms: int | None
    cold: bool  # moved to cold storage: its records are not in the database
    forgotten: bool  # purged by ``openclaw memory forget``


@dataclass(frozen=True)
class TranscriptSize:
    """A transcript's size as JSONL (records one per line, ``\n`` between: what OpenClaw's
    ``sqliteTranscriptJsonlByteSize`` reports) and its newest record's time (ms)."""

    jsonl_bytes: int
    last_record_ms: int


def _wal(path: Path) -> Path:
    return Path(f"{path}-wal")


def _quiet_wal_database(path: Path) -> bool:
    """A WAL database no process has open: no ``-wal``, no hot ``-journal``, and the header's
    read/write versions (bytes 18-19) say WAL. Only a checkpoint changes such a file, and a
    checkpoint needs a ``-wal`` first."""
    if _wal(path).exists() or Path(f"{path}-journal").exists():
        return False
    with open(path, "rb") as fh:
        header = fh.read(20)
    return len(header) == 20 and header[18:20] == b"\x02\x02"


def _fingerprint(path: Path) -> tuple[int, int, int, bool]:
    stat = os.stat(path)
    return stat.st_ino, stat.st_mtime_ns, stat.st_size, _wal(path).exists()


def _connect(path: Path, immutable: bool) -> Any:
    _, module, _ = choose_driver()
    uri = f"file:{quote(str(path))}?mode=ro" + ("&immutable=1" if immutable else "")
    conn = module.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                          check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA query_only=1")
    return conn


def _read(path: Path, read: Callable[[Any], T], immutable: bool) -> T:
    conn = _connect(path, immutable)
    try:
        conn.execute("BEGIN")
        try:
            return read(conn)
        finally:
            conn.execute("COMMIT")
    finally:
        conn.close()


def read_agent_database(path: Path, read: Callable[[Any], T]) -> T:
    """Run ``read(conn)`` in one short read-only transaction of the database at ``path``.

    Raises :class:`FileNotFoundError` when there is no database, :class:`AgentDatabaseBusy`
    when it is locked, :class:`AgentDatabaseUnreadable` when it cannot be read.
    """
    if not path.is_file():
        raise FileNotFoundError(f"no OpenClaw agent database at {path}")
    _, module, _ = choose_driver()
    try:
        for _ in range(QUIET_READ_ATTEMPTS):
            if not _quiet_wal_database(path):
                return _read(path, read, immutable=False)
            before = _fingerprint(path)
            value = _read(path, read, immutable=True)
            if _fingerprint(path) == before:
                return value
        raise AgentDatabaseBusy(f"{path} kept changing while it was read; trying again later")
    except module.DatabaseError as exc:
        if is_busy(exc):
            raise AgentDatabaseBusy(f"{path} is locked by OpenClaw ({exc}); trying again "
                                    "later") from exc
        raise AgentDatabaseUnreadable(f"{path} cannot be read ({exc})") from exc


def _tables(conn: Any) -> set[str]:
    return {name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}


def _check_schema(conn: Any, path: Path) -> set[str]:
    tables = _tables(conn)
    missing = REQUIRED_TABLES - tables
    if missing:
        raise AgentDatabaseUnreadable(
            f"{path} is not an OpenClaw 2026.9 agent database (no {', '.join(sorted(missing))} "
            "table); run `openclaw doctor --fix` to migrate it")
    return tables


def live_transcripts(path: Path, agent_id: str) -> list[LiveTranscript]:
    """The current transcript of every session in the database, with its last change.

    Reads the session tables only (no transcript record): cheap enough for every watcher
    batch, whatever the size of the transcripts.
    """

    def read(conn: Any) -> list[LiveTranscript]:
        tables = _check_schema(conn, path)
        cold = ("EXISTS (SELECT 1 FROM session_transcript_cold_archives c "
                "WHERE c.session_id = n.current_session_id)"
                if "session_transcript_cold_archives" in tables else "0")
        forgotten, params = "0", ()
        if "memory_session_tombstones" in tables:
            forgotten = ("EXISTS (SELECT 1 FROM memory_session_tombstones t WHERE "
                         "t.session_id = n.current_session_id AND t.agent_id = ?)")
            params = (agent_id,)
        rows = conn.execute(
            "SELECT n.current_session_id, n.session_key, n.entry_json, "
            f"w.transcript_updated_at, {cold}, {forgotten} "
            "FROM session_nodes n "
            "LEFT JOIN session_windows w ON w.session_id = n.current_session_id "
            "ORDER BY n.current_session_id, n.session_key", params).fetchall()
        return [LiveTranscript(sid, key, entry or "", None if updated is None else int(updated),
                               bool(is_cold), bool(is_forgotten))
                for sid, key, entry, updated, is_cold, is_forgotten in rows]

    return read_agent_database(path, read)


SIZE_QUERY_IDS = 400  # session ids per query (OpenClaw's own stats chunk)


def transcript_sizes(path: Path, session_ids: list[str]) -> dict[str, TranscriptSize]:
    """The JSONL size and newest record time of these sessions' transcripts (absent: none).

    One aggregate query per :data:`SIZE_QUERY_IDS` ids, in one read transaction; it reads
    each record's stored size, never its payload.
    """

    def read(conn: Any) -> dict[str, TranscriptSize]:
        _check_schema(conn, path)
        sizes: dict[str, TranscriptSize] = {}
        for start in range(0, len(session_ids), SIZE_QUERY_IDS):
            chunk = session_ids[start:start + SIZE_QUERY_IDS]
            for sid, size, last in conn.execute(
                    "SELECT session_id, sum(coalesce(event_utf8_bytes, "
                    "length(CAST(event_json AS BLOB)))) + count(*) - 1, max(created_at) "
                    "FROM transcript_events WHERE session_id IN "
                    f"({','.join('?' * len(chunk))}) GROUP BY session_id", chunk):
                sizes[sid] = TranscriptSize(max(0, int(size or 0)), int(last or 0))
        return sizes

    return read_agent_database(path, read) if session_ids else {}


def _decode(event_json: str | None, event_zstd: bytes | None, utf8_bytes: int | None) -> str:
    if event_json is not None:
        return event_json
    if event_zstd is None or utf8_bytes is None or not 0 < utf8_bytes <= MAX_EVENT_BYTES:
        raise AgentDatabaseUnreadable("a transcript record has neither text nor a valid "
                                      "compressed payload")
    try:
        raw = zstandard.ZstdDecompressor().decompress(bytes(event_zstd),
                                                      max_output_size=utf8_bytes)
    except zstandard.ZstdError as exc:
        raise AgentDatabaseUnreadable(f"a compressed transcript record is damaged ({exc})"
                                      ) from exc
    if len(raw) != utf8_bytes:
        raise AgentDatabaseUnreadable("a compressed transcript record does not match its "
                                      "recorded size")
    return raw.decode("utf-8")


def transcript_records(path: Path, session_id: str) -> list[str] | None:
    """The JSON text of every record of one session's transcript, in ``seq`` order.

    None when the transcript is in cold storage (its records are not in the database).
    """

    def read(conn: Any) -> list[tuple[Any, ...]] | None:
        tables = _check_schema(conn, path)
        if "session_transcript_cold_archives" in tables and conn.execute(
                "SELECT 1 FROM session_transcript_cold_archives WHERE session_id = ?",
                (session_id,)).fetchone():
            return None
        return conn.execute(
            "SELECT event_json, event_zstd, event_utf8_bytes FROM transcript_events "
            "WHERE session_id = ? ORDER BY seq", (session_id,)).fetchall()

    rows = read_agent_database(path, read)
    return None if rows is None else [_decode(*row) for row in rows]

