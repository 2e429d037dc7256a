"""Changed facts: does the newer value of a fact win, and does an old note that alone answers
stay in reach? The recency side of issue 36 item 3, next to LoCoMo (which asks about every
session alike, so it measures only burying).

The cases (``tests/data/changed_facts.json``, hand-written, from no benchmark) are laid out as
one memory of dated notes, ``memory/YYYY-MM-DD-N.md`` (dated for temporal decay, no topic word in
the name), asked at :data:`NOW`:

- **changed**: an old note states a fact's old value, a newer one its current value; the
  question asks for it. The ages are fixed by the case's place: the old note 45-314 days old,
  the new one 2-41 days.
- **unique**: only an old note (60-339 days) answers; a recent note names the subject without
  answering (``near``), as a busy memory would.
- **filler**: recent notes about other things, the week's ordinary entries.

Every note holds its sentence and one filler line. Each question is searched as
``memory_search`` searches (the configuration's ``maxResults`` and ``minScore``): a changed fact
is **new first** when the newer note is shown above the older one (or the older one is not
shown), **old first** when the older note is shown above the newer one (or alone); a unique fact
is **kept** when its note is shown.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memq.evaluation.workspace import EvalWorkspace, Indexed
from pipeline.search.hybrid import search_store

#: When the questions are asked.
NOW = dt.datetime(2026, 12, 7, 12, tzinfo=dt.UTC)
#: Where the cases live in the repository.
CASES = Path(__file__).resolve().parents[2] / "tests" / "data" / "changed_facts.json"



def decays(floors: tuple[float, ...] = (0.5, 0.75), superseded: tuple[float, ...] = (0.4,),
           bands: tuple[float, ...] = (0.0,)) -> dict[str, dict[str, Any]]:
    """The recency settings compared (memq.json ``query.hybrid.temporalDecay`` keys): decay
    off, OpenClaw's decay (half-life 30 days, no floor), a ``minFactor`` per floor, and
    superseded recency (``mode: "superseded"``) per cosine threshold in ``superseded`` and
    relevance band in ``bands``."""
    return {"decay off": {"enabled": False},
            "OpenClaw decay": {"enabled": True, "halfLifeDays": 30, "minFactor": 0,
                               "mode": "decay"},
            **{f"minFactor {f:g}": {"enabled": True, "halfLifeDays": 30, "minFactor": f,
                                    "mode": "decay"}
               for f in floors},
            **{f"superseded {s:g}" + (f" band {b:g}" if b else ""):
               {"enabled": True, "halfLifeDays": 30, "mode": "superseded", "similarity": s,
                "band": b}
               for s in superseded for b in bands}}


DECAYS = decays()


@dataclass(frozen=True)
class Case:
    """One question: its kind (``changed`` or ``unique``), the note that should win, and for
    a changed fact the note with the old value."""

    kind: str
    slug: str
    question: str
    answer: str  # path of the note holding the current value (unique: the only answer)
    stale: str | None = None  # path of the note holding the old value (changed facts)


def old_age(i: int) -> int:
    """Days since the old note of changed case ``i``: 45-314, spread by the case's place."""
    return 45 + (i * 53) % 270


def new_age(i: int) -> int:
    """Days since the new note of changed case ``i``: 2-41."""
    return 2 + (i * 17) % 40


def unique_age(i: int) -> int:
    """Days since the only answering note of unique case ``i``: 60-339."""
    return 60 + (i * 67) % 280


def near_age(i: int) -> int:
    """Days since the recent note that names unique case ``i``'s subject: 1-30."""
    return 1 + (i * 7) % 30


def layout(data: dict[str, Any], limit: int = 0) -> tuple[dict[str, str], list[Case]]:
    """Memory files (relative path -> text) and the questions of ``data`` (the JSON's shape);
    ``limit`` keeps the first N cases of each kind (0: all)."""
    files: dict[str, str] = {}
    fillers: list[str] = data["filler"]
    per_day: dict[str, int] = {}

    def note(age: int, text: str) -> str:
        day = (NOW - dt.timedelta(days=age)).date().isoformat()
        per_day[day] = per_day.get(day, 0) + 1
        path = f"memory/{day}-{per_day[day]}.md"
        filler = fillers[len(files) % len(fillers)]
        files[path] = f"# {day}\n\n{text}\n\n{filler}\n"
        return path

    changed = data["changed"][:limit] if limit else data["changed"]
    unique = data["unique"][:limit] if limit else data["unique"]
    cases = []
    for i, c in enumerate(changed):
        stale = note(old_age(i), c["old"])
        cases.append(Case("changed", c["slug"], c["question"], note(new_age(i), c["new"]), stale))
    for i, c in enumerate(unique):
        cases.append(Case("unique", c["slug"], c["question"], note(unique_age(i), c["old"])))
        note(near_age(i), c["near"])
    for age, text in enumerate(fillers, start=1):
        note(age * 3 % 30 + 1, text)
    return files, cases


def outcome(case: Case, paths: list[str]) -> str:
    """What the shown ``paths`` (best first) give for ``case``: ``new first``, ``old first`` or
    ``neither`` (changed facts); ``kept`` or ``buried`` (unique facts)."""
    place = {p: i for i, p in reversed(list(enumerate(paths)))}
    if case.kind == "unique":
        return "kept" if case.answer in place else "buried"
    new, old = place.get(case.answer), place.get(case.stale or "")
    if new is None and old is None:
        return "neither"
    if old is None or (new is not None and new < old):
        return "new first"
    return "old first"


def score(outcomes: list[tuple[Case, str]]) -> dict[str, float]:
    """Shares per kind: ``newFirst``, ``oldFirst`` (changed), ``kept`` (unique), and
    ``both``: the share of all questions answered as a memory should (new first, or kept)."""
    changed = [o for c, o in outcomes if c.kind == "changed"]
    unique = [o for c, o in outcomes if c.kind == "unique"]

    def share(rows: list[str], what: str) -> float:
        return round(sum(o == what for o in rows) / len(rows), 4) if rows else 0.0

    right = sum(o in ("new first", "kept") for _, o in outcomes)
    return {"newFirst": share(changed, "new first"), "oldFirst": share(changed, "old first"),
            "kept": share(unique, "kept"),
            "both": round(right / len(outcomes), 4) if outcomes else 0.0,
            "changed": len(changed), "unique": len(unique)}


def run(work_dir: Path, base: dict[str, Any] | None, data: dict[str, Any],
        decays: dict[str, dict[str, Any]] | None = None, limit: int = 0,
        log: Callable[[str], None] = print) -> dict[str, dict[str, Any]]:
    """Index the cases once under ``work_dir`` and score every recency setting (``decays``,
    default :data:`DECAYS`); setting name -> :func:`score`'s figures and each case's outcome."""
    files, cases = layout(data, limit)
    work = EvalWorkspace(work_dir, base)
    work.sync_files(files)
    indexed = work.index(warn=log)
    log(f"changed facts: {len(files)} notes -> {indexed.chunks} chunks, model {indexed.model}")
    try:
        return {name: _score_setting(work, indexed, cases, name, keys)
                for name, keys in (decays or DECAYS).items()}
    finally:
        indexed.close()


def _score_setting(work: EvalWorkspace, indexed: Indexed, cases: list[Case], name: str,
                   keys: dict[str, Any]) -> dict[str, Any]:
    settings = work.settings({"query": {"hybrid": {"temporalDecay": keys}}},
                             name=name.replace(" ", "-"))
    outcomes = []
    for case in cases:
        hits = search_store(indexed.db, settings, case.question,
                            provider=indexed.provider,  # type: ignore[arg-type]
                            held=indexed.held, now=NOW.timestamp())
        outcomes.append((case, outcome(case, [h.path for h in hits])))
    return {**score(outcomes), "outcomes": {c.slug: o for c, o in outcomes}}


def load(path: Path = CASES) -> dict[str, Any]:
    """The cases file (``changed``, ``unique``, ``filler``)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    for key in ("changed", "unique", "filler"):
        if not isinstance(data.get(key), list) or not data[key]:
            raise ValueError(f"{path}: no {key!r} list")
    return data
