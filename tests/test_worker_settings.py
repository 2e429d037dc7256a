"""A worker's settings per memory: kept between messages, and read again when the config
file changes (a memory added to an openclaw.json is served without restarting the fleet)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pipeline.errors import MessageRefused
from workers.runtime import WorkerRuntime


def write_config(path: Path, tmp_path: Path, agents: dict[str, int]) -> None:
    """An openclaw.json listing ``agents`` (id -> chunking tokens), the first one default."""
    listed = []
    for i, (agent, tokens) in enumerate(agents.items()):
        ws = tmp_path / f"ws-{agent}"
        ws.mkdir(exist_ok=True)
        listed.append({"id": agent, "workspace": str(ws), **({"default": True} if i == 0 else {}),
                       "memorySearch": {"chunking": {"tokens": tokens, "overlap": 8}}})
    path.write_text(json.dumps({"agents": {
        "defaults": {"memorySearch": {"provider": "none", "store": {
            "path": str(tmp_path / "stores" / "{agentId}.sqlite")}}},
        "list": listed}}))


def bump_mtime(path: Path) -> None:
    """Make sure the file's mtime moved (a coarse file system may keep the same second)."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))


def test_settings_are_kept_and_follow_the_config_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "openclaw.json"
    write_config(config, tmp_path, {"alpha": 64})
    monkeypatch.setenv("MEMQ_CONFIG", str(config))
    monkeypatch.setenv("MEMQ_HOME", str(tmp_path / "home"))
    runtime = WorkerRuntime()
    alpha = runtime.settings_for("alpha")
    assert alpha.chunking.tokens == 64
    assert runtime.settings_for("alpha") is alpha  # kept between messages
    with pytest.raises(MessageRefused, match="'beta' is not one of this fleet's"):
        runtime.settings_for("beta")
    write_config(config, tmp_path, {"alpha": 96, "beta": 128})
    bump_mtime(config)
    beta = runtime.settings_for("beta")  # added to the config: served without a restart
    assert beta.agent_id == "beta" and beta.chunking.tokens == 128
    assert beta.workspace == tmp_path / "ws-beta"
    assert runtime.settings_for("alpha").chunking.tokens == 96  # its change is read too
    assert runtime.default_memory() == "alpha"
    write_config(config, tmp_path, {"beta": 128})
    bump_mtime(config)
    with pytest.raises(MessageRefused, match="'alpha' is not one of this fleet's"):
        runtime.settings_for("alpha")  # removed from the config: refused from now on


def test_a_config_found_in_the_workspace_is_followed_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No MEMQ_CONFIG: the worker's config is the workspace's memq.toml, found from
    MEMQ_WORKSPACE (not from the current directory)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    config = ws / "memq.toml"
    config.write_text("provider = \"none\"\n[chunking]\ntokens = 64\noverlap = 8\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("MEMQ_CONFIG", raising=False)
    monkeypatch.setenv("MEMQ_WORKSPACE", str(ws))
    monkeypatch.setenv("MEMQ_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    runtime = WorkerRuntime()
    memory = runtime.default_memory()
    assert runtime.settings_for(memory).chunking.tokens == 64
    config.write_text("provider = \"none\"\n[chunking]\ntokens = 96\noverlap = 8\n")
    bump_mtime(config)
    assert runtime.settings_for(memory).chunking.tokens == 96
