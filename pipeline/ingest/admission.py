"""Which paths a writer accepts from a producer on another host.

A producer that holds a memory's files but not its store (:mod:`pipeline.ingest.remote`) sends
what changed to the shard's writer, which cannot look at those files: it checks each path
against the memory's own sources instead, with the rules a local scan follows
(:func:`pipeline.ingest.sources.memory_files`, the sessions folder). A path outside them is
refused, whatever the message says.
"""

from __future__ import annotations

import os
from collections.abc import Callable
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
    ``..`` that leaves them, an absolute path or a control character. A writer checking many
    paths builds one :class:`Admission` instead (the same answers).
    """
    return Admission(settings).refused(path, source)


class Admission:
    """:func:`refused_path` for many paths of one memory: its roots, name filters and extra
    path patterns are worked out once (a full pass sends thousands of paths)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.workspace = settings.workspace
        wanted = extra_filter(settings.multimodal)
        roots: list[tuple[Path, Callable[[str], bool]]] = [(self.workspace / "memory",
                                                             is_markdown)]
        roots += [(e if e.is_absolute() else self.workspace / e, wanted)
                  for e in settings.extra_paths]
        self.roots = roots
        self.legacy = self.workspace / LEGACY_ROOT_FILE
        self.patterns = PathPatterns.of(settings)
        # plain string forms when every root is already in normal form (the usual case):
        # then a path of plain names is checked without pathlib, with the same answers
        texts = [str(self.workspace), *(str(root) for root, _ in roots)]
        self.plain: tuple[str, list[tuple[str, Callable[[str], bool]]]] | None = None
        if all(os.path.isabs(t) and t != "/" and os.path.normpath(t) == t for t in texts):
            self.plain = (texts[0], [(str(root), accepts) for root, accepts in roots])

    def refused(self, path: str, source: str) -> str | None:
        """Why ``path`` of ``source`` is not one of the memory's files, or None (see
        :func:`refused_path`)."""
        if not path or "\0" in path or "\\" in path or path.startswith("/") \
                or any(ord(c) < 32 for c in path):
            return "not a relative memory path"
        settings = self.settings
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
        parts = path.split("/")
        if self.plain is not None and not any(p in ("", ".", "..") for p in parts):
            return self._refused_plain(path, parts)
        workspace = self.workspace
        target = Path(os.path.normpath(workspace / path))
        if relative_path(workspace, target) != path:
            return "not a normal path (it has '.', '..' or repeated slashes)"
        if target.parent == workspace and target.name in ROOT_FILES:
            return None
        if target == self.legacy:
            return "memory.md is no longer a memory file (OpenClaw 2026.9 indexes MEMORY.md)"
        for root, accepts in self.roots:
            if target == root and accepts(target.name):  # an extra path that is a file
                return None
            try:
                inside = target.relative_to(root).parts
            except ValueError:
                continue
            if any(part in IGNORED_DIRS for part in inside[:-1]) or not accepts(target.name):
                continue
            if self.patterns.excludes(target):
                return "excluded by its extra path's patterns"
            return None
        return "outside the memory's files (MEMORY.md, USER.md, memory/, extraPaths)"

    def _refused_plain(self, path: str, parts: list[str]) -> str | None:
        """:meth:`refused` of a path of plain names (no empty, ``.`` or ``..`` part) when the
        workspace and every root are absolute and in normal form: the same tests on strings
        (``workspace/path`` is then the path's normal form)."""
        assert self.plain is not None
        workspace, roots = self.plain
        name = parts[-1]
        if len(parts) == 1 and name in ROOT_FILES:
            return None
        if path == LEGACY_ROOT_FILE:
            return "memory.md is no longer a memory file (OpenClaw 2026.9 indexes MEMORY.md)"
        target = f"{workspace}/{path}"
        for root, accepts in roots:
            if target == root and accepts(name):  # an extra path that is a file
                return None
            if not target.startswith(root + "/"):
                continue
            inside = target[len(root) + 1:].split("/")
            if any(part in IGNORED_DIRS for part in inside[:-1]) or not accepts(name):
                continue
            if self.patterns.excludes(target):
                return "excluded by its extra path's patterns"
            return None
        return "outside the memory's files (MEMORY.md, USER.md, memory/, extraPaths)"
