"""Which files are memory: ``MEMORY.md``, ``memory/**/*.md`` and ``extraPaths``.

Paths are stored relative to the workspace with forward slashes (extra paths outside the
workspace come out as ``../…``), as OpenClaw stores them. Symlinks are never followed, so a
link loop or a link to ``/`` cannot pull half the disk into the index.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

IGNORED_DIRS = frozenset({".git", "node_modules", ".pnpm-store", ".venv", "venv", ".tox",
                          "__pycache__"})
MEMORY_SOURCE = "memory"


@dataclass(frozen=True)
class SourceFile:
    path: str  # relative to the workspace, forward slashes
    abs_path: Path
    source: str


def _markdown_under(root: Path) -> Iterator[Path]:
    """Every regular ``.md`` file below ``root``, never entering symlinks or ignored folders."""
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue  # unreadable folder: its files simply are not memory we can see
        for entry in entries:
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                if entry.name not in IGNORED_DIRS:
                    stack.append(Path(entry.path))
            elif entry.is_file(follow_symlinks=False) and entry.name.lower().endswith(".md"):
                yield Path(entry.path)


def relative_path(workspace: Path, path: Path) -> str:
    return Path(os.path.relpath(path, workspace)).as_posix()


def memory_files(workspace: Path, extra_paths: tuple[Path, ...] = ()) -> list[SourceFile]:
    """List the memory files of a workspace, deduplicated by real path, in a stable order."""
    workspace = Path(workspace)
    candidates: list[Path] = []
    upper, lower = workspace / "MEMORY.md", workspace / "memory.md"
    for root_file in (upper, lower):
        if root_file.is_file() and not root_file.is_symlink():
            candidates.append(root_file)
            break  # lower-case memory.md only when MEMORY.md is absent
    memory_dir = workspace / "memory"
    if memory_dir.is_dir() and not memory_dir.is_symlink():
        candidates.extend(_markdown_under(memory_dir))
    for extra in extra_paths:
        extra = extra if extra.is_absolute() else workspace / extra
        if extra.is_symlink():
            continue
        if extra.is_dir():
            candidates.extend(_markdown_under(extra))
        elif extra.is_file() and extra.name.lower().endswith(".md"):
            candidates.append(extra)
    seen: set[str] = set()
    found: list[SourceFile] = []
    for path in candidates:
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        found.append(SourceFile(relative_path(workspace, path), path, MEMORY_SOURCE))
    found.sort(key=lambda f: f.path)
    return found
