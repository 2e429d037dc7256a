"""Tests for pipeline.config: OpenClaw's memorySearch keys and defaults, files, env, errors."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

from pipeline.config import (
    DEFAULT_CACHE_MAX_ENTRIES,
    BatchSettings,
    CacheSettings,
    ChunkingSettings,
    ConfigError,
    Headers,
    HybridSettings,
    LocalSettings,
    QuerySettings,
    RemoteSettings,
    Settings,
    StoreSettings,
    SyncSettings,
    WatchSettings,
    default_store_path,
    find_config_file,
    load_settings,
    redact_url,
    settings_to_dict,
)
from tests.secrets_scan import SENTINEL

SECRET = SENTINEL


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean HOME and cwd so no real config file or data dir is touched."""
    home = tmp_path / "home"
    home.mkdir()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return home


@pytest.fixture
def env(home: Path) -> dict[str, str]:
    return {"HOME": str(home)}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    (ws / "memory").mkdir(parents=True)
    return ws


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def load_toml(tmp_path: Path, env: dict[str, str], text: str, **kw: object) -> Settings:
    cfg = write(tmp_path / "conf" / "memq.toml", text)
    return load_settings(config_file=cfg, env=env, **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------- defaults


def test_defaults_equal_openclaw(env: dict[str, str], ws: Path) -> None:
    s = load_settings(workspace=ws, env=env)
    assert s.workspace == ws
    assert (s.enabled, s.provider, s.fallback, s.model) == (True, "auto", "none", "")
    assert s.sources == ("memory",)
    assert s.extra_paths == ()
    assert s.session_memory is False
    assert (s.chunking.tokens, s.chunking.overlap) == (400, 80)
    assert (s.query.max_results, s.query.min_score) == (6, 0.35)
    h = s.query.hybrid
    assert (h.enabled, h.vector_weight, h.text_weight, h.candidate_multiplier) == (
        True, 0.7, 0.3, 4,
    )  # fmt: skip
    assert (h.mmr.enabled, h.mmr.lambda_) == (True, 0.7)  # on by default since 2026.9
    assert (h.temporal_decay.enabled, h.temporal_decay.half_life_days) == (True, 30)
    assert s.query.candidates() == 24  # min(200, 6 x 4), as OpenClaw
    assert s.cache.enabled is True
    assert s.cache.max_entries == DEFAULT_CACHE_MAX_ENTRIES == 100_000  # memq's cap
    assert (s.store.vector_enabled, s.store.extension_path, s.store.fts_tokenizer) == (
        True, None, "unicode61",
    )  # fmt: skip
    sync = s.sync
    assert (sync.watch, sync.watch_debounce_ms, sync.on_session_start, sync.on_search) == (
        True, 1500, True, True,
    )  # fmt: skip
    assert sync.interval_minutes == 0
    assert (sync.sessions.delta_bytes, sync.sessions.delta_messages) == (100_000, 50)
    assert sync.sessions.post_compaction_force is True
    b = s.remote.batch
    assert (b.enabled, b.wait, b.concurrency, b.poll_interval_ms, b.timeout_minutes) == (
        False, True, 2, 2000, 60,
    )  # fmt: skip
    assert (s.remote.base_url, s.remote.api_key, dict(s.remote.headers)) == (None, None, {})
    assert (s.local.model_path, s.local.model_cache_dir, s.local.threads) == (None, None, None)
    assert s.multimodal.enabled is False and s.multimodal.max_file_bytes == 10 * 1024 * 1024
    assert (s.broker_url, s.agent_id, s.config_file) == (None, "main", None)
    assert s.sessions_dir == Path(env["HOME"]) / ".openclaw/agents/main/sessions"
    assert s.warnings == ()


def test_dataclass_defaults_match_the_contract(ws: Path) -> None:
    assert ChunkingSettings() == ChunkingSettings(400, 80)
    assert HybridSettings().normalized_weights() == pytest.approx((0.7, 0.3))
    assert QuerySettings().max_results == 6
    assert CacheSettings() == CacheSettings(True, 100_000)
    assert SyncSettings().watch_debounce_ms == 1500
    assert BatchSettings() == BatchSettings(False, True, 2, 2000, 60)
    assert LocalSettings() == LocalSettings(None, None, None)
    s = Settings(workspace=ws)
    assert s.store.path.is_absolute() and not s.store.path.is_relative_to(ws)
    assert s == Settings(workspace=str(ws))
    hash(s)  # frozen and hashable, headers included
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.provider = "openai"  # type: ignore[misc]


def test_default_cwd_workspace(env: dict[str, str], home: Path) -> None:
    assert load_settings(env=env).workspace == Path.cwd()


# ---------------------------------------------------------------------------------------- files

FULL_TOML = """
workspace = "../ws"
provider = "OpenAI"
fallback = "local"
model = "text-embedding-3-large"
sources = ["memory", "sessions"]
extraPaths = ["notes", "/abs/docs", "  "]
brokerUrl = "redis://broker:6379/0"
agentId = "ops"
enabled = true

[experimental]
sessionMemory = true

[chunking]
tokens = 256
overlap = 32

[query]
maxResults = 10
minScore = 0.2

[query.hybrid]
vectorWeight = 0.6
textWeight = 0.4
candidateMultiplier = 8
mmr = { enabled = true, lambda = 0.5 }
temporalDecay = { enabled = true, halfLifeDays = 14 }

[rerank]
enabled = true
baseUrl = "https://rerank.example/v1"
apiKey = "sk-memq-SENTINEL-7f3a9c2e5b1d"
model = "jina-reranker-v2-base-multilingual"
topN = 30
timeoutMs = 800

[cache]
enabled = false
maxEntries = 5000

[store]
path = "idx/{agentId}.sqlite"
fts.tokenizer = "trigram"
vector = { enabled = false, extensionPath = "/opt/vec0.so" }

[sync]
watch = false
watchDebounceMs = 250
onSessionStart = false
onSearch = false
intervalMinutes = 15

[remote]
baseUrl = "https://proxy.example/v1"
apiKey = "sk-memq-SENTINEL-7f3a9c2e5b1d"
headers = { "X-Team" = "search", Authorization = "Bearer sk-memq-SENTINEL-7f3a9c2e5b1d" }

[remote.batch]
enabled = true
wait = false
concurrency = 4
pollIntervalMs = 500
timeoutMinutes = 30

[local]
modelPath = "models/mini.gguf"
modelCacheDir = "~/models"
threads = 3
"""


def test_toml_file(tmp_path: Path, env: dict[str, str], home: Path) -> None:
    s = load_toml(tmp_path, env, FULL_TOML)
    conf = tmp_path / "conf"
    assert s.config_file == conf / "memq.toml"
    assert s.workspace == tmp_path / "ws"  # relative to the config file's folder
    assert (s.provider, s.fallback, s.model) == ("openai", "local", "text-embedding-3-large")
    assert s.sources == ("memory", "sessions") and s.session_memory
    assert s.extra_paths == (tmp_path / "ws/notes", Path("/abs/docs"))
    assert s.broker_url == "redis://broker:6379/0"
    assert s.agent_id == "ops"
    assert (s.chunking.tokens, s.chunking.overlap) == (256, 32)
    assert (s.query.max_results, s.query.min_score) == (10, 0.2)
    h = s.query.hybrid
    assert (h.vector_weight, h.text_weight, h.candidate_multiplier) == (0.6, 0.4, 8)
    assert (h.mmr.enabled, h.mmr.lambda_) == (True, 0.5)
    assert (h.temporal_decay.enabled, h.temporal_decay.half_life_days) == (True, 14)
    assert (s.cache.enabled, s.cache.max_entries) == (False, 5000)
    r = s.rerank
    assert (r.enabled, r.provider, r.base_url, r.api_key) == (
        True, "http", "https://rerank.example/v1", SECRET)
    assert (r.model, r.top_n, r.timeout_ms) == ("jina-reranker-v2-base-multilingual", 30, 800)
    assert s.store.path == conf / "idx/ops.sqlite"
    assert (s.store.vector_enabled, s.store.extension_path) == (False, "/opt/vec0.so")
    assert s.store.fts_tokenizer == "trigram"
    assert (s.sync.watch, s.sync.watch_debounce_ms, s.sync.interval_minutes) == (False, 250, 15)
    assert (s.sync.on_session_start, s.sync.on_search) == (False, False)
    assert s.remote.base_url == "https://proxy.example/v1"
    assert s.remote.api_key == SECRET
    assert s.remote.headers["X-Team"] == "search"
    assert s.remote.batch == BatchSettings(True, False, 4, 500, 30)
    assert s.local.model_path == str(conf / "models/mini.gguf")
    assert s.local.model_cache_dir == home / "models"
    assert s.local.threads == 3


def test_json_file(tmp_path: Path, env: dict[str, str], ws: Path) -> None:
    cfg = write(tmp_path / "memq.json", json.dumps({
        "workspace": str(ws),
        "provider": "gemini",
        "query": {"minScore": 0.5, "hybrid": {"enabled": False}},
        "cache": {"maxEntries": None},
        "local": {"threads": None, "modelPath": "hf:org/repo/model.gguf"},
    }))  # fmt: skip
    s = load_settings(config_file=cfg, env=env)
    assert s.provider == "gemini"
    assert s.query.min_score == 0.5 and s.query.hybrid.enabled is False
    assert s.cache.max_entries is None  # explicit null = unbounded
    assert s.local.threads is None
    assert s.local.model_path == "hf:org/repo/model.gguf"  # not treated as a path


def test_toml_unbounded_cache(tmp_path: Path, env: dict[str, str]) -> None:
    s = load_toml(tmp_path, env, '[cache]\nmaxEntries = "unbounded"\n')
    assert s.cache.max_entries is None


def test_json5ish_comments_trailing_commas_bare_keys(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = write(
        tmp_path / "memq.json",
        """{
      // a comment with "quotes" and a URL-looking http://x
      provider: 'ollama', /* block
      comment */
      "remote": {"baseUrl": "http://127.0.0.1:11434",},
      "extraPaths": ["a//b", 'it\\'s',],
    }""",
    )
    s = load_settings(config_file=cfg, env=env, workspace=tmp_path)
    assert s.provider == "ollama"
    assert s.remote.base_url == "http://127.0.0.1:11434"
    assert s.extra_paths == (tmp_path / "a/b", tmp_path / "it's")


OPENCLAW_JSON = """// openclaw.json
{
  gateway: { port: 18789 },          // unrelated OpenClaw keys are ignored
  channels: { telegram: { enabled: true } },
  models: { providers: { openai: { baseUrl: "https://x" } } },
  agents: {
    defaults: {
      workspace: "~/claw-ws",
      model: { primary: "anthropic/claude" },
      memorySearch: {
        provider: "voyage",
        extraPaths: ["shared"],
        remote: { apiKey: { source: "env", provider: "default", id: "VOYAGE_KEY" } },
        store: { path: "~/.openclaw/memory/{agentId}.sqlite" },
        query: { hybrid: { mmr: { enabled: true } } },
        sync: { sessions: { deltaMessages: 10 } },
      },
    },
    list: [
      { id: "main", default: true },
      { id: "work", workspace: "/srv/work", memorySearch: { extraPaths: ["team"],
        chunking: { tokens: 300 } } },
    ],
  },
  memory: { backend: "builtin", citations: "auto", search: { query: { maxResults: 9 } } },
}
"""


def test_openclaw_json(tmp_path: Path, env: dict[str, str], home: Path) -> None:
    cfg = write(tmp_path / "oc" / "openclaw.json", OPENCLAW_JSON)
    s = load_settings(config_file=cfg, env=env)
    assert s.workspace == home / "claw-ws"
    assert s.agent_id == "main"
    assert s.provider == "voyage"
    assert s.extra_paths == (home / "claw-ws/shared",)
    assert s.remote.api_key is None and s.remote.api_key_env == "VOYAGE_KEY"
    assert s.query.hybrid.mmr.enabled is True
    assert s.sync.sessions.delta_messages == 10
    assert s.query.max_results == 9  # from the newer memory.search
    # OpenClaw's own index is never reused: memq keeps a separate file, and says so.
    assert s.store.path == default_store_path(home / "claw-ws", env)
    assert any("store.path" in w for w in s.warnings)


def test_openclaw_json_agent_override(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = write(tmp_path / "openclaw.json", OPENCLAW_JSON)
    s = load_settings(config_file=cfg, env={**env, "MEMQ_AGENT_ID": "work"})
    assert s.agent_id == "work"
    assert s.workspace == Path("/srv/work")
    assert s.chunking.tokens == 300
    # extraPaths concatenate across layers, as in OpenClaw
    assert s.extra_paths == (Path("/srv/work/shared"), Path("/srv/work/team"))
    assert s.sessions_dir == Path(env["HOME"]) / ".openclaw/agents/work/sessions"


def test_openclaw_json_detected_by_content(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = write(tmp_path / "claw.json", '{"agents": {"defaults": {"memorySearch": '
                '{"provider": "mistral"}, "workspace": "/w"}}, "wizard": {}}')  # fmt: skip
    s = load_settings(config_file=cfg, env=env)
    assert (s.provider, s.workspace) == ("mistral", Path("/w"))


def test_openclaw_json_unknown_memorysearch_key(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = write(
        tmp_path / "openclaw.json",
        '{"agents": {"defaults": {"memorySearch": {"query": {"maxResult": 3}}}}}',
    )
    with pytest.raises(ConfigError) as err:
        load_settings(config_file=cfg, env=env)
    msg = str(err.value)
    assert '"agents.defaults.memorySearch.query.maxResult"' in msg
    assert 'did you mean "agents.defaults.memorySearch.query.maxResults"' in msg
    assert str(cfg) in msg


def test_openclaw_qmd_keys_are_accepted_with_a_warning(tmp_path: Path, env: dict[str, str]
                                                       ) -> None:  # fmt: skip
    cfg = write(tmp_path / "openclaw.json", '{"agents": {"defaults": {"memorySearch": '
                '{"qmd": {"extraCollections": [{"path": "x"}]}}}}}')  # fmt: skip
    s = load_settings(config_file=cfg, env=env)
    assert any("qmd.extraCollections" in w for w in s.warnings)


def test_openclaw_extra_paths_objects(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = write(
        tmp_path / "openclaw.json",
        '{"agents": {"defaults": {"workspace": "/w", '
        '"memorySearch": {"extraPaths": ["a", {"path": "b", "pattern": "*.md"}]}}}}',
    )
    s = load_settings(config_file=cfg, env=env)
    assert s.extra_paths == (Path("/w/a"), Path("/w/b"))
    assert s.extra_path_patterns == ((Path("/w/b"), "*.md"),)


# ------------------------------------------------------------------------------ env and order


def test_env_overrides(tmp_path: Path, env: dict[str, str], ws: Path) -> None:
    cfg = write(tmp_path / "memq.toml", 'provider = "openai"\nmodel = "m1"\n'
                '[local]\nthreads = 2\n')  # fmt: skip
    e = {
        **env,
        "MEMQ_CONFIG": str(cfg),
        "MEMQ_WORKSPACE": str(ws),
        "MEMQ_STORE_PATH": "rel/{agentId}.db",
        "MEMQ_BROKER_URL": "amqp://guest@rabbit//",
        "MEMQ_PROVIDER": "LOCAL",
        "MEMQ_FALLBACK": "none",
        "MEMQ_MODEL": "m2",
        "MEMQ_LOCAL_MODEL_PATH": "~/m.gguf",
        "MEMQ_LOCAL_THREADS": "6",
        "MEMQ_CACHE_DIR": "cache",
        "MEMQ_EXTRA_PATHS": os.pathsep.join(["x", "/y", ""]),
        "MEMQ_AGENT_ID": "bot",
    }
    s = load_settings(env=e)
    assert s.config_file == cfg
    assert s.workspace == ws
    assert s.store.path == Path.cwd() / "rel/bot.db"  # env paths are relative to the cwd
    assert s.broker_url == "amqp://guest@rabbit//"
    assert (s.provider, s.fallback, s.model) == ("local", "none", "m2")
    assert s.local.model_path == str(Path(env["HOME"]) / "m.gguf")
    assert s.local.threads == 6
    assert s.local.model_cache_dir == Path.cwd() / "cache"
    assert s.extra_paths == (ws / "x", Path("/y"))  # ... but extraPaths follow the workspace
    assert s.agent_id == "bot"


def test_empty_env_values_count_as_unset(env: dict[str, str], ws: Path) -> None:
    s = load_settings(workspace=ws, env={**env, "MEMQ_PROVIDER": "", "MEMQ_LOCAL_THREADS": " "})
    assert s.provider == "auto" and s.local.threads is None


def test_precedence(tmp_path: Path, env: dict[str, str]) -> None:
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    cfg = write(tmp_path / "memq.toml", f'workspace = "{c}"\nprovider = "gemini"\n')
    e = {**env, "MEMQ_CONFIG": str(cfg)}
    assert load_settings(env=e).workspace == c  # file beats default
    assert load_settings(env={**e, "MEMQ_WORKSPACE": str(b)}).workspace == b  # env beats file
    assert load_settings(env={**e, "MEMQ_WORKSPACE": str(b)}, workspace=a).workspace == a
    assert load_settings(env=e).provider == "gemini"
    assert load_settings(env={**e, "MEMQ_PROVIDER": "voyage"}).provider == "voyage"


def test_broker_precedence(tmp_path: Path, env: dict[str, str], ws: Path) -> None:
    assert load_settings(workspace=ws, env={**env, "REDIS_URL": "redis://r/1"}).broker_url == (
        "redis://r/1"
    )
    cfg = write(ws / "memq.toml", 'brokerUrl = "redis://file/2"\n')
    e = {**env, "MEMQ_CONFIG": str(cfg)}
    # REDIS_URL is generic: it fills in only when memq is not told otherwise.
    assert load_settings(env={**e, "REDIS_URL": "redis://r/1"}).broker_url == "redis://file/2"
    assert load_settings(env={**e, "MEMQ_BROKER_URL": "redis://m/3"}).broker_url == "redis://m/3"


# ------------------------------------------------------------------------------------ discovery


def test_discovery_order(tmp_path: Path, env: dict[str, str], ws: Path, home: Path) -> None:
    assert find_config_file(ws, env) is None
    xdg = write(home / ".config/memq/config.toml", 'model = "xdg"\n')
    assert find_config_file(ws, env) == xdg
    custom_xdg = write(tmp_path / "xdgc/memq/config.toml", 'model = "xdg2"\n')
    assert find_config_file(ws, {**env, "XDG_CONFIG_HOME": str(tmp_path / "xdgc")}) == custom_xdg
    as_json = write(ws / "memq.json", '{"model": "json"}')
    assert find_config_file(ws, env) == as_json
    as_toml = write(ws / "memq.toml", 'model = "toml"\n')
    assert find_config_file(ws, env) == as_toml
    s = load_settings(workspace=ws, env=env)
    assert s.model == "toml" and any("memq.json" in w for w in s.warnings)
    named = write(tmp_path / "named.toml", 'model = "named"\n')
    assert load_settings(workspace=ws, env={**env, "MEMQ_CONFIG": str(named)}).model == "named"
    explicit = write(tmp_path / "explicit.json", '{"model": "explicit"}')
    s = load_settings(explicit, workspace=ws, env={**env, "MEMQ_CONFIG": str(named)})
    assert s.model == "explicit"
    assert load_settings(workspace=ws, env={**env, "MEMQ_CONFIG": "none"}).config_file is None
    # MEMQ_WORKSPACE picks the folder searched for memq.toml
    assert load_settings(env={**env, "MEMQ_WORKSPACE": str(ws)}).model == "toml"


def test_cwd_config_discovered(env: dict[str, str]) -> None:
    write(Path.cwd() / "memq.toml", 'provider = "none"\n')
    assert load_settings(env=env).provider == "none"


def test_missing_config_files(tmp_path: Path, env: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml", env=env)
    with pytest.raises(ConfigError, match="MEMQ_CONFIG") as err:
        load_settings(env={**env, "MEMQ_CONFIG": str(tmp_path / "nope.toml")})
    assert err.value.key == "MEMQ_CONFIG"


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("memq.toml", "provider = \n", "not valid TOML"),
        ("memq.json", '{"provider": "openai" "model": "x"}', "not valid JSON"),
        ("memq.json", "[1, 2]", "top level must be"),
    ],
)
def test_syntax_errors_name_the_file(tmp_path: Path, env: dict[str, str], name: str, text: str,
                                     expected: str) -> None:  # fmt: skip
    cfg = write(tmp_path / name, text)
    with pytest.raises(ConfigError) as err:
        load_settings(cfg, env=env)
    assert expected in str(err.value) and str(cfg) in str(err.value)
    assert "line 1" in str(err.value) or expected == "top level must be"


# ----------------------------------------------------------------------------------- validation

BAD_VALUES = [
    # (TOML text, key named in the message, words in the message)
    ("[chunking]\ntokens = -5", "chunking.tokens", ">= 1"),
    ("[chunking]\ntokens = 0", "chunking.tokens", ">= 1"),
    ("[chunking]\ntokens = 12.5", "chunking.tokens", "whole number"),
    ("[chunking]\noverlap = -1", "chunking.overlap", ">= 0"),
    ("[chunking]\ntokens = true", "chunking.tokens", "whole number"),
    ("[query]\nminScore = 1.5", "query.minScore", "from 0 to 1"),
    ("[query]\nminScore = -0.1", "query.minScore", "from 0 to 1"),
    ("[query]\nminScore = nan", "query.minScore", "from 0 to 1"),
    ('[query]\nminScore = "high"', "query.minScore", "from 0 to 1"),
    ("[query]\nmaxResults = 0", "query.maxResults", ">= 1"),
    ("[query.hybrid]\nvectorWeight = -0.2", "query.hybrid.vectorWeight", "from 0 to 1"),
    ("[query.hybrid]\ntextWeight = 1.2", "query.hybrid.textWeight", "from 0 to 1"),
    (
        "[query.hybrid]\nvectorWeight = 0\ntextWeight = 0",
        "query.hybrid.vectorWeight",
        "textWeight is 0 too",
    ),
    ("[query.hybrid]\ncandidateMultiplier = 0", "query.hybrid.candidateMultiplier", ">= 1"),
    ("[query.hybrid]\nenabled = 1", "query.hybrid.enabled", "true or false"),
    ("[query.hybrid.mmr]\nlambda = 2", "query.hybrid.mmr.lambda", "from 0 to 1"),
    (
        "[query.hybrid.temporalDecay]\nhalfLifeDays = 0",
        "query.hybrid.temporalDecay.halfLifeDays",
        ">= 1",
    ),
    (
        '[query.hybrid.temporalDecay]\nmode = "newest"',
        "query.hybrid.temporalDecay.mode",
        '"decay", "superseded"',
    ),
    (
        "[query.hybrid.temporalDecay]\nsimilarity = 1.5",
        "query.hybrid.temporalDecay.similarity",
        "from 0 to 1",
    ),
    ("[query.hybrid.temporalDecay]\nband = -1", "query.hybrid.temporalDecay.band", "from 0 to 1"),
    ('provider = "foo"', "provider", '"auto", "local", "openai"'),
    ('provider = "opnai"', "provider", 'did you mean "openai"'),
    ('fallback = "auto"', "fallback", "one of"),
    ("provider = 3", "provider", "one of"),
    ('sources = ["memory", "notes"]', "sources", '"memory" and/or "sessions"'),
    ('sources = "memory"', "sources", "must be a list"),
    ('extraPaths = "notes"', "extraPaths", "must be a list"),
    ("extraPaths = [1]", "extraPaths", "items must be paths"),
    ("[cache]\nmaxEntries = 0", "cache.maxEntries", '"unbounded"'),
    ("[cache]\nmaxEntries = -3", "cache.maxEntries", ">= 1"),
    ('[cache]\nenabled = "yes"', "cache.enabled", "true or false"),
    ("[sync]\nwatchDebounceMs = -1", "sync.watchDebounceMs", ">= 0"),
    ("[sync]\nintervalMinutes = 1.5", "sync.intervalMinutes", "whole number"),
    ("[sync.sessions]\ndeltaBytes = -1", "sync.sessions.deltaBytes", ">= 0"),
    ("[remote.batch]\nconcurrency = 0", "remote.batch.concurrency", ">= 1"),
    ("[remote.batch]\ntimeoutMinutes = 0", "remote.batch.timeoutMinutes", ">= 1"),
    ("[remote.batch]\npollIntervalMs = -5", "remote.batch.pollIntervalMs", ">= 0"),
    ('[remote]\nbaseUrl = "ftp://x"', "remote.baseUrl", "http:// or https://"),
    ('[remote]\nbaseUrl = "localhost:8080"', "remote.baseUrl", "http:// or https://"),
    ('[remote]\nheaders = "x"', "remote.headers", "table of header"),
    ("[remote.headers]\nX-Num = 5", "remote.headers.X-Num", "one-line string"),
    ("[local]\nthreads = 0", "local.threads", ">= 1"),
    ("[store]\nvector = true", "store.vector", "must be a table"),
    ('[store.fts]\ntokenizer = "porter"', "store.fts.tokenizer", '"unicode61", "trigram"'),
    ('[store]\ndriver = "postgres"', "store.driver", '"sqlite"'),
    ('[store]\npath = ""', "store.path", "file path"),
    ('brokerUrl = "localhost"', "brokerUrl", "URL"),
    ('agentId = "../evil"', "agentId", "file names"),
    ("outputDimensionality = 0", "outputDimensionality", ">= 1"),
    ("[multimodal]\nenabled = true", "multimodal.enabled", '"gemini"'),
    ('[multimodal]\nmodalities = ["video"]', "multimodal.modalities", '"image", "audio"'),
    ('query = "fast"', "query", "must be a table"),
    ("workspace = 5", "workspace", "directory path"),
]


@pytest.mark.parametrize(("text", "key", "words"), BAD_VALUES, ids=[b[1] for b in BAD_VALUES])
def test_bad_values_name_key_value_and_file(tmp_path: Path, env: dict[str, str], text: str,
                                            key: str, words: str) -> None:  # fmt: skip
    with pytest.raises(ConfigError) as err:
        load_toml(tmp_path, env, text + "\n")
    msg = str(err.value)
    assert msg.startswith(f"{key}:"), msg
    assert words in msg, msg
    assert str(tmp_path / "conf" / "memq.toml") in msg, msg
    assert err.value.key == key
    assert err.value.source == str(tmp_path / "conf" / "memq.toml")
    assert "; got " in msg


def test_bad_value_shows_the_value(tmp_path: Path, env: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=r"query\.minScore: .*; got 1\.5 \(in .*memq\.toml\)"):
        load_toml(tmp_path, env, "[query]\nminScore = 1.5\n")


@pytest.mark.parametrize(
    ("text", "shown", "suggested"),
    [
        ("[query]\nminScor = 0.5", "query.minScor", "query.minScore"),
        ("[query]\nmax_results = 3", "query.max_results", "query.maxResults"),
        (
            "[query.hybrid]\nvectorweight = 0.5",
            "query.hybrid.vectorweight",
            "query.hybrid.vectorWeight",
        ),
        ("minScore = 0.5", "minScore", "query.minScore"),  # right key, wrong table
        ("[chunking]\ntoken = 300", "chunking.token", "chunking.tokens"),
        (
            "[remote.batch]\npollInterval = 300",
            "remote.batch.pollInterval",
            "remote.batch.pollIntervalMs",
        ),
        ("[sync]\ndebounceMs = 10", "sync.debounceMs", "sync.watchDebounceMs"),
        ("provder = 'local'", "provder", "provider"),
    ],
)
def test_unknown_key_suggests_closest(tmp_path: Path, env: dict[str, str], text: str, shown: str,
                                      suggested: str) -> None:  # fmt: skip
    with pytest.raises(ConfigError) as err:
        load_toml(tmp_path, env, text + "\n")
    msg = str(err.value)
    assert f'unknown key "{shown}"' in msg
    assert f'did you mean "{suggested}"?' in msg
    assert "memq.toml" in msg


def test_unknown_key_without_a_close_match_lists_known_keys(
    tmp_path: Path, env: dict[str, str]
) -> None:
    with pytest.raises(ConfigError) as err:
        load_toml(tmp_path, env, "[chunking]\nzzz = 1\n")
    assert "known keys in chunking: overlap, tokens" in str(err.value)


def test_memorysearch_section_in_memq_file_gets_a_hint(tmp_path: Path, env: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="at the top level"):
        load_toml(tmp_path, env, 'provider = "local"\n[memorySearch]\nprovider = "local"\n')


@pytest.mark.parametrize(
    ("var", "value", "words"),
    [
        ("MEMQ_LOCAL_THREADS", "abc", "whole number"),
        ("MEMQ_LOCAL_THREADS", "0", ">= 1"),
        ("MEMQ_LOCAL_THREADS", "2.5", "whole number"),
        ("MEMQ_LOCAL_STREAMS", "0", ">= 1"),
        ("MEMQ_LOCAL_STREAMS", "two", "whole number"),
        ("MEMQ_PROVIDER", "foo", "one of"),
        ("MEMQ_FALLBACK", "auto", "one of"),
        ("MEMQ_BROKER_URL", "not a url", "URL"),
        ("MEMQ_AGENT_ID", "a/b", "file names"),
        ("MEMQ_STORE_PATH", "/", "not a directory"),
    ],
)
def test_bad_env_values_name_the_variable(env: dict[str, str], ws: Path, var: str, value: str,
                                          words: str) -> None:  # fmt: skip
    with pytest.raises(ConfigError) as err:
        load_settings(workspace=ws, env={**env, var: value})
    msg = str(err.value)
    assert msg.startswith(f"{var} (sets "), msg
    assert words in msg, msg
    assert "environment variable" in msg
    assert err.value.source == f"environment variable {var}"


def test_env_threads_none_means_auto(env: dict[str, str], ws: Path) -> None:
    assert (
        load_settings(workspace=ws, env={**env, "MEMQ_LOCAL_THREADS": "auto"}).local.threads is None
    )


def test_local_streams_from_file_and_env_reach_the_provider_and_workers(
        tmp_path: Path, env: dict[str, str], ws: Path) -> None:
    from pipeline.embeddings.registry import _local
    from workers.embedded import worker_env

    assert load_settings(workspace=ws, env=env).local.streams is None  # one per thread
    s = load_toml(tmp_path, env, "[local]\nthreads = 4\nstreams = 2\n")
    assert (s.local.threads, s.local.streams) == (4, 2)
    provider = _local(s, None, s.local.window_tokens)
    assert (provider.streams, provider._stream_threads) == (2, 2)
    assert worker_env(s)["MEMQ_LOCAL_STREAMS"] == "2"
    s = load_settings(workspace=ws, env={**env, "MEMQ_LOCAL_STREAMS": "1"})
    assert s.local.streams == 1
    assert load_settings(workspace=ws, env={**env, "MEMQ_LOCAL_STREAMS": "auto"}
                         ).local.streams is None


def test_local_window_tokens_from_file_and_env(tmp_path: Path, env: dict[str, str],
                                               ws: Path) -> None:
    from pipeline.embeddings.registry import choose_provider
    from workers.embedded import worker_env

    s = load_settings(workspace=ws, env=env)
    assert s.local.window_tokens == 0 and "MEMQ_LOCAL_WINDOW_TOKENS" not in worker_env(s)
    s = load_toml(tmp_path, env, "provider = \"local\"\n[local]\nwindowTokens = 256\n")
    assert s.local.window_tokens == 256
    assert worker_env(s)["MEMQ_LOCAL_WINDOW_TOKENS"] == "256"
    chosen = choose_provider(s)
    assert chosen.provider.window_tokens == 256  # type: ignore[union-attr]
    assert chosen.spec.options["window_tokens"] == 256
    s = load_settings(workspace=ws, env={**env, "MEMQ_LOCAL_WINDOW_TOKENS": "128"})
    assert s.local.window_tokens == 128
    for bad in ("-1", "many"):
        with pytest.raises(ConfigError, match="MEMQ_LOCAL_WINDOW_TOKENS"):
            load_settings(workspace=ws, env={**env, "MEMQ_LOCAL_WINDOW_TOKENS": bad})


def test_workspace_must_be_a_directory(tmp_path: Path, env: dict[str, str]) -> None:
    f = write(tmp_path / "file.txt", "x")
    with pytest.raises(ConfigError, match="workspace"):
        load_settings(workspace=f, env=env)
    with pytest.raises(ConfigError, match="MEMQ_WORKSPACE"):
        load_settings(env={**env, "MEMQ_WORKSPACE": str(f)})


def test_missing_workspace_is_a_warning(tmp_path: Path, env: dict[str, str]) -> None:
    s = load_settings(workspace=tmp_path / "later", env=env)
    assert any("does not exist" in w for w in s.warnings)


def test_direct_construction_is_validated(ws: Path) -> None:
    with pytest.raises(ConfigError) as err:
        ChunkingSettings(tokens=0)
    assert err.value.key == "chunking.tokens"
    with pytest.raises(ConfigError, match=r"^query\.minScore:"):
        QuerySettings(min_score=2)
    with pytest.raises(ConfigError, match="textWeight is 0 too"):
        HybridSettings(vector_weight=0, text_weight=0)
    with pytest.raises(ConfigError, match=r"^provider:"):
        Settings(workspace=ws, provider="foo")
    with pytest.raises(ConfigError, match=r"^sources:"):
        Settings(workspace=ws, sources=("memory", "x"))


# -------------------------------------------------------------------------------- normalisation


def test_overlap_clamped_to_tokens_minus_one(tmp_path: Path, env: dict[str, str]) -> None:
    s = load_toml(tmp_path, env, "[chunking]\ntokens = 50\noverlap = 80\n")
    assert (s.chunking.tokens, s.chunking.overlap) == (50, 49)
    assert any("overlap clamped" in w for w in s.warnings)
    assert ChunkingSettings(tokens=1, overlap=5).overlap == 0


def test_candidate_multiplier_clamped_to_20(tmp_path: Path, env: dict[str, str]) -> None:
    s = load_toml(tmp_path, env, "[query.hybrid]\ncandidateMultiplier = 50\n")
    assert s.query.hybrid.candidate_multiplier == 20
    assert any("candidateMultiplier" in w for w in s.warnings)


def test_weights_kept_and_normalised_on_demand(tmp_path: Path, env: dict[str, str]) -> None:
    s = load_toml(tmp_path, env, "[query.hybrid]\nvectorWeight = 0.2\ntextWeight = 0.2\n")
    assert (s.query.hybrid.vector_weight, s.query.hybrid.text_weight) == (0.2, 0.2)
    assert s.query.hybrid.normalized_weights() == (0.5, 0.5)
    only_text = HybridSettings(vector_weight=0, text_weight=1)
    assert only_text.normalized_weights() == (0.0, 1.0)


def test_integral_floats_accepted_for_ints(tmp_path: Path, env: dict[str, str]) -> None:
    s = load_toml(tmp_path, env, "[chunking]\ntokens = 300.0\n[query]\nminScore = 1\n")
    assert s.chunking.tokens == 300 and isinstance(s.chunking.tokens, int)
    assert s.query.min_score == 1.0 and isinstance(s.query.min_score, float)


def test_sessions_need_session_memory(tmp_path: Path, env: dict[str, str]) -> None:
    s = load_toml(tmp_path, env, 'sources = ["memory", "sessions"]\n')
    assert s.sources == ("memory",)  # as OpenClaw: dropped without experimental.sessionMemory
    assert any("sessionMemory" in w for w in s.warnings)
    s = load_toml(tmp_path, env, 'sources = ["sessions"]\n[experimental]\nsessionMemory = true\n')
    assert s.sources == ("sessions",) and s.session_memory
    s = load_toml(tmp_path, env, "sources = []\n")
    assert s.sources == ("memory",)
    s = load_toml(tmp_path, env, "rememberAcrossConversations = true\n")
    assert s.sources == ("memory", "sessions") and s.session_memory


def test_multimodal_with_gemini_embedding_2(tmp_path: Path, env: dict[str, str]) -> None:
    s = load_toml(tmp_path, env, 'provider = "gemini"\nmodel = "models/gemini-embedding-2-preview"'
                  '\n[multimodal]\nenabled = true\nmodalities = ["image"]\n')  # fmt: skip
    assert s.multimodal.active and s.multimodal.modalities == ("image",)
    s = load_toml(tmp_path, env, 'provider = "gemini"\nmodel = "gemini-embedding-2-preview"'
                  '\n[multimodal]\nenabled = true\n')  # fmt: skip
    assert s.multimodal.modalities == ("image", "audio")
    with pytest.raises(ConfigError, match='fallback = "none"'):
        load_toml(
            tmp_path,
            env,
            'provider = "gemini"\nfallback = "local"\n'
            'model = "gemini-embedding-2-preview"\n[multimodal]\nenabled = true\n',
        )


# --------------------------------------------------------------------------------------- secrets


def _secret_toml(extra: str = "") -> str:
    return (f'brokerUrl = "redis://:{SECRET}@redis:6379/0"\n'
            f'[remote]\napiKey = "{SECRET}"\nbaseUrl = "https://u:{SECRET}@proxy.example"\n'
            f'[remote.headers]\nAuthorization = "Bearer {SECRET}"\n"X-Api-Key" = "{SECRET}"\n'
            f'"X-Goog-Api-Key" = "{SECRET}"\nCookie = "s={SECRET}"\n"X-Trace" = "visible"\n'
            f'[rerank]\nenabled = true\napiKey = "{SECRET}"\n'
            f'baseUrl = "https://u:{SECRET}@rerank.example/v1"\n'
            + extra)  # fmt: skip


def test_secrets_never_in_repr_or_str(tmp_path: Path, env: dict[str, str]) -> None:
    s = load_toml(tmp_path, env, _secret_toml())
    assert s.remote.api_key == SECRET  # kept for the providers module
    assert s.remote.headers["Authorization"] == f"Bearer {SECRET}"
    assert s.rerank.api_key == SECRET  # kept for the reranker's client
    for text in (repr(s), str(s), repr(s.remote), str(s.remote), repr(s.remote.headers),
                 repr(s.rerank), json.dumps(settings_to_dict(s))):  # fmt: skip
        assert SECRET not in text
        assert "***" in text
    assert "visible" in repr(s.remote.headers)
    d = settings_to_dict(s)
    assert d["remote"]["apiKey"] == "***"
    assert d["remote"]["headers"] == {"Authorization": "***", "X-Api-Key": "***",
                                      "X-Goog-Api-Key": "***", "Cookie": "***",
                                      "X-Trace": "visible"}  # fmt: skip
    assert d["brokerUrl"] == "redis://:***@redis:6379/0"
    assert d["remote"]["baseUrl"] == "https://u:***@proxy.example"
    assert d["rerank"]["apiKey"] == "***"
    assert d["rerank"]["baseUrl"] == "https://u:***@rerank.example/v1"


@pytest.mark.parametrize(
    "extra",
    [
        "[query]\nminScore = 9\n",
        "[query]\nbogus = 1\n",
        '[remote.batch]\nenabled = "x"\n',
    ],
)
def test_secrets_never_in_errors(tmp_path: Path, env: dict[str, str], extra: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_toml(tmp_path, env, _secret_toml(extra))
    assert SECRET not in str(err.value)


@pytest.mark.parametrize(
    "text",
    [
        f'[remote]\napiKey = ["{SECRET}"]\n',
        f'[remote]\napiKey = {{ source = "file", id = "{SECRET}" }}\n',
        f'[rerank]\napiKey = ["{SECRET}"]\n',
        f'[rerank]\napiKey = {{ source = "file", id = "{SECRET}" }}\n',
        f'[remote.headers]\nAuthorization = ["{SECRET}"]\n',
        f'[remote]\nbaseUrl = "ftp://user:{SECRET}@host"\n',
        f'brokerUrl = "nope:{SECRET}@host"\n',
    ],
)
def test_bad_secret_values_are_not_echoed(tmp_path: Path, env: dict[str, str], text: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_toml(tmp_path, env, text)
    assert SECRET not in str(err.value)
    assert str(err.value).split(":")[0] in ("remote.apiKey", "rerank.apiKey",
                                            "remote.headers.Authorization",
                                            "remote.baseUrl", "brokerUrl")  # fmt: skip


def test_secret_env_broker_url_not_in_errors(env: dict[str, str], ws: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(workspace=ws, env={**env, "MEMQ_BROKER_URL": f"redis:/:{SECRET}@h"})
    assert SECRET not in str(err.value)


def test_remote_settings_repr_direct() -> None:
    r = RemoteSettings(api_key=SECRET, headers={"authorization": SECRET, "Accept": "json"})
    assert SECRET not in repr(r) and "json" in repr(r)
    assert isinstance(r.headers, Headers) and r.headers == {
        "authorization": SECRET,
        "Accept": "json",
    }
    hash(r)


def test_redact_url() -> None:
    assert redact_url("redis://localhost:6379/0") == "redis://localhost:6379/0"
    assert redact_url("redis://:pw@h:1/0") == "redis://:***@h:1/0"
    assert redact_url("amqp://user:pw@h//") == "amqp://user:***@h//"
    assert redact_url("https://token@h/x") == "https://***@h/x"
    assert redact_url(None) is None


# ------------------------------------------------------------------------------------ store path


def test_default_store_path_stable_and_outside_workspace(env: dict[str, str], ws: Path,
                                                         home: Path) -> None:  # fmt: skip
    p1 = load_settings(workspace=ws, env=env).store.path
    p2 = load_settings(workspace=str(ws) + "/memory/..", env=env).store.path
    assert p1 == p2 == default_store_path(ws, env)
    assert p1.parent == home / ".local/share/memq"
    assert re.fullmatch(r"workspace-[0-9a-f]{10}\.sqlite", p1.name)
    assert not p1.is_relative_to(ws)
    other = ws.parent / "other"
    other.mkdir()
    assert default_store_path(other, env) != p1


def test_default_store_path_follows_symlinks(tmp_path: Path, env: dict[str, str], ws: Path
                                             ) -> None:  # fmt: skip
    link = tmp_path / "link"
    link.symlink_to(ws)
    assert default_store_path(link, env).name.endswith(default_store_path(ws, env).name[-18:])
    assert default_store_path(link, env) == default_store_path(ws, env)


def test_default_store_path_dirs(tmp_path: Path, env: dict[str, str], ws: Path) -> None:
    xdg = tmp_path / "data"
    assert default_store_path(ws, {**env, "XDG_DATA_HOME": str(xdg)}).parent == xdg / "memq"
    assert default_store_path(ws, {**env, "XDG_DATA_HOME": "relative"}).parent == (
        Path(env["HOME"]) / ".local/share/memq"
    )  # relative XDG values are ignored, per the spec
    mh = tmp_path / "mh"
    e = {**env, "XDG_DATA_HOME": str(xdg), "MEMQ_HOME": str(mh)}
    assert default_store_path(ws, e).parent == mh
    assert load_settings(workspace=ws, env=e).store.path.parent == mh


def test_store_path_inside_memory_warns(tmp_path: Path, env: dict[str, str], ws: Path) -> None:
    s = load_settings(workspace=ws, env={**env, "MEMQ_STORE_PATH": str(ws / "memory/i.sqlite")})
    assert any("inside a memory folder" in w for w in s.warnings)


# ---------------------------------------------------------------------------------- relative paths


def test_relative_paths(tmp_path: Path, env: dict[str, str], home: Path) -> None:
    conf = tmp_path / "etc" / "memq"
    cfg = write(conf / "memq.toml", 'workspace = "../../w"\nextraPaths = ["../shared", "~/n"]\n'
                'sessionsDir = "sess/{agentId}"\n[store]\npath = "db/../idx.sqlite"\n'
                '[store.vector]\nextensionPath = "lib/vec0"\n')  # fmt: skip
    s = load_settings(cfg, env=env)
    assert s.workspace == tmp_path / "w"
    assert s.extra_paths == (tmp_path / "shared", home / "n")
    assert s.store.path == conf / "idx.sqlite"
    assert s.store.extension_path == str(conf / "lib/vec0")
    assert s.sessions_dir == conf / "sess/main"
    s = load_settings(write(conf / "b.toml", '[store]\npath = "~/x/{agentId}.db"\n'
                            '[store.vector]\nextensionPath = "vec0"\n'), env=env)  # fmt: skip
    assert s.store.path == home / "x/main.db"
    assert s.store.extension_path == "vec0"  # a bare name stays for SQLite's own search


def test_every_path_is_absolute(tmp_path: Path, env: dict[str, str]) -> None:
    s = load_toml(tmp_path, env, FULL_TOML)
    for p in (s.workspace, s.store.path, *s.extra_paths, s.sessions_dir, s.config_file,
              s.local.model_cache_dir):  # fmt: skip
        assert p is not None and p.is_absolute()


# --------------------------------------------------------------------------------------- output


def test_settings_to_dict_round_trips(tmp_path: Path, env: dict[str, str]) -> None:
    """The camelCase dump uses the same keys the loader accepts."""
    s = load_toml(tmp_path, env, FULL_TOML.replace(SECRET, "k"))
    d = settings_to_dict(s)
    json.dumps(d)
    for key in ("extraPathPatterns", "searchSources", "configFile", "dataDir", "warnings",
                "models"):
        d.pop(key)  # output only (models.providers: from an openclaw.json)
    d["remote"].pop("apiKeyEnv")
    d["remote"]["apiKey"] = "k"
    d["rerank"].pop("apiKeyEnv")
    d["rerank"]["apiKey"] = "k"
    d["remote"]["headers"]["Authorization"] = "Bearer k"
    again = load_settings(write(tmp_path / "dump" / "memq.json", json.dumps(d)), env=env)
    assert dataclasses.replace(again, config_file=s.config_file) == s


def test_settings_to_dict_shape(env: dict[str, str], ws: Path) -> None:
    d = settings_to_dict(load_settings(workspace=ws, env=env))
    assert d["query"]["hybrid"]["vectorWeight"] == 0.7
    assert d["store"]["vector"]["enabled"] is True
    assert d["remote"]["batch"]["pollIntervalMs"] == 2000
    assert d["experimental"]["sessionMemory"] is False
    assert d["cache"]["maxEntries"] == 100_000
    assert d["remote"]["apiKey"] is None


def test_redact_malformed_url() -> None:
    assert redact_url("redis:/:pw@h") == "redis:/***@h"
    assert redact_url("nope:pw@host") == "nope:***@host"


def test_settings_pickle(tmp_path: Path, env: dict[str, str]) -> None:
    import pickle

    s = load_toml(tmp_path, env, FULL_TOML)
    assert pickle.loads(pickle.dumps(s)) == s


def test_store_settings_direct(env: dict[str, str]) -> None:
    assert StoreSettings(path="x.sqlite").path == Path.cwd() / "x.sqlite"
    with pytest.raises(ConfigError, match=r"^store\.fts\.tokenizer:"):
        StoreSettings(path="x.sqlite", fts_tokenizer="porter")


def test_watch_polling_key_env_and_errors(tmp_path: Path, env: dict[str, str], ws: Path) -> None:
    assert load_settings(workspace=ws, env=env).watch == WatchSettings(None, 1000)
    s = load_toml(tmp_path, env, "[watch]\npolling = true\npollIntervalMs = 250\n")
    assert (s.watch.polling, s.watch.poll_interval_ms) == (True, 250)
    assert settings_to_dict(s)["watch"] == {"polling": True, "pollIntervalMs": 250}
    s = load_toml(tmp_path, env, '[watch]\npolling = "auto"\n')
    assert s.watch.polling is None and settings_to_dict(s)["watch"]["polling"] == "auto"
    s = load_toml(tmp_path, {**env, "MEMQ_WATCH_POLLING": "false",
                             "MEMQ_WATCH_POLL_INTERVAL_MS": "500"}, "[watch]\npolling = true\n")
    assert (s.watch.polling, s.watch.poll_interval_ms) == (False, 500)  # env beats the file
    with pytest.raises(ConfigError, match=r'watch\.polling: must be "auto", true or false; '
                                          r'got "sometimes"'):
        load_toml(tmp_path, env, '[watch]\npolling = "sometimes"\n')
    with pytest.raises(ConfigError, match="MEMQ_WATCH_POLLING"):
        load_settings(workspace=ws, env={**env, "MEMQ_WATCH_POLLING": "maybe"})
    with pytest.raises(ConfigError, match=r"watch\.pollIntervalMs"):
        load_toml(tmp_path, env, "[watch]\npollIntervalMs = 0\n")
