"""Session transcripts (``sources: [memory, sessions]`` with ``experimental.sessionMemory`` or
``rememberAcrossConversations``): where they are, and ``memory_get`` on a session hit.

Two places hold them. OpenClaw's ``<sessionsDir>/*.jsonl`` files (every transcript before
2026.9; archives and legacy files since), stored as ``sessions/<file>.jsonl``; and, since
2026.9, the live transcripts in the agent's database (:mod:`pipeline.ingest.live_sessions`),
stored as ``sessions/<agentId>/<sessionId>.jsonl``. Both are read the same way
(:mod:`pipeline.ingest.transcripts`: the searchable text, its line map back to the JSONL lines,
redaction, the delta thresholds).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from pipeline.config import Settings
from pipeline.ingest.live_sessions import live_session_get
from pipeline.ingest.sources import SourceFile
from pipeline.ingest.transcripts import (
    SESSIONS_SOURCE,
    Transcript,
    compacted,
    needs_sync,
    transcript,
    transcript_chunks,
    transcript_window,
)
from pipeline.results import MemoryText

#: What other modules have imported from here since before :mod:`pipeline.ingest.transcripts`.
__all__ = ["SESSIONS_SOURCE", "Transcript", "compacted", "needs_sync", "session_files",
           "session_files_at", "session_get", "transcript", "transcript_chunks"]


def session_files(settings: Settings) -> list[SourceFile]:
    """The transcripts to index, when session memory is on (else none)."""
    if SESSIONS_SOURCE not in settings.sources:
        return []
    folder = settings.sessions_dir
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return []
    return [SourceFile(f"sessions/{e.name}", e.path, SESSIONS_SOURCE) for e in entries
            if e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False)]


def session_files_at(settings: Settings, paths: Iterable[Path]) -> tuple[list[SourceFile],
                                                                          set[str]]:
    """Like :func:`pipeline.ingest.sources.memory_files_at`, for transcripts: (found, scopes)."""
    if SESSIONS_SOURCE not in settings.sources:
        return [], set()
    folder = Path(os.path.abspath(settings.sessions_dir))
    found, scopes = [], set()
    for raw in paths:
        path = Path(os.path.abspath(raw))
        if path == folder:
            scopes.add("sessions")
            found.extend(session_files(settings))
        elif path.parent == folder and path.name.endswith(".jsonl"):
            scopes.add(f"sessions/{path.name}")
            if path.is_file() and not path.is_symlink():
                found.append(SourceFile(f"sessions/{path.name}", str(path), SESSIONS_SOURCE))
    return found, scopes


def session_get(settings: Settings, requested: str, from_line: int | None,
                lines: int | None) -> MemoryText | None:
    """``memory_get`` for a session hit, or None for other paths.

    ``sessions/<file>.jsonl`` opens a transcript file, ``sessions/<agentId>/<sessionId>.jsonl``
    a live transcript (:func:`pipeline.ingest.live_sessions.live_session_get`). The window is in
    JSONL lines, as a hit's ``startLine``/``endLine`` are; the text is the transcript lines
    (``User: …``/``Assistant: …``) that came from those JSONL lines. Only a plain file directly
    in the sessions folder can be read.
    """
    if SESSIONS_SOURCE not in settings.sources or not requested.startswith("sessions/"):
        return None
    live = live_session_get(settings, requested, from_line, lines)
    if live is not None:
        return live
    name = requested.removeprefix("sessions/")
    if "/" in name or "\\" in name or "\x00" in name or not name.endswith(".jsonl") \
            or name.startswith("."):
        return None
    path = Path(settings.sessions_dir) / name
    if path.is_symlink() or not path.is_file():
        return MemoryText(requested, "")
    return transcript_window(requested, path.read_text(encoding="utf-8", errors="replace"),
                             from_line, lines)
