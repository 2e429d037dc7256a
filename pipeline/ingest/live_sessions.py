"""Live session transcripts: the ones OpenClaw 2026.9 keeps in the agent's SQLite database.

OpenClaw keeps each agent's current conversations in
``<agents>/<id>/agent/openclaw-agent.sqlite`` (beside ``<agents>/<id>/sessions/``, which holds
only archives); :mod:`pipeline.store.openclaw_agent` reads it without disturbing it. Each
session key's current transcript is one live transcript, indexed under OpenClaw's own memory
path for it, ``sessions/<agentId>/<sessionId>.jsonl`` (``sessionPathForSessionIdentity``),
and read exactly like a ``.jsonl`` file: its records in
``seq`` order, one per line (:mod:`pipeline.ingest.transcripts`), so hits, ``memory_get`` line
windows, the delta thresholds, redaction and decay all work as for the files. A live
transcript's modification time is its last change in the database (``transcript_updated_at``),
its size that of its JSONL form (what OpenClaw's own transcript stats report).

As OpenClaw's memory indexer (``listSessionCorpusEntries``, ``isMemorySessionIndexable``), these
are left out: sessions purged by ``openclaw memory forget``, cron runs and the sessions they
spawned, dreaming-narrative runs, and isolated heartbeat sessions. A transcript moved to cold
storage (``session.maintenance.coldStorage``) is not in the database: what memq indexed of it
before is kept as it is (OpenClaw restores it to read it; memq never writes there).

A session that is live is read from the database only: a legacy ``<sessionId>.jsonl`` of the
same session (left in ``sessions/`` before ``openclaw doctor --fix`` imported it) is not
indexed a second time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.config import Settings
from pipeline.errors import StoreError
from pipeline.ingest.transcripts import SESSIONS_SOURCE
from pipeline.store.openclaw_agent import (
    AGENT_DB_NAME,
    LiveTranscript,
    TranscriptSize,
    live_transcripts,
    transcript_records,
    transcript_sizes,
)

log = logging.getLogger(__name__)

AGENT_FOLDER = "agent"
#: The files of the agent database whose changes mean new transcript records (not ``-shm``:
#: readers write there, memq included).
CHANGE_FILES = (AGENT_DB_NAME, f"{AGENT_DB_NAME}-wal")
_CRON_RUN_PREFIX = "cron:"
_DREAMING_PREFIX = "dreaming-narrative-"
MS = 1_000_000  # ns per ms


@dataclass(frozen=True)
class LiveSession:
    """One live transcript to index: its store path, session id and stat-like fingerprint."""

    path: str
    session_id: str
    mtime_ns: int
    size: int
    cold: bool = False  # in cold storage: keep what was indexed, read nothing


@dataclass
class LiveScan:
    """The live transcripts of one agent database (``error``: it could not be read now)."""

    scope: str  # the store paths the scan speaks for: ``sessions/<agentId>``
    sessions: list[LiveSession] = field(default_factory=list)
    error: str | None = None


def agent_database(settings: Settings) -> Path:
    """Where OpenClaw keeps this agent's database: ``agent/`` beside its sessions folder."""
    return settings.sessions_dir.parent / AGENT_FOLDER / AGENT_DB_NAME


def live_scope(settings: Settings) -> str:
    return f"{SESSIONS_SOURCE}/{settings.agent_id}"


def live_path(settings: Settings, session_id: str) -> str:
    """OpenClaw's memory path of a live transcript: ``sessions/<agentId>/<sessionId>.jsonl``."""
    return f"{live_scope(settings)}/{session_id}.jsonl"


def _rest_of_key(session_key: str) -> str:
    """A session key without its ``agent:<id>:`` head (``agent:main:cron:x:run:y`` → ``cron:…``)."""
    parts = session_key.strip().split(":", 2)
    return parts[2] if len(parts) == 3 and parts[0].lower() == "agent" else session_key.strip()


def _is_cron_run(session_key: str) -> bool:
    rest = _rest_of_key(session_key)
    if not rest.startswith(_CRON_RUN_PREFIX):
        return False
    parts = rest.split(":")
    return len(parts) >= 4 and parts[1] != "" and parts[2] == "run" and parts[3] != ""


def _is_dreaming(session_key: Any) -> bool:
    return isinstance(session_key, str) and _rest_of_key(session_key).startswith(
        _DREAMING_PREFIX)


def _entry(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _parents(entry: dict[str, Any]) -> list[str]:
    return [v.strip() for v in (entry.get("parentSessionKey"), entry.get("spawnedBy"))
            if isinstance(v, str) and v.strip()]


def indexable(transcripts: list[LiveTranscript]) -> list[LiveTranscript]:
    """The transcripts OpenClaw's memory indexer would index (see the module docstring)."""
    entries = {t.session_key: _entry(t.entry_json) for t in transcripts}
    cron: dict[str, bool] = {}

    def from_cron(key: str, seen: frozenset[str] = frozenset()) -> bool:
        if key not in cron:
            parents = [p for p in _parents(entries.get(key, {})) if p not in seen]
            cron[key] = _is_cron_run(key) or any(from_cron(p, seen | {key}) for p in parents)
        return cron[key]

    kept = []
    for t in transcripts:
        entry = entries[t.session_key]
        heartbeat = entry.get("heartbeatIsolatedBaseSessionKey")
        if (t.forgotten or from_cron(t.session_key) or _is_dreaming(t.session_key)
                or _is_dreaming(entry.get("spawnedBy"))
                or (isinstance(heartbeat, str) and heartbeat.strip())):
            continue
        kept.append(t)
    return kept


def _indexable(settings: Settings) -> list[LiveTranscript]:
    """The indexable live transcripts of the agent database, once each (none when there is
    no database); raises :class:`~pipeline.errors.StoreError` when it cannot be read now."""
    try:
        found = live_transcripts(agent_database(settings), settings.agent_id)
    except FileNotFoundError:
        return []
    once: dict[str, LiveTranscript] = {}
    for t in indexable(found):  # two keys on one transcript (an alias): index it once
        if _plain_name(t.session_id):
            once.setdefault(t.session_id, t)
    return list(once.values())


def _listed(settings: Settings, known: Mapping[str, tuple[int, int]]) -> list[LiveSession]:
    """The indexable live transcripts with their fingerprints. A transcript whose last change
    (``transcript_updated_at``) is the one ``known`` (path → mtime_ns, size) recorded keeps
    the recorded size; the others are sized from the database (their records' stored sizes)."""
    database = agent_database(settings)
    listed: list[LiveSession] = []
    unsized: list[LiveTranscript] = []
    for t in _indexable(settings):
        path = live_path(settings, t.session_id)
        seen = known.get(path)
        if t.updated_ms is not None and seen is not None and seen[0] == t.updated_ms * MS:
            listed.append(LiveSession(path, t.session_id, seen[0], seen[1], t.cold))
        else:
            unsized.append(t)
    try:
        sizes = transcript_sizes(database, [t.session_id for t in unsized])
    except FileNotFoundError:
        return []
    for t in unsized:
        size = sizes.get(t.session_id, TranscriptSize(0, 0))
        changed = t.updated_ms if t.updated_ms is not None else size.last_record_ms
        listed.append(LiveSession(live_path(settings, t.session_id), t.session_id,
                                  changed * MS, size.jsonl_bytes, t.cold))
    return sorted(listed, key=lambda s: s.path)


def live_sessions(settings: Settings,
                  known: Mapping[str, tuple[int, int]] | None = None) -> LiveScan | None:
    """The live transcripts to index, when session memory is on (else None).

    ``known`` (store path → recorded mtime_ns, size) spares sizing the transcripts that did
    not change. No database means no live transcripts; one that cannot be read now comes back
    with ``error`` set (what was indexed from it is kept, the next pass tries again).
    """
    if SESSIONS_SOURCE not in settings.sources:
        return None
    scan = LiveScan(live_scope(settings))
    try:
        scan.sessions = _listed(settings, known or {})
    except StoreError as exc:
        scan.error = str(exc)
    return scan


def touches_database(settings: Settings, path: Path) -> bool:
    """Whether a changed path is the agent database (its file, its ``-wal``) or its folder."""
    folder = agent_database(settings).parent
    return path == folder or (path.parent == folder and path.name in CHANGE_FILES)


def is_agent_folder_noise(settings: Settings, path: Path) -> bool:
    """A watcher event in the agent folder that says nothing about transcripts (``-shm``, the
    folder itself, other files OpenClaw keeps there)."""
    folder = agent_database(settings).parent
    return path == folder or (path.parent == folder and path.name not in CHANGE_FILES)


def live_sessions_at(settings: Settings, paths: Iterable[Path],
                     known: Mapping[str, tuple[int, int]] | None = None) -> LiveScan | None:
    """:func:`live_sessions` when one of ``paths`` (what a watcher saw change) touches the
    agent database; None otherwise."""
    if SESSIONS_SOURCE in settings.sources and any(
            touches_database(settings, Path(p)) for p in paths):
        return live_sessions(settings, known)
    return None


def _plain_name(name: str) -> bool:
    return bool(name) and not name.startswith(".") and not any(c in name for c in "/\\\x00")


def read_live_session(settings: Settings, session: LiveSession) -> bytes | None:
    """A live transcript as JSONL bytes (its records one per line, ``\\n`` between them, as
    OpenClaw sizes it); None when it is in cold storage or gone."""
    records = transcript_records(agent_database(settings), session.session_id)
    return None if records is None else "\n".join(records).encode("utf-8")
