"""memq's library: an agent's Markdown memory, indexed and searched.

    from pipeline import Memory

    with Memory("~/agent-workspace") as memory:
        memory.index()
        hits = memory.search("which database did we pick?")

The names below load on first use, so importing one part of the package (``pipeline.config``
for the CLI's ``--help``) does not load them all.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.errors import MemqError
    from pipeline.memory import IndexRun, Memory
    from pipeline.query import memory_get, memory_search
    from pipeline.results import Appended, MemoryText, SearchHit, SearchResults

_EXPORTS = {
    "Memory": "pipeline.memory",
    "IndexRun": "pipeline.memory",
    "MemqError": "pipeline.errors",
    "memory_search": "pipeline.query",
    "memory_get": "pipeline.query",
    "SearchHit": "pipeline.results",
    "SearchResults": "pipeline.results",
    "MemoryText": "pipeline.results",
    "Appended": "pipeline.results",
}
__all__ = ["Appended", "IndexRun", "Memory", "MemoryText", "MemqError", "SearchHit",
           "SearchResults", "memory_get", "memory_search"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
