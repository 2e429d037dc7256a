"""Citations for search results, as OpenClaw's ``memory.citations`` (auto, on, off).

With citations on, each result carries ``citation`` (``path#L3-L7``, or ``path#L3`` for one
line) and its snippet ends with ``Source: path#L3-L7``, so an agent can quote where a memory
came from and hand the path to ``memory_get``. OpenClaw's ``auto`` means "on in direct chats";
memq has no chat context, so ``auto`` behaves as ``on``.
"""

from __future__ import annotations

import re
from dataclasses import replace

from pipeline.errors import RequestRefused
from pipeline.results import SearchHit

CITATION_MODES = ("auto", "on", "off")
#: JavaScript's whitespace and line terminators (``String.prototype.trimEnd``).
_TRAILING_SPACE = re.compile("[\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f"
                             "\u205f\u3000\ufeff]+\\Z")


def citation_for(path: str, start: int, end: int) -> str:
    return f"{path}#L{start}" if start == end else f"{path}#L{start}-L{end}"


def trim_end(text: str) -> str:
    """``text`` without trailing whitespace, as JavaScript's ``trimEnd`` (OpenClaw trims a
    snippet so before adding the ``Source:`` footer): its whitespace, not Python's."""
    return _TRAILING_SPACE.sub("", text)


def check_mode(mode: str) -> str:
    """``mode`` if it is a citations mode; else a clear RequestRefused."""
    if mode not in CITATION_MODES:
        raise RequestRefused(f"citations must be one of {', '.join(CITATION_MODES)}, got {mode!r}")
    return mode


def apply_citations(hits: list[SearchHit], mode: str) -> list[SearchHit]:
    """``hits`` with citations added (``auto``/``on``) or left alone (``off``)."""
    if check_mode(mode) == "off":
        return hits
    cited = []
    for hit in hits:
        citation = citation_for(hit.path, hit.start_line, hit.end_line)
        cited.append(replace(hit, citation=citation,
                             snippet=f"{trim_end(hit.snippet)}\n\nSource: {citation}"))
    return cited
