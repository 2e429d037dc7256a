"""The QMD backend against the real ``qmd`` CLI (npm @tobilu/qmd, installed by .ci/tools).

Searches run in ``search`` (BM25) mode: ``vsearch`` and ``query`` need models from a hub this
machine cannot reach, so for them the tests check the command lines and that the failure falls
back. Every fallback reason is produced for real: a missing executable, a qmd removed and put
back, a non-zero exit, a kill, a timeout (a slow stand-in command whose whole process group
must be gone afterwards) and output that is not JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import load_settings
from pipeline.errors import QmdPathError, QmdUnavailable
from pipeline.qmd import QmdBackend
from pipeline.results import MemoryText
from pipeline.search.citations import apply_citations
from tests.conftest import EXAMPLE_WORKSPACE
from tests.secrets_scan import SENTINEL
from tests.tools import node_env, tool

MakeBackend = Callable[..., QmdBackend]


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _layout(root: Path) -> Path:
    """A workspace copy, a notes folder outside it, and files no collection covers."""
    ws = root / "ws"
    shutil.copytree(EXAMPLE_WORKSPACE, ws)
    (ws / "secret.md").write_text("# Not memory\n\nThe vault combination is 12-34-56.\n")
    notes = root / "notes"
    notes.mkdir()
    (notes / "ops.md").write_text("# Ops\n\nThe deployment uses kubernetes on hetzner.\n"
                                  "Backups run nightly at 03:00 UTC.\n")
    (notes / "ops.txt").write_text("kubernetes but not markdown\n")
    outside = root / "elsewhere.md"
    outside.write_text("# Elsewhere\n\nkubernetes symlinked in from outside\n")
    (notes / "link.md").symlink_to(outside)
    return ws


def _make(root: Path, ws: Path, *, command: Path | str | None = None, cooldown: float = 60.0,
          env: dict[str, str] | None = None, **qmd: Any) -> QmdBackend:
    qmd.setdefault("paths", [{"path": str(root / "notes"), "name": "notes"}])
    qmd["command"] = str(command or tool("qmd"))
    keys = {"backend": "qmd", "store": {"path": str(root / "state" / "memq.sqlite")},
            "sessionsDir": str(root / "sessions"), "qmd": qmd}
    cfg = root / "memq.json"
    cfg.write_text(json.dumps(keys), encoding="utf-8")
    settings = load_settings(cfg, workspace=ws, env={"HOME": str(root)})
    return QmdBackend(settings, env=node_env(env), cooldown_s=cooldown)


@pytest.fixture
def make(tmp_path: Path) -> Callable[..., tuple[QmdBackend, Path]]:
    ws = _layout(tmp_path)

    def build(**kw: Any) -> tuple[QmdBackend, Path]:
        return _make(tmp_path, ws, **kw), ws

    return build


@pytest.fixture(scope="module")
def booted(tmp_path_factory: pytest.TempPathFactory) -> QmdBackend:
    """One booted backend for the tests that only read."""
    root = tmp_path_factory.mktemp("qmd")
    backend = _make(root, _layout(root))
    report = backend.boot()
    assert report["updated"] is True and not report["collections"]["failed"]
    return backend


def _lines(path: Path, start: int, end: int) -> str:
    return "\n".join(path.read_text().split("\n")[start - 1 : end])


# ---------------------------------------------------------------------------------------------
# search, get, status


def test_search_maps_results_to_workspace_paths(booted: QmdBackend) -> None:
    ws = booted.settings.workspace
    results = booted.search("Zigbee")
    assert {r.path for r in results} == {"MEMORY.md", "memory/2026-11-10.md"}
    for r in results:
        assert r.source == "memory" and 0 < r.score < 1
        assert "Zigbee" in r.snippet
        assert "Zigbee" in _lines(ws / r.path, r.start_line, r.end_line)
        assert not r.snippet.startswith("@@")
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)


def test_results_outside_the_workspace_are_qmd_urls(booted: QmdBackend) -> None:
    results = booted.search("kubernetes hetzner")
    assert [r.path for r in results] == ["qmd://notes-main/ops.md"]
    got = booted.get("qmd://notes-main/ops.md")
    whole = (booted.settings.workspace.parent / "notes" / "ops.md").read_text()
    # OpenClaw's memory_get window: the whole short file, its last newline not a line
    assert (got.text, got.status, got.truncated) == (whole.removesuffix("\n"), "ok", False)
    hit = results[0]
    window = booted.get(hit.path, hit.start_line, hit.end_line - hit.start_line + 1)
    assert "kubernetes on hetzner" in window.text
    assert booted.get("qmd/notes-main/ops.md", 4, 1).text == "Backups run nightly at 03:00 UTC."


def test_search_ands_words_like_qmd(booted: QmdBackend) -> None:
    assert booted.search("kubernetes") and booted.search("kubernetes hetzner")
    assert booted.search("kubernetes PostgreSQL") == []  # no document has both
    assert booted.search("-kubernetes") == []  # a query, not an option qmd would reject


@pytest.mark.parametrize("path", [
    "qmd://notes-main/../ws/MEMORY.md",  # escapes the collection
    "qmd://nosuch-main/ops.md",  # no such collection
    "qmd/nosuch-main/ops.md",  # OpenClaw's form: not a collection, so a workspace path
    "qmd://notes-main/link.md",  # a symlink out of the collection
    "qmd://notes-main/ops.txt",  # not Markdown
    "qmd://notes-main/",
    "secret.md",  # in the workspace, but no collection covers it (memory-root is MEMORY.md)
    "memory/../../elsewhere.md",  # outside every collection
    "/etc/passwd",
    "",
])
def test_get_refuses_what_no_collection_covers(booted: QmdBackend, path: str) -> None:
    with pytest.raises(QmdPathError):
        booted.get(path)


def test_get_reads_workspace_memory_and_missing_files(booted: QmdBackend) -> None:
    ws = booted.settings.workspace
    got = booted.get("memory/2026-11-03.md", 3, 2)
    # OpenClaw's memory_get: a window with more lines after it says where to go on
    assert got == MemoryText("memory/2026-11-03.md",
                             _lines(ws / "memory/2026-11-03.md", 3, 4)
                             + "\n\n[More content available. Use from=5 to continue.]",
                             3, 2, status="ok", truncated=True, next_from=5)
    assert booted.get(str(ws / "MEMORY.md")).path == "MEMORY.md"
    assert booted.get("memory/2099-01-01.md") == MemoryText("memory/2099-01-01.md", "")


def test_limits_cap_results_and_snippets(booted: QmdBackend) -> None:
    assert len(booted.search("Sam", max_results=50)) <= booted.qmd.limits.max_results
    assert len(booted.search("Sam", max_results=1)) == 1
    assert booted.search("Sam", max_results=0) == []
    assert booted.search("   ") == []
    assert booted.search("Zigbee", min_score=0.999) == []


def test_scope_denies_group_chats(booted: QmdBackend) -> None:
    assert booted.search("Zigbee", session_key="agent:main:discord:group:1") == []
    assert booted.search("Zigbee", session_key="agent:main:telegram:direct:1")


def test_concurrent_searches_agree(booted: QmdBackend) -> None:
    expected = booted.search("PostgreSQL")
    assert expected
    got: list[Any] = []
    threads = [threading.Thread(target=lambda: got.append(booted.search("PostgreSQL")))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [expected] * 4


def test_citations_apply_as_for_the_builtin_backend(booted: QmdBackend) -> None:
    hit = apply_citations(booted.search("kubernetes hetzner"), "on")[0]
    assert hit.citation == f"qmd://notes-main/ops.md#L{hit.start_line}-L{hit.end_line}"
    assert hit.snippet.endswith(f"\n\nSource: {hit.citation}")


def test_status(booted: QmdBackend) -> None:
    s = booted.status()
    ws = booted.settings.workspace
    assert s["backend"] == "qmd" and s["available"] is True and s["down"] is None
    docs = {c["name"]: c["documents"] for c in s["collections"]}
    assert docs == {"memory-root-main": 1,
                    "memory-dir-main": len(list((ws / "memory").glob("*.md"))),
                    "notes-main": 1}  # ops.md: qmd skips the symlinked link.md
    assert all(c["bound"] for c in s["collections"])
    assert booted.search("symlinked") == []
    assert s["lastUpdateAt"] and s["lastEmbedAt"] is None  # search mode never embeds
    assert booted.due() == []  # the interval (5 min) has not passed; search mode never embeds
    assert booted.due(now=s["lastUpdateAt"] + 300) == ["update"]


def test_command_lines_for_every_mode(booted: QmdBackend) -> None:
    qmd = str(tool("qmd"))
    names = ["-c", "memory-root-main", "-c", "memory-dir-main", "-c", "notes-main"]
    for mode in ("search", "vsearch", "query"):
        assert booted.search_command("budget review", 3, mode=mode) == [
            qmd, mode, "budget review", "--json", "-n", "3", *names]
    assert booted.search_command("x")[1] == "search"  # the configured mode


# ---------------------------------------------------------------------------------------------
# writes: collections, updates, sessions


def test_update_after_a_file_change_finds_the_new_text(make: Callable[..., Any]) -> None:
    backend, ws = make()
    backend.boot()
    note = ws / "memory" / "2026-11-25.md"
    assert backend.search("flamingo") == []
    with note.open("a") as fh:
        fh.write("- Saw a flamingo at the Tagus estuary.\n")
    assert backend.search("flamingo") == []  # qmd's index is stale until an update
    skipped = backend.update("watch")  # within 15 s of the boot update
    assert skipped["skipped"] == "debounced"
    assert skipped["dueAt"] == pytest.approx(skipped["lastUpdateAt"] + 15)
    assert backend.update("watch", force=True)["updated"] is True
    (hit,) = backend.search("flamingo")
    assert hit.path == "memory/2026-11-25.md"
    assert "flamingo" in _lines(note, hit.start_line, hit.end_line)
    note.unlink()
    backend.update("watch", force=True)
    assert backend.search("flamingo") == []


def test_collections_are_kept_or_rebound(make: Callable[..., Any], tmp_path: Path) -> None:
    backend, _ = make()
    first = backend.ensure_collections()
    assert first["added"] == ["memory-root-main", "memory-dir-main", "notes-main"]
    again = backend.ensure_collections()
    assert again["added"] == [] and len(again["kept"]) == 3
    other = tmp_path / "notes2"
    other.mkdir()
    (other / "radio.md").write_text("# Radio\n\nThe ham radio callsign is CT7ABC.\n")
    moved, _ = make(paths=[{"path": str(other), "name": "notes"}], includeDefaultMemory=False)
    report = moved.ensure_collections()
    assert report["added"] == ["notes-main"]  # the same name, now bound to notes2
    assert sorted(report["removed"]) == ["memory-dir-main", "memory-root-main"]
    moved.update(force=True)
    assert [r.path for r in moved.search("callsign")] == ["qmd://notes-main/radio.md"]
    assert moved.search("kubernetes") == [] and moved.search("Zigbee") == []


def _transcript(*turns: tuple[str, Any]) -> str:
    lines = [json.dumps({"type": "session", "id": "x"})]
    for role, content in turns:
        lines.append(json.dumps({"type": "message", "message": {"role": role,
                                                                "content": content}}))
    return "\n".join(lines) + "\n"


def test_sessions_are_exported_and_searchable(make: Callable[..., Any], tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (sessions / "chat-1.jsonl").write_text(_transcript(
        ("user", f"Remember my espresso order, and my key {SENTINEL}"),
        ("assistant", [{"type": "text", "text": "Noted:   a double\nespresso."},
                       {"type": "toolCall", "name": "memory_search"}]),
        ("toolResult", "not a turn")))
    old = sessions / "chat-old.jsonl"
    old.write_text(_transcript(("user", "espresso long ago")))
    ten_days_ago = time.time() - 10 * 86_400
    os.utime(old, (ten_days_ago, ten_days_ago))
    backend, _ = make(sessions={"enabled": True, "retentionDays": 5})
    report = backend.boot()
    assert report["sessions"] == {"written": 1, "unchanged": 0, "removed": 0}
    export = backend.home.default_sessions_dir
    assert sorted(p.name for p in export.iterdir()) == ["chat-1.md"]
    text = (export / "chat-1.md").read_text()
    # OpenClaw 2026.9.6's masking keeps a long key's head and tail (tests/test_openclaw_sessions)
    assert text == ("# Session chat-1\n\nUser: Remember my espresso order, and my key "
                    "sk-mem…5b1d\n"
                    "Assistant: Noted: a double espresso.\n")
    (hit,) = backend.search("espresso")
    assert (hit.path, hit.source) == ("qmd://sessions-main/chat-1.md", "sessions")
    assert "espresso" in backend.get(hit.path, hit.start_line, 10).text
    (sessions / "chat-1.jsonl").unlink()
    assert backend.update(force=True)["sessions"]["removed"] == 1
    assert backend.search("espresso") == []


# ---------------------------------------------------------------------------------------------
# fallback: every reason raises QmdUnavailable, and an outage is remembered


def test_missing_executable(make: Callable[..., Any], tmp_path: Path) -> None:
    backend, _ = make(command=tmp_path / "nowhere" / "qmd")
    with pytest.raises(QmdUnavailable) as info:
        backend.ensure_collections()
    assert info.value.kind == "missing"
    backend.home.index_path.parent.mkdir(parents=True, exist_ok=True)
    backend.home.index_path.touch()  # as if it had worked before
    with pytest.raises(QmdUnavailable) as info:
        backend.search("anything")
    assert info.value.kind == "missing" and "cannot run" in info.value.reason
    status = backend.status()
    assert status["available"] is False and status["down"]["kind"] == "missing"


def test_not_set_up_yet(make: Callable[..., Any], tmp_path: Path) -> None:
    backend, ws = make()
    with pytest.raises(QmdUnavailable) as info:
        backend.search("Zigbee")
    assert info.value.kind == "collections"
    backend.boot()
    extra = tmp_path / "extra"
    extra.mkdir()
    grown = _make(tmp_path, ws, paths=[{"path": str(tmp_path / "notes"), "name": "notes"},
                                       {"path": str(extra), "name": "extra"}], cooldown=0)
    with pytest.raises(QmdUnavailable) as info:  # a collection qmd does not have yet
        grown.search("Zigbee")
    assert info.value.kind == "collections" and "Collection not found" in info.value.reason
    grown.ensure_collections()
    assert grown.search("Zigbee")


def _ready(backend: QmdBackend) -> QmdBackend:
    """A home that looks set up, for stand-in commands that fail before reading it."""
    backend.home.index_path.parent.mkdir(parents=True, exist_ok=True)
    backend.home.index_path.touch()
    return backend


def test_an_outage_is_remembered_then_retried(make: Callable[..., Any], tmp_path: Path) -> None:
    calls = tmp_path / "calls.log"
    fake = _script(tmp_path / "bin" / "qmd", f'echo "$1" >> {calls}\n'
                                             'echo "boom: index corrupt" >&2\nexit 3\n')
    backend = _ready(make(command=fake)[0])
    with pytest.raises(QmdUnavailable) as first:
        backend.search("anything")
    assert first.value.kind == "exit"
    assert first.value.reason == "qmd search failed (exit 3): boom: index corrupt"
    with pytest.raises(QmdUnavailable) as second:  # within the cool-down: qmd is not run
        backend.search("anything else")
    assert calls.read_text().split() == ["search"]
    assert (second.value.kind, second.value.since) == ("exit", first.value.since)
    assert second.value.retry_at == pytest.approx(first.value.since + 60, abs=5)
    another_process = make(command=fake)[0]  # same home: sees the outage too
    with pytest.raises(QmdUnavailable):
        another_process.search("x")
    assert calls.read_text().split() == ["search"]
    impatient = make(command=fake, cooldown=0)[0]
    with pytest.raises(QmdUnavailable):
        impatient.search("x")
    assert calls.read_text().split() == ["search", "search"]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _wait_gone(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def test_timeout_kills_the_whole_process_group(make: Callable[..., Any],
                                               tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # like the npm launcher: the CLI runs as a child of the process memq started
    fake = _script(tmp_path / "bin" / "qmd", f"echo $$ >> {pids}\nsleep 60 &\n"
                                             f"echo $! >> {pids}\nwait\n")
    backend = _ready(make(command=fake, limits={"timeoutMs": 300})[0])
    with pytest.raises(QmdUnavailable) as info:
        backend.search("anything")
    assert (info.value.kind, info.value.reason) == ("timeout",
                                                    "qmd search timed out after 300 ms")
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2
    assert _wait_gone(started) == []


def test_killed_mid_search(make: Callable[..., Any], tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    fake = _script(tmp_path / "bin" / "qmd", f"echo $$ > {pid_file}\nexec sleep 60\n")
    backend = _ready(make(command=fake)[0])

    def kill_when_started() -> None:
        deadline = time.monotonic() + 30
        while not pid_file.exists() or not pid_file.read_text().strip():
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        os.kill(int(pid_file.read_text()), signal.SIGKILL)

    killer = threading.Thread(target=kill_when_started)
    killer.start()
    with pytest.raises(QmdUnavailable) as info:
        backend.search("anything")
    killer.join()
    assert (info.value.kind, info.value.reason) == ("killed", "qmd search was killed by SIGKILL")


def test_output_that_is_not_json(make: Callable[..., Any], tmp_path: Path) -> None:
    fake = _script(tmp_path / "bin" / "qmd", 'echo "Searching... 3 results"\n')
    backend = _ready(make(command=fake)[0])
    with pytest.raises(QmdUnavailable) as info:
        backend.search("anything")
    assert (info.value.kind, info.value.reason) == ("json",
                                                    "qmd search did not print a JSON array")


def test_no_secrets_in_errors(make: Callable[..., Any], tmp_path: Path) -> None:
    fake = _script(tmp_path / "bin" / "qmd", 'echo "openai($OPENAI_API_KEY) '
                                             'home($XDG_CONFIG_HOME) args: $*" >&2\nexit 1\n')
    backend = _ready(make(command=fake, env={**os.environ, "OPENAI_API_KEY": SENTINEL})[0])
    with pytest.raises(QmdUnavailable) as info:
        backend.search(f"what is {SENTINEL}")
    reason = info.value.reason
    assert f"openai() home({backend.home.config_home}) args: search what is ***" in reason
    assert SENTINEL not in reason  # the key was not passed on; the echoed query is masked
    assert SENTINEL not in json.dumps(backend.status())


def test_qmd_removed_mid_use_then_restored(make: Callable[..., Any], tmp_path: Path) -> None:
    link = tmp_path / "bin" / "qmd"
    link.parent.mkdir()
    link.symlink_to(tool("qmd"))
    backend, _ = make(command=link, cooldown=0)
    backend.boot()
    expected = backend.search("Zigbee")
    assert expected
    link.unlink()
    with pytest.raises(QmdUnavailable) as info:
        backend.search("Zigbee")
    assert info.value.kind == "missing"
    assert backend.status()["down"]["kind"] == "missing"
    link.symlink_to(tool("qmd"))
    assert backend.search("Zigbee") == expected  # tried again after the cool-down
    assert backend.status()["down"] is None


# ---------------------------------------------------------------------------------------------
# vsearch and query: models come from an unreachable hub here


def test_vsearch_without_vectors_falls_back(make: Callable[..., Any]) -> None:
    backend, _ = make(searchMode="vsearch", update={"embedTimeoutMs": 1000})
    report = backend.boot()
    assert report["embed"]["kind"] == "timeout"  # recorded, not raised
    with pytest.raises(QmdUnavailable) as info:
        backend.search("Zigbee")
    assert info.value.kind == "no-vectors"
    status = backend.status()
    assert status["embedFailures"] == 1 and status["embedBackoffUntil"] > time.time()
    assert backend.embed()["skipped"] == "backoff"
    assert backend.due() == []  # the update ran just now; embed waits out its back-off
    with pytest.raises(QmdUnavailable) as forced:
        backend.embed(force=True)
    assert forced.value.kind == "timeout"
    assert backend.status()["embedFailures"] == 2


def test_query_mode_needs_models_and_falls_back(make: Callable[..., Any]) -> None:
    backend, _ = make(searchMode="query", limits={"timeoutMs": 2000})
    backend.ensure_collections()
    with pytest.raises(QmdUnavailable) as info:
        backend.search("Zigbee")
    assert info.value.kind in ("timeout", "exit")


def test_a_mode_qmd_rejects_is_retried_with_query(make: Callable[..., Any],
                                                   tmp_path: Path) -> None:
    calls = tmp_path / "calls.log"
    real = tool("qmd")
    # an older qmd: vsearch rejects the flags; its "query" is answered by the real BM25 search
    fake = _script(tmp_path / "bin" / "qmd", f"""echo "$1" >> {calls}
case "$1" in
  vsearch) echo "error: unknown option '--json'" >&2; exit 2 ;;
  query) shift; exec {real} search "$@" ;;
  *) exec {real} "$@" ;;
esac
""")
    backend, _ = make(command=fake, searchMode="vsearch", update={"embedTimeoutMs": 500})
    backend.ensure_collections()
    backend.update(force=True)
    results = backend.search("Zigbee")
    assert {r.path for r in results} == {"MEMORY.md", "memory/2026-11-10.md"}
    assert calls.read_text().split()[-2:] == ["vsearch", "query"]
