"""The key table (pipeline.config.keys.KEYS) and the settings dataclasses stay in step.

Adding a key is a field in a dataclass plus one row in KEYS; these tests fail when one of the
two is missing, when the docs do not list a key, or when ``memq status --json`` would change
the order of its keys.
"""

from __future__ import annotations

import dataclasses
from operator import attrgetter
from pathlib import Path

import pytest

from pipeline.config import (
    ENV_VARS,
    ConfigError,
    Settings,
    StoreSettings,
    load_settings,
    settings_to_dict,
)
from pipeline.config.keys import KEYS, READ, keys_at
from pipeline.config.settings import nested, owner

DOCS = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def _settings_classes() -> list[type]:
    out, todo = [], [Settings]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(nested(cls).values())
    return out


def test_every_row_names_a_settings_attribute(tmp_path: Path) -> None:
    s = Settings(workspace=tmp_path)
    for key in KEYS:
        if key.attr is not None:
            attrgetter(key.attr)(s)  # AttributeError names the row that is wrong


@pytest.mark.parametrize("cls", _settings_classes(), ids=lambda c: c.__name__)
def test_every_field_is_a_key_or_a_nested_section(cls: type) -> None:
    keys = keys_at(owner(cls))
    loose = [
        f.name for f in dataclasses.fields(cls) if f.name not in keys and f.name not in nested(cls)
    ]
    assert loose == [], f"{cls.__name__} fields without a row in keys.KEYS: {loose}"


def test_settings_to_dict_keeps_its_order(tmp_path: Path) -> None:
    """``memq status --json`` prints the keys in this order; the table decides it."""
    d = settings_to_dict(load_settings(workspace=tmp_path, env={"HOME": str(tmp_path)}))
    assert list(d) == [
        "workspace", "enabled", "provider", "fallback", "model", "sources", "extraPaths",
        "extraPathPatterns", "rememberAcrossConversations", "searchSources", "experimental",
        "outputDimensionality", "inputType", "queryInputType", "documentInputType", "multimodal",
        "watch", "fleet", "chunking", "query", "rerank", "cache", "store", "sync", "remote",
        "local",
        "models", "brokerUrl", "resultBackend", "agentId", "sessionsDir", "citations", "backend",
        "qmd", "dataDir", "configFile", "warnings",
    ]  # fmt: skip
    assert list(d["store"]) == ["driver", "path", "fts", "vector"]
    assert list(d["rerank"]) == ["enabled", "provider", "baseUrl", "apiKey", "apiKeyEnv",
                                 "model", "modelPath", "topN", "timeoutMs"]
    assert list(d["sync"]) == [
        "onSessionStart", "onSearch", "watch", "watchDebounceMs", "intervalMinutes", "sessions",
    ]  # fmt: skip
    assert list(d["remote"]) == ["baseUrl", "apiKey", "apiKeyEnv", "headers", "batch", "rateLimit"]
    assert list(d["qmd"]) == [
        "command", "searchMode", "includeDefaultMemory", "paths", "sessions", "update", "limits",
        "scope",
    ]  # fmt: skip
    assert d["store"]["driver"] == StoreSettings(path="x").driver == "sqlite"


def test_env_vars() -> None:
    assert ENV_VARS == {
        "MEMQ_WORKSPACE": "workspace",
        "MEMQ_STORE_PATH": "store.path",
        "MEMQ_BROKER_URL": "brokerUrl",
        "MEMQ_PROVIDER": "provider",
        "MEMQ_FALLBACK": "fallback",
        "MEMQ_MODEL": "model",
        "MEMQ_LOCAL_MODEL_PATH": "local.modelPath",
        "MEMQ_LOCAL_THREADS": "local.threads",
        "MEMQ_LOCAL_STREAMS": "local.streams",
        "MEMQ_LOCAL_WINDOW_TOKENS": "local.windowTokens",
        "MEMQ_CACHE_DIR": "local.modelCacheDir",
        "MEMQ_EXTRA_PATHS": "extraPaths",
        "MEMQ_AGENT_ID": "agentId",
        "MEMQ_SESSIONS_DIR": "sessionsDir",
        "MEMQ_WATCH_POLLING": "watch.polling",
        "MEMQ_WATCH_POLL_INTERVAL_MS": "watch.pollIntervalMs",
        "MEMQ_FLEET_SHARDS": "fleet.shards",
        "MEMQ_LOCAL_SHARDS": "fleet.localShards",
        "MEMQ_QUERY_TIMEOUT_MS": "fleet.queryTimeoutMs",
        "MEMQ_JOBS_KEEP_DAYS": "fleet.jobsKeepDays",
        "MEMQ_RESULT_BACKEND": "resultBackend",
    }
    assert set(ENV_VARS.values()) <= set(READ)


def test_docs_list_every_key_and_variable() -> None:
    text = DOCS.read_text(encoding="utf-8")
    missing = [k for k in READ if f"`{k}`" not in text]
    missing += [v for v in ENV_VARS if f"`{v}`" not in text]
    assert missing == [], f"not in docs/configuration.md: {missing}"


def test_output_only_rows_are_not_config_keys(tmp_path: Path) -> None:
    """settings_to_dict shows configFile and friends, but a file may not set them."""
    for key in ("configFile", "dataDir", "warnings", "extraPathPatterns", "remote.apiKeyEnv",
                "rerank.apiKeyEnv", "models.providers"):
        assert key not in READ
    cfg = tmp_path / "memq.json"
    cfg.write_text('{"remote": {"apiKeyEnv": "X"}}', encoding="utf-8")
    with pytest.raises(ConfigError, match=r'unknown key "remote\.apiKeyEnv"'):
        load_settings(cfg, workspace=tmp_path, env={"HOME": str(tmp_path)})
