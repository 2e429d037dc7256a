"""``backend`` and the ``qmd.*`` keys: OpenClaw 2026.3.24's defaults, memq.toml and openclaw.json
(``memory.backend``, ``memory.qmd``), and clear errors for bad values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.config import ConfigError, Settings, load_settings, settings_to_dict
from pipeline.config.qmd_values import DEFAULT_SCOPE, QmdPath, duration_ms


def _load(tmp_path: Path, name: str, text: str) -> Settings:
    cfg = tmp_path / name
    cfg.write_text(text, encoding="utf-8")
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return load_settings(cfg, workspace=ws, env={"HOME": str(tmp_path)})


def test_defaults_are_openclaw_2026_3(tmp_path: Path) -> None:
    s = Settings(workspace=tmp_path)
    q = s.qmd
    assert s.backend == "builtin"
    assert (q.command, q.search_mode, q.include_default_memory, q.paths) == (
        "qmd", "search", True, ())
    assert (q.sessions.enabled, q.sessions.retention_days, q.sessions.export_dir) == (
        False, None, None)
    u = q.update
    assert (u.interval_ms, u.debounce_ms, u.on_boot, u.wait_for_boot_sync) == (
        300_000, 15_000, True, False)
    assert (u.embed_interval_ms, u.command_timeout_ms, u.update_timeout_ms,
            u.embed_timeout_ms) == (3_600_000, 30_000, 120_000, 120_000)
    lim = q.limits
    assert (lim.max_results, lim.max_snippet_chars, lim.max_injected_chars, lim.timeout_ms) == (
        6, 700, 4000, 4000)
    assert q.scope == DEFAULT_SCOPE
    assert settings_to_dict(s)["qmd"]["scope"] == {
        "default": "deny", "rules": [{"action": "allow", "match": {"chatType": "direct"}}]}


def test_openclaw_json_memory_section(tmp_path: Path) -> None:
    ws = tmp_path / "agent"
    ws.mkdir()
    cfg = tmp_path / "openclaw.json"
    cfg.write_text("""{
      // OpenClaw's documented QMD example, plus every other key
      agents: {defaults: {workspace: "WORKSPACE"}},
      memory: {
        backend: "qmd",
        citations: "off",
        qmd: {
          command: "~/bin/qmd",
          searchMode: "vsearch",
          includeDefaultMemory: false,
          paths: [{name: "docs", path: "~/notes", pattern: "**/*.md"}, {path: "team"}],
          sessions: {enabled: true, retentionDays: 30, exportDir: "exports"},
          update: {interval: "1h30m", debounceMs: 5000, onBoot: false, waitForBootSync: true,
                   embedInterval: "2h", commandTimeoutMs: 0, updateTimeoutMs: 9000,
                   embedTimeoutMs: 1},
          limits: {maxResults: 3, maxSnippetChars: 200, maxInjectedChars: 500, timeoutMs: 250},
          scope: {default: "deny", rules: [
            {action: "allow", match: {chatType: "direct"}},
            {action: "deny", match: {keyPrefix: "discord:channel:"}},
            {action: "deny", match: {rawKeyPrefix: "agent:main:discord:"}},
          ]},
        },
      },
    }""".replace("WORKSPACE", str(ws)), encoding="utf-8")
    s = load_settings(cfg, env={"HOME": str(tmp_path)})
    q = s.qmd
    assert s.backend == "qmd" and s.citations == "off"
    assert q.command == str(tmp_path / "bin" / "qmd")
    assert q.search_mode == "vsearch" and q.include_default_memory is False
    assert q.paths == (QmdPath(tmp_path / "notes", "**/*.md", "docs"), QmdPath(ws / "team"))
    assert (q.sessions.enabled, q.sessions.retention_days, q.sessions.export_dir) == (
        True, 30, ws / "exports")
    assert (q.update.interval_ms, q.update.embed_interval_ms) == (5_400_000, 7_200_000)
    assert (q.update.debounce_ms, q.update.on_boot, q.update.wait_for_boot_sync) == (
        5000, False, True)
    # 0 means the default, as in OpenClaw
    assert (q.update.command_timeout_ms, q.update.update_timeout_ms,
            q.update.embed_timeout_ms) == (30_000, 9000, 1)
    assert (q.limits.max_results, q.limits.max_snippet_chars, q.limits.max_injected_chars,
            q.limits.timeout_ms) == (3, 200, 500, 250)
    assert [r.to_json() for r in q.scope.rules] == [
        {"action": "allow", "match": {"chatType": "direct"}},
        {"action": "deny", "match": {"keyPrefix": "discord:channel:"}},
        {"action": "deny", "match": {"rawKeyPrefix": "agent:main:discord:"}},
    ]
    assert json.loads(json.dumps(settings_to_dict(s)))["qmd"]["update"]["interval"] == "1h30m"


def test_memq_toml_top_level(tmp_path: Path) -> None:
    s = _load(tmp_path, "memq.toml", """
backend = "qmd"
[qmd]
command = "tools/qmd --verbose"
[[qmd.paths]]
path = "../shared"
name = "Shared Notes"
[qmd.scope]
rules = [{ action = "deny", match = { chatType = "group" } }]
""")
    assert s.backend == "qmd"
    assert s.qmd.command == str(tmp_path / "ws" / "tools" / "qmd")  # from the workspace
    assert any("only the executable" in w for w in s.warnings)
    assert s.qmd.paths == (QmdPath(tmp_path / "shared", None, "Shared Notes"),)
    # a scope written without "default" allows by default (OpenClaw: scope.default ?? "allow")
    assert s.qmd.scope.default == "allow"


@pytest.mark.parametrize(("text", "error"), [
    ('backend = "qdm"', r'backend: must be one of "builtin", "qmd" \(did you mean "qmd"\?\)'),
    ('[qmd]\nsearchMode = "hybrid"', r'qmd\.searchMode: must be one of "search", "vsearch"'),
    ('[qmd.update]\ninterval = "5 minutes"', r"qmd\.update\.interval: must be a duration"),
    ("[qmd.update]\ninterval = 5", r"qmd\.update\.interval: must be a duration.*got 5"),
    ("[qmd.update]\ndebounceMs = -1", r"qmd\.update\.debounceMs: must be a whole number >= 0"),
    ("[qmd.limits]\nmaxResults = 0", r"qmd\.limits\.maxResults: must be a whole number >= 1"),
    ('[[qmd.paths]]\npattern = "*.md"', r"qmd\.paths: every entry needs a path string"),
    ('[[qmd.paths]]\npath = "x"\nmask = "*"', r"qmd\.paths: unknown field 'mask'"),
    ('[qmd.scope]\ndefault = "maybe"', r'qmd\.scope\.default: must be one of "allow", "deny"'),
    ('[[qmd.scope.rules]]\naction = "allow"\nmatch = { chatType = "dms" }',
     r"qmd\.scope\.rules\[0\]\.match\.chatType: must be one of"),
    ('[[qmd.scope.rules]]\naction = "allow"\nmatch = { user = "x" }',
     r"qmd\.scope\.rules\[0\]\.match\.user: unknown key"),
    ("[qmd.sessions]\nretentionDays = -1", r"qmd\.sessions\.retentionDays: must be a whole number"),
    ('[qmd]\ncomand = "x"', r'unknown key "qmd\.comand".*did you mean "qmd\.command"'),
])
def test_bad_values_name_the_key_and_the_file(tmp_path: Path, text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error) as info:
        _load(tmp_path, "memq.toml", text)
    assert "memq.toml" in str(info.value)


def test_qmd_keys_belong_in_memory_not_memory_search(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"reads it from memory\.qmd\.command"):
        _load(tmp_path, "openclaw.json",
              '{agents: {defaults: {memorySearch: {qmd: {command: "qmd"}}}}}')
    s = _load(tmp_path, "openclaw.json",
              '{memory: {qmd: {mcporter: {enabled: true}}}, agents: {defaults: {memorySearch: '
              '{qmd: {extraCollections: []}}}}}')
    assert sum("memq does not use; ignored" in w for w in s.warnings) == 2


@pytest.mark.parametrize(("text", "ms"), [("5m", 300_000), ("90s", 90_000), ("1h30m", 5_400_000),
                                          ("250ms", 250), ("2", 120_000), ("0", 0),
                                          ("1.5h", 5_400_000), ("1d", 86_400_000)])
def test_durations(text: str, ms: int) -> None:
    assert duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "m", "5 m", "5x", "-1m", "5m3", "1h 30m"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        duration_ms(text)
