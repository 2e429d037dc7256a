"""Each hit's ``provenance``, as OpenClaw 2026.9.6 labels an indexed chunk.

OpenClaw classifies a file by its workspace-relative path (``resolveMemoryPathClassification``
in ``memory-path-provenance.ts``), and a chunk takes its file's class with ``sessionKind``
``unknown`` and ``observedAt`` its file's modification time in milliseconds
(``resolveChunkProvenance``):

* ``system``: dreaming output (``DREAMS.md``/``dreams.md`` at the root, anything under
  ``memory/dreaming/`` or ``memory/.dreams/``);
* ``agent``: the workspace's memory notes (``MEMORY.md``, ``memory.md``, ``USER.md`` at the
  root, ``users/<id>/USER.md``, ``.md`` files under ``memory/``);
* ``untrusted``: everything else (extra paths, session transcripts).

Two differences, both because memq does not keep what OpenClaw reads for them: OpenClaw lets
a recorded artifact provenance override a memory note's class (memq records none), and it
labels a transcript chunk from its lines' origins (memq labels every transcript chunk
``untrusted``, the class OpenClaw gives a chunk holding any untrusted line).
"""

from __future__ import annotations

import re

from pipeline.results import Provenance

_CURATED = ("MEMORY.md", "memory.md", "USER.md")
_USER_FILE = re.compile(r"^users/[a-zA-Z0-9][a-zA-Z0-9_-]{0,127}/USER\.md$")


def origin_class(path: str, source: str) -> str:
    """OpenClaw's origin class of a file at workspace-relative ``path`` from ``source``."""
    if source != "memory":
        return "untrusted"
    segments = path.split("/")
    if (len(segments) == 1 and segments[0] in ("DREAMS.md", "dreams.md")) or (
            segments[0] == "memory" and len(segments) > 1
            and segments[1] in ("dreaming", ".dreams")):
        return "system"
    workspace_memory = ((len(segments) == 1 and segments[0] in _CURATED)
                        or _USER_FILE.match(path) is not None
                        or (segments[0] == "memory" and segments[-1].endswith(".md")))
    return "agent" if workspace_memory else "untrusted"


def provenance(path: str, source: str, mtime_ns: int | None) -> Provenance:
    """The provenance of a chunk of file ``path`` from ``source``, its file's modification
    time ``mtime_ns`` (None when the store has no file row for it: observed at 0)."""
    observed = max(0, int(mtime_ns // 1_000_000)) if mtime_ns is not None else 0
    return Provenance(origin_class(path, source), "unknown", observed)
