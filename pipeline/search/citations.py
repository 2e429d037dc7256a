"""Citations for search results, as OpenClaw's ``memory.citations`` (auto, on, off).

With citations on, each result carries ``citation`` (``path#L3-L7``, or ``path#L3`` for one
line) and its snippet ends with ``Source: path#L3-L7``, so an agent can quote where a memory
came from and hand the path to ``memory_get``. OpenClaw's ``auto`` means "on in direct chats";
memq has no chat context, so ``auto`` behaves as ``on``.
"""

from __future__ import annotations

from dataclasses import replace

from pipeline.errors import RequestRefused
from pipeline.results import SearchHit

CITATION_MODES = ("auto", "on", "off")


def citation_for(path: str, start: int, end: int) -> str:
    return f"{path}#L{start}" if start == end else f"{path}#L{start}-L{end}"


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
                             snippet=f"{hit.snippet}\n\nSource: {citation}"))
    return cited
