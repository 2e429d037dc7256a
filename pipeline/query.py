"""``memory_search`` and ``memory_get``: one-call versions of :class:`memq.Memory`'s
``search`` and ``get``, answering with OpenClaw's JSON shapes (dicts).

Each call builds a :class:`~memq.Memory` and closes it: fine for a single question. A
program that searches many times keeps one ``Memory`` open instead (its model and its
in-memory copies of the store are loaded once).
"""

from __future__ import annotations

import os
from typing import Any

from pipeline.config import Settings
from pipeline.memory import Memory


def memory_search(query: str, *, settings: Settings | None = None,
                  workspace: str | os.PathLike[str] | None = None,
                  max_results: int | None = None, min_score: float | None = None,
                  sync: bool | None = None, citations: str | None = None,
                  in_memory: bool = False) -> dict[str, Any]:
    """Search an agent's memory (:meth:`memq.Memory.search`); returns OpenClaw's result
    shape: ``{results: [{path, startLine, endLine, score, snippet, source}], provider, model,
    mode, …}``. ``in_memory`` loads the store into memory first (only worth it in a process
    that keeps searching through a :class:`~memq.Memory`)."""
    with Memory(workspace, settings=settings, in_memory=in_memory) as memory:
        return memory.search(query, max_results=max_results, min_score=min_score, sync=sync,
                             citations=citations).to_dict()


def memory_get(path: str, from_line: int | None = None, lines: int | None = None, *,
               settings: Settings | None = None,
               workspace: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Read lines of a memory file (:meth:`memq.Memory.get`): ``{status, text, path, from,
    lines, truncated?, nextFrom?}`` (``{status: "not_found", text: "", path}`` for a file that
    does not exist yet); raises :class:`~pipeline.errors.MemoryPathError` for anything but a
    memory file."""
    with Memory(workspace, settings=settings, in_memory=False) as memory:
        return memory.get(path, from_line, lines).to_dict()
