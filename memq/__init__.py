"""memq: an AI agent's Markdown memory, indexed and searched, on one host or a fleet.

    from memq import Memory

    with Memory("~/agent-workspace") as memory:
        memory.index()
        for hit in memory.search("which database did we pick?"):
            print(hit.path, hit.start_line, hit.score)

This is the public surface. Everything here loads on first use, so ``import memq`` stays cheap
(the ``memq`` command's ``--help`` never loads the library). The machinery behind it lives in
``pipeline/`` (the library) and ``workers/`` (the Celery side); their modules may change from
one release to the next, these names do not.

- :class:`Memory`: one agent's memory: ``search``, ``get``, ``append``, ``index``, ``status``,
  ``jobs``; local or through the fleet, decided once when it is opened.
- :class:`Settings`, :func:`load_settings`: the configuration (OpenClaw's keys and defaults).
- :class:`MemoryCatalog`: every memory of a configuration and the stores left behind.
- :func:`memory_search`, :func:`memory_get`: one call each, answering in OpenClaw's JSON shape.
- Results: :class:`SearchResults` of :class:`SearchHit`, :class:`MemoryText`, :class:`Appended`,
  :class:`IndexRun`.
- Errors: every error memq raises on purpose is a :class:`MemqError`; the subclasses named here
  say what to do next (see :mod:`pipeline.errors`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.catalog import MemoryCatalog
    from pipeline.config import Settings, load_settings
    from pipeline.errors import (
        AppendError,
        ConfigError,
        DeletionRefused,
        EmbeddingError,
        FilesElsewhere,
        FleetError,
        MemoryDisabled,
        MemoryPathError,
        MemqError,
        RequestRefused,
        ShardUnreachable,
        StoreError,
        UnknownMemory,
        WorkspaceMissing,
    )
    from pipeline.memory import IndexRun, Memory
    from pipeline.query import memory_get, memory_search
    from pipeline.results import Appended, MemoryText, SearchHit, SearchResults

_ERRORS = ("AppendError", "ConfigError", "DeletionRefused", "EmbeddingError", "FilesElsewhere",
           "FleetError", "MemoryDisabled", "MemoryPathError", "MemqError", "RequestRefused",
           "ShardUnreachable", "StoreError", "UnknownMemory", "WorkspaceMissing")
#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "Memory": "pipeline.memory",
    "IndexRun": "pipeline.memory",
    "Settings": "pipeline.config",
    "load_settings": "pipeline.config",
    "MemoryCatalog": "pipeline.catalog",
    "memory_search": "pipeline.query",
    "memory_get": "pipeline.query",
    "SearchHit": "pipeline.results",
    "SearchResults": "pipeline.results",
    "MemoryText": "pipeline.results",
    "Appended": "pipeline.results",
    **dict.fromkeys(_ERRORS, "pipeline.errors"),
}
__all__ = ["AppendError", "Appended", "ConfigError", "DeletionRefused", "EmbeddingError",
           "FilesElsewhere", "FleetError", "IndexRun", "Memory", "MemoryCatalog",
           "MemoryDisabled", "MemoryPathError", "MemoryText", "MemqError", "RequestRefused",
           "SearchHit", "SearchResults", "Settings", "ShardUnreachable", "StoreError",
           "UnknownMemory", "WorkspaceMissing", "load_settings", "memory_get", "memory_search"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'memq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def installed_version() -> str:
    """The installed distribution's version (``memq --version``, the MCP server's), or
    ``"unknown"`` when run from a checkout that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memq")
    except PackageNotFoundError:
        return "unknown"


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
