"""Entry annotations weigh scores (importance, project keys) and path queries rank files first,
as OpenClaw 2026.9.6 does: each rule checked against OpenClaw's own functions, run under Node
from the installed package (``tests/openclaw_entry_weights.mjs``), then end to end in a store.
"""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from pipeline.ingest.chunking import memory_chunks
from pipeline.search import weights

ORACLE = Path(__file__).with_name("openclaw_entry_weights.mjs")


@cache
def _paths() -> tuple[str, str]:
    from tests.tools import tool, tools_dir

    node = tool("node")
    tool("openclaw")
    return str(node), str(tools_dir() / "openclaw/node_modules/openclaw")


def openclaw(cases: dict[str, Any]) -> dict[str, Any]:
    """OpenClaw's answers to ``cases`` (see the script's header)."""
    node, package = _paths()
    done = subprocess.run([node, str(ORACLE), package], input=json.dumps(cases),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# --- chunk metadata ---------------------------------------------------------------------------

INDEX_CASES = [
    ("MEMORY.md", "# Notes\n- fact one <!-- importance: 9 --> <!-- trigger: a, b; c -->\n"
                  "  more text\n- two <!-- project: GitHub.com/x/y -->\n"
                  "- three <!-- project: a;<b> -->\n"),
    ("MEMORY.md", "- Keep the gateway on loopback. <!-- trigger: gateway setup, network safety -->"
                  " <!-- importance: 9 -->\n- plain entry\n"),
    ("MEMORY.md", "intro <!-- importance: 4 -->\n- a <!-- importance: 11 -->\n"
                  "- b <!-- importance: 03 --> <!-- importance: 7 -->\n"
                  "- c <!-- importance: 5 --> trailing text\n- d <!-- IMPORTANCE :2-->\n"),
    ("MEMORY.md", "- a <!-- project: one; two -->\n- b <!-- project: ; -->\n"
                  "- c <!-- project: path:/Repo/X -->\n- d <!-- project: Org/Repo -->\n"
                  "  <!-- project: org/repo -->\n- e <!-- project: x\nstill -->\n"
                  "- f <!-- project: unclosed\n"),
    ("USER.md", "- about me <!-- importance: 8 --> <!-- project: a/b -->\n- second\n"),
    ("memory.md", "- lower-case root <!-- importance: 6 --> <!-- trigger: one -->\n"),
    ("memory/2026-02-10.md", "# Day\nnote <!-- importance: 9 --> <!-- project: a/B -->\n\nmore\n"),
    ("memory/ops.md", "first <!-- trigger: x -->\r\nsecond <!-- project: k1;k2 -->\r\n"),
    ("MEMORY.md", "- one\n<!-- importance: 3 -->- two\n  - nested <!-- trigger: t -->\n# H\n"
                  "- three   \n"),
    ("notes/extra.md", "# H\n" + "\n".join(f"- item {i} <!-- project: p{i % 3} -->"
                                             for i in range(60)) + "\n"),
]


@pytest.mark.parametrize("tokens,overlap", [(400, 80), (24, 8)])
def test_chunks_carry_their_entrys_values_as_openclaw_indexes_them(tokens: int,
                                                                   overlap: int) -> None:
    """Importance, triggers and project key of every chunk: what ``prepareMemoryIndexChunks``
    gives (curated root only for importance/triggers; never a project key in USER.md; the
    invalid marker for a refused or unclosed project comment)."""
    cases = [{"path": p, "content": c, "tokens": tokens, "overlap": overlap,
              "curatedRoot": p in ("MEMORY.md", "memory.md", "USER.md")}
             for p, c in INDEX_CASES]
    expected = openclaw({"index": cases})["index"]
    for (path, content), want in zip(INDEX_CASES, expected, strict=True):
        got = [[c.start_line, c.end_line, c.importance, c.triggers, c.project_key]
               for c in memory_chunks(path, content, tokens, overlap)]
        assert got == want, path
    assert any(row[2] == 9 for row in expected[0])  # the cases do exercise every value
    assert any(row[4] == "!invalid-project-annotation" for row in expected[3])


# --- the multipliers --------------------------------------------------------------------------


def test_importance_multiplier_is_openclaws() -> None:
    values = [None, 0, 1, 2, 5, 5.7, 9, 10, 11, 100, -4]
    expected = openclaw({"importance": values})["importance"]
    assert [weights.importance_multiplier(v) for v in values] == expected
    assert weights.importance_multiplier(10) == 1.25 and weights.importance_multiplier(1) == 0.8


PROJECT_CASES = [
    ("a", ["a"]), ("a", ["b"]), ("a; b", ["a", "b"]), ("a; b", ["a"]), (None, ["a"]),
    ("a", None), ("a", []), ("!invalid-project-annotation", ["a"]),
    ("!invalid-project-annotation", None), ("x; !invalid-project-annotation", None),
    ("github.com/o/r", ["github.com/o/r", "other"]), (" ; a ;", ["a"]),
]


def test_project_multiplier_and_invalid_entries_are_openclaws() -> None:
    expected = openclaw({"projects": [{"projectKey": k, "active": a}
                                      for k, a in PROJECT_CASES]})["projects"]
    for (key, active), want in zip(PROJECT_CASES, expected, strict=True):
        keys = weights.active_keys(active)
        assert weights.project_multiplier(key, keys) == want["multiplier"], (key, active)
        assert weights.project_eligible(key) == want["kept"], (key, active)
    assert {w["multiplier"] for w in expected} == {1, 1.15, 0.9}


PATH_CASES = [
    ("memory/notes.md", "memory/notes.md"), ("notes.md", "memory/notes.md"),
    ("notes", "memory/notes.md"), ("memory/notes", "memory/notes.md"),
    ("Notes.MD", "memory/notes.md"), ("./MEMORY.md", "MEMORY.md"), ("memory", "MEMORY.md"),
    ("memory\\notes.md", "memory/notes.md"), ("  notes.md ", "memory/notes.md"),
    ("notes.md", "memory/notes.md.bak"), (".", "memory/x.md"), ("", "memory/x.md"),
    (".hidden", "memory/.hidden"), ("archive.tar", "memory/archive.tar.gz"),
    ("cafe\u0301.md", "memory/caf\u00e9.md"), ("notes about cats", "memory/notes.md"),
]


def test_exact_path_specificity_is_openclaws() -> None:
    expected = openclaw({"paths": [{"query": q, "path": p} for q, p in PATH_CASES]})["paths"]
    got = [weights.exact_path_specificity(q, p) for q, p in PATH_CASES]
    assert got == expected
    assert {3, 2, 1, 0} <= set(expected)
