"""Which paths a writer accepts from a producer on another host.

A producer that holds a memory's files but not its store (:mod:`pipeline.ingest.remote`) sends
what changed to the shard's writer, which cannot look at those files: it checks each path
against the memory's own sources instead, with the rules a local scan follows
(:func:`pipeline.ingest.sources.memory_files`, the sessions folder). A path outside them is
refused, whatever the message says.
"""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.config import Settings
from pipeline.ingest.globs import PathPatterns
from pipeline.ingest.sessions import is_transcript_file
from pipeline.ingest.sources import (
    IGNORED_DIRS,
    LEGACY_ROOT_FILE,
    MEMORY_SOURCE,
    ROOT_FILES,
    extra_filter,
    is_markdown,
    relative_path,
)


def refused_path(settings: Settings, path: str, source: str) -> str | None:
    """Why a memory path (as the store keeps it: relative to the workspace, ``/``-separated)
    is not one of the memory's files, or None when a scan of its sources could list it.

    The rules of :func:`memory_files` and the sessions folder, on the path alone, for a writer
    that receives files it cannot see (a producer on another host sends them): ``MEMORY.md``,
    ``USER.md``,
    ``memory/**/*.md``, the extra paths (with their patterns, and media when multimodal is
    on), ``sessions/…`` transcripts when session memory is on; never an ignored folder, a
    ``..`` that leaves them, an absolute path or a control character.
    """
    if not path or "\0" in path or "\\" in path or path.startswith("/") \
            or any(ord(c) < 32 for c in path):
        return "not a relative memory path"
    if source == "sessions":
        parts = path.split("/")
        if "sessions" not in settings.sources:
            return "session memory is off for this memory"
        if parts[0] != "sessions" or len(parts) not in (2, 3) or any(
                p in ("", ".", "..") for p in parts) or (
                len(parts) == 3 and parts[1] != settings.agent_id):
            return "not a session transcript of this memory"
        if not is_transcript_file(parts[-1]):
            return "not a transcript file name"
        return None
    if source != MEMORY_SOURCE:
        return f"unknown source {source!r}"
    workspace = settings.workspace
    target = Path(os.path.normpath(workspace / path))
    if relative_path(workspace, target) != path:
        return "not a normal path (it has '.', '..' or repeated slashes)"
    if target.parent == workspace and target.name in ROOT_FILES:
        return None
    if target == workspace / LEGACY_ROOT_FILE:
        return "memory.md is no longer a memory file (OpenClaw 2026.9 indexes MEMORY.md)"
    roots = [(workspace / "memory", is_markdown)]
    wanted = extra_filter(settings.multimodal)
    roots += [(e if e.is_absolute() else workspace / e, wanted) for e in settings.extra_paths]
    for root, accepts in roots:
        if target == root and accepts(target.name):  # an extra path that is a file
            return None
        try:
            inside = target.relative_to(root).parts
        except ValueError:
            continue
        if any(part in IGNORED_DIRS for part in inside[:-1]) or not accepts(target.name):
            continue
        if PathPatterns.of(settings).excludes(target):
            return "excluded by its extra path's patterns"
        return None
    return "outside the memory's files (MEMORY.md, USER.md, memory/, extraPaths)"
