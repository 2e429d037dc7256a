"""Entry weights and path specificity: OpenClaw 2026.9.6's ``importance.ts``,
``project-ranking.ts`` and ``prepareExactPathMatcher``, as plain functions.

* Importance: ``0.75 + clamp(floor(importance), 1, 10) × 0.05`` (0.8 … 1.25); no importance: 1.
* Project: with active project keys, an entry whose project keys (``"; "``-joined) are *all*
  active scores ×1.15, any other annotated entry ×0.9, an unannotated one ×1. An entry whose
  key list holds :data:`~pipeline.ingest.entry_metadata.INVALID_PROJECT_KEY` is never returned
  (with or without active keys).
* Exact path: a query that, trimmed, with ``\\`` as ``/``, without a leading ``./``, NFC and
  lower-cased, equals a file's path (so normalized) is specificity 3; a query without ``/``
  equal to its basename 2, to its stem (the basename before its last ``.``, unless that dot
  starts it) 1; else 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from pipeline.results import INVALID_PROJECT_KEY
from pipeline.store.path_keys import js_trim, name_keys, normalized_path

__all__ = ["INVALID_PROJECT_KEY", "active_keys", "exact_path_specificity",
           "importance_multiplier", "project_eligible", "project_multiplier"]


def importance_multiplier(importance: float | None) -> float:
    """OpenClaw's ``importanceMultiplier``."""
    if importance is None:
        return 1.0
    return 0.75 + max(1, min(10, math.floor(importance))) * 0.05


def active_keys(keys: Iterable[str] | None) -> frozenset[str] | None:
    """``prepareActiveProjectKeys``: the active set, or None when there is none."""
    keys = frozenset(keys or ())
    return keys or None


def _keys(project_key: str) -> list[str]:
    return [js_trim(key) for key in project_key.split(";")]


def project_multiplier(project_key: str | None, active: frozenset[str] | None) -> float:
    """``projectScoreMultiplier``: 1.15 when every key of the entry is active, 0.9 when not,
    1 without an annotation or without active keys."""
    if not project_key or not active:
        return 1.0
    return 1.15 if all(key in active for key in _keys(project_key) if key) else 0.9


def project_eligible(project_key: str | None) -> bool:
    """False for an entry whose project annotation could not be read (dropped from results)."""
    return not project_key or INVALID_PROJECT_KEY not in _keys(project_key)


def exact_path_specificity(query: str, path: str) -> int:
    """How exactly ``query`` names ``path``: 3 the path, 2 its basename, 1 its stem, 0 not."""
    wanted = normalized_path(query)
    if not wanted or wanted == ".":
        return 0
    if wanted == normalized_path(path):
        return 3
    if "/" in wanted:
        return 0
    name, stem = name_keys(path)
    return 2 if wanted == name else 1 if wanted == stem else 0
