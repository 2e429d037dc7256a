"""memory_get's window and shape as OpenClaw 2026.9.6 gives them: at most 120 lines and 12,000
characters, ``{status, text, path, from, lines, truncated?, nextFrom?}`` with its continuation
notice, ``not_found``, and refusals (a session path too) as ``status: "error"`` with a code.

Golden: OpenClaw's own ``memory_get`` tool (``createMemoryGetTool`` from the installed package,
run under Node by ``tests/openclaw_get.mjs``) reads the same files, and memq's MCP tool
answers field by field, key order included (the model reads the answer as JSON text).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from memq.mcp_server import MemoryTools
from pipeline.errors import MemoryPathError
from pipeline.memory import Memory
from pipeline.results import GET_LINES, GET_MAX_CHARS, MemoryText
from tests.conftest import run_memq
from tests.tools import run_oracle

ORACLE = Path(__file__).with_name("openclaw_get.mjs")

#: A line of 100 characters (with the newline, 101): 118 of them fit in 12,000 characters.
ROW = "- {:04d} " + "x" * 93
#: A character outside the BMP: two UTF-16 units, as OpenClaw counts characters.
ASTRAL = "\U0001F600"


def openclaw(workspace: Path, extra: list[str], calls: list[dict[str, Any]],
             scratch: Path) -> list[tuple[dict[str, Any], str]]:
    """OpenClaw's memory_get answers (structured, text) to ``calls`` on ``workspace``."""
    scratch.mkdir(exist_ok=True)
    env = {"HOME": str(scratch), "OPENCLAW_STATE_DIR": str(scratch / "state"),
           "PATH": "/usr/bin:/bin"}
    answers = run_oracle(ORACLE, {"workspace": str(workspace), "extraPaths": extra,
                                  "calls": calls}, env=env)
    return [(details, text) for details, text in answers]  # type: ignore[attr-defined]


def _files(ws: Path, shared: Path) -> None:
    """Memory files for every window rule, plus things memory_get must refuse."""
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Notes\n- Sam prefers tea.\n- The gate code is 4471.\n")
    (ws / "memory" / "long.md").write_text("".join(f"line {i}\n" for i in range(1, 301)))
    (ws / "memory" / "rows.md").write_text("\n".join(ROW.format(i) for i in range(1, 151)))
    (ws / "memory" / "wide.md").write_text("w" * 13_000 + "\nsecond line\n")
    (ws / "memory" / "exact.md").write_text("e" * GET_MAX_CHARS + "\nnext\n")
    # Emoji on the line that crosses the budget: 5,999 of them are 11,998 UTF-16 units.
    (ws / "memory" / "astral.md").write_text(ASTRAL * 6_001 + "\n")
    (ws / "memory" / "astral-rows.md").write_text(
        "\n".join(ASTRAL * 2_000 for _ in range(4)) + "\n")
    (ws / "memory" / "crlf.md").write_text("one\r\ntwo\r\n\r\nthree", newline="")
    (ws / "memory" / "empty.md").write_text("")
    (ws / "memory" / "blank-first.md").write_text("\n" * 130)
    (ws / "memory" / "notes.txt").write_text("not markdown")
    (ws / "README.md").write_text("not memory")
    (ws / "sessions").mkdir()
    (ws / "sessions" / "abc.jsonl").write_text('{"type":"session","id":"abc"}\n')
    shared.mkdir()
    (shared / "wide.md").write_text("s" * 12_500 + "\n")
    (shared / "plan.md").write_text("".join(f"plan {i}\n" for i in range(1, 131)))


CALLS: list[dict[str, Any]] = [
    {"path": "MEMORY.md"},                                   # small file: whole, status ok
    {"path": "memory/long.md"},                              # > 120 lines: 120, nextFrom 121
    {"path": "memory/long.md", "from": 121},                 # the continuation
    {"path": "memory/long.md", "from": 100, "lines": 50},    # an explicit window
    {"path": "memory/long.md", "from": 290, "lines": 50},    # to the end: not truncated
    {"path": "memory/long.md", "from": 300},                 # the last line
    {"path": "memory/long.md", "from": 500},                 # past the end: no lines
    {"path": "memory/long.md", "lines": 250},                # more than 120 when asked
    {"path": "memory/rows.md"},                              # the character cap, at a line
    {"path": "memory/rows.md", "from": 140, "lines": 5},
    {"path": "memory/rows.md", "lines": 150},                # asked lines, still capped
    {"path": "memory/wide.md"},                              # one line over 12,000 chars
    {"path": "memory/wide.md", "from": 2},
    {"path": "memory/exact.md"},                             # a line of exactly 12,000
    {"path": "memory/astral.md"},                            # cut inside an emoji line
    {"path": "memory/astral-rows.md"},                       # lines counted in UTF-16
    {"path": "memory/crlf.md"},
    {"path": "memory/empty.md"},
    {"path": "memory/blank-first.md"},                       # empty text, still truncated
    {"path": "memory/2031-01-01.md"},                        # missing: not_found
    {"path": "memory/2031-01-01.md", "from": 3, "lines": 2},
    {"path": "../outside.md"},                               # refused: outside
    {"path": "README.md"},                                   # refused: not memory
    {"path": "memory/notes.txt"},                            # refused: not .md
    {"path": "/etc/passwd"},
    {"path": "sessions/abc.jsonl"},                          # a session path: refused
    {"path": "sessions/main/abc.jsonl", "from": 1, "lines": 1},
    {"path": "../shared/wide.md"},                           # an extra path's long line
    {"path": "../shared/plan.md", "from": 5},
    {"path": "MEMORY.md", "corpus": "all", "from": 2, "lines": 1},
    {"path": "memory/long.md", "corpus": "memory"},
    {"path": "sessions/abc.jsonl", "corpus": "all"},         # refused, corpus all
    {"path": "memory/2031-01-01.md", "corpus": "all"},       # missing, corpus all
]  # corpus "wiki": memq's warning adds "(memq has no wiki)" on purpose (tests/test_mcp.py)


@pytest.fixture
def golden(tmp_path: Path, make_settings) -> tuple[Path, Any]:
    """A workspace with every kind of file, memq settings on it (session memory on, so a
    session path is a real transcript memq could read), and OpenClaw's answers."""
    ws, shared = tmp_path / "ws", tmp_path / "shared"
    _files(ws, shared)
    settings = make_settings(ws, provider="none", extraPaths=[str(shared)],
                             sources=["memory", "sessions"],
                             experimental={"sessionMemory": True},
                             sessionsDir=str(ws / "sessions"))
    return ws, settings


def test_memory_get_answers_as_openclaws_tool(golden, tmp_path: Path) -> None:
    ws, settings = golden
    theirs = openclaw(ws, [str(tmp_path / "shared")], CALLS, tmp_path / "node-home")
    with Memory(settings=settings, in_memory=False) as memory:
        tools = MemoryTools(memory)
        for call, (expected, text) in zip(CALLS, theirs, strict=True):
            ours = tools.get(dict(call))
            assert list(ours.items()) == list(expected.items()), call
            assert json.loads(text) == ours
    # The cases do what they are named for (so a change on either side is seen).
    answers = dict(zip((json.dumps(c) for c in CALLS), (e for e, _ in theirs), strict=True))
    long = answers[json.dumps({"path": "memory/long.md"})]
    assert (long["lines"], long["nextFrom"], long["truncated"]) == (GET_LINES, 121, True)
    assert long["text"].endswith("line 120\n\n[More content available. Use from=121 to "
                                 "continue.]")
    wide = answers[json.dumps({"path": "memory/wide.md"})]
    assert "nextFrom" not in wide and wide["truncated"] and wide["text"].endswith(
        "use read on the source file.]")
    rows = answers[json.dumps({"path": "memory/rows.md"})]
    assert (rows["lines"], rows["nextFrom"]) == (118, 119)
    assert answers[json.dumps({"path": "memory/2031-01-01.md"})] == {
        "status": "not_found", "text": "", "path": "memory/2031-01-01.md"}
    for path in ("sessions/abc.jsonl", "../outside.md"):
        refused = answers[json.dumps({"path": path})]
        assert (refused["status"], refused["code"]) == ("error", "MEMORY_PATH_NOT_ALLOWED")


def test_library_gives_the_typed_window_and_refuses_sessions(golden) -> None:
    """``Memory.get`` returns the same window, typed; a refused path raises (the MCP tool and
    ``memq get --json`` turn it into OpenClaw's error answer)."""
    _, settings = golden
    with Memory(settings=settings, in_memory=False) as memory:
        got = memory.get("memory/long.md", 119)
        assert (got.status, got.from_line, got.lines, got.truncated, got.next_from) == (
            "ok", 119, GET_LINES, True, 239)
        assert got.text.startswith("line 119\nline 120\n")
        assert MemoryText.from_dict(got.to_dict()) == got  # as a reader sends it
        missing = memory.get("memory/2031-01-01.md")
        assert (missing.status, missing.text, missing.from_line) == ("not_found", "", None)
        assert MemoryText.from_dict(missing.to_dict()) == missing
        whole = memory.get("MEMORY.md")
        assert (whole.truncated, whole.next_from, whole.lines) == (False, None, 3)
        for path in ("sessions/abc.jsonl", "sessions/main/abc.jsonl"):
            with pytest.raises(MemoryPathError):
                memory.get(path)


def test_cli_get_json_has_openclaws_shape(golden, tmp_path: Path) -> None:
    """``memq get --json``: the window (exit 0), not_found (exit 1), a refused session path
    as ``status: "error"`` with its code (exit 2, the reason on stderr); without ``--json``
    the text, notice included."""
    ws, settings = golden
    env = {"MEMQ_HOME": str(tmp_path / "data"), "MEMQ_BROKER_URL": "", "REDIS_URL": ""}
    base = ("get", "--workspace", str(ws), "--config", str(settings.config_file))

    def memq(*argv: str) -> subprocess.CompletedProcess[str]:
        return run_memq(*base, *argv, env=env, timeout=120)

    done = memq("--json", "memory/long.md", "--from", "250")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"status": "ok", "path": "memory/long.md", "from": 250,
                                       "lines": 51, "text": "\n".join(
                                           f"line {i}" for i in range(250, 301))}
    done = memq("--json", "memory/rows.md", "--lines", "130")
    out = json.loads(done.stdout)
    assert (out["lines"], out["nextFrom"], out["truncated"]) == (118, 119, True)
    missing = memq("--json", "memory/2031-01-01.md")
    assert missing.returncode == 1
    assert json.loads(missing.stdout) == {"status": "not_found", "text": "",
                                          "path": "memory/2031-01-01.md"}
    refused = memq("--json", "sessions/abc.jsonl")
    assert refused.returncode == 2 and "sessions/abc.jsonl" in refused.stderr
    assert json.loads(refused.stdout) == {
        "path": "sessions/abc.jsonl", "text": "", "status": "error",
        "code": "MEMORY_PATH_NOT_ALLOWED", "error": "path is not an allowed Markdown memory file"}
    plain = memq("memory/long.md")
    assert plain.returncode == 0
    assert plain.stdout.endswith("line 120\n\n[More content available. Use from=121 to "
                                 "continue.]\n")
