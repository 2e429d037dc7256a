"""Where a memory's QMD state lives, and which collections it has.

**The home.** OpenClaw keeps one self-contained QMD home per agent under
``~/.openclaw/agents/<id>/qmd/`` (``xdg-config``, ``xdg-cache``, ``sessions``). memq keeps one
per memory beside its index: ``<store path without .sqlite>.qmd/``, so two workspaces never
share a QMD index, and removing a memory's files removes its QMD state too.

**The collections** (OpenClaw 2026.3.24, ``resolveDefaultCollections`` / ``resolveCustomPaths``
in ``dist/search-manager-BS0Qj_gi.js``, session collection in ``dist/qmd-manager-CdVu0x02.js``;
the default ones as its later QMD backends, which OpenClaw removed in 2026.8.1):

- with ``includeDefaultMemory``: ``memory-root-<agent>`` (the workspace, mask ``MEMORY.md``)
  and ``memory-dir-<agent>`` (``<workspace>/memory``, ``**/*.md``). No ``memory-alt`` for the
  legacy lower-case ``memory.md`` (2026.3 had one): it is no longer memory, in OpenClaw
  2026.9.6 and in memq's own sources. ``USER.md`` has no collection (OpenClaw's QMD backends,
  2026.3 and later, gave it none), so only the builtin backend searches it;
- one per ``paths[]`` entry: ``<name or custom-N>-<agent>`` (N counts entries from 1), mask
  the entry's ``pattern`` or ``**/*.md``. A path that is a file becomes its folder with the
  file's (glob-escaped) name as the mask, as OpenClaw 2026.4+ does; 2026.3 handed qmd the file,
  which qmd rejects. Duplicate (folder, mask) pairs are dropped (2026.4+ too);
- with ``sessions.enabled``: ``sessions-<agent>`` over the export folder, ``**/*.md``.

Names are lower-cased, runs of other characters than ``a-z0-9-`` become ``-``, and a clash gets
``-2``, ``-3``….
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import Settings
from pipeline.config.qmd_values import DEFAULT_PATTERN


@dataclass(frozen=True)
class Collection:
    """One QMD collection: qmd indexes the files under ``path`` that match ``pattern``."""

    name: str
    path: Path
    pattern: str
    kind: str  # "memory" or "sessions": the ``source`` of its results


@dataclass(frozen=True)
class QmdHome:
    """The folders and files of one memory's QMD home."""

    root: Path

    @property
    def config_home(self) -> Path:
        return self.root / "xdg-config"

    @property
    def cache_home(self) -> Path:
        return self.root / "xdg-cache"

    @property
    def index_path(self) -> Path:
        """qmd's own SQLite index (``$XDG_CACHE_HOME/qmd/index.sqlite``)."""
        return self.cache_home / "qmd" / "index.sqlite"

    @property
    def default_sessions_dir(self) -> Path:
        return self.root / "sessions"

    @property
    def state_path(self) -> Path:
        """memq's record of this home: bound collections, last update and embed, health."""
        return self.root / "memq-qmd-state.json"

    @property
    def write_lock(self) -> Path:
        """Held while a command that changes the home runs (collection add, update, embed)."""
        return self.root / "write.lock"


def qmd_home(settings: Settings) -> QmdHome:
    """The memory's QMD home: beside its store, ``<store stem>.qmd``."""
    store = settings.store.path
    return QmdHome(store.with_name(store.stem + ".qmd"))


def sanitize_name(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


def _unique(base: str, taken: set[str]) -> str:
    name = sanitize_name(base) or "collection"
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}-{n}", n + 1
    taken.add(candidate)
    return candidate


def _escape_glob(name: str) -> str:
    return re.sub(r"([\\*?\[\]{}()!+@])", r"\\\1", name)


def collections(settings: Settings, home: QmdHome) -> list[Collection]:
    """The collections this memory's QMD home should have, in OpenClaw's order."""
    qmd = settings.qmd
    agent = sanitize_name(settings.agent_id) or "agent"
    taken: set[str] = set()
    out: list[Collection] = []
    workspace = settings.workspace
    if qmd.include_default_memory:
        for base, path, pattern in (("memory-root", workspace, "MEMORY.md"),
                                    ("memory-dir", workspace / "memory", DEFAULT_PATTERN)):
            out.append(Collection(_unique(f"{base}-{agent}", taken), path, pattern, "memory"))
    seen: set[tuple[Path, str]] = set()
    for index, entry in enumerate(qmd.paths, start=1):
        path, pattern = Path(os.path.normpath(entry.path)), entry.pattern or DEFAULT_PATTERN
        if path.is_file():
            path, pattern = path.parent, _escape_glob(path.name)
        if (path, pattern) in seen:
            continue
        seen.add((path, pattern))
        name = _unique(f"{entry.name or f'custom-{index}'}-{agent}", taken)
        out.append(Collection(name, path, pattern, "memory"))
    if qmd.sessions.enabled:
        folder = qmd.sessions.export_dir or home.default_sessions_dir
        out.append(Collection(_unique(f"sessions-{agent}", taken), folder, DEFAULT_PATTERN,
                              "sessions"))
    return out


def has_glob(pattern: str) -> bool:
    """Whether a mask matches many files (OpenClaw's ``isDirectoryGlobPattern``)."""
    return any(ch in pattern for ch in "*?[")
