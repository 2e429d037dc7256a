"""LoCoMo: recall of the evidence turns of each question, over dated memory notes.

Each conversation of ``locomo10.json`` becomes its own workspace: every session is written to
``memory/YYYY-MM-DD.md`` (its date; two sessions on one day share the file) as a heading and
one line per turn, ``- [D1:3] Caroline: text`` (a shared photo's caption appended), so a
chunk's line range says exactly which turns it holds. Each question runs as a query; a turn
listed in its ``evidence`` counts as found when one of the first ``k`` chunks covers its line.
Recall@k is the share of the question's evidence turns found, averaged per category.

k is counted in chunks, not turns: with memq's default chunking (400 tokens) a chunk holds
about ten turns, so k = 1, 3 and 6 (memq's default ``maxResults``: what an agent sees) are the
informative cut-offs; k = 20 would return a third of a conversation.

Two layouts (:data:`LAYOUTS`):

- ``notes``: the sessions as dated notes, nothing else;
- ``memory``: as an agent keeps a memory: the same notes, and LoCoMo's ``observation`` facts
  as entries of ``MEMORY.md`` (``- fact``, one line each, so each is its own chunk). The turn
  ids a fact cites stay with the harness, not in the text; a returned entry finds the turns it
  cites.

Besides turn-level recall (``R@k``), session-level recall (``S@k``: the share of a question's
evidence sessions that some returned chunk holds a turn of, or an entry citing one) is the
figure other agent-memory retrievers publish as "R@k" on LoCoMo.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memq.evaluation.metrics import mean
from memq.evaluation.workspace import EvalWorkspace, mode_settings, search

KS = (1, 3, 6)
LAYOUTS = ("notes", "memory")
MEMORY_FILE = "MEMORY.md"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop",
              5: "adversarial"}
_TURN_ID = re.compile(r"D(\d+):(\d+)")
_SESSION = re.compile(r"session_(\d+)$")


@dataclass
class Question:
    text: str
    category: int
    evidence: list[str]


@dataclass
class Conversation:
    """One conversation written as memory files, and where each turn landed."""

    sample_id: str
    files: dict[str, str]
    lines: dict[str, tuple[str, int]] = field(default_factory=dict)  # dia_id -> (path, line)
    #: path -> line -> the turn ids that line holds (its own turn; an entry: the turns cited).
    cites: dict[str, dict[int, tuple[str, ...]]] = field(default_factory=dict)
    questions: list[Question] = field(default_factory=list)
    #: When the questions are asked (epoch seconds): the last session's time, so temporal
    #: decay measures a note's age as the agent would have seen it then.
    asked_at: float | None = None


def session_time(stamp: str) -> dt.datetime:
    """``"1:56 pm on 8 May, 2023"`` -> 2023-05-08 13:56 UTC."""
    return dt.datetime.strptime(stamp.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=dt.UTC)


def session_day(stamp: str) -> dt.date:
    """``"1:56 pm on 8 May, 2023"`` -> 2023-05-08."""
    return session_time(stamp).date()


def evidence_ids(raw: list[str]) -> list[str]:
    """Turn ids in an evidence list; LoCoMo sometimes packs several in one string
    (``"D8:6; D9:17"``); malformed ones (``"D"``) are dropped."""
    found = [f"D{a}:{b}" for item in raw for a, b in _TURN_ID.findall(str(item))]
    return list(dict.fromkeys(found))


def _turn_line(turn: dict[str, Any]) -> str:
    text = " ".join(str(turn.get("text", "")).split())
    if turn.get("blip_caption"):
        text += f" [shares a photo: {turn['blip_caption']}]"
    return f"- [{turn['dia_id']}] {turn['speaker']}: {text}"


def conversation(sample: dict[str, Any], layout: str = "notes") -> Conversation:
    """Memory files for one LoCoMo sample in ``layout`` (:data:`LAYOUTS`), with each turn's
    (path, line) and what each line cites."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown LoCoMo layout {layout!r} (choose from {', '.join(LAYOUTS)})")
    talk = sample["conversation"]
    sessions = sorted((int(m.group(1)), key) for key in talk
                      if (m := _SESSION.match(key)) and talk[key])
    by_path: dict[str, list[str]] = {}
    conv = Conversation(str(sample.get("sample_id", "")), {})
    for number, key in sessions:
        stamp = talk[f"{key}_date_time"]
        asked = session_time(stamp).timestamp()
        conv.asked_at = asked if conv.asked_at is None else max(conv.asked_at, asked)
        path = f"memory/{session_day(stamp).isoformat()}.md"
        lines = by_path.setdefault(path, [])
        if lines:
            lines.append("")
        lines += [f"# Session {number}: {stamp}", ""]
        for turn in talk[key]:
            lines.append(_turn_line(turn))
            conv.lines[turn["dia_id"]] = (path, len(lines))
            conv.cites.setdefault(path, {})[len(lines)] = (turn["dia_id"],)
    if layout == "memory":
        entries = conv.cites.setdefault(MEMORY_FILE, {})
        by_path[MEMORY_FILE] = lines = []
        for fact, cited in observations(sample):
            lines.append(f"- {fact}")
            entries[len(lines)] = cited
    conv.files = {path: "\n".join(lines) + "\n" for path, lines in by_path.items()}
    conv.questions = [Question(q["question"], int(q["category"]), evidence_ids(q["evidence"]))
                      for q in sample.get("qa", []) if evidence_ids(q.get("evidence", []))]
    return conv


def observations(sample: dict[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """LoCoMo's observation facts, session by session and speaker by speaker, each with the
    turn ids it cites (facts citing none are left out: they cannot be scored)."""
    found: list[tuple[str, tuple[str, ...]]] = []
    facts = sample.get("observation") or {}
    numbered = sorted((int(m.group(1)), key) for key in facts
                      if (m := re.match(r"session_(\d+)_observation$", key)))
    for _, key in numbered:
        for items in (facts[key] or {}).values():
            for item in items:
                text, cited = " ".join(str(item[0]).split()), evidence_ids(list(item[1:]))
                if text and cited:
                    found.append((text, tuple(cited)))
    return found


def session_of(turn: str) -> str:
    """``D3:12`` -> ``D3`` (the session a turn id belongs to)."""
    return turn.split(":", 1)[0]


def turns_found(hits: list[dict[str, Any]], conv: Conversation) -> set[str]:
    """Every turn some hit holds: its own line covered, or an entry citing it covered."""
    found: set[str] = set()
    for hit in hits:
        for line, cited in conv.cites.get(hit["path"], {}).items():
            if hit["startLine"] <= line <= hit["endLine"]:
                found.update(cited)
    return found


def recall(found: set[str], evidence: list[str]) -> tuple[float, float]:
    """(turn-level, session-level) share of ``evidence`` in ``found``."""
    if not evidence:
        return 0.0, 0.0
    sessions = {session_of(t) for t in evidence}
    held = {session_of(t) for t in found}
    return (sum(t in found for t in evidence) / len(evidence),
            len(sessions & held) / len(sessions))


def load(path: Path, layout: str = "notes") -> list[Conversation]:
    try:
        samples = json.loads(path.read_text(encoding="utf-8"))
        return [conversation(s, layout) for s in samples]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a LoCoMo file (locomo10.json format): {exc}") from exc


def run(work_dir: Path, base: dict[str, Any] | None, conversations: list[Conversation],
        modes: list[str], limit: int = 0, log: Callable[[str], None] = print,
        named: dict[str, dict[str, Any]] | None = None, fused: dict[str, Any] | None = None
        ) -> dict[str, dict[str, dict[str, float]]]:
    """mode -> category ("all" included) -> {"R@k": mean, "S@k": mean}. ``limit`` caps the
    questions per conversation; ``named``: modes besides :data:`~memq.evaluation.workspace.MODES`
    (name -> memq.json keys); ``fused``: hybrid keys (vectorWeight, rrfK) for the fused modes.
    Evidence turns missing from the conversation are counted as not found."""
    per_mode: dict[str, dict[str, list[dict[str, float]]]] = {m: {} for m in modes}
    for conv in conversations:
        work = EvalWorkspace(work_dir / (conv.sample_id or "conversation"), base)
        work.sync_files(conv.files)
        indexed = work.index(warn=log)
        log(f"{conv.sample_id}: {len(conv.files)} notes -> {indexed.chunks} chunks")
        questions = conv.questions[:limit] if limit > 0 else conv.questions
        try:
            for name, settings in mode_settings(work, modes, fused, named=named).items():
                for q in questions:
                    hits = search(indexed, settings, name, q.text, max(KS), now=conv.asked_at)
                    row: dict[str, float] = {}
                    for k in KS:
                        turn, session = recall(turns_found(hits[:k], conv), q.evidence)
                        row[f"R@{k}"], row[f"S@{k}"] = turn, session
                    for group in (CATEGORIES.get(q.category, str(q.category)), "all"):
                        per_mode[name].setdefault(group, []).append(row)
        finally:
            indexed.close()
    return {m: {g: {**mean(rows), "questions": len(rows)} for g, rows in groups.items()}
            for m, groups in per_mode.items()}
