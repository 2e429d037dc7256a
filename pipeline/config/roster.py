"""The memories a config file names: OpenClaw's agents, or memq's own ``memories``/``memoriesDir``.

An ``openclaw.json`` lists agents in ``agents.list`` (an array of ``{id, workspace,
memorySearch, default}``) or, since 2026.9, ``agents.entries`` (an object keyed by id; it wins
when both are present). Ids are canonical (:mod:`pipeline.config.agent_id`); the first entry of
an id wins. The workspace of an agent follows OpenClaw 2026.9.6 (``resolveAgentWorkspaceDir``):
its own ``workspace``, else, for the agent that owns the legacy data (the one marked
``default: true``, or the only one), ``agents.defaults.workspace`` or OpenClaw's default
workspace, else ``<agents.defaults.workspace>/<id>``, else ``<state dir>/workspace-<id>``.

memq's own file keeps its top-level settings as its own memory (``agentId``, ``main`` by
default) and may name more: ``memories`` (a list of tables with ``name``, ``workspace`` and any
memorySearch keys as overrides) and ``memoriesDir`` (a folder whose sub-folders are workspaces,
each a memory named after its folder, canonicalised like an agent id).

A roster records what it was read from (:attr:`Roster.stamps`: the file, and the
``memoriesDir`` folder, whose mtime changes when a sub-folder is added or removed), so a
long-running process can tell with a ``stat`` or two whether to read it again
(:meth:`Roster.changed`).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.config.agent_id import (
    DEFAULT_AGENT_ID,
    is_valid_agent_id,
    normalize_agent_id,
    normalize_agent_id_strict,
)
from pipeline.config.errors import ConfigError, show
from pipeline.config.paths import expand, home, openclaw_state_dir, resolve
from pipeline.errors import UnknownMemory

#: Keys of a ``memories`` entry that are not overrides.
ENTRY_KEYS = ("name", "workspace")
#: Settings of the whole fleet: a memory of memq's file cannot override them.
FLEET_WIDE = ("agentId", "brokerUrl", "memories", "memoriesDir", "fleet.shards")

#: One version of a file or folder: its path, then its mtime (ns), size and inode (the path
#: alone when it cannot be read).
Stamp = tuple[object, ...]


def stamp_of(path: str | os.PathLike[str]) -> Stamp:
    """The version of the file or folder at ``path`` (one ``stat``)."""
    try:
        st = os.stat(path)
    except OSError:
        return (str(path),)
    return (str(path), st.st_mtime_ns, st.st_size, st.st_ino)


def stamps_changed(stamps: Sequence[Stamp]) -> bool:
    """Whether any file or folder ``stamps`` were taken of is another version now."""
    return any(stamp_of(str(stamp[0])) != stamp for stamp in stamps)


@dataclass(frozen=True)
class Listed:
    """One memory a config file names: its canonical ``name``, where it is written
    (``display``: ``agents.list[1]``, ``memories[0]``, ``memoriesDir/<folder>``), its table of
    overrides (``section``) and its workspace as written (None: by the file's rules)."""

    name: str
    display: str
    section: Mapping[str, Any] = field(default_factory=dict)
    workspace: str | None = None


@dataclass(frozen=True)
class Roster:
    """The memories of one config file: ``listed`` in order, ``default`` (the memory used
    without ``--agent``), and whether the file names memories at all (``closed``: then a name
    it does not list is an :class:`~pipeline.errors.UnknownMemory`)."""

    listed: tuple[Listed, ...]
    default: str
    closed: bool
    source: str
    #: What it was read from, each stamped before it was read (see :meth:`changed`).
    stamps: tuple[Stamp, ...] = ()

    @property
    def names(self) -> list[str]:
        """Every memory's name, the default first when it is listed."""
        return [m.name for m in self.listed]

    @property
    def served(self) -> list[str]:
        """The memories a fleet serves under this file: the default, then every listed one;
        empty when the file names none (any name is then its own memory)."""
        return list(dict.fromkeys([self.default, *self.names])) if self.closed else []

    def changed(self) -> bool:
        """Whether the file or ``memoriesDir`` folder it was read from changed since (a
        ``stat`` each; a sub-folder added to or removed from ``memoriesDir`` changes the
        folder's mtime)."""
        return stamps_changed(self.stamps)

    def find(self, name: str) -> Listed | None:
        """The memory ``name`` (any spelling of its id) names, or None."""
        canonical = normalize_agent_id_strict(name)
        return next((m for m in self.listed if m.name == canonical), None)

    def require(self, name: str) -> Listed | None:
        """:meth:`find`, or :class:`UnknownMemory` when the file names memories and ``name``
        is none of them (None when the file names none: any name is its own memory)."""
        found = self.find(name)
        if found is None and self.closed and normalize_agent_id_strict(name) != self.default:
            raise unknown_memory(name, [self.default, *self.names], self.source)
        return found


def unknown_memory(name: str, known: Sequence[str], source: str) -> UnknownMemory:
    """The error for a name that is not one of ``known``: lists them, suggests the closest."""
    known = list(dict.fromkeys(known))
    text = f'unknown memory "{name}": {source} has {", ".join(known) or "none"}'
    guess = difflib.get_close_matches(normalize_agent_id(name), known, n=1, cutoff=0.6)
    if guess:
        text += f'; did you mean "{guess[0]}"?'
    return UnknownMemory(text, name=name, known=tuple(known), source=source)


# --------------------------------------------------------------------------------- OpenClaw


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _agent_entries(data: Mapping[str, Any], source: str
                   ) -> tuple[list[tuple[Mapping[str, Any], str]], bool]:
    """Every agent entry with where it is written, and whether the file has a roster."""
    agents = _dict(data.get("agents"))
    if agents.get("entries") is not None:
        entries = agents["entries"]
        if not isinstance(entries, Mapping):
            raise ConfigError(f"agents.entries: must be an object keyed by agent id; got "
                              f"{show(entries)} (in {source})", key="agents.entries",
                              source=source)
        return [({**entry, "id": key}, f"agents.entries.{key}") for key, entry in entries.items()
                if isinstance(entry, Mapping)], True
    if agents.get("list") is not None:
        listed = agents["list"]
        if not isinstance(listed, list):
            raise ConfigError(f"agents.list: must be an array of agents; got {show(listed)} "
                              f"(in {source})", key="agents.list", source=source)
        return [(entry, f"agents.list[{i}]") for i, entry in enumerate(listed)
                if isinstance(entry, Mapping)], True
    return [], False


def _agent_id(entry: Mapping[str, Any], display: str, source: str) -> str:
    raw = entry.get("id")
    if raw is not None and not isinstance(raw, str):
        raise ConfigError(f"{display}.id: must be a string; got {show(raw)} (in {source})",
                          key="agents.list.id", source=source)
    return normalize_agent_id(raw)


def _owner(data: Mapping[str, Any], entries: list[tuple[str, Mapping[str, Any]]],
           has_roster: bool) -> str | None:
    """The agent that owns the legacy data (OpenClaw's ``tryResolveLegacyDataOwner``): the one
    marked ``default: true`` (unless ownership is explicit), else the only one."""
    if _dict(data.get("agents")).get("ownership") != "explicit":
        marked = [name for name, entry in entries if entry.get("default") is True]
        if len(marked) == 1:
            return marked[0]
    if not entries:
        return None if has_roster else DEFAULT_AGENT_ID
    return entries[0][0] if len(entries) == 1 else None


def openclaw_roster(data: Mapping[str, Any], source: str) -> Roster:
    """The agents of an openclaw.json, and its default one: the system agent
    (``agents.defaults.systemAgent.agentId``, with explicit ownership), the owner of the legacy
    data, else (memq, where OpenClaw would ask) the first listed, else ``main``."""
    raw, has_roster = _agent_entries(data, source)
    entries = [(_agent_id(entry, display, source), entry, display) for entry, display in raw]
    listed: dict[str, Listed] = {}
    for name, entry, display in entries:
        if name not in listed:
            workspace = entry.get("workspace")
            listed[name] = Listed(name, display, entry,
                                  workspace.strip() if isinstance(workspace, str)
                                  and workspace.strip() else None)
    agents = _dict(data.get("agents"))
    default: str | None = None
    if agents.get("ownership") == "explicit":
        system = _dict(_dict(agents.get("defaults")).get("systemAgent")).get("agentId")
        if isinstance(system, str) and system.strip():
            default = normalize_agent_id(system) if normalize_agent_id(system) in listed else None
    else:
        default = _owner(data, [(n, e) for n, e, _ in entries], has_roster)
    default = default or next(iter(listed), DEFAULT_AGENT_ID)
    return Roster(tuple(listed.values()), default, has_roster, source)


def openclaw_workspace(data: Mapping[str, Any], agent: str, env: Mapping[str, str],
                       source: str) -> tuple[str, str]:
    """The workspace of ``agent`` as a path (``~`` expanded; relative: from the file's folder)
    and the words that say where it came from (OpenClaw's ``resolveAgentWorkspaceDir``)."""
    roster = openclaw_roster(data, source)
    own = roster.find(agent)
    if own is not None and own.workspace:
        return own.workspace, f"{own.display}.workspace"
    raw, has_roster = _agent_entries(data, source)
    owner = _owner(data, [(_agent_id(e, d, source), e) for e, d in raw], has_roster)
    fallback = _dict(_dict(data.get("agents")).get("defaults")).get("workspace")
    fallback = fallback.strip() if isinstance(fallback, str) else ""
    if owner is not None and agent == owner:
        if fallback:
            return fallback, "agents.defaults.workspace"
        return str(default_agent_workspace(env)), "OpenClaw's default workspace"
    if fallback:
        return (os.path.join(expand(fallback, env), agent),
                f"agents.defaults.workspace + agent {agent}")
    return (str(openclaw_state_dir(env) / f"workspace-{agent}"),
            f"OpenClaw's workspace for agent {agent}")


def default_agent_workspace(env: Mapping[str, str]) -> Path:
    """OpenClaw's default workspace (``resolveDefaultAgentWorkspaceDir``):
    ``$OPENCLAW_WORKSPACE_DIR``, else ``$OPENCLAW_STATE_DIR/workspace``, else
    ``~/.openclaw-<profile>/workspace`` for ``$OPENCLAW_PROFILE``, else
    ``~/.openclaw/workspace`` (``~`` is ``$OPENCLAW_HOME``, else ``$HOME``)."""
    named = env.get("OPENCLAW_WORKSPACE_DIR", "").strip()
    if named:
        return resolve(named, Path.cwd(), env)
    if env.get("OPENCLAW_STATE_DIR", "").strip():
        return openclaw_state_dir(env) / "workspace"
    base = (resolve(env["OPENCLAW_HOME"].strip(), Path.cwd(), env)
            if env.get("OPENCLAW_HOME", "").strip() else home(env))
    profile = env.get("OPENCLAW_PROFILE", "").strip()
    if profile and profile.lower() != "default":
        return base / f".openclaw-{profile}" / "workspace"
    return base / ".openclaw" / "workspace"


# ------------------------------------------------------------------------------ memq's own file


def memq_roster(data: Mapping[str, Any], path: Path, env: Mapping[str, str]) -> Roster:
    """The memories of memq's own file: ``memories`` then ``memoriesDir``'s sub-folders (the
    file's own memory, ``agentId`` or ``main``, is the default and is not in ``listed``)."""
    source = str(path)
    own = data.get("agentId")
    if isinstance(own, str) and own.strip():  # one OpenClaw would rewrite stays as written:
        default = normalize_agent_id_strict(own) if is_valid_agent_id(own) else own  # refused
    else:
        default = DEFAULT_AGENT_ID
    listed: dict[str, Listed] = {}
    stamps: tuple[Stamp, ...] = ()

    def add(memory: Listed) -> None:
        if memory.name == default:
            raise ConfigError(f'{memory.display}: the name "{memory.name}" is the file\'s own '
                              f"memory (agentId, {DEFAULT_AGENT_ID} by default); give it "
                              f"another (in {source})", key="memories", source=source)
        if memory.name in listed:
            raise ConfigError(f'{memory.display}: the name "{memory.name}" is also '
                              f"{listed[memory.name].display}'s; memory names must differ "
                              f"(case and punctuation aside) (in {source})",
                              key="memories", source=source)
        listed[memory.name] = memory

    memories = data.get("memories")
    if memories is not None:
        if not isinstance(memories, list):
            raise ConfigError(f"memories: must be a list of tables with name and workspace; "
                              f"got {show(memories)} (in {source})", key="memories",
                              source=source)
        for i, entry in enumerate(memories):
            add(_memq_entry(entry, f"memories[{i}]", source))
    folder = data.get("memoriesDir")
    if folder is not None:
        if not isinstance(folder, str) or not folder.strip():
            raise ConfigError(f"memoriesDir: must be a folder path; got {show(folder)} "
                              f"(in {source})", key="memoriesDir", source=source)
        root = resolve(folder.strip(), path.parent, env)
        if not root.is_dir():
            raise ConfigError(f"memoriesDir: {root} is not a folder (in {source})",
                              key="memoriesDir", source=source)
        stamps = (stamp_of(root),)  # before listing it: a sub-folder added meanwhile shows
        for sub in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            name = normalize_agent_id_strict(sub.name)
            if name is not None:
                add(Listed(name, f"memoriesDir/{sub.name}", {}, str(sub)))
    return Roster(tuple(listed.values()), default, bool(listed) or memories is not None
                  or folder is not None, source, stamps)


def _memq_entry(entry: Any, display: str, source: str) -> Listed:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{display}: must be a table with name and workspace; got "
                          f"{show(entry)} (in {source})", key="memories", source=source)
    name, workspace = entry.get("name"), entry.get("workspace")
    canonical = normalize_agent_id_strict(name) if isinstance(name, str) else None
    if canonical is None:
        raise ConfigError(f"{display}.name: must be a name with a letter or digit; got "
                          f"{show(name)} (in {source})", key="memories.name", source=source)
    if not isinstance(workspace, str) or not workspace.strip():
        raise ConfigError(f"{display}.workspace: must be a directory path; got "
                          f"{show(workspace)} (in {source})", key="memories.workspace",
                          source=source)
    for key in FLEET_WIDE:
        head, _, rest = key.partition(".")
        if head in entry and (not rest or rest in _dict(entry[head])):
            raise ConfigError(f"{display}.{key}: is a setting of the whole file, not of one "
                              f"memory (in {source})", key=key, source=source)
    return Listed(canonical, display, entry, workspace.strip())
