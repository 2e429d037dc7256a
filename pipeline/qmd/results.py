"""qmd's ``--json`` output, read as OpenClaw reads it and mapped to memq's result shape.

Parsing (OpenClaw 2026.3.24 ``parseQmdQueryJson``): a "No results found" line means no
results; otherwise stdout must hold a JSON array, possibly after log noise (the first balanced
``[…]`` is taken). Anything else raises :class:`~pipeline.qmd.errors.QmdUnavailable` of kind
``json``.

Mapping (``QmdMemoryManager.search``): each entry's ``snippet`` starts with a diff-style header
``@@ -<start>,<count> @@`` that gives the lines (no header: lines 1 to the snippet's line
count); the snippet is cut to ``limits.maxSnippetChars``; entries under ``minScore`` (default
0) are dropped; when both memory and session results are present they are interleaved, the
source with the best first hit first; then the snippets are cut to ``limits.maxInjectedChars``
in total. **memq:** the ``@@ … @@`` header line is removed from the snippet text (its line
numbers are in ``startLine``/``endLine``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipeline.errors import QmdUnavailable

_HEADER = re.compile(r"@@\s*-([0-9]+),([0-9]+)")
_HEADER_LINE = re.compile(r"^@@[^\n]*@@[^\n]*(\n|$)")
_NO_RESULTS = re.compile(
    r"^(?:\[[^\]]+\]\s*)?(?:(?:warn(?:ing)?|info|error|qmd)\s*:\s*)*no results found\.?$")


def _no_results(text: str) -> bool:
    return any(_NO_RESULTS.match(" ".join(line.lower().split()))
               for line in text.splitlines() if line.strip())


def _first_array(text: str) -> str | None:
    start = text.find("[")
    if start < 0:
        return None
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return None


def _array(text: str) -> list[Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, list) else None


def parse_entries(stdout: str, stderr: str, what: str = "qmd search") -> list[dict[str, Any]]:
    """The result entries qmd printed; raises ``QmdUnavailable("json")`` for anything else."""
    out, err = stdout.strip(), stderr.strip()
    if (out and _no_results(out)) or (not out and err and _no_results(err)):
        return []
    if not out:
        raise QmdUnavailable("json", f"{what} printed nothing (expected a JSON array)")
    found = _array(out)
    if found is None:
        noisy = _first_array(out)
        found = _array(noisy) if noisy is not None else None
    if found is None:
        raise QmdUnavailable("json", f"{what} did not print a JSON array")
    return [e for e in found if isinstance(e, dict)]


def snippet_lines(snippet: str) -> tuple[int, int, str]:
    """``(startLine, endLine, text)`` of a qmd snippet (the text without its ``@@`` header)."""
    header = _HEADER.search(snippet)
    body = _HEADER_LINE.sub("", snippet, count=1) if snippet.startswith("@@") else snippet
    if header:
        start, count = int(header.group(1)), int(header.group(2))
        return start, max(start, start + count - 1), body
    return 1, len(snippet.split("\n")), body


@dataclass(frozen=True)
class Location:
    """Where a qmd document is, as memq names it."""

    path: str  # workspace-relative, or qmd://<collection>/<path> outside the workspace
    source: str  # "memory" or "sessions"


def to_results(entries: list[dict[str, Any]], locate: Callable[[dict[str, Any]], Location | None],
               *, limit: int, min_score: float, max_snippet_chars: int,
               max_injected_chars: int) -> list[dict[str, Any]]:
    """memq's results (``path, startLine, endLine, score, snippet, source``) for qmd entries.

    ``locate`` maps an entry to its document (None: not in a managed collection, skipped).
    """
    results = []
    for entry in entries:
        where = locate(entry)
        if where is None:
            continue
        raw_score = entry.get("score")
        score = float(raw_score) if isinstance(raw_score, int | float) else 0.0
        if score < min_score:
            continue
        start, end, body = snippet_lines(str(entry.get("snippet") or ""))
        results.append({"path": where.path, "startLine": start, "endLine": end,
                        "score": score, "snippet": body[:max_snippet_chars],
                        "source": where.source})
    return clamp_injected(interleave_sources(results, limit), max_injected_chars)


def interleave_sources(results: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """At most ``limit`` results; memory and session hits alternate when both are present
    (OpenClaw's ``diversifyResultsBySource``)."""
    if limit <= 0:
        return []
    by_source: dict[str, list[dict[str, Any]]] = {}
    for hit in results:
        by_source.setdefault(hit["source"], []).append(hit)
    if not {"memory", "sessions"} <= set(by_source):
        return results[:limit]
    order = sorted(by_source, key=lambda s: -by_source[s][0]["score"])
    out: list[dict[str, Any]] = []
    while len(out) < limit and any(by_source[s] for s in order):
        for source in order:
            if by_source[source] and len(out) < limit:
                out.append(by_source[source].pop(0))
    return out


def clamp_injected(results: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    """Results whose snippets add up to at most ``budget`` characters; the last one that does
    not fit whole is cut (OpenClaw's ``clampResultsByInjectedChars``)."""
    out, remaining = [], budget
    for hit in results:
        if remaining <= 0:
            break
        snippet = hit["snippet"]
        if len(snippet) <= remaining:
            out.append(hit)
            remaining -= len(snippet)
        else:
            out.append({**hit, "snippet": snippet[:remaining]})
            break
    return out
