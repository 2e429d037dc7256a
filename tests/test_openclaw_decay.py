"""Which notes decay, and from when, is OpenClaw 2026.9.6's rule: memq's
:func:`pipeline.search.decay.note_time` is compared with OpenClaw's own ``extractTimestamp``
(and ``isEvergreenMemoryPath``), run by Node on the installed package
(tests/openclaw_decay.mjs), for the same paths."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

from pipeline.search import decay
from tests.tools import node_env, tool, tools_dir

SCRIPT = Path(__file__).with_name("openclaw_decay.mjs")
MTIME_MS = 1_700_000_000_000

PATHS = [
    # dated: (dir/)*YYYY-MM-DD(-slug)?.md under a memory/ folder
    "memory/2026-01-15.md", "memory/2026-01-15-standup.md", "memory/2026-01-15-a-b.c.md",
    "memory/x/2026-01-01.md", "memory/a/b/c/2026-02-10.md", "memory/2026-01-15-.md",
    "./memory/2026-01-15.md", "memory\\2026-01-15.md", "notes/memory/2026-01-15.md",
    "memory/2024-02-29.md", "memory/0100-01-01.md", "memory/9999-12-31.md",
    # named like dated notes, but not
    "memory/2026-01-15_notes.md", "memory/2026-01-15.notes.md", "memory/2026-01-15 notes.md",
    "memory/2026-01-15.MD", "memory/2026-01-15.Md", "Memory/2026-01-15.md",
    "MEMORY/2026-01-15.md", "memory/2026-1-15.md", "memory/20260115.md",
    "memory/x2026-01-15.md", "memory/2026-01-15.md.bak", "memory/2026-01-15.md\n",
    "memory/2026-01-15-slug/notes.md", "memory/٢٠٢٦-٠١-١٥.md",
    # matching the pattern, but no date
    "memory/2026-02-30.md", "memory/2025-02-29.md", "memory/2026-13-01.md",
    "memory/2026-00-10.md", "memory/0000-01-01.md", "memory/0050-06-01.md",
    "memory/0099-12-31.md",
    # evergreen or aged by mtime
    "MEMORY.md", "USER.md", "./MEMORY.md", "memory.md", "user.md", "Memory.md",
    "memory/MEMORY.md", "memory/people.md", "memory/x/notes.md", "memory/2026-01-15",
    "2026-01-15.md", "2026-01-15-standup.md", "extra/2020-01-01.md", "notes/people.md",
    "sessions/abc.jsonl", "sessions/main/2026-01-15.jsonl", "docs/MEMORY.md",
]


def openclaw(paths: list[str]) -> list[list]:
    dist = tools_dir() / "openclaw/node_modules/openclaw/dist"
    tool("openclaw")
    done = subprocess.run([str(tool("node")), str(SCRIPT), str(dist)],
                          input=json.dumps({"paths": paths, "mtimeMs": MTIME_MS}),
                          capture_output=True, text=True, env=node_env(), timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_which_notes_decay_and_from_when_is_openclaws() -> None:
    theirs = openclaw(PATHS)
    ours = []
    for path in PATHS:
        when = decay.note_time(path, MTIME_MS * 10**6)
        ours.append(None if when is None else round(when * 1000))
    mismatches = [(p, o, t[0]) for p, o, t in zip(PATHS, ours, theirs, strict=True) if o != t[0]]
    assert mismatches == []
    # and the cases that matter read as expected
    day = dt.datetime(2026, 1, 15, tzinfo=dt.UTC).timestamp()
    assert decay.note_date("memory/2026-01-15.md") == day
    assert decay.note_time("memory/2026-01-15_notes.md", 123) is None  # evergreen
    assert decay.note_time("memory/2026-01-15.MD", 123) is None
    assert decay.note_time("memory/2026-02-30.md", 10**9) == 1.0  # by mtime
    assert decay.note_time("2026-01-15.md", 10**9) == 1.0  # not under memory/: by mtime
    assert [t[1] for t in theirs][PATHS.index("memory/2026-01-15_notes.md")] is True
