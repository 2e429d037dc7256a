"""What an entry's annotation comments say: importance, trigger phrases, project keys.

A port of OpenClaw 2026.9.6's ``extractCuratedEntryRecallMetadata`` and
``extractProjectKeysFromCuratedEntry`` (``curated-annotations.ts``) and of how its indexer
(``prepareMemoryIndexChunks``) gives every chunk of a ``memory`` file the values of its entry:

* The span read is the chunk's *entry* (in ``MEMORY.md``/``USER.md``, a top-level ``- `` bullet
  from its line to the line before the next bullet or heading) or else the chunk's own lines,
  taken from the file as written (annotations not stripped, CRLF read as LF).
* ``importance`` and ``triggers`` only in a curated root file (``MEMORY.md``, ``memory.md`` or
  ``USER.md`` at the workspace root), only from lines that end in ``-->``: an importance is
  ``1``..``10`` in ASCII digits (the largest wins); trigger phrases are split on ``,`` and
  ``;``, trimmed, kept once each in order, and joined with ``"; "``.
* ``project_key`` in every ``memory`` file except ``USER.md``: the keys of every
  ``<!-- project: … -->`` comment of the span (the comment may span lines), split on ``;``,
  each trimmed and refused when empty or holding a line break, ``<`` or ``>``; a key with a
  ``/`` after its first character has the part before it lower-cased (``path:…`` keys are
  kept as they are). Joined with ``"; "``. When any project comment of the span is unclosed
  or holds a refused key, the value is :data:`INVALID_PROJECT_KEY`, and search drops the entry.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pipeline.ingest.annotations import MARKER, js_space_class, nocase, scan_annotations
from pipeline.results import INVALID_PROJECT_KEY

__all__ = ["CURATED_ROOTS", "INVALID_PROJECT_KEY", "EntryMetadata", "chunk_metadata",
           "entry_metadata", "project_keys"]

#: Workspace-relative paths whose importance and trigger comments count (``curatedRoot``).
CURATED_ROOTS = frozenset({"MEMORY.md", "memory.md", "USER.md"})

_S = js_space_class()
_PROJECT = re.compile(f"<!--{_S}*({nocase('project')}){_S}*:")
_DIGITS = re.compile("[0-9]+")
_REFUSED = re.compile("[\r\n<>]")
_PHRASE_SPLIT = re.compile("[,;]")
_EDGE_SPACE = re.compile(f"^{_S}+|{_S}+\\Z")  # String.prototype.trim: the same set as \\s
_END_SPACE = re.compile(f"{_S}+\\Z")
_HEADING = re.compile(f"#{{1,6}}(?:{_S}|\\Z)")


@dataclass(frozen=True)
class EntryMetadata:
    """One entry's recall values (None: absent)."""

    importance: int | None = None
    triggers: str | None = None
    project_key: str | None = None


def _trim(text: str) -> str:
    return _EDGE_SPACE.sub("", text)


def _scan(text: str, marker: re.Pattern[str]) -> Iterator[tuple[str, str]]:
    """(kind, trimmed value) of each annotation (not line-scoped)."""
    for _, _, kind, value in scan_annotations(text, marker):
        yield kind, _trim(value)


def _normalize_key(value: str) -> str | None:
    """``normalizeProjectAnnotationKey``."""
    key = _trim(value)
    if not key or _REFUSED.search(key):
        return None
    if key.startswith("path:"):
        return key
    slash = key.find("/")
    return key if slash < 1 else key[:slash].lower() + key[slash:]


def project_keys(text: str) -> tuple[bool, bool, list[str]]:
    """``extractProjectKeysFromCuratedEntry``: (annotated, valid, keys) of a span's text."""
    markers = sum(1 for _ in _PROJECT.finditer(text))
    keys: dict[str, None] = {}
    parsed = raw = valid = 0
    for _, value in _scan(text, _PROJECT):
        parsed += 1
        for part in value.split(";"):
            raw += 1
            key = _normalize_key(part)
            if key:
                keys[key] = None
                valid += 1
    annotated = markers > 0
    ok = not annotated or (parsed == markers and raw > 0 and raw == valid)
    return annotated, ok, list(keys)


def entry_metadata(lines: Sequence[str], *, curated_root: bool, project_scope: bool
                   ) -> EntryMetadata:
    """``extractCuratedEntryRecallMetadata`` of one span's source ``lines``."""
    phrases: dict[str, None] = {}
    importance: int | None = None
    for line in lines if curated_root else ():
        if not _END_SPACE.sub("", line).endswith("-->"):
            continue
        for kind, value in _scan(line, MARKER):
            if kind == "trigger":
                for phrase in _PHRASE_SPLIT.split(value):
                    if phrase := _trim(phrase):
                        phrases[phrase] = None
            elif kind == "importance" and _DIGITS.fullmatch(value):
                number = int(value)
                if 1 <= number <= 10:
                    importance = number if importance is None else max(importance, number)
    project = None
    if project_scope:
        annotated, ok, keys = project_keys("\n".join(lines))
        project = (INVALID_PROJECT_KEY if annotated and not ok
                   else "; ".join(keys) if keys else None)
    return EntryMetadata(importance, "; ".join(phrases) if phrases else None, project)


def _entry_spans(lines: Sequence[str]) -> list[tuple[int, int] | None]:
    """Per 1-based line (index 0 unused): the (start, end) of its bullet entry, or None when
    it is in a section (a heading, or the text before the first bullet)."""
    spans: list[tuple[int, int] | None] = [None] * (len(lines) + 1)
    start: int | None = None
    for number, line in enumerate([*lines, "# end"], start=1):
        bullet = line.startswith("- ")
        heading = _HEADING.match(line) is not None
        if bullet or heading or number == 1 or number > len(lines):
            if start is not None:
                for n in range(start, number):
                    spans[n] = (start, number - 1)
            start = number if bullet and number <= len(lines) else None
    return spans


def chunk_metadata(path: str, content: str, ranges: Sequence[tuple[int, int]], *,
                   chunked: str | None = None) -> list[EntryMetadata]:
    """The recall values of each chunk (its 1-based inclusive line ``ranges``) of a ``memory``
    file at workspace-relative ``path`` with text ``content`` (annotations not stripped).
    ``chunked``: the text the chunker cut per entry (annotations stripped) when the file was
    chunked per entry (``MEMORY.md``/``USER.md``), else None."""
    normalized = path.replace("\\", "/")
    curated = normalized in CURATED_ROOTS
    scoped = normalized.upper() != "USER.MD"
    if not curated and not scoped:
        return [EntryMetadata() for _ in ranges]
    source = content.replace("\r\n", "\n").split("\n")
    entries = _entry_spans(chunked.split("\n")) if chunked is not None else None
    seen: dict[tuple[int, int], EntryMetadata] = {}
    out: list[EntryMetadata] = []
    for start, end in ranges:
        span = (entries[start] if entries is not None and start < len(entries) else None) \
            or (start, end)
        if span not in seen:
            seen[span] = entry_metadata(source[span[0] - 1:span[1]], curated_root=curated,
                                        project_scope=scoped)
        out.append(seen[span])
    return out
