"""Which files are memory: ``MEMORY.md``, ``USER.md``, ``memory/**/*.md`` and ``extraPaths``.

As in OpenClaw 2026.9.6 (``listMemoryFiles``): ``MEMORY.md`` and ``USER.md`` count only at the
workspace root, with exactly that name, and only as regular files (a symlink is skipped, by
``lstat``). The legacy lower-case ``memory.md`` is no longer memory: it is not listed, not even
through an extra path that names it or the workspace, and nor is anything under
``.openclaw-repair/`` (where OpenClaw's doctor moves it).

Under ``extraPaths`` only, image and audio files are memory too when ``multimodal`` is on
(:mod:`pipeline.ingest.multimodal`), as in OpenClaw. An extra path given as ``{path, pattern}``
lets in only the files its glob matches (:mod:`pipeline.ingest.globs`).

Paths are stored relative to the workspace with forward slashes (extra paths outside the
workspace come out as ``../…``), as OpenClaw stores them. Symlinks are never followed, so a
link loop or a link to ``/`` cannot pull half the disk into the index.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import MultimodalSettings, Settings
from pipeline.errors import MemoryPathError
from pipeline.ingest.globs import PathPatterns
from pipeline.ingest.multimodal import classify

IGNORED_DIRS = frozenset({".git", "node_modules", ".pnpm-store", ".venv", "venv", ".tox",
                          "__pycache__", ".openclaw-repair"})
MEMORY_SOURCE = "memory"
#: The memory files at the workspace root, in listing order (exact names, regular files only).
ROOT_FILES = ("MEMORY.md", "USER.md")
#: A root file ``memory_get`` may read (any case) but that is never indexed (OpenClaw's
#: ``isMemoryPath`` allows it; its ``listMemoryFiles`` does not list it).
READABLE_ROOT_FILE = "dreams.md"
#: OpenClaw's legacy root file, never memory since 2026.9 (``shouldSkipRootMemoryAuxiliaryPath``).
LEGACY_ROOT_FILE = "memory.md"


@dataclass(frozen=True)
class SourceFile:
    path: str  # relative to the workspace, forward slashes
    file: str  # where to open it (as listed: under the workspace or an extra path)
    source: str

    @property
    def abs_path(self) -> Path:
        return Path(self.file)


# (listed path, real path, path relative to the workspace) of one file.
_Listed = tuple[str, str, str]


def is_markdown(name: str) -> bool:
    return name.lower().endswith(".md")


def extra_filter(multimodal: MultimodalSettings | None) -> Callable[[str], bool]:
    """Which file names count under an extra path: Markdown, plus media when multimodal is on."""
    if multimodal is None or not multimodal.active:
        return is_markdown
    return lambda name: is_markdown(name) or classify(name, multimodal) is not None


def _markdown_under(root: Path, rel_root: str, wanted: Callable[[str], bool] = is_markdown,
                    unreadable: list[tuple[str, str]] | None = None) -> Iterator[_Listed]:
    """Every regular ``.md`` file (or ``wanted`` name) below ``root``, never entering symlinks
    or ignored folders.

    A folder that cannot be listed is appended to ``unreadable`` as (relative path, reason).

    Symlinks are never followed, so a folder's real path is its parent's plus its name, and its
    path relative to the workspace is its parent's plus its name: both come from string joins
    instead of a ``realpath`` and a ``relpath`` per file (a no-op re-sync of 10,000 files spent
    most of its time there).
    """
    stack = [(str(root), os.path.realpath(root), rel_root)]
    while stack:
        folder, real, rel = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            if unreadable is not None:
                unreadable.append((rel, exc.strerror or str(exc)))
            continue
        for entry in entries:
            if entry.is_symlink():
                continue
            name = entry.name
            if entry.is_dir(follow_symlinks=False):
                if name not in IGNORED_DIRS:
                    stack.append((entry.path, f"{real}{os.sep}{name}", f"{rel}/{name}"))
            elif entry.is_file(follow_symlinks=False) and wanted(name):
                yield entry.path, f"{real}{os.sep}{name}", f"{rel}/{name}"


def _regular_root_file(workspace: Path, name: str) -> bool:
    """Whether ``workspace/name`` is a regular file itself (``lstat``: a symlink is not)."""
    try:
        return stat.S_ISREG(os.lstat(workspace / name).st_mode)
    except OSError:
        return False


def relative_path(workspace: Path, path: Path) -> str:
    return Path(os.path.relpath(path, workspace)).as_posix()


def _single(workspace: Path, path: Path) -> _Listed:
    return str(path), os.path.realpath(path), relative_path(workspace, path)


def memory_files(workspace: Path, extra_paths: tuple[Path, ...] = (),
                 multimodal: MultimodalSettings | None = None, *,
                 unreadable: list[tuple[str, str]] | None = None,
                 patterns: PathPatterns | None = None) -> list[SourceFile]:
    """List the memory files of a workspace, deduplicated by real path, in a stable order.

    Folders that cannot be listed (permissions) are appended to ``unreadable`` as (relative
    path, reason): their files are unknown, not gone. ``patterns`` (the ``{path, pattern}``
    extraPaths entries) leave out the files below a globbed folder that match none of its globs.
    """
    workspace = Path(workspace)
    wanted = extra_filter(multimodal)
    candidates: list[_Listed] = []
    for name in ROOT_FILES:
        if _regular_root_file(workspace, name):
            candidates.append(_single(workspace, workspace / name))
    memory_dir = workspace / "memory"
    if memory_dir.is_dir() and not memory_dir.is_symlink():
        candidates.extend(_markdown_under(memory_dir, relative_path(workspace, memory_dir),
                                          unreadable=unreadable))
    for extra in extra_paths:
        extra = extra if extra.is_absolute() else workspace / extra
        if extra.is_symlink():
            continue
        if extra.is_dir():
            candidates.extend(_markdown_under(extra, relative_path(workspace, extra), wanted,
                                              unreadable))
        elif extra.is_file() and wanted(extra.name):
            candidates.append(_single(workspace, extra))
    # The legacy file however it is reached (its own name is not resolved: it may be a link).
    seen: set[str] = {os.path.join(os.path.realpath(workspace), LEGACY_ROOT_FILE)}
    found: list[SourceFile] = []
    for listed, real, rel in candidates:
        if real in seen or (patterns and patterns.excludes(listed)):
            continue
        seen.add(real)
        found.append(SourceFile(rel, listed, MEMORY_SOURCE))
    found.sort(key=lambda f: f.path)
    return found


def _clean_below(root: Path, path: Path) -> bool:
    """True when ``path`` lies inside ``root`` with no symlink and no ignored folder on the way."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return False
    current = root
    for part in parts:
        if part in IGNORED_DIRS:
            return False
        current = current / part
        try:
            if current.is_symlink():
                return False
        except OSError:  # a folder on the way cannot be entered: nothing below is visible
            return False
    return True


def memory_files_at(workspace: Path, extra_paths: tuple[Path, ...], paths: Iterable[Path],
                    multimodal: MultimodalSettings | None = None, *,
                    patterns: PathPatterns | None = None
                    ) -> tuple[list[SourceFile], set[str]]:
    """The memory files at or below ``paths`` (files or folders), without listing the roots.

    Returns (memory files found on disk, relative path prefixes the caller may treat as gone
    when the store knows a file there that is not on disk). This is what a watcher's targeted
    sync needs: it costs a few stats per event instead of a walk of every root. Files that
    ``patterns`` exclude are not found (so a known one in scope counts as gone).
    """
    workspace = Path(workspace)
    extras = [e if e.is_absolute() else workspace / e for e in extra_paths]
    roots = [workspace / "memory", *[e for e in extras if not e.is_file()]]
    in_extras = extra_filter(multimodal)
    found: dict[str, SourceFile] = {}
    scopes: set[str] = set()
    for raw in paths:
        path = Path(os.path.abspath(raw))
        rel = relative_path(workspace, path)
        if path.parent == workspace and path.name in (*ROOT_FILES, LEGACY_ROOT_FILE):
            scopes.add(path.name)  # a known legacy memory.md is gone: it is no longer memory
            if path.name in ROOT_FILES and _regular_root_file(workspace, path.name):
                found[path.name] = SourceFile(path.name, str(path), MEMORY_SOURCE)
            continue
        if path in extras and not path.is_dir():
            scopes.add(rel)
            if path.is_file() and not path.is_symlink() and in_extras(path.name):
                found[rel] = SourceFile(rel, str(path), MEMORY_SOURCE)
            continue
        root = next((r for r in roots if path == r or _clean_below(r, path)), None)
        if root is None:
            continue
        scopes.add(rel)
        if path.is_symlink():
            continue
        wanted = is_markdown if root == roots[0] else in_extras
        if path.is_dir():
            for listed, _, f_rel in _markdown_under(path, rel, wanted):
                found[f_rel] = SourceFile(f_rel, listed, MEMORY_SOURCE)
        elif path.is_file() and wanted(path.name):
            found[rel] = SourceFile(rel, str(path), MEMORY_SOURCE)
    kept = [f for f in found.values() if not (patterns and patterns.excludes(f.file))]
    return sorted(kept, key=lambda f: f.path), scopes


_PATH_REQUIRED = ("path required: a memory .md file (MEMORY.md, USER.md, memory/…, or an "
                  "extra path)")


def in_scope(path: str, scopes: set[str]) -> bool:
    """Whether relative ``path`` is one of ``scopes`` or inside one of them (folders)."""
    return path in scopes or any(path.startswith(s + "/") for s in scopes)


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _could_be_memory(settings: Settings, path: Path) -> bool:
    """Is ``path`` where a memory file lives, whether or not it exists yet? No part of it may be
    a symlink or an ignored folder."""
    workspace = settings.workspace
    if os.path.realpath(path.parent) != str(path.parent):
        return False
    if PathPatterns.of(settings).excludes(path):
        return False
    if path.parent == workspace and (path.name in ROOT_FILES
                                     or path.name.lower() == READABLE_ROOT_FILE):
        return True
    if path == workspace / LEGACY_ROOT_FILE:
        return False
    roots = [workspace / "memory", *(p if p.is_absolute() else workspace / p
                                      for p in settings.extra_paths)]
    for root in roots:
        if _under(path, root) and path != root:
            return not IGNORED_DIRS.intersection(path.relative_to(root).parts[:-1])
    return False


def resolve_memory_path(settings: Settings, requested: str) -> Path:
    """The file ``requested`` names, if it is (or could be) a memory file; else raise."""
    if not requested or "\x00" in requested:
        raise MemoryPathError(_PATH_REQUIRED)
    candidate = Path(requested)
    if not candidate.is_absolute():
        candidate = settings.workspace / candidate
    candidate = Path(os.path.normpath(candidate))
    if candidate.suffix.lower() != ".md":
        raise MemoryPathError(_PATH_REQUIRED)
    listed = {Path(os.path.normpath(f.abs_path))
              for f in memory_files(settings.workspace, settings.extra_paths,
                                    patterns=PathPatterns.of(settings))}
    if candidate in listed:
        return candidate
    # Not listed: a file that does not exist yet, or that a concurrent append created after the
    # listing, is fine where memory files live; a symlink or anything but a file is not.
    if candidate.is_symlink() or not _could_be_memory(settings, candidate):
        raise MemoryPathError(_PATH_REQUIRED)
    if candidate.exists() and not candidate.is_file():
        raise MemoryPathError(_PATH_REQUIRED)
    return candidate

