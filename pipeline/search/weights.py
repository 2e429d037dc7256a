"""Entry weights: OpenClaw 2026.9.6's ``importance.ts`` and ``project-ranking.ts``, as plain
functions (path specificity is :mod:`pipeline.search.paths`'s).

* Importance: ``0.75 + clamp(floor(importance), 1, 10) × 0.05`` (0.8 … 1.25); no importance: 1.
* Project: with active project keys, an entry whose project keys (``"; "``-joined) are *all*
  active scores ×1.15, any other annotated entry ×0.9, an unannotated one ×1. An entry whose
  key list holds :data:`~pipeline.ingest.entry_metadata.INVALID_PROJECT_KEY` is never returned
  (with or without active keys).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from pipeline.results import INVALID_PROJECT_KEY
from pipeline.store.path_keys import js_trim

__all__ = ["INVALID_PROJECT_KEY", "active_keys", "importance_multiplier", "project_eligible",
           "project_multiplier"]


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
