"""Binding a QMD home's collections to the configured folders (``qmd collection add``).

As OpenClaw 2026.3.24 ``ensureCollections``: list what qmd has; add each missing collection
(creating its folder first when the mask is a glob); a collection bound to another folder or
mask is removed and added again; an add refused because another name already holds the same
folder and mask removes that name and adds again; any other failure is logged and the rest go
on. qmd 2.8's ``collection list`` prints names and masks but no folders, so memq remembers the
folder and mask it bound each name to (the home's state file) and rebinds on any difference.
**memq:** collections memq bound earlier that the config no longer has are removed, so
``qmd update`` stops refreshing them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.errors import QmdUnavailable
from pipeline.qmd import commands
from pipeline.qmd.layout import Collection, has_glob
from pipeline.qmd.runner import QmdRunner
from pipeline.qmd.state import StateFile

log = logging.getLogger("memq.qmd")

_NAME_LINE = re.compile(r"^\s*([a-z0-9._-]+)\s+\(qmd://[^)]+\)\s*$", re.IGNORECASE)
_PATTERN_LINE = re.compile(r"^\s*(?:pattern|mask)\s*:\s*(.+?)\s*$", re.IGNORECASE)
_CONFLICT = re.compile(r"Name:\s*([a-z0-9._-]+)", re.IGNORECASE)


def parse_list(output: str) -> dict[str, str | None]:
    """Collection name -> mask (None when not shown) from ``qmd collection list``."""
    listed: dict[str, str | None] = {}
    current = None
    for line in output.splitlines():
        if not line.strip():
            current = None
            continue
        named = _NAME_LINE.match(line)
        if named:
            current = named.group(1)
            listed.setdefault(current, None)
            continue
        pattern = _PATTERN_LINE.match(line)
        if current and pattern:
            listed[current] = pattern.group(1)
    return listed


@dataclass
class BindReport:
    """What :func:`ensure_collections` did, by collection name."""

    added: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"added": self.added, "kept": self.kept, "removed": self.removed,
                "failed": self.failed}


def _binding(c: Collection) -> dict[str, str]:
    return {"path": str(c.path), "pattern": c.pattern}


def ensure_collections(runner: QmdRunner, wanted: Sequence[Collection], state: StateFile,
                       timeout_ms: int) -> BindReport:
    """Make qmd's collections match ``wanted``. Raises :class:`QmdUnavailable` when qmd cannot
    be run at all, or when no wanted collection could be bound."""
    listed = parse_list(runner.run(commands.LIST_ARGS, timeout_ms).stdout)
    bound: dict[str, Any] = dict(state.read().get("collections") or {})
    report = BindReport()
    wanted_names = {c.name for c in wanted}
    for name in [n for n in bound if n not in wanted_names]:
        if name in listed:
            _remove(runner, name, timeout_ms)
            report.removed.append(name)
        bound.pop(name)
    for c in wanted:
        same = bound.get(c.name) == _binding(c) and listed.get(c.name) in (c.pattern, None)
        if c.name in listed and same:
            report.kept.append(c.name)
            continue
        if c.name in listed:
            _remove(runner, c.name, timeout_ms)
        try:
            _add(runner, c, timeout_ms)
        except QmdUnavailable as exc:
            if exc.kind != "exit":
                raise
            bound.pop(c.name, None)
            report.failed[c.name] = exc.reason
            log.warning("qmd collection add failed for %s: %s", c.name, exc.reason)
            continue
        bound[c.name] = _binding(c)
        report.added.append(c.name)
    state.update(lambda s: s.__setitem__("collections", bound))
    if wanted and len(report.failed) == len(wanted):
        raise QmdUnavailable("collections", "no QMD collection could be created: "
                             + "; ".join(f"{n}: {r}" for n, r in report.failed.items()))
    return report


def _remove(runner: QmdRunner, name: str, timeout_ms: int) -> None:
    try:
        runner.run(commands.collection_remove_args(name), timeout_ms)
    except QmdUnavailable as exc:
        if exc.kind != "exit" or "not found" not in exc.reason.lower():
            raise


def _add(runner: QmdRunner, c: Collection, timeout_ms: int) -> None:
    if has_glob(c.pattern):
        c.path.mkdir(parents=True, exist_ok=True)
    args = commands.collection_add_args(c.path, c.name, c.pattern)
    try:
        runner.run(args, timeout_ms)
    except QmdUnavailable as exc:
        conflict = _CONFLICT.search(exc.reason) if "already exists" in exc.reason else None
        if conflict is None or conflict.group(1) == c.name:
            raise
        log.warning("qmd collection %s holds %s's folder and mask; rebinding",
                    conflict.group(1), c.name)
        _remove(runner, conflict.group(1), timeout_ms)
        runner.run(args, timeout_ms)
