"""The raw values a config file sets: memq's own file, or the memorySearch parts of openclaw.json.

Keys are checked against :data:`~pipeline.config.keys.READ` here (unknown keys are errors,
with a suggestion); values are checked later, by the settings they fill.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline.config.agent_id import is_valid_agent_id, normalize_agent_id_strict
from pipeline.config.errors import ConfigError, Entry, message, show
from pipeline.config.files import read_file
from pipeline.config.keys import READ, TABLES, children
from pipeline.config.remember import remembers_by_default
from pipeline.config.roster import (
    ENTRY_KEYS,
    Roster,
    memq_roster,
    openclaw_roster,
    openclaw_workspace,
    stamp_of,
)


def file_entries(
    path: Path, agent_hint: str | None, env: Mapping[str, str], warnings: list[str]
) -> dict[str, Entry]:
    """Every key the file at ``path`` sets, by dotted key path, for the memory ``agent_hint``
    names (any spelling of its id; default: the file's default memory).

    For an openclaw.json, also its workspace and the agent; for memq's file naming
    ``memories``/``memoriesDir``, a listed memory's workspace and overrides over the file's
    keys. When the file names memories, ``agentId`` holds the canonical name of the one
    chosen, and a name it does not list raises :class:`~pipeline.errors.UnknownMemory`.
    """
    collector = _Collector(path, warnings)
    data = read_file(path)
    if _is_openclaw(path, data):
        agent_id, ws_entry = _collect_openclaw(collector, data, agent_hint, env)
        collector.entries["workspace"] = ws_entry
        collector.entries.setdefault("agentId", collector.entry(agent_id, "agentId"))
    else:
        _collect_memq(collector, data, agent_hint, env)
    return collector.entries


def _collect_memq(c: _Collector, data: Mapping[str, Any], agent_hint: str | None,
                  env: Mapping[str, str]) -> None:
    own = {k: v for k, v in data.items() if k not in ("memories", "memoriesDir")}
    c.walk(own, display="", top=True)
    if not any(k in data for k in ("memories", "memoriesDir")) or agent_hint is None:
        return
    roster = memq_roster(data, c.path, env)
    listed = roster.require(agent_hint)
    if listed is None:  # the file's own memory
        c.entries["agentId"] = c.pinned(roster.default, "agentId")
        return
    c.entries["agentId"] = c.pinned(listed.name, f"{listed.display}.name")
    c.entries["workspace"] = c.pinned(listed.workspace, f"{listed.display}.workspace")
    inherited = c.entries.get("store.path")
    overrides = {k: v for k, v in listed.section.items() if k not in ENTRY_KEYS}
    c.walk(overrides, display=f"{listed.display}.", top=True)
    shared = c.entries.get("store.path")
    if shared is not None and shared is inherited and "{agentId}" not in str(shared.value):
        # One file for every memory would mix them: this one keeps its own default store.
        del c.entries["store.path"]
        c.warnings.append(f"{shared.name} has no {{agentId}}: memory {listed.name} keeps its "
                          "own store (the default path for its workspace)")


class _Collector:
    def __init__(self, path: Path, warnings: list[str]) -> None:
        self.path = path
        self.where = f"in {path}"
        self.entries: dict[str, Entry] = {}
        self.warnings = warnings

    def entry(self, value: Any, name: str) -> Entry:
        return Entry(value, name, self.where, str(self.path), self.path.parent)

    def pinned(self, value: Any, name: str) -> Entry:
        """An entry that names the memory chosen: it beats the environment's."""
        return Entry(value, name, self.where, str(self.path), self.path.parent, pinned=True)

    def walk(self, data: Mapping[str, Any], *, display: str, top: bool, prefix: str = "") -> None:
        for name, value in data.items():
            key = f"{prefix}{name}"
            shown = f"{display}{key}"
            spec = READ.get(key)
            if spec is not None and (top or not spec.top_only):
                if spec.ignored:
                    self.warnings.append(
                        f"{shown} is an OpenClaw setting memq does not use; ignored ({self.where})"
                    )
                    continue
                entry = self.entry(value, shown)
                if key == "extraPaths":
                    self._add_extra_paths(key, entry)
                else:
                    self.entries[key] = entry
            elif key in TABLES:
                if not isinstance(value, Mapping):
                    raise ConfigError(
                        message(shown, "must be a table of settings", show(value), self.where),
                        key=key,
                        source=str(self.path),
                    )
                self.walk(value, display=display, top=top, prefix=f"{key}.")
            else:
                raise self._unknown(key, shown, display, top)

    def _add_extra_paths(self, key: str, entry: Entry) -> None:
        value = entry.value
        if not isinstance(value, list):
            raise entry.fail(
                key, "must be a list of paths (strings or {path, pattern} tables)", show(value)
            )
        for item in value:
            ok = isinstance(item, str) or (
                isinstance(item, Mapping)
                and isinstance(item.get("path"), str)
                and set(item) <= {"path", "pattern"}
                and isinstance(item.get("pattern", ""), str)
            )
            if not ok:
                raise entry.fail(key, "items must be paths or {path, pattern} tables", show(item))
        previous = self.entries.get(key)
        if previous is not None:  # OpenClaw concatenates extraPaths across config layers
            entry.value = [*previous.value, *((i, entry.base) for i in value)]
        else:
            entry.value = [(i, entry.base) for i in value]
        self.entries[key] = entry

    def _unknown(self, key: str, shown: str, display: str, top: bool) -> ConfigError:
        if not top and any(p == key or p.startswith(key + ".") for p in _MEMORY_KEYS):
            return ConfigError(f'"{shown}" is not a memorySearch key ({self.where}); OpenClaw '
                               f"reads it from memory.{key}", key=key, source=str(self.path))
        prefix, _, leaf = key.rpartition(".")
        siblings = [
            c
            for c in children(prefix)
            if top or not (k := READ.get(f"{prefix}.{c}".lstrip("."))) or not k.top_only
        ]

        def norm(s: str) -> str:
            return s.replace("_", "").replace("-", "").lower()

        guess = [s for s in siblings if norm(s) == norm(leaf)] or difflib.get_close_matches(
            leaf, siblings, n=1, cutoff=0.6
        )
        suggestion = f"{prefix}.{guess[0]}".lstrip(".") if guess else None
        if suggestion is None:  # maybe the key is right but in the wrong table
            leaves = {p: p.rsplit(".", 1)[-1] for p, k in READ.items() if top or not k.top_only}
            exact = [p for p, lf in leaves.items() if norm(lf) == norm(leaf)]
            close = difflib.get_close_matches(leaf, list(leaves.values()), n=1, cutoff=0.75)
            found = exact or [p for p, lf in leaves.items() if close and lf == close[0]]
            suggestion = found[0] if found else None
        text = f'unknown key "{shown}" ({self.where})'
        if suggestion is not None:
            text += f'; did you mean "{display}{suggestion}"?'
        elif key in ("memorySearch", "agents", "memory") and top:
            text += (
                "; memq.toml takes OpenClaw's memorySearch keys at the top level (to read "
                "an OpenClaw config, point MEMQ_CONFIG at openclaw.json)"
            )
        else:
            known = ", ".join(siblings)
            text += f"; known keys{' in ' + display + prefix if prefix else ''}: {known}"
        return ConfigError(text, key=key, source=str(self.path))


#: The keys an openclaw.json sets under ``memory`` (memory.backend, memory.qmd.*).
_MEMORY_KEYS = [p for p, k in READ.items() if k.top_only and p.split(".")[0] in ("backend", "qmd")]


def _is_openclaw(path: Path, data: Mapping[str, Any]) -> bool:
    if path.name.lower().startswith("openclaw"):
        return True
    memq_top = set(children(""))
    return bool({"agents", "memory"} & set(data)) and not (memq_top & set(data))


def _dict_at(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def _collect_openclaw(
    c: _Collector, data: Mapping[str, Any], agent_hint: str | None, env: Mapping[str, str]
) -> tuple[str, Entry]:
    """Read an openclaw.json; return the agent id and the workspace entry."""
    agents = _dict_at(data, "agents")
    roster = openclaw_roster(data, str(c.path))
    if agent_hint is None:
        agent_id = roster.default
    else:
        found = roster.require(agent_hint)
        agent_id = found.name if found is not None else _canonical_hint(agent_hint)
        if found is not None or agent_id == roster.default:
            c.entries["agentId"] = c.pinned(agent_id, "agentId")
    chosen = roster.find(agent_id)
    agent = chosen.section if chosen is not None else {}
    layers = [
        ("agents.defaults.memorySearch.", _dict_at(agents, "defaults", "memorySearch")),
        ("memory.search.", _dict_at(data, "memory", "search")),
    ]
    if chosen is not None:
        layers += [
            (f"{chosen.display}.memorySearch.", agent.get("memorySearch")),
            (f"{chosen.display}.memory.search.", _dict_at(agent, "memory", "search")),
        ]
    for display, section in layers:
        if section is None:
            continue
        if not isinstance(section, Mapping):
            raise ConfigError(
                message(display[:-1], "must be an object of settings", show(section), c.where),
                source=str(c.path),
            )
        c.walk(section, display=display, top=False)
    c.entries.setdefault(  # OpenClaw's default
        "rememberAcrossConversations", c.entry(remembers_by_default(data), "session"))
    providers = _dict_at(data, "models", "providers")
    if providers is not None:  # the credentials and endpoints memory embeddings inherit
        c.entries["models.providers"] = c.entry(providers, "models.providers")
    citations = _dict_at(data, "memory", "citations")
    if citations is not None:
        c.entries["citations"] = c.entry(citations, "memory.citations")
    memory = _dict_at(data, "memory")
    if isinstance(memory, Mapping):  # memory.backend and memory.qmd: top-level keys in memq's file
        backend = {k: memory[k] for k in ("backend", "qmd") if k in memory}
        c.walk(backend, display="memory.", top=True)
    if "store.path" in c.entries:
        ignored = c.entries.pop("store.path")
        c.warnings.append(
            f"{ignored.name} points at OpenClaw's own index; memq keeps a separate "
            "one (set MEMQ_STORE_PATH or store.path in memq.toml to choose it)"
        )
    workspace, where = openclaw_workspace(data, agent_id, env, str(c.path))
    if chosen is not None and agent_id != roster.default:  # a listed agent's own folder
        return agent_id, c.pinned(workspace, where)
    return agent_id, c.entry(workspace, where)


def _canonical_hint(hint: str) -> str:
    """A name no roster lists, canonical when it can be (the loader refuses the rest)."""
    canonical = normalize_agent_id_strict(hint)
    return canonical if canonical is not None and is_valid_agent_id(hint) else hint


def listed_agents(path: Path | None, env: Mapping[str, str] | None = None) -> list[str]:
    """The memories a config file names (an openclaw.json's agents, memq's ``memories`` and
    ``memoriesDir``, with the file's own memory first): the memories a fleet serves under
    that config. Empty when the file names none (any name is then its own memory)."""
    if path is None:
        return []
    return read_roster(path, os.environ if env is None else env).served


def read_roster(path: Path, env: Mapping[str, str]) -> Roster:
    """The :class:`~pipeline.config.roster.Roster` of the config file at ``path``, stamped
    (the file, and its ``memoriesDir`` folder) so :meth:`Roster.changed` can tell when to
    read it again."""
    before = stamp_of(path)
    data = read_file(path)
    if _is_openclaw(path, data):
        roster = openclaw_roster(data, str(path))
    else:
        roster = memq_roster(data, path, env)
    return replace(roster, stamps=(before, *roster.stamps))
