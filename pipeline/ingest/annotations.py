"""Entry annotation comments of curated memory, stripped before chunking (OpenClaw 2026.9.6).

OpenClaw lets a memory entry carry ``<!-- trigger: … -->``, ``<!-- importance: N -->`` and
``<!-- project: … -->`` comments. They steer recall, but are not part of what is embedded or
matched: its indexer removes them from every file of the ``memory`` source before chunking
(``stripMemoryAnnotationCarriers`` in ``curated-annotations.ts``), as ported here:

* A carrier is ``<!--``, optional whitespace, ``trigger``/``importance``/``project`` (any case),
  optional whitespace, ``:``, then everything up to the next ``-->``; only when that ``-->`` is
  on the same line (a carrier spanning lines is left alone). Other comments stay.
* When at least one carrier was removed, spaces and tabs at the end of *every* line of the file
  (before ``\\r``, ``\\n``, U+2028, U+2029 or the end) are removed too; otherwise the text is
  returned unchanged.

No line break is ever removed, so line numbers of the stripped text are those of the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["MARKER", "js_space_class", "nocase", "scan_annotations",
           "strip_memory_annotation_carriers"]

# JavaScript's \s (WhiteSpace + LineTerminator); the keywords are spelled out per letter
# because JavaScript's /iu folds case with simple case folding only (Python's re.I would also
# let U+0131 "ı" match "i").
_JS_SPACE = ("[\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]")


def js_space_class() -> str:
    """A regex character class of JavaScript's ``\\s`` (WhiteSpace + LineTerminator)."""
    return _JS_SPACE


def nocase(word: str) -> str:
    """A regex matching ``word`` in any case, letter by letter (JavaScript's ``/iu``)."""
    return "".join(f"[{c.lower()}{c.upper()}]" for c in word)


#: Any annotation's opening; group 1 is its kind as written.
MARKER = re.compile(
    f"<!--{_JS_SPACE}*({nocase('trigger')}|{nocase('importance')}|{nocase('project')})"
    f"{_JS_SPACE}*:")
_LINE_BREAK = re.compile("[\r\n]")
_TRAILING = re.compile("[ \t]+(?=[\r\n\u2028\u2029]|\\Z)")


def scan_annotations(text: str, marker: re.Pattern[str] = MARKER, *, line_scoped: bool = False
                     ) -> Iterator[tuple[int, int, str, str]]:
    """(start, end, kind lower-cased, raw value) of each annotation that ``marker`` opens, as
    OpenClaw's ``scanMemoryAnnotations`` finds them (its cached ``-->`` and line-break
    positions included): the value runs to the next ``-->``; an opening without one ends the
    scan; ``line_scoped`` skips an annotation whose ``-->`` is on a later line."""
    closing = -1
    newline = -1
    pos = 0
    while (match := marker.search(text, pos)) is not None:
        value_start = match.end()
        if closing < value_start:
            closing = text.find("-->", value_start)
            if closing < 0:
                return
        if line_scoped:
            if newline < value_start:
                brk = _LINE_BREAK.search(text, value_start)
                newline = brk.start() if brk is not None else len(text)
            if newline < closing:
                pos = value_start
                continue
        yield match.start(), closing + 3, match.group(1).lower(), text[value_start:closing]
        pos = closing + 3


def strip_memory_annotation_carriers(text: str) -> str:
    """``text`` without its one-line trigger/importance/project comments (see module doc)."""
    parts: list[str] = []
    cursor = 0
    for start, end, _, _ in scan_annotations(text, line_scoped=True):
        parts.append(text[cursor:start])
        cursor = end
    if cursor == 0:
        return text
    parts.append(text[cursor:])
    return _TRAILING.sub("", "".join(parts))
