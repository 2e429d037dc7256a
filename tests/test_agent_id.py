"""memq's agent ids and agent workspaces are OpenClaw 2026.9.6's: the Python port is compared with
OpenClaw's own code, run by Node on the installed package (tests/openclaw_agents.mjs)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import (
    ConfigError,
    is_valid_agent_id,
    load_settings,
    normalize_agent_id,
    normalize_agent_id_strict,
    read_roster,
)
from pipeline.config.roster import openclaw_roster, openclaw_workspace
from pipeline.errors import UnknownMemory
from tests.tools import node_env, tool, tools_dir

SCRIPT = Path(__file__).with_name("openclaw_agents.mjs")

TRICKY_IDS = [
    "main", "Ops", "OPS", " ops ", "ops\n", "my agent", "My  Agent!", "../evil", "..", "a/b",
    "a.b", "-lead", "trail-", "--", "___", "_x", "x_", "!!!", "", "   ", "\u00a0ops\u00a0",
    "\ufeffops", "\u2003ops", "\x1cops", "ops\x85", "İstanbul", "\u212aelvin", "ſhort", "café",
    "日本語", "agent日本", "a" * 64, "a" * 65, "-" + "b" * 70, "x" * 63 + "-y", "Ab-Cd_Ef",
    "UPPER_lower-09", "0day", "émile", "tab\tinside", "a\u0130b", "ΣΑΣ", "a😀b", "😀",
]


def openclaw(ids: list[str], configs: list[dict[str, Any]]) -> dict[str, Any]:
    dist = tools_dir() / "openclaw/node_modules/openclaw/dist"
    tool("openclaw")
    done = subprocess.run([str(tool("node")), str(SCRIPT), str(dist)],
                          input=json.dumps({"ids": ids, "configs": configs}),
                          capture_output=True, text=True, env=node_env(), timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_agent_ids_are_canonicalised_as_openclaw_does() -> None:
    theirs = openclaw(TRICKY_IDS, [])["ids"]
    ours = [[normalize_agent_id(i), normalize_agent_id_strict(i), is_valid_agent_id(i)]
            for i in TRICKY_IDS]
    mismatches = [(i, o, t) for i, o, t in zip(TRICKY_IDS, ours, theirs, strict=True) if o != t]
    assert mismatches == []
    # and the cases that matter read as expected
    assert normalize_agent_id("Ops") == "ops"
    assert normalize_agent_id("My  Agent!") == "my-agent"
    assert normalize_agent_id_strict("!!!") is None and normalize_agent_id("!!!") == "main"


CONFIGS: list[dict[str, Any]] = [
    # the marked default owns the defaults' workspace; the others get <defaults>/<id>
    {"agents": {"defaults": {"workspace": "/srv/ws"},
                "list": [{"id": "Main", "default": True}, {"id": "Work"},
                         {"id": "ops", "workspace": "/srv/ops"}]}},
    # no default and several agents: nobody owns the default workspace
    {"agents": {"list": [{"id": "a"}, {"id": "B"}]}},
    # one agent: it is the owner, of OpenClaw's default workspace
    {"agents": {"list": [{"id": "solo"}]}},
    # 2026.9's keyed roster wins over the list
    {"agents": {"entries": {"Alpha": {"workspace": "/x/alpha"}, "beta": {"default": True}},
                "list": [{"id": "ignored"}], "defaults": {"workspace": "/d"}}},
    # no roster at all: main is the implicit agent
    {"agents": {"defaults": {"workspace": "/d"}}},
    {},
    # explicit ownership ignores the default marker
    {"agents": {"ownership": "explicit", "list": [{"id": "p", "default": True}, {"id": "q"}]}},
    # duplicates: the first of an id wins
    {"agents": {"list": [{"id": "dup", "workspace": "/one"}, {"id": "DUP", "workspace": "/two"}]}},
]
ASKED = ["main", "work", "ops", "a", "b", "solo", "alpha", "beta", "ignored", "p", "q", "dup",
         "zed"]


def test_agent_rosters_and_workspaces_are_openclaws(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home"), "OPENCLAW_STATE_DIR": str(tmp_path / "state")}
    theirs = openclaw([], [{"cfg": cfg, "env": env, "ids": ASKED} for cfg in CONFIGS])
    for cfg, their_ids, their_dirs in zip(CONFIGS, theirs["agents"], theirs["workspaces"],
                                          strict=True):
        roster = openclaw_roster(cfg, "openclaw.json")
        assert (roster.names or ["main"]) == their_ids, cfg
        ours = {agent: openclaw_workspace(cfg, agent, env, "openclaw.json")[0]
                for agent in ASKED}
        assert ours == their_dirs, cfg


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_any_spelling_of_an_agent_names_one_memory(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "OPENCLAW_STATE_DIR": str(tmp_path / "state")}
    cfg = write(tmp_path / "openclaw.json", json.dumps({"agents": {"list": [
        {"id": "Main", "default": True, "workspace": str(tmp_path / "m")},
        {"id": "Ops Team", "workspace": str(tmp_path / "o"),
         "memorySearch": {"chunking": {"tokens": 200}, "store": {"path": "x.sqlite"}}},
    ]}}))
    for spelling in ("ops-team", "OPS-TEAM", " Ops Team ", "ops team"):
        s = load_settings(config_file=cfg, agent=spelling, env=env)
        assert (s.agent_id, s.workspace, s.chunking.tokens) == \
            ("ops-team", tmp_path / "o", 200), spelling
        assert s.sessions_dir == tmp_path / "state/agents/ops-team/sessions"
    assert load_settings(config_file=cfg, env=env).agent_id == "main"
    assert read_roster(cfg, env).names == ["main", "ops-team"]
    with pytest.raises(UnknownMemory) as err:
        load_settings(config_file=cfg, agent="opsteam", env=env)
    assert err.value.known == ("main", "ops-team")
    assert 'unknown memory "opsteam"' in str(err.value) and "ops-team" in str(err.value)


def test_store_path_agent_id_is_canonical(tmp_path: Path) -> None:
    cfg = write(tmp_path / "memq.toml", '[store]\npath = "idx/{agentId}.sqlite"\n')
    s = load_settings(config_file=cfg, agent="Ops", env={"HOME": str(tmp_path)},
                      workspace=tmp_path)
    assert (s.agent_id, s.store.path) == ("ops", tmp_path / "idx/ops.sqlite")


@pytest.mark.parametrize(("raw", "hint"), [("../evil", '"evil"'), ("a.b", '"a-b"'),
                                           ("!!!", None)])
def test_an_id_openclaw_would_rewrite_is_refused_with_its_reading(tmp_path: Path, raw: str,
                                                                   hint: str | None) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(config_file=None, agent=raw, env={"HOME": str(tmp_path),
                                                        "MEMQ_CONFIG": "none"},
                      workspace=tmp_path)
    assert "file names" in str(err.value)
    if hint:
        assert f"OpenClaw reads it as {hint}" in str(err.value)


def test_agents_entries_layer_their_memory_search(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "OPENCLAW_STATE_DIR": str(tmp_path / "state")}
    cfg = write(tmp_path / "openclaw.json", json.dumps({"agents": {
        "defaults": {"memorySearch": {"chunking": {"tokens": 300}}},
        "entries": {"Work": {"memorySearch": {"chunking": {"tokn": 1}}},
                    "Home": {"default": True, "memorySearch": {"chunking": {"tokens": 99}}}}}}))
    home = load_settings(config_file=cfg, env=env)
    assert (home.agent_id, home.chunking.tokens) == ("home", 99)
    assert home.workspace == tmp_path / "state/workspace"  # the owner: the default workspace
    with pytest.raises(ConfigError) as err:
        load_settings(config_file=cfg, env=env, agent="work")
    assert '"agents.entries.Work.memorySearch.chunking.tokn"' in str(err.value)
