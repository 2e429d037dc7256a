"""memq settings: OpenClaw's ``agents.defaults.memorySearch`` keys and defaults.

Settings come from (highest first) explicit arguments, environment variables, a config file and
the defaults, which are OpenClaw's (2026.3.25, ``src/agents/memory-search.ts``) except where
``docs/configuration.md`` says memq differs.

The config file is TOML or JSON. memq's own file (``memq.toml`` / ``memq.json``) carries the
camelCase memorySearch keys at the top level (``provider``, ``chunking.tokens``,
``query.hybrid.vectorWeight``…) plus memq's keys (``workspace``, ``brokerUrl``, ``agentId``,
``sessionsDir``, ``local.threads``). An OpenClaw ``openclaw.json`` (JSON5-ish: comments, trailing
commas and bare keys are tolerated) is read too: memq takes ``agents.defaults.memorySearch``,
the newer ``memory.search``, the agent's own overrides and its workspace, and ignores the rest.

Every problem raises :class:`ConfigError`, whose message names the key (or environment
variable), the bad value, what is allowed and where the value came from. Secrets (``remote.apiKey``,
auth-like ``remote.headers``, passwords in URLs) never appear in reprs or error messages.

Modules: ``keys`` (the table of keys, their specs and checks), ``settings`` (the dataclasses,
cross-key checks, ``settings_to_dict``), ``files`` (finding and parsing the file), ``collect``
(the keys a file sets), ``env`` (the keys variables set), ``loader`` (``load_settings``),
``paths``, ``redact`` and ``errors``; ``agent_id`` (OpenClaw's canonical agent ids) and
``roster`` (the memories a file names: OpenClaw's agents, memq's ``memories``/``memoriesDir``).

Adding a key
------------
1. Add the field, with its default, to the dataclass that holds it in ``settings.py``
   (``SyncSettings`` for ``sync.*``…).
2. Add one row to ``keys.KEYS``, where ``settings_to_dict`` should show it::

       Key("sync.watchPolling", BOOL),

   The attribute is the snake_case of the key (``sync.watch_polling``); give ``attr=`` when
   it is not, and ``env="MEMQ_…"`` for an environment variable (``env.py`` turns variable
   text into whole numbers and path lists; other kinds get the stripped text).
3. Add the key to the tables in ``docs/configuration.md``.

That is all: files and variables accept the key, the dataclass checks it (also when built by
hand), ``load_settings`` fills it and ``settings_to_dict`` shows it. Only a key whose value
needs more than its spec's check (a path with a base, a value that depends on another key)
also needs a resolver in ``loader._RESOLVERS`` or a rule in the dataclass's
``__post_init__``. ``tests/test_config_keys.py`` checks that rows, fields and docs match.
"""

from pipeline.config.agent_id import (
    DEFAULT_AGENT_ID,
    is_valid_agent_id,
    normalize_agent_id,
    normalize_agent_id_strict,
)
from pipeline.config.collect import listed_agents, read_roster
from pipeline.config.env import ENV_VARS
from pipeline.config.errors import ConfigError
from pipeline.config.files import find_config_file
from pipeline.config.keys import (
    CITATIONS,
    DEFAULT_CACHE_MAX_ENTRIES,
    DEFAULT_MULTIMODAL_MAX_FILE_BYTES,
    FALLBACKS,
    FTS_TOKENIZERS,
    FUSIONS,
    MAX_CANDIDATE_MULTIPLIER,
    MODALITIES,
    MULTIMODAL_MODEL,
    MULTIMODAL_MODELS,
    PROVIDERS,
    SOURCES,
)
from pipeline.config.loader import load_settings
from pipeline.config.paths import default_sessions_dir, default_store_path
from pipeline.config.providers import (
    ADAPTERS,
    NOT_YET,
    PROVIDER_IDS,
    ProviderEntry,
    adapter_of,
)
from pipeline.config.redact import Headers, is_sensitive_header, redact_url
from pipeline.config.roster import Listed, Roster
from pipeline.config.settings import (
    BatchSettings,
    CacheSettings,
    ChunkingSettings,
    HybridSettings,
    LocalSettings,
    MmrSettings,
    MultimodalSettings,
    QuerySettings,
    RemoteSettings,
    RerankSettings,
    SessionSyncSettings,
    Settings,
    StoreSettings,
    SyncSettings,
    TemporalDecaySettings,
    WatchSettings,
    settings_to_dict,
)

__all__ = [
    "ADAPTERS",
    "CITATIONS",
    "DEFAULT_AGENT_ID",
    "DEFAULT_CACHE_MAX_ENTRIES",
    "DEFAULT_MULTIMODAL_MAX_FILE_BYTES",
    "ENV_VARS",
    "FALLBACKS",
    "FTS_TOKENIZERS",
    "FUSIONS",
    "MAX_CANDIDATE_MULTIPLIER",
    "MODALITIES",
    "MULTIMODAL_MODEL",
    "MULTIMODAL_MODELS",
    "NOT_YET",
    "PROVIDERS",
    "PROVIDER_IDS",
    "SOURCES",
    "BatchSettings",
    "CacheSettings",
    "ChunkingSettings",
    "ConfigError",
    "Headers",
    "HybridSettings",
    "Listed",
    "LocalSettings",
    "MmrSettings",
    "MultimodalSettings",
    "ProviderEntry",
    "QuerySettings",
    "RemoteSettings",
    "RerankSettings",
    "Roster",
    "SessionSyncSettings",
    "Settings",
    "StoreSettings",
    "SyncSettings",
    "TemporalDecaySettings",
    "WatchSettings",
    "adapter_of",
    "default_sessions_dir",
    "default_store_path",
    "find_config_file",
    "is_sensitive_header",
    "is_valid_agent_id",
    "listed_agents",
    "load_settings",
    "normalize_agent_id",
    "normalize_agent_id_strict",
    "read_roster",
    "redact_url",
    "settings_to_dict",
]
