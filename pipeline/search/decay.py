"""Temporal decay: older notes count less, evergreen notes not at all.

multiplier = exp(−ln 2 / halfLife × age in days), so a note one half-life old keeps half its
score. memq's ``minFactor`` (``query.hybrid.temporalDecay.minFactor``, default 0: OpenClaw's
decay) puts a floor under it: ``minFactor + (1 − minFactor) × exp(…)``, so a newer note still
wins a near tie while an old note that alone answers keeps at least ``minFactor`` of its score.

Which notes age, and from when, is OpenClaw 2026.9.6's ``extractTimestamp``
(extensions/memory-core/src/memory/temporal-decay.ts), exactly:

- a path with a ``memory/`` folder followed by ``(dir/)*YYYY-MM-DD(-slug)?.md`` (case-sensitive,
  a valid calendar date) ages from that date, UTC midnight: ``memory/2026-02-10.md``,
  ``memory/work/2026-02-10-standup.md``; ``memory/2026-01-15_notes.md``, ``2026-01-15.MD`` or
  ``memory/2026-02-30.md`` are not dated (the last, named like a dated note but no date, ages
  from its modification time);
- ``MEMORY.md`` and ``USER.md`` (exactly, at the workspace root) and every other file under
  ``memory/`` are evergreen;
- every other file (``memory.md``, extra paths, session transcripts) ages from its
  modification time.
"""

from __future__ import annotations

import datetime as dt
import math
import re

_DATED = re.compile(r"(?:^|/)memory/(?:[^/]+/)*(\d{4})-(\d{2})-(\d{2})(?:-[^/]+)?\.md\Z", re.ASCII)
_EVERGREEN = frozenset({"MEMORY.md", "USER.md"})
DAY_S = 86400.0


def _normalized(path: str) -> str:
    path = path.replace("\\", "/")
    return path[2:] if path.startswith("./") else path


def note_date(path: str) -> float | None:
    """The UTC timestamp of a dated memory note's name, or None (invalid dates included)."""
    match = _DATED.search(_normalized(path))
    return None if match is None else _utc_day(match)


def _utc_day(match: re.Match[str]) -> float | None:
    year, month, day_of_month = map(int, match.groups())
    if year < 100:  # JavaScript's Date.UTC reads years 0-99 as 1900-1999: no round trip
        return None
    try:
        day = dt.datetime(year, month, day_of_month, tzinfo=dt.UTC)
    except ValueError:
        return None
    return day.timestamp()


def note_time(path: str, mtime_ns: int | None) -> float | None:
    """When the note was written for decay purposes; None means evergreen."""
    normalized = _normalized(path)
    match = _DATED.search(normalized)
    if match is not None:
        dated = _utc_day(match)
        if dated is not None:
            return dated  # a dated name that is no date (2026-02-30) ages by mtime below
    elif normalized in _EVERGREEN or normalized.startswith("memory/"):
        return None
    return None if mtime_ns is None else mtime_ns / 1e9


def multiplier(written_at: float | None, now: float, half_life_days: float,
               min_factor: float = 0.0) -> float:
    """The decay factor of a note written at ``written_at`` (None: evergreen, 1), never below
    ``min_factor`` (0: OpenClaw's decay)."""
    if written_at is None:
        return 1.0
    age_days = max(0.0, (now - written_at) / DAY_S)
    decayed = math.exp(-math.log(2) / half_life_days * age_days)
    return decayed if min_factor <= 0 else min_factor + (1.0 - min_factor) * decayed


def file_multiplier(path: str, mtime_ns: int | None, now: float, half_life_days: float,
                    min_factor: float = 0.0,
                    times: dict[tuple[str, int | None], float | None] | None = None) -> float:
    """The decay factor of the chunks of file ``path`` (its modification time ``mtime_ns``,
    None when unknown). ``times``: each file's :func:`note_time`, kept across calls (a held
    copy's, :mod:`pipeline.store.rows`), filled here."""
    return multiplier(written_at(path, mtime_ns, times), now, half_life_days, min_factor)


def written_at(path: str, mtime_ns: int | None,
               times: dict[tuple[str, int | None], float | None] | None = None) -> float | None:
    """:func:`note_time` of file ``path``, looked up in (and added to) ``times`` when given."""
    if times is None:
        return note_time(path, mtime_ns)
    if (path, mtime_ns) not in times:
        times[path, mtime_ns] = note_time(path, mtime_ns)
    return times[path, mtime_ns]
