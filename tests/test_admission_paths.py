"""The writer's path check for a producer on another host, built once per pass
(:class:`pipeline.ingest.admission.Admission`): its string route for plain paths answers as
the pathlib route does, path by path, whatever the memory's sources."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from pipeline.ingest.admission import Admission, refused_path

NAMES = ["MEMORY.md", "USER.md", "memory.md", "DREAMS.md", "note.md", "NOTE.MD", "a.png",
         "a.txt", "x.jsonl", ".md"]
FOLDERS = ["", "memory/", "memory/deep/", "memory/.git/", "memory/node_modules/x/",
           "notes/", "notes/archive/", "notes/keep/", "media/", "media/sub/", "other/",
           "memoryx/", "sessions/", "memory/../", "./memory/", "memory//", "../shared/",
           "../shared/projects/", "memory/./", "notes/../memory/"]
ODD = ["", "/etc/passwd", "memory\\a.md", "memory/a\0.md", "memory/a\n.md", "memory/",
       "memory", "notes", "media", "sessions/s.jsonl", "sessions/main/s.jsonl"]


def _paths() -> list[str]:
    return [f + n for f, n in itertools.product(FOLDERS, NAMES)] + ODD


@pytest.mark.parametrize("keys", [
    {},
    {"extraPaths": ["notes", "media/sub/a.png"]},
    {"extraPaths": [{"path": "notes", "pattern": "keep/*.md"}, "media"],
     "multimodal": {"enabled": True, "modalities": ["image"]}, "provider": "gemini",
     "model": "gemini-embedding-2-preview"},
    {"extraPaths": [{"path": "notes", "pattern": "*.md"}, "notes/archive"]},
    {"extraPaths": ["../shared", "notes/../memory"]},  # not in normal form: pathlib only
    {"sources": ["memory", "sessions"]},
])
def test_the_string_route_answers_as_pathlib(tmp_path: Path, make_settings,
                                             keys: dict) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    keys = {"provider": "none", **keys}
    settings = make_settings(ws, **keys)
    fast = Admission(settings)
    slow = Admission(settings)
    slow.plain = None  # every path the pathlib way
    if "notes/../memory" not in str(keys):
        assert fast.plain is not None
    answers = {}
    for path, source in itertools.product(_paths(), ["memory", "sessions", "other"]):
        answer = fast.refused(path, source)
        assert answer == slow.refused(path, source), (path, source)
        assert answer == refused_path(settings, path, source), (path, source)
        answers[path, source] = answer
    # the check is a real one: some paths pass and some are refused
    assert answers["memory/note.md", "memory"] is None
    assert answers["memory/.git/note.md", "memory"] is not None
    assert answers["memory.md", "memory"] is not None
    assert answers["other/note.md", "memory"] is not None
    assert answers["memory/../note.md", "memory"] is not None
