"""Session transcripts (``sources: [memory, sessions]`` with ``experimental.sessionMemory`` or
``rememberAcrossConversations``): where they are and what their store paths are
(``memory_get`` refuses them, as OpenClaw's does).

Two places hold them. Files in ``<sessionsDir>``, stored under OpenClaw 2026.9.6's memory path
for a transcript file (``sessionPathForFile``): ``sessions/<agentId>/<file>``, the agent id
being the one the folder names when it is OpenClaw's ``…/agents/<agentId>/sessions`` (nearest
such folder above the file, its name as written), ``sessions/<file>`` for a folder elsewhere
(a ``sessionsDir`` of memq's own). The files are the
``<sessionId>.jsonl`` transcripts of OpenClaw before 2026.9 (and legacy ones left since), and
2026.9's archives of reset and deleted sessions, ``<sessionId>.jsonl.reset.<time>`` /
``.deleted.<time>``, zstd-compressed as ``….zst`` when OpenClaw's Node has zstd (OpenClaw's
``isUsageCountedSessionTranscriptFileName`` and ``isSessionArchiveArtifactName``: trajectory
files, compaction checkpoints and ``.bak`` copies are not transcripts). And, since 2026.9, the
live transcripts in the agent's database (:mod:`pipeline.ingest.live_sessions`), stored as
``sessions/<agentId>/<sessionId>.jsonl``: in OpenClaw's folder of the agent a legacy
``<sessionId>.jsonl`` file has that path too, and is left to the live copy when the database
holds the session. A store that named files ``sessions/<file>`` before renames its rows in
place (:mod:`pipeline.store.session_paths`). All are read the same way
(:mod:`pipeline.ingest.transcripts`: the searchable text, its line map back to the JSONL lines,
redaction, the delta thresholds).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

import zstandard

from pipeline.config import Settings
from pipeline.ingest.sources import SourceFile
from pipeline.ingest.transcripts import (
    SESSIONS_SOURCE,
    Transcript,
    compacted,
    needs_sync,
    transcript,
    transcript_chunks,
)

#: What other modules have imported from here since before :mod:`pipeline.ingest.transcripts`.
__all__ = ["SESSIONS_SOURCE", "Transcript", "agent_of_session_file", "compacted",
           "is_transcript_file", "needs_sync", "read_session_file", "session_file_path",
           "session_files", "session_files_at", "session_folder_path",
           "transcript", "transcript_chunks"]

ZSTD_SUFFIX = ".zst"
#: OpenClaw's archive of a reset or deleted session (``artifacts.ts``: ``ARCHIVE_SUFFIX_RE``).
_ARCHIVE = re.compile(r"\.jsonl\.(?:reset|deleted)\.\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}"
                      r"(?:\.\d{3})?Z(?:\.[0-9a-f]{32})?(?:\.zst)?$")
#: ``.jsonl`` files in the sessions folder that are no transcript of their own.
_NOT_TRANSCRIPT = re.compile(r"(?:\.trajectory\.jsonl|\.checkpoint\.[0-9a-f]{8}-[0-9a-f]{4}-"
                             r"[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\.jsonl)$",
                             re.IGNORECASE)


def is_transcript_file(name: str) -> bool:
    """Whether a file name in the sessions folder is a transcript memq indexes."""
    if name.startswith(".") or name.endswith(".tmp"):
        return False
    if name.endswith(".jsonl"):
        return _NOT_TRANSCRIPT.search(name) is None
    return _ARCHIVE.search(name) is not None


def read_session_file(path: str, limit: int) -> bytes:
    """A transcript file's JSONL bytes (a ``.zst`` archive decompressed), at most ``limit`` + 1
    of them (so a caller can tell it is over). Raises :class:`OSError` when it cannot be read,
    :class:`zstandard.ZstdError` when a ``.zst`` archive is damaged."""
    with open(path, "rb") as fh:
        if not path.endswith(ZSTD_SUFFIX):
            return fh.read()
        with zstandard.ZstdDecompressor().stream_reader(fh) as reader:
            parts, total = [], 0
            while total <= limit and (part := reader.read(min(1 << 20, limit + 1 - total))):
                parts.append(part)
                total += len(part)
            return b"".join(parts)


def _agent_of_sessions_dir(folder: str) -> str | None:
    """OpenClaw's ``extractAgentIdFromSessionsDir`` (POSIX): ``<id>`` of
    ``…/agents/<id>/sessions`` (None for any other folder)."""
    parts = [p for p in os.path.abspath(folder).split(os.sep) if p]
    if len(parts) < 3 or parts[-1] != "sessions" or parts[-3] != "agents":
        return None
    return parts[-2]


def agent_of_session_file(path: str | os.PathLike[str]) -> str | None:
    """The agent a transcript file belongs to by where it is, as OpenClaw 2026.9.6 decides
    (``extractAgentIdFromSessionPath``): the nearest folder above it named ``sessions`` that
    sits in ``agents/<id>/``; None when there is none."""
    folder = os.path.dirname(os.path.abspath(path))
    while True:
        if os.path.basename(folder) == "sessions":
            agent = _agent_of_sessions_dir(folder)
            if agent:
                return agent
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def session_file_path(path: str | os.PathLike[str]) -> str:
    """The memory path of the transcript file at ``path`` (OpenClaw's ``sessionPathForFile``):
    ``sessions/<agentId>/<file name>``, or ``sessions/<file name>`` when the file is in no
    agent's sessions folder."""
    agent = agent_of_session_file(path)
    name = os.path.basename(os.path.abspath(path))
    return f"{SESSIONS_SOURCE}/{agent}/{name}" if agent else f"{SESSIONS_SOURCE}/{name}"


def session_folder_path(settings: Settings) -> str:
    """The memory path of the sessions folder: what its files' paths start with
    (``sessions/<agentId>`` for OpenClaw's folder of an agent, else ``sessions``)."""
    return session_file_path(Path(settings.sessions_dir) / "x").rpartition("/")[0]


def session_files(settings: Settings) -> list[SourceFile]:
    """The transcripts to index, when session memory is on (else none)."""
    if SESSIONS_SOURCE not in settings.sources:
        return []
    folder = settings.sessions_dir
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return []
    prefix = session_folder_path(settings)
    return [SourceFile(f"{prefix}/{e.name}", e.path, SESSIONS_SOURCE) for e in entries
            if is_transcript_file(e.name) and e.is_file(follow_symlinks=False)]


def session_files_at(settings: Settings, paths: Iterable[Path]) -> tuple[list[SourceFile],
                                                                          set[str]]:
    """Like :func:`pipeline.ingest.sources.memory_files_at`, for transcripts: (found, scopes)."""
    if SESSIONS_SOURCE not in settings.sources:
        return [], set()
    folder = Path(os.path.abspath(settings.sessions_dir))
    prefix = session_folder_path(settings)
    found, scopes = [], set()
    for raw in paths:
        path = Path(os.path.abspath(raw))
        if path == folder:
            scopes.add(prefix)
            found.extend(session_files(settings))
        elif path.parent == folder and is_transcript_file(path.name):
            scopes.add(f"{prefix}/{path.name}")
            if path.is_file() and not path.is_symlink():
                found.append(SourceFile(f"{prefix}/{path.name}", str(path), SESSIONS_SOURCE))
    return found, scopes
