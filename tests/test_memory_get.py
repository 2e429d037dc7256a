"""memory_get reads only memory files, inside the memory roots, with OpenClaw's line window."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.errors import MemoryPathError
from pipeline.query import memory_get, memory_search
from tests.conftest import run_memq


def test_reads_line_windows(workspace: Path, make_settings) -> None:
    settings = make_settings(workspace, provider="none")
    out = memory_get("memory/2026-11-18.md", 3, 1, settings=settings)
    assert out == {"status": "ok", "path": "memory/2026-11-18.md", "from": 3, "lines": 1,
                   "truncated": True, "nextFrom": 4,
                   "text": "- Flight to Berlin for the payments conference: LH1169, departs 07:05"
                           " from Lisbon, seat 14C.\n\n[More content available. Use from=4 to "
                           "continue.]"}
    whole = memory_get(str(workspace / "MEMORY.md"), settings=settings)
    assert whole["text"] + "\n" == (workspace / "MEMORY.md").read_text()
    assert "truncated" not in whole and whole["status"] == "ok"
    far = memory_get("MEMORY.md", 10_000, 5, settings=settings)
    assert (far["text"], far["lines"], far["from"]) == ("", 0, 10_000)
    # as OpenClaw: from and lines are at least 1
    one = memory_get("MEMORY.md", -4, 0, settings=settings)
    assert (one["from"], one["lines"]) == (1, 1)
    assert one["text"].startswith((workspace / "MEMORY.md").read_text().split("\n")[0])


def test_missing_memory_file_is_not_found(workspace: Path, make_settings) -> None:
    settings = make_settings(workspace, provider="none")
    assert memory_get("memory/2031-01-01.md", settings=settings) == {
        "status": "not_found", "path": "memory/2031-01-01.md", "text": ""}


@pytest.mark.parametrize("path", [
    "../outside.md", "/etc/passwd", "/proc/self/environ", "memory/../../outside.md",
    "memory/notes.txt", "README.md", "", "memory/link.md", "memory/\x00.md",
    "memory/node_modules/x.md",
])
def test_escapes_are_refused(workspace: Path, make_settings, tmp_path: Path, path: str) -> None:
    (tmp_path / "outside.md").write_text("secret")
    (workspace / "README.md").write_text("not memory")
    (workspace / "memory" / "notes.txt").write_text("not markdown")
    (workspace / "memory" / "link.md").symlink_to(tmp_path / "outside.md")
    (workspace / "memory" / "node_modules").mkdir()
    (workspace / "memory" / "node_modules" / "x.md").write_text("ignored")
    settings = make_settings(workspace, provider="none")
    with pytest.raises(MemoryPathError, match="path required"):
        memory_get(path, settings=settings)


def test_search_before_any_index_says_so(workspace: Path, make_settings) -> None:
    settings = make_settings(workspace, provider="none")
    out = memory_search("anything", settings=settings)
    assert out["results"] == [] and "memq index" in out["warning"]


def test_search_citations_point_memory_get_at_the_lines(workspace: Path, make_settings,
                                                        tmp_path: Path) -> None:
    from pipeline.embeddings.registry import ProviderChoice
    from pipeline.ingest.producer import sync_files
    from pipeline.store.engine import connect

    settings = make_settings(workspace, provider="none")
    db = connect(settings.store.path)
    sync_files(db, settings, ProviderChoice(None, None, "test"))
    db.close()
    out = memory_search("Berlin flight", settings=settings, max_results=1)
    (hit,) = out["results"]
    assert out["citations"] == "auto"
    assert hit["citation"] == f"{hit['path']}#L{hit['startLine']}-L{hit['endLine']}"
    assert hit["snippet"].endswith(f"\n\nSource: {hit['citation']}")
    path, lines = hit["citation"].split("#L")
    start, end = (int(x.lstrip("L")) for x in lines.split("-"))
    window = memory_get(path, start, end - start + 1, settings=settings)
    assert "Berlin" in window["text"]
    off = memory_search("Berlin flight", settings=settings, max_results=1, citations="off")
    assert "citation" not in off["results"][0] and "Source:" not in off["results"][0]["snippet"]
    with pytest.raises(ValueError, match="citations"):
        memory_search("x", settings=settings, citations="sometimes")


def _cli_env(tmp_path: Path) -> dict[str, str]:
    """The real CLI on its own data dir, keyword-only, no broker."""
    return {"MEMQ_HOME": str(tmp_path / "data"), "MEMQ_CONFIG": "", "MEMQ_PROVIDER": "none",
            "MEMQ_BROKER_URL": "", "REDIS_URL": "", "MEMQ_AGENT_ID": ""}


def test_cli_get_of_a_missing_memory_file_says_so_and_exits_1(workspace: Path,
                                                               tmp_path: Path) -> None:
    """A typo'd date: the library reads it as empty text (it could exist), the CLI says the
    file does not exist (stderr, exit 1), ``--json`` says ``not_found``; an existing empty
    file still prints nothing and exits 0."""
    env = _cli_env(tmp_path)
    done = run_memq("get", "--workspace", str(workspace), "memory/2026-11-3.md", env=env,
                    timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert "memory/2026-11-3.md does not exist" in done.stderr
    as_json = run_memq("get", "--workspace", str(workspace), "--json", "memory/2026-11-3.md",
                       env=env, timeout=120)
    assert as_json.returncode == 1, as_json.stderr
    assert json.loads(as_json.stdout) == {"path": "memory/2026-11-3.md", "text": "",
                                          "status": "not_found"}
    (workspace / "memory" / "empty.md").write_text("")
    empty = run_memq("get", "--workspace", str(workspace), "memory/empty.md", env=env,
                     timeout=120)
    assert (empty.returncode, empty.stdout, empty.stderr) == (0, "\n", "")


def test_cli_get_outside_the_memory_files_names_the_rule(workspace: Path,
                                                        tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("not memory")
    done = run_memq("get", "--workspace", str(workspace), "../README.md",
                    env=_cli_env(tmp_path), timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert not done.stderr.startswith("memq: path required"), done.stderr
    assert "../README.md" in done.stderr and "outside the memory files" in done.stderr
    assert "MEMORY.md" in done.stderr and "memory/" in done.stderr


def test_cli_search_marks_a_cut_snippet_with_an_ellipsis(workspace: Path,
                                                         tmp_path: Path) -> None:
    """``memq search`` shows 200 characters of a snippet: one cut there ends with "…", one
    that fits is shown whole, without it."""
    long_line = "- The zeppelin hangar " + " ".join(f"word{i}" for i in range(80)) + "\n"
    (workspace / "memory" / "2026-11-20.md").write_text(long_line)
    (workspace / "memory" / "2026-11-21.md").write_text("- A short zeppelin note.\n")
    env = _cli_env(tmp_path)
    assert run_memq("index", "--workspace", str(workspace), env=env,
                    timeout=120).returncode == 0
    done = run_memq("search", "--workspace", str(workspace), "--min-score", "0",
                    "--citations", "off", "zeppelin",
                    env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    snippets = {lines[i].split()[1].split(":")[0]: lines[i + 1].strip()
                for i in range(len(lines) - 1) if "zeppelin" in lines[i + 1]}
    cut = snippets["memory/2026-11-20.md"]
    assert cut.endswith("…") and len(cut) == 201 and cut[:-1] in " ".join(long_line.split())
    assert snippets["memory/2026-11-21.md"] == "- A short zeppelin note."
