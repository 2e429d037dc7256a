"""The QMD backend's pure parts: collection names, command lines, JSON parsing and result
mapping, scope rules, secret masking. (tests/test_qmd_backend.py drives the real qmd CLI.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.config.qmd_values import QmdPath, QmdScope, ScopeRule, check_scope
from pipeline.config.settings import QmdSessionsSettings, QmdSettings
from pipeline.errors import QmdUnavailable
from pipeline.qmd import collections, qmd_home
from pipeline.qmd.commands import bm25_query, search_args
from pipeline.qmd.results import (
    Location,
    clamp_injected,
    interleave_sources,
    parse_entries,
    snippet_lines,
    to_results,
)
from pipeline.qmd.runner import qmd_env, summary
from pipeline.qmd.sanitize import redact_for_errors, redact_secrets
from pipeline.qmd.scope import scope_allows
from tests.secrets_scan import SENTINEL


def _settings(tmp_path: Path, **qmd: object) -> Settings:
    return Settings(workspace=tmp_path / "ws", agent_id="Main.Agent", backend="qmd",
                    qmd=QmdSettings(**qmd))  # type: ignore[arg-type]


def test_collections_follow_openclaw_names(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo[1].md").write_text("x")
    s = _settings(tmp_path, paths=(
        QmdPath(notes, None, "Team Docs"), QmdPath(tmp_path / "other", "*.txt"),
        QmdPath(notes / "todo[1].md"), QmdPath(notes, None, "again"),
        QmdPath(tmp_path / "other2", None, "Team Docs")),
        sessions=QmdSessionsSettings(enabled=True))
    home = qmd_home(s)
    got = [(c.name, c.path, c.pattern, c.kind) for c in collections(s, home)]
    ws = tmp_path / "ws"
    assert got == [
        ("memory-root-main-agent", ws, "MEMORY.md", "memory"),
        ("memory-dir-main-agent", ws / "memory", "**/*.md", "memory"),
        ("team-docs-main-agent", notes, "**/*.md", "memory"),
        ("custom-2-main-agent", tmp_path / "other", "*.txt", "memory"),
        # a file: its folder, its escaped name as the mask
        ("custom-3-main-agent", notes, "todo\\[1\\].md", "memory"),
        # (notes, **/*.md) again is dropped; a name clash gets -2
        ("team-docs-main-agent-2", tmp_path / "other2", "**/*.md", "memory"),
        ("sessions-main-agent", home.root / "sessions", "**/*.md", "sessions"),
    ]
    assert home.root == s.store.path.with_name(s.store.path.stem + ".qmd")


def test_lowercase_memory_md_is_in_no_default_collection(tmp_path: Path) -> None:
    """As OpenClaw's QMD backend after 2026.3 (``memory-root`` and ``memory-dir`` only) and
    memq's own sources: the legacy ``memory.md`` is no longer memory, so no ``memory-alt``."""
    s = _settings(tmp_path)
    got = collections(s, qmd_home(s))
    assert [c.name for c in got] == ["memory-root-main-agent", "memory-dir-main-agent"]
    assert "memory.md" not in {c.pattern for c in got}


def test_include_default_memory_off(tmp_path: Path) -> None:
    s = _settings(tmp_path, include_default_memory=False)
    assert collections(s, qmd_home(s)) == []


def test_search_command_lines() -> None:
    names = ["memory-root-main", "docs-main"]
    assert search_args("search", "  budget review ", 6, names) == [
        "search", "budget review", "--json", "-n", "6", "-c", "memory-root-main", "-c",
        "docs-main"]
    assert search_args("vsearch", "budget", 3, names)[:5] == ["vsearch", "budget", "--json",
                                                              "-n", "3"]
    assert search_args("query", "budget", 3, [])[:2] == ["query", "budget"]
    assert search_args("search", "--help me", 3, [])[:2] == ["search", " --help me"]


def test_bm25_query_for_han_text() -> None:
    assert bm25_query("quarterly budget") == "quarterly budget"
    cjk = bm25_query("我们讨论了预算会议的安排")
    assert cjk.split() == ["我们", "们讨", "讨论", "论了", "了预", "预算", "算会", "会议", "议的",
                           "的安", "安排"]
    long = bm25_query("一二三四五六七八九十甲乙丙丁戊己")
    assert len(long.split()) == 12


def test_parse_entries() -> None:
    assert parse_entries("No results found.", "") == []
    assert parse_entries("", "[qmd] warn: No results found") == []
    noisy = 'Loading...\n[{"docid": "#ab", "score": 0.5, "snippet": "x [y]"}]\ndone'
    assert parse_entries(noisy, "") == [{"docid": "#ab", "score": 0.5, "snippet": "x [y]"}]
    for bad in ("", "not json", '{"results": 1}', '[{"unclosed": 1}'):
        with pytest.raises(QmdUnavailable) as info:
            parse_entries(bad, "some stderr")
        assert info.value.kind == "json"


def test_snippet_lines() -> None:
    assert snippet_lines("@@ -12,3 @@ (1 before, 0 after)\n\nline a\nline b\n") == (
        12, 14, "\nline a\nline b\n")
    assert snippet_lines("plain\ntext") == (1, 2, "plain\ntext")


def _hit(path: str, source: str, score: float, snippet: str = "abc") -> dict[str, object]:
    return {"path": path, "startLine": 1, "endLine": 1, "score": score, "snippet": snippet,
            "source": source}


def test_interleave_and_clamp() -> None:
    hits = [_hit("a", "sessions", 0.9), _hit("b", "sessions", 0.8), _hit("c", "memory", 0.7),
            _hit("d", "memory", 0.6)]
    assert [h["path"] for h in interleave_sources(hits, 3)] == ["a", "c", "b"]
    only = [_hit("a", "memory", 0.9), _hit("b", "memory", 0.8)]
    assert interleave_sources(only, 1) == only[:1]
    clamped = clamp_injected([_hit("a", "memory", 1, "x" * 6), _hit("b", "memory", 1, "y" * 6),
                              _hit("c", "memory", 1, "z")], 10)
    assert [h["snippet"] for h in clamped] == ["x" * 6, "y" * 4]


def test_to_results_drops_unknown_and_low_scores() -> None:
    entries = [{"file": "qmd://a/x.md", "score": 0.9, "snippet": "@@ -3,2 @@\nhello\nworld"},
               {"file": "qmd://zzz/y.md", "score": 0.8, "snippet": "s"},
               {"file": "qmd://a/z.md", "score": 0.1, "snippet": "s"},
               {"file": "qmd://a/w.md", "snippet": "no score"}]

    def locate(entry: dict[str, object]) -> Location | None:
        return Location(str(entry["file"]), "memory") if "/a/" in str(entry["file"]) else None

    out = to_results(entries, locate, limit=6, min_score=0.05, max_snippet_chars=3,
                     max_injected_chars=100)
    assert out == [{"path": "qmd://a/x.md", "startLine": 3, "endLine": 4, "score": 0.9,
                    "snippet": "hel", "source": "memory"},
                   {"path": "qmd://a/z.md", "startLine": 1, "endLine": 1, "score": 0.1,
                    "snippet": "s", "source": "memory"}]


@pytest.mark.parametrize(("key", "allowed"), [
    (None, True),  # memq: no session key is a direct chat
    ("agent:main:telegram:direct:42", True),
    ("agent:main:discord:group:7", False),
    ("agent:main:discord:channel:general", False),
    ("agent:main:main", True),
    ("subagent:x", False),
])
def test_default_scope_allows_direct_chats_only(key: str | None, allowed: bool) -> None:
    assert scope_allows(check_scope(None), key) is allowed


def test_scope_rules_in_order() -> None:
    scope = check_scope({"default": "deny", "rules": [
        {"action": "deny", "match": {"rawKeyPrefix": "agent:main:discord:"}},
        {"action": "allow", "match": {"keyPrefix": "discord:"}},
        {"action": "allow", "match": {"channel": "slack", "chatType": "group"}},
    ]})
    assert not scope_allows(scope, "agent:main:discord:group:1")  # first rule wins
    assert scope_allows(scope, "agent:other:discord:group:1")  # keyPrefix on the normalised key
    assert scope_allows(scope, "agent:main:slack:group:9")
    assert not scope_allows(scope, "agent:main:slack:channel:9")
    assert scope_allows(QmdScope("allow", (ScopeRule("deny", chat_type="group"),)), "x:direct:1")


def test_redact_secrets() -> None:
    text = (f"User: my key is {SENTINEL} and OPENAI_API_KEY=abc123xyz, "
            "Authorization: Bearer abcdefghijklmnopqrstuvwxyz and ghp_"
            + "a" * 24 + " but keys in general are fine")
    out = redact_secrets(text)
    assert SENTINEL not in out and "abc123xyz" not in out and "abcdefghijklmnop" not in out
    assert "ghp_" + "a" * 24 not in out and "ghp_aa…aaaa" in out  # head and tail kept
    # OpenClaw 2026.9.6 keeps a long token's head and tail (tests/test_openclaw_sessions.py)
    assert out.startswith("User: my key is sk-mem…5b1d and OPENAI_API_KEY=***")
    assert out.endswith("but keys in general are fine")
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIsecret\n-----END RSA PRIVATE KEY-----"
    assert "MIIsecret" not in redact_secrets(pem)
    # Error text and logs keep nothing of a secret, not even its head and tail.
    whole = redact_for_errors(text)
    assert whole.startswith("User: my key is *** and OPENAI_API_KEY=***")
    assert "ghp_" not in whole and "…" not in whole
    assert whole.endswith("but keys in general are fine")


def test_qmd_env_drops_credentials(tmp_path: Path) -> None:
    env = qmd_env({"PATH": "/bin", "OPENAI_API_KEY": SENTINEL, "GITHUB_TOKEN": "t",
                   "HF_TOKEN": "hf", "DB_PASSWORD": "p"}, tmp_path / "c", tmp_path / "k")
    assert env == {"PATH": "/bin", "HF_TOKEN": "hf", "XDG_CONFIG_HOME": str(tmp_path / "c"),
                   "QMD_CONFIG_DIR": str(tmp_path / "c"), "XDG_CACHE_HOME": str(tmp_path / "k"),
                   "NO_COLOR": "1"}


def test_summary_names_the_subcommand_only() -> None:
    assert summary(["search", "my private query", "--json"]) == "qmd search"
    assert summary(["collection", "add", "/home/x", "--name", "n"]) == "qmd collection add"
