"""Temporal decay: older notes count less, evergreen notes not at all.

multiplier = exp(−ln 2 / halfLife × age in days), so a note one half-life old keeps half its
score. The age comes from the file name for dated memory notes at any depth
(``memory/2026-02-10.md``, ``memory/work/2026-02-10.md``, ``memory/2026-02-10-standup.md``,
UTC midnight); ``MEMORY.md`` and ``USER.md`` (exactly, at the workspace root, as OpenClaw 2026.9's
``isEvergreenMemoryPath``) and undated files under ``memory/`` are evergreen;
every other file (extra paths, session transcripts) ages from its modification time.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Sequence

from pipeline.store import reads
from pipeline.store.engine import Database

_DATED = re.compile(r"(?:^|/)(\d{4})-(\d{2})-(\d{2})(?:[-_. ][^/]*)?\.md$", re.IGNORECASE)
_EVERGREEN = frozenset({"MEMORY.md", "USER.md"})
DAY_S = 86400.0


def note_date(path: str) -> float | None:
    """The UTC timestamp of a dated memory note's name, or None (invalid dates included)."""
    if not path.startswith("memory/"):
        return None
    match = _DATED.search(path)
    if match is None:
        return None
    try:
        day = dt.datetime(*map(int, match.groups()), tzinfo=dt.UTC)
    except ValueError:
        return None
    return day.timestamp()


def note_time(path: str, mtime_ns: int | None) -> float | None:
    """When the note was written for decay purposes; None means evergreen."""
    if path in _EVERGREEN:
        return None
    if path.startswith("memory/"):
        return note_date(path)
    return None if mtime_ns is None else mtime_ns / 1e9


def multiplier(written_at: float | None, now: float, half_life_days: float) -> float:
    if written_at is None:
        return 1.0
    age_days = max(0.0, (now - written_at) / DAY_S)
    return math.exp(-math.log(2) / half_life_days * age_days)


def multipliers(db: Database, rowids: Sequence[int], now: float, half_life_days: float
                ) -> dict[int, float]:
    """Decay multiplier per chunk rowid."""
    return {r: multiplier(note_time(path, mtime), now, half_life_days)
            for r, path, mtime in reads.chunk_files(db, rowids)}
