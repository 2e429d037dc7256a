"""``memory_append``: an agent writes a note into its own memory, only inside the memory roots.

The note goes to today's daily log (``memory/YYYY-MM-DD.md``) or to the curated long-term file
(``MEMORY.md``). The file is opened with ``O_APPEND | O_NOFOLLOW`` and written with a single
``write``, so concurrent appends interleave whole notes, a symlink planted at the target is
refused, and the file always ends with a newline. Indexing the new text is the caller's job
(:meth:`memq.Memory.append` does it).
"""

from __future__ import annotations

import fcntl
import os
import stat
from datetime import date
from typing import Any

from pipeline.config import Settings
from pipeline.errors import AppendError
from pipeline.ingest.producer import MAX_FILE_BYTES
from pipeline.ingest.sources import resolve_memory_path
from pipeline.results import Appended

TARGETS = ("daily", "longterm")
MAX_NOTE_BYTES = 64 * 1024




def _target_path(settings: Settings, target: str, today: date) -> str:
    if target == "daily":
        return f"memory/{today.isoformat()}.md"
    if target == "longterm":
        return "MEMORY.md"  # never the legacy memory.md: OpenClaw 2026.9 no longer indexes it
    raise AppendError(f"target must be one of {', '.join(TARGETS)}; got {target!r}")


def _encode(text: Any) -> bytes:
    if not isinstance(text, str) or not text.strip():
        raise AppendError("text required: the note to remember, as Markdown")
    if "\x00" in text:
        raise AppendError("text must not contain NUL bytes")
    try:
        data = (text.strip("\r\n") + "\n").encode("utf-8")
    except UnicodeEncodeError as exc:
        raise AppendError("text is not valid Unicode (lone surrogate)") from exc
    if len(data) > MAX_NOTE_BYTES:
        raise AppendError(f"text is {len(data)} bytes; one note may be at most {MAX_NOTE_BYTES}")
    return data


def append_note(text: str, target: str = "daily", *, settings: Settings,
                today: date | None = None) -> Appended:
    """Append ``text`` to a memory file; return where it landed (path and line range)."""
    data = _encode(text)
    rel = _target_path(settings, target, today or date.today())
    path = resolve_memory_path(settings, rel)  # MemoryPathError for symlinks and escapes
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        raise AppendError(f"cannot open {rel} for appending: {exc.strerror or exc}") from exc
    try:
        # Appenders take turns: without the lock, a second one could read the file while the
        # first one's write is half done, and misjudge its last line and its line numbers.
        fcntl.flock(fd, fcntl.LOCK_EX)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise AppendError(f"{rel} is not a regular file")
        if info.st_size + len(data) + 1 > MAX_FILE_BYTES:
            raise AppendError(f"{rel} would grow past {MAX_FILE_BYTES} bytes and stop being "
                              "indexed; start a new file instead")
        existing = os.pread(fd, info.st_size, 0) if info.st_size else b""
        prefix = b"\n" if existing and not existing.endswith(b"\n") else b""
        start = (existing + prefix).count(b"\n") + 1
        payload = prefix + data
        written = 0
        while written < len(payload):
            written += os.write(fd, payload[written:])
        os.fsync(fd)
    finally:
        os.close(fd)
    return Appended(rel, target, start, start + data.count(b"\n") - 1, len(data))
