"""The structured values of OpenClaw's ``memory.qmd.*`` keys: durations, ``paths[]``, ``scope``.

Shapes, defaults and parsing follow OpenClaw 2026.3.24 (the last npm release before the
2026.3.25 baseline of memq's other keys): ``dist/search-manager-BS0Qj_gi.js``
(``src/memory/backend-config.ts``) and the zod schema in ``dist/env-D1ktUnAV.js``
(``MemoryQmdSchema``). Where OpenClaw silently
replaces a bad value by its default, memq reports it instead (a clear error, naming the key).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.config.errors import Invalid, show

QMD_SEARCH_MODES: tuple[str, ...] = ("search", "vsearch", "query")
BACKENDS: tuple[str, ...] = ("builtin", "qmd")
SCOPE_ACTIONS: tuple[str, ...] = ("allow", "deny")
SCOPE_CHAT_TYPES: tuple[str, ...] = ("direct", "group", "channel", "dm")
#: OpenClaw's pattern for a ``paths[]`` entry that gives none.
DEFAULT_PATTERN = "**/*.md"

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_SINGLE = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$")
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def duration_ms(text: str) -> int:
    """Milliseconds of an OpenClaw duration (``parseDurationMs`` with ``defaultUnit: "m"``):
    ``"5m"``, ``"90s"``, ``"1h30m"``, ``"250ms"``, a bare number of minutes (``"5"``).
    Raises ValueError for anything else."""
    trimmed = str(text).strip().lower()
    single = _SINGLE.match(trimmed)
    if single:
        return round(float(single.group(1)) * _UNIT_MS[single.group(2) or "m"])
    total, consumed = 0.0, 0
    for match in _PART.finditer(trimmed):
        if match.start() != consumed:
            raise ValueError(text)
        total += float(match.group(1)) * _UNIT_MS[match.group(2)]
        consumed = match.end()
    if not trimmed or consumed != len(trimmed):
        raise ValueError(text)
    return round(total)


def check_duration(key: str, value: Any) -> str:
    """``value`` as a normalised duration string; else :class:`Invalid` naming ``key``."""
    if isinstance(value, str):
        try:
            duration_ms(value)
            return value.strip().lower()
        except ValueError:
            pass
    raise Invalid(key, 'must be a duration string such as "5m", "90s", "1h30m" or "0" (off)',
                  show(value))


def command_word(command: str) -> str:
    """The executable of ``memory.qmd.command``: its first shell word, as OpenClaw spawns it
    (``splitShellArgs(raw)[0]``; the rest of the string is dropped)."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return words[0] if words else "qmd"


@dataclass(frozen=True)
class QmdPath:
    """One ``memory.qmd.paths[]`` entry: a folder (or one file) QMD indexes as a collection."""

    path: Path
    pattern: str | None = None
    name: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": str(self.path)}
        if self.pattern is not None:
            out["pattern"] = self.pattern
        if self.name is not None:
            out["name"] = self.name
        return out


def check_paths(value: Any) -> tuple[QmdPath, ...]:
    """``memory.qmd.paths`` as :class:`QmdPath` entries (paths as written; the settings make
    them absolute from the workspace). Entries with an empty path are skipped, as in OpenClaw."""
    key = "qmd.paths"
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise Invalid(key, "must be a list of {path, pattern, name} tables", show(value))
    out = []
    for item in value:
        if isinstance(item, QmdPath):
            out.append(item)
            continue
        if not isinstance(item, Mapping):
            raise Invalid(key, "items must be {path, pattern, name} tables", show(item))
        extra = set(item) - {"path", "pattern", "name"}
        if extra:
            raise Invalid(key, f"unknown field {sorted(extra)[0]!r} in an entry (allowed: path, "
                               "pattern, name)", show(item))
        if not isinstance(item.get("path"), str | Path):
            raise Invalid(key, "every entry needs a path string", show(item))
        for field in ("pattern", "name"):
            if item.get(field) is not None and not isinstance(item[field], str):
                raise Invalid(key, f"{field} must be a string", show(item))
        raw = str(item["path"]).strip()
        if not raw:
            continue
        pattern = (item.get("pattern") or "").strip() or None
        name = (item.get("name") or "").strip() or None
        out.append(QmdPath(Path(raw), pattern, name))
    return tuple(out)


@dataclass(frozen=True)
class ScopeRule:
    """One ``memory.qmd.scope.rules[]`` entry (OpenClaw's ``session.sendPolicy`` rule shape)."""

    action: str
    channel: str | None = None
    chat_type: str | None = None
    key_prefix: str | None = None
    raw_key_prefix: str | None = None

    def to_json(self) -> dict[str, Any]:
        match = {name: value for name, value in (
            ("channel", self.channel), ("chatType", self.chat_type),
            ("keyPrefix", self.key_prefix), ("rawKeyPrefix", self.raw_key_prefix))
            if value is not None}
        return {"action": self.action, "match": match} if match else {"action": self.action}


@dataclass(frozen=True)
class QmdScope:
    """``memory.qmd.scope``: which chats may see QMD results.

    ``default`` is what happens when no rule matches. OpenClaw's default scope is
    ``{default: "deny", rules: [{action: "allow", match: {chatType: "direct"}}]}``; a scope
    written without ``default`` allows by default (``scope.default ?? "allow"``).
    """

    default: str = "allow"
    rules: tuple[ScopeRule, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"default": self.default, "rules": [r.to_json() for r in self.rules]}


DEFAULT_SCOPE = QmdScope("deny", (ScopeRule("allow", chat_type="direct"),))

_MATCH_FIELDS = {"channel": "channel", "chatType": "chat_type", "keyPrefix": "key_prefix",
                 "rawKeyPrefix": "raw_key_prefix"}


def _word(key: str, value: Any, allowed: tuple[str, ...]) -> str:
    if isinstance(value, str) and value.strip().lower() in allowed:
        return value.strip().lower()
    raise Invalid(key, "must be one of " + ", ".join(f'"{a}"' for a in allowed), show(value))


def check_scope(value: Any) -> QmdScope:
    """``memory.qmd.scope`` as a :class:`QmdScope` (None means OpenClaw's default scope)."""
    key = "qmd.scope"
    if value is None:
        return DEFAULT_SCOPE
    if isinstance(value, QmdScope):
        return value
    if not isinstance(value, Mapping):
        raise Invalid(key, "must be a table with default and rules", show(value))
    extra = set(value) - {"default", "rules"}
    if extra:
        raise Invalid(f"{key}.{sorted(extra)[0]}", "unknown key (allowed: default, rules)", None)
    default = _word(f"{key}.default", value.get("default", "allow"), SCOPE_ACTIONS)
    rules_raw = value.get("rules", [])
    if isinstance(rules_raw, str) or not isinstance(rules_raw, Iterable):
        raise Invalid(f"{key}.rules", "must be a list of {action, match} tables", show(rules_raw))
    rules = []
    for n, rule in enumerate(rules_raw):
        where = f"{key}.rules[{n}]"
        if not isinstance(rule, Mapping) or set(rule) - {"action", "match"}:
            raise Invalid(where, "must be an {action, match} table", show(rule))
        match = rule.get("match") or {}
        if not isinstance(match, Mapping):
            raise Invalid(f"{where}.match", "must be a table", show(match))
        unknown = set(match) - set(_MATCH_FIELDS)
        if unknown:
            raise Invalid(f"{where}.match.{sorted(unknown)[0]}",
                          "unknown key (allowed: " + ", ".join(_MATCH_FIELDS) + ")", None)
        fields: dict[str, str | None] = {}
        for name, attr in _MATCH_FIELDS.items():
            raw = match.get(name)
            if raw is None:
                continue
            if name == "chatType":
                fields[attr] = _word(f"{where}.match.chatType", raw, SCOPE_CHAT_TYPES)
            elif isinstance(raw, str):
                fields[attr] = raw
            else:
                raise Invalid(f"{where}.match.{name}", "must be a string", show(raw))
        rules.append(ScopeRule(_word(f"{where}.action", rule.get("action"), SCOPE_ACTIONS),
                               **fields))
    return QmdScope(default, tuple(rules))
