"""Every memory of a configuration, and the stores left behind by memories that are gone.

    catalog = MemoryCatalog(config_file="openclaw.json")
    catalog.names()               # ["main", "work", ...]
    catalog.settings("Work")      # the settings of "work" (any spelling of its id)
    catalog.describe()            # name, workspace, store, size, state, last index of each
    catalog.prune()               # delete the orphaned stores memq made

A configuration names its memories in an openclaw.json (``agents.list``/``agents.entries``) or
in memq's own file (``memories``, ``memoriesDir``); its own memory (the default) is always one.
A name it does not list raises :class:`~pipeline.errors.UnknownMemory`.

A memory's **state**: ``ok`` (indexed), ``not indexed`` (no store yet, or never finished a
pass), ``orphaned`` (its workspace folder is gone) or ``foreign`` (its store file records
another memory as its owner, and is refused). An **orphaned store** is a store under memq's
data dir (:func:`~pipeline.config.paths.data_dir`) whose recorded owner's workspace is gone;
:meth:`MemoryCatalog.prune` deletes exactly those (never a store without an owner record, nor
one outside the data dir, which memq did not name itself).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.config import Settings, load_settings, read_roster
from pipeline.config.paths import data_dir
from pipeline.store.owner import owner_of, peek

STATE_OK = "ok"
STATE_NOT_INDEXED = "not indexed"
STATE_ORPHANED = "orphaned"
STATE_FOREIGN = "foreign"
#: The files of one store besides itself (SQLite's, and memq's job log).
_SIDE_SUFFIXES = ("-wal", "-shm", ".jobs", ".jobs-wal", ".jobs-shm")


@dataclass(frozen=True)
class MemoryInfo:
    """One memory as ``memq memories`` shows it."""

    name: str
    default: bool
    workspace: Path
    store: Path
    size: int
    state: str
    last_index_at: float | None
    owner: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "default": self.default, "workspace": str(self.workspace),
                "store": str(self.store), "size": self.size, "state": self.state,
                "lastIndexAt": self.last_index_at, "owner": self.owner}


@dataclass(frozen=True)
class OrphanStore:
    """A store under memq's data dir whose owner's workspace is gone."""

    store: Path
    memory: str
    workspace: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"store": str(self.store), "memory": self.memory, "workspace": self.workspace,
                "size": self.size}


class MemoryCatalog:
    """The memories of one configuration (``config_file``, else the one memq finds; the
    ``workspace`` argument applies to the file's own memory, as on every command)."""

    def __init__(self, config_file: str | os.PathLike[str] | None = None,
                 workspace: str | os.PathLike[str] | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.env = dict(os.environ if env is None else env)
        self.own = load_settings(config_file=config_file, workspace=workspace, env=self.env)
        self.config_file = self.own.config_file
        self._workspace = workspace
        self.roster = read_roster(self.config_file, self.env) if self.config_file else None

    @property
    def default(self) -> str:
        """The memory used without ``--agent``/``--memory``."""
        return self.own.agent_id

    def names(self) -> list[str]:
        """Every memory's canonical name, the default first."""
        listed = self.roster.names if self.roster is not None else []
        return list(dict.fromkeys([self.default, *listed]))

    def changed(self) -> bool:
        """Whether the configuration's memories may have changed since this catalog read
        them: its file, or its ``memoriesDir`` folder (a sub-folder added or removed), is
        another version now (a ``stat`` each; read a new catalog to see how)."""
        return self.roster is not None and self.roster.changed()

    def settings(self, name: str | None = None) -> Settings:
        """The settings of memory ``name`` (any spelling of it; None: the default);
        :class:`~pipeline.errors.UnknownMemory` for a name the configuration does not list."""
        if name is None or name == self.default:
            return self.own
        if self.roster is not None:
            self.roster.require(name)
        return load_settings(config_file=self.config_file, env=self.env, agent=name)

    def describe(self, names: list[str] | None = None) -> list[MemoryInfo]:
        """Each memory (of ``names``, default all) with its workspace, store, size, state and
        last index time."""
        return [self.info(name) for name in (self.names() if names is None else names)]

    def info(self, name: str) -> MemoryInfo:
        """Memory ``name``'s workspace, store, size, state and last index time."""
        s = self.settings(name)
        facts = peek(s.store.path) if s.store.path.exists() else None
        if not s.workspace.is_dir():
            state = STATE_ORPHANED
        elif facts is not None and facts.owner is not None \
                and facts.owner != owner_of(s.agent_id, s.workspace):
            state = STATE_FOREIGN
        elif facts is None or facts.last_index_at is None:
            state = STATE_NOT_INDEXED
        else:
            state = STATE_OK
        return MemoryInfo(s.agent_id, name == self.default, s.workspace, s.store.path,
                          store_size(s.store.path), state,
                          facts.last_index_at if facts else None, facts.owner if facts else None)

    def orphans(self) -> list[OrphanStore]:
        """The stores under memq's data dir whose recorded owner's workspace is gone."""
        root = data_dir(self.env)
        if not root.is_dir():
            return []
        found = []
        for path in sorted(root.iterdir()):
            if not path.name.endswith(".sqlite") or not path.exists():
                continue
            facts = peek(path)
            if facts.owner is not None and not Path(facts.owner["workspace"]).is_dir():
                found.append(OrphanStore(path, facts.owner["memory"], facts.owner["workspace"],
                                         store_size(path)))
        return found

    def prune(self) -> list[OrphanStore]:
        """Delete every orphaned store (:meth:`orphans`) with its side files; what was removed."""
        removed = self.orphans()
        for orphan in removed:
            remove_store(orphan.store)
        return removed


def store_size(path: Path) -> int:
    """Bytes of the store at ``path``: the file it points to (a generation, after a rebuild)
    and its WAL and job log; 0 when there is none."""
    total = 0
    real = Path(os.path.realpath(path))
    for candidate in {real, *(Path(f"{p}{s}") for p in (path, real) for s in _SIDE_SUFFIXES)}:
        try:
            total += candidate.stat().st_size
        except OSError:
            continue
    return total


def remove_store(path: Path) -> None:
    """Delete the store at ``path``: the name, the generation it points to, and their WAL,
    shared-memory and job-log files."""
    real = Path(os.path.realpath(path))
    for base in dict.fromkeys((path, real)):
        for suffix in ("", *_SIDE_SUFFIXES):
            Path(f"{base}{suffix}").unlink(missing_ok=True)
