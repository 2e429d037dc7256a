"""The settings dataclasses, the checks that involve several keys, and their JSON form.

Each dataclass validates itself, so building one by hand (``ChunkingSettings(tokens=0)``) fails
just like a bad file value: every field bound to a row of :data:`~pipeline.config.keys.KEYS`
is checked and normalised by that row's spec, then ``__post_init__`` applies the rules that
involve several keys (clamps, sources needing session memory, multimodal needing Gemini…).
"""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from operator import attrgetter
from pathlib import Path
from typing import Any

from pipeline.config.errors import Invalid, show
from pipeline.config.keys import (
    DEFAULT_CACHE_MAX_ENTRIES,
    DEFAULT_MULTIMODAL_MAX_FILE_BYTES,
    KEYS,
    MAX_CANDIDATE_MULTIPLIER,
    MODALITIES,
    MULTIMODAL_MODELS,
    READ,
    SIMPLE_KINDS,
    SOURCES,
    Key,
    keys_at,
)
from pipeline.config.paths import (
    absolute,
    data_dir,
    default_result_backend,
    default_sessions_dir,
    default_store_path,
    resolve,
)
from pipeline.config.providers import ProviderEntry, check_provider_id
from pipeline.config.qmd_values import (
    DEFAULT_SCOPE,
    QmdPath,
    QmdScope,
    duration_ms,
)
from pipeline.config.redact import Headers
from pipeline.routing import shard_of

_AGENT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _set(obj: object, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)  # the dataclasses are frozen


class _Validated:
    """Base of the settings dataclasses: check every field bound to a key, keep its normal form."""

    def __post_init__(self) -> None:
        for name, key in checked_fields(type(self)).items():
            _set(self, name, key.check(getattr(self, name)))

    def __repr__(self) -> str:
        """The dataclass repr with secrets and URL passwords hidden (used with ``repr=False``)."""
        keys = keys_at(owner(type(self)))
        parts = []
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            key, value = keys.get(f.name), getattr(self, f.name)
            if key is not None and key.spec.kind in ("url", "secret"):
                value = key.spec.to_json(value)
            parts.append(f"{f.name}={value!r}")
        return f"{type(self).__qualname__}({', '.join(parts)})"


@dataclass(frozen=True)
class ChunkingSettings(_Validated):
    """``chunking.*``: chunk size and overlap in OpenClaw "tokens" (4 UTF-16 chars each).

    ``overlap`` is clamped to ``tokens - 1`` as OpenClaw does.
    """

    tokens: int = 400
    overlap: int = 80

    def __post_init__(self) -> None:
        super().__post_init__()
        _set(self, "overlap", min(self.overlap, max(0, self.tokens - 1)))


@dataclass(frozen=True)
class MmrSettings(_Validated):
    """``query.hybrid.mmr.*``: maximal-marginal-relevance re-ranking (on by default, as in
    OpenClaw 2026.9)."""

    enabled: bool = True
    lambda_: float = 0.7  # config key "lambda"


@dataclass(frozen=True)
class TemporalDecaySettings(_Validated):
    """``query.hybrid.temporalDecay.*``: recency, on by default (as in OpenClaw 2026.9).
    ``mode`` (memq's own) is ``"superseded"`` by default (memq's departure from OpenClaw, issue
    36: docs/search.md) or ``"decay"``, OpenClaw's exponential decay by note age, whose
    ``min_factor`` (memq's own) is a floor on the factor (0: OpenClaw's). ``"superseded"``:
    an older note is demoted to just under the best newer candidate whose chunk's vector has a
    cosine of at least ``similarity`` with its own and whose score clears ``minScore`` and is at
    least ``band`` of its own (:mod:`pipeline.search.superseded`); any other keeps its score."""

    enabled: bool = True
    half_life_days: int = 30
    min_factor: float = 0.0
    mode: str = "superseded"
    similarity: float = 0.4
    band: float = 0.0


@dataclass(frozen=True)
class HybridSettings(_Validated):
    """``query.hybrid.*``: vector + keyword fusion.

    Weights are each in 0..1 and not both 0; they are kept as configured, and
    :meth:`normalized_weights` gives the pair scaled to sum 1, which is what OpenClaw scores with.
    ``candidate_multiplier`` is clamped to 1..20 as OpenClaw does.
    """

    enabled: bool = True
    vector_weight: float = 0.7
    text_weight: float = 0.3
    candidate_multiplier: int = 4
    fusion: str = "weighted"
    rrf_k: int = 60
    keyword_score: str = "best"  # "length": each hit at its length (pipeline.search.calibration)
    mmr: MmrSettings = field(default_factory=MmrSettings)
    temporal_decay: TemporalDecaySettings = field(default_factory=TemporalDecaySettings)

    def __post_init__(self) -> None:
        super().__post_init__()
        _set(self, "candidate_multiplier", min(self.candidate_multiplier, MAX_CANDIDATE_MULTIPLIER))
        if self.vector_weight == 0 and self.text_weight == 0:
            raise Invalid(
                "query.hybrid.vectorWeight",
                "cannot be 0 while query.hybrid.textWeight is 0 too (one signal must count)",
                "0 and textWeight 0",
            )

    def normalized_weights(self) -> tuple[float, float]:
        """``(vector, text)`` scaled to sum 1, as OpenClaw merges scores."""
        total = self.vector_weight + self.text_weight
        return self.vector_weight / total, self.text_weight / total


@dataclass(frozen=True)
class QuerySettings(_Validated):
    """``query.*``: result count and score threshold for ``memory_search``."""

    max_results: int = 6
    min_score: float = 0.35
    hybrid: HybridSettings = field(default_factory=HybridSettings)
    timeout_ms: int = 30_000  # memq's key; OpenClaw hard-codes 30 s (pipeline.search.deadline)

    def candidates(self) -> int:
        """Candidates fetched per side: min(200, maxResults x candidateMultiplier) as OpenClaw."""
        return min(200, self.max_results * self.hybrid.candidate_multiplier)


@dataclass(frozen=True, repr=False)
class RerankSettings(_Validated):
    """``rerank.*`` (memq's own; ``memory.search.rerank`` in an openclaw.json): a cross-encoder
    that re-orders the best ``top_n`` fused candidates (:mod:`pipeline.search.rerank`).

    Off by default. ``provider`` ``http`` posts to ``base_url`` + ``/rerank`` (required when
    enabled); ``api_key`` is kept as written (a key, ``${VAR}`` or a variable name) and
    ``api_key_env`` is the variable of a SecretRef, both resolved where the request is made and
    never shown. ``local`` runs a GGUF cross-encoder in process through llama.cpp
    (:mod:`pipeline.search.rerank_local`): ``model_path`` (required when enabled) is a file,
    an ``hf:<owner>/<repo>/<file.gguf>`` URI or an http(s) URL, as ``local.modelPath``; it
    uses ``local.threads`` and ``local.modelCacheDir``. ``timeout_ms`` applies to ``http``.
    """

    enabled: bool = False
    provider: str = "http"
    base_url: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    model: str = ""
    model_path: str | None = None
    top_n: int = 20
    timeout_ms: int = 5000

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.model_path is not None and not self.model_path.strip():
            _set(self, "model_path", None)
        if not self.enabled:
            return
        if self.provider == "local" and not self.model_path:
            raise Invalid("rerank.modelPath", 'must be set when rerank.provider is "local" '
                          "(a GGUF cross-encoder: a file, hf:<owner>/<repo>/<file.gguf> or an "
                          "http(s) URL)", None)
        if self.provider == "http" and not self.base_url:
            raise Invalid("rerank.baseUrl", "must be set when rerank.enabled is true (the "
                          "endpoint's base, e.g. https://api.jina.ai/v1)", None)


@dataclass(frozen=True)
class CacheSettings(_Validated):
    """``cache.*``: the embedding cache. ``max_entries=None`` means unbounded."""

    enabled: bool = True
    max_entries: int | None = DEFAULT_CACHE_MAX_ENTRIES


@dataclass(frozen=True)
class StoreSettings(_Validated):
    """``store.*``: the SQLite file (absolute path) and its FTS5 / sqlite-vec options."""

    path: Path
    vector_enabled: bool = True
    extension_path: str | None = None
    fts_tokenizer: str = "unicode61"

    @property
    def driver(self) -> str:
        """``store.driver``: accepted for OpenClaw compatibility; SQLite is the only store."""
        return "sqlite"

    @property
    def want_vectors(self) -> bool | str:
        """What to ask :func:`pipeline.store.engine.connect` for: False (vectors off), the
        sqlite-vec library to load (``extensionPath``), or True (the bundled one)."""
        if not self.vector_enabled:
            return False
        return self.extension_path or True


@dataclass(frozen=True)
class SessionSyncSettings(_Validated):
    """``sync.sessions.*``: when a session transcript counts as changed."""

    delta_bytes: int = 100_000
    delta_messages: int = 50
    post_compaction_force: bool = True


@dataclass(frozen=True)
class SyncSettings(_Validated):
    """``sync.*``: when the index is brought up to date."""

    watch: bool = True
    watch_debounce_ms: int = 1500
    on_session_start: bool = True
    on_search: bool = True
    interval_minutes: int = 0
    sessions: SessionSyncSettings = field(default_factory=SessionSyncSettings)


@dataclass(frozen=True)
class WatchSettings(_Validated):
    """``watch.*`` (memq's own): how ``memq watch`` learns that files changed.

    ``polling`` is None for "auto" (native events, polling where they cannot work), or True /
    False to force one; ``poll_interval_ms`` is the polling observer's scan period.
    """

    polling: bool | None = None
    poll_interval_ms: int = 1000


#: ``fleet.localShards`` words: every shard's stores are here, none are, or tell by the claims.
LOCAL_SHARD_WORDS = ("auto", "all", "none")


@dataclass(frozen=True)
class FleetSettings(_Validated):
    """``fleet.*`` (memq's own): how many writer shards the fleet has (``shards``), and this
    memory's shard when it is pinned (``shard``) rather than hashed from its name.

    The host's part: which shards' stores this host holds (``local_shards``: ``"auto"``, the
    shards a writer or reader of this data dir claimed; ``"all"``; ``"none"``; or shard
    numbers), how long a caller waits for a shard's reader (``query_timeout_ms``), and how
    many days finished jobs stay in the job log (``jobs_keep_days``).
    """

    shards: int = 1
    shard: int | None = None
    local_shards: str | tuple[int, ...] = "auto"
    query_timeout_ms: int = 5000
    jobs_keep_days: int = 7

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.shard is not None and self.shard >= self.shards:
            raise Invalid("fleet.shard", f"must be below fleet.shards ({self.shards})",
                          show(self.shard))
        _set(self, "local_shards", _local_shards(self.local_shards, self.shards))

    def shard_of(self, memory: str) -> int:
        """The writer shard of ``memory``: the pinned one, else a stable hash of its name."""
        return self.shard if self.shard is not None else shard_of(memory, self.shards)


def _local_shards(value: Any, shards: int) -> str | tuple[int, ...]:
    """``fleet.localShards``: one of :data:`LOCAL_SHARD_WORDS`, or shard numbers (a list, or
    text such as ``"0,2"`` from ``MEMQ_LOCAL_SHARDS``)."""
    items = value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in LOCAL_SHARD_WORDS:
            return word
        items = [part for part in re.split(r"[\s,]+", word) if part]
    wanted = 'must be "auto", "all", "none" or a list of shard numbers'
    if not isinstance(items, list | tuple) or not items:
        raise Invalid("fleet.localShards", wanted, show(value))
    numbers = []
    for item in items:
        if isinstance(item, str) and item.strip().isdigit():
            item = int(item)
        if not isinstance(item, int) or isinstance(item, bool) or not 0 <= item < shards:
            raise Invalid("fleet.localShards", f"{wanted} below fleet.shards ({shards})",
                          show(value))
        numbers.append(item)
    return tuple(sorted(set(numbers)))


@dataclass(frozen=True)
class BatchSettings(_Validated):
    """``remote.batch.*``: provider batch-file APIs (OpenAI, Gemini, Voyage)."""

    enabled: bool = False
    wait: bool = True
    concurrency: int = 2
    poll_interval_ms: int = 2000
    timeout_minutes: int = 60


@dataclass(frozen=True, repr=False)
class RemoteSettings(_Validated):
    """``remote.*``: endpoint overrides for remote providers.

    ``api_key`` is the literal ``remote.apiKey`` string from the config file (OpenClaw also lets
    it name an environment variable, which the providers module resolves); ``api_key_env`` is
    the variable named by an OpenClaw SecretRef ``{source: "env", id: "NAME"}``. The repr never
    shows the key nor the values of auth-like headers.
    """

    base_url: str | None = None
    api_key: str | None = None
    headers: Mapping[str, str] = field(default_factory=Headers)
    batch: BatchSettings = field(default_factory=BatchSettings)
    api_key_env: str | None = None
    #: memq's fleet-wide limits (``remote.rateLimit.*``), shared by every embed worker.
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.api_key_env is not None and not (
            isinstance(self.api_key_env, str) and self.api_key_env.strip()
        ):
            raise Invalid("remote.apiKey", "the env SecretRef id must name a variable", None)


@dataclass(frozen=True)
class LocalSettings(_Validated):
    """``local.*``: the in-process llama.cpp model. ``threads=None`` lets llama.cpp decide;
    ``streams``: documents decoded side by side on those threads (None: one per thread);
    ``window_tokens``: the longest token sequence embedded at once, a longer text being the
    mean of its windows (0: the model's context, OpenClaw's way)."""

    model_path: str | None = None
    model_cache_dir: Path | None = None
    threads: int | None = None
    streams: int | None = None
    window_tokens: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.model_path == "":
            _set(self, "model_path", None)


@dataclass(frozen=True)
class MultimodalSettings(_Validated):
    """``multimodal.*``: image/audio files under extraPaths (Gemini embedding 2 only)."""

    enabled: bool = False
    modalities: tuple[str, ...] = ()
    max_file_bytes: int = DEFAULT_MULTIMODAL_MAX_FILE_BYTES

    def __post_init__(self) -> None:
        super().__post_init__()
        _set(self, "modalities", _check_modalities(self.modalities, self.enabled))

    @property
    def active(self) -> bool:
        return self.enabled and bool(self.modalities)


@dataclass(frozen=True)
class QmdSessionsSettings(_Validated):
    """``qmd.sessions.*`` (OpenClaw's ``memory.qmd.sessions``): export transcripts for QMD.

    ``retention_days`` None (or 0) keeps every transcript; ``export_dir`` None means the
    ``sessions`` folder of the memory's QMD home.
    """

    enabled: bool = False
    retention_days: int | None = None
    export_dir: Path | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.retention_days == 0:  # OpenClaw: only a positive count limits retention
            _set(self, "retention_days", None)


#: OpenClaw 2026.3.24's defaults for the timeouts that take 0 (or nothing) to mean "default".
QMD_TIMEOUT_DEFAULTS = {"command_timeout_ms": 30_000, "update_timeout_ms": 120_000,
                        "embed_timeout_ms": 120_000}


@dataclass(frozen=True)
class QmdUpdateSettings(_Validated):
    """``qmd.update.*``: when QMD's index is refreshed (``qmd update``, ``qmd embed``).

    ``interval`` and ``embed_interval`` are duration strings (``"5m"``); :attr:`interval_ms`
    and :attr:`embed_interval_ms` give milliseconds, 0 meaning off. A timeout of 0 means its
    default, as in OpenClaw.
    """

    interval: str = "5m"
    debounce_ms: int = 15_000
    on_boot: bool = True
    wait_for_boot_sync: bool = False
    embed_interval: str = "60m"
    command_timeout_ms: int = QMD_TIMEOUT_DEFAULTS["command_timeout_ms"]
    update_timeout_ms: int = QMD_TIMEOUT_DEFAULTS["update_timeout_ms"]
    embed_timeout_ms: int = QMD_TIMEOUT_DEFAULTS["embed_timeout_ms"]

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, default in QMD_TIMEOUT_DEFAULTS.items():
            if getattr(self, name) == 0:
                _set(self, name, default)

    @property
    def interval_ms(self) -> int:
        return duration_ms(self.interval)

    @property
    def embed_interval_ms(self) -> int:
        return duration_ms(self.embed_interval)


@dataclass(frozen=True)
class QmdLimitsSettings(_Validated):
    """``qmd.limits.*``: how much a QMD search returns, and how long it may take."""

    max_results: int = 6
    max_snippet_chars: int = 700
    max_injected_chars: int = 4000
    timeout_ms: int = 4000

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.timeout_ms == 0:  # OpenClaw: a non-positive timeout means the default
            _set(self, "timeout_ms", 4000)


@dataclass(frozen=True)
class QmdSettings(_Validated):
    """``qmd.*`` (OpenClaw's ``memory.qmd``): the QMD backend, used when ``backend`` is ``qmd``.

    ``command`` is the executable (from a file, its first shell word, as OpenClaw spawns it);
    a relative path with a folder is taken from the workspace. ``paths`` entries are made
    absolute from the workspace by :class:`Settings`. ``scope`` says which chats may see
    QMD results. :mod:`pipeline.qmd` reads these.
    """

    command: str = "qmd"  # the executable; the loader keeps a file's first shell word only
    search_mode: str = "search"
    include_default_memory: bool = True
    paths: tuple[QmdPath, ...] = ()
    sessions: QmdSessionsSettings = field(default_factory=QmdSessionsSettings)
    update: QmdUpdateSettings = field(default_factory=QmdUpdateSettings)
    limits: QmdLimitsSettings = field(default_factory=QmdLimitsSettings)
    scope: QmdScope = DEFAULT_SCOPE

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.command:
            _set(self, "command", "qmd")


def _list_of(key: str, value: Any, allowed: tuple[str, ...], what: str) -> list[str]:
    """``value`` as a list, if it is a list (not a string) of ``allowed`` words."""
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise Invalid(key, f"must be a list of {what}", show(value))
    items = list(value)
    for item in items:
        if item not in allowed:
            raise Invalid(key, f"must be a list of {what}", show(item))
    return items


def _check_modalities(value: Any, enabled: bool) -> tuple[str, ...]:
    items = _list_of("multimodal.modalities", value, (*MODALITIES, "all"),
                     '"image", "audio" or "all"')  # fmt: skip
    if not enabled:
        return ()
    if not items or "all" in items:  # OpenClaw: unset or "all" means every modality
        return MODALITIES
    return tuple(m for m in MODALITIES if m in items)


@dataclass(frozen=True, repr=False)
class Settings(_Validated):
    """Everything memq needs to know, resolved: paths absolute, defaults filled in.

    ``sources`` is the effective list (OpenClaw drops ``sessions`` unless session memory is on,
    and an empty list means ``("memory",)``). ``search_sources`` is what a search without
    ``corpus`` reads (OpenClaw's ``searchSources``: ``rememberAcrossConversations`` indexes
    transcripts without searching them, unless ``sources`` lists ``sessions``).
    ``session_memory`` is ``experimental.sessionMemory`` or ``rememberAcrossConversations``.
    ``store`` defaults to :func:`default_store_path` and
    ``sessions_dir`` to OpenClaw's transcripts folder for ``agent_id``. ``data_dir`` is the data
    dir of the environment the settings were loaded from (:func:`~pipeline.config.paths.data_dir`;
    this host's shard claims live there). ``warnings`` lists things worth showing in
    ``memq status`` (clamped values, ignored keys...).
    """

    workspace: Path
    enabled: bool = True
    provider: str = "auto"
    fallback: str = "none"
    model: str = ""
    sources: tuple[str, ...] = ("memory",)
    extra_paths: tuple[Path, ...] = ()
    chunking: ChunkingSettings = field(default_factory=ChunkingSettings)
    query: QuerySettings = field(default_factory=QuerySettings)
    rerank: RerankSettings = field(default_factory=RerankSettings)
    cache: CacheSettings = field(default_factory=CacheSettings)
    store: StoreSettings = None  # type: ignore[assignment]  # filled by __post_init__
    sync: SyncSettings = field(default_factory=SyncSettings)
    remote: RemoteSettings = field(default_factory=RemoteSettings)
    local: LocalSettings = field(default_factory=LocalSettings)
    session_memory: bool = False
    broker_url: str | None = None
    result_backend: str = None  # type: ignore[assignment]  # filled by __post_init__
    agent_id: str = "main"
    config_file: Path | None = None
    # Additions beyond the first contract:
    multimodal: MultimodalSettings = field(default_factory=MultimodalSettings)
    watch: WatchSettings = field(default_factory=WatchSettings)
    fleet: FleetSettings = field(default_factory=FleetSettings)
    remember_across_conversations: bool = False
    search_sources: tuple[str, ...] | None = None  # filled by __post_init__
    output_dimensionality: int | None = None
    input_type: str | None = None
    query_input_type: str | None = None
    document_input_type: str | None = None
    extra_path_patterns: tuple[tuple[Path, str], ...] = ()
    sessions_dir: Path = None  # type: ignore[assignment]  # filled by __post_init__
    citations: str = "auto"
    backend: str = "builtin"
    qmd: QmdSettings = field(default_factory=QmdSettings)
    #: An openclaw.json's ``models.providers`` entries memq uses, as (provider, entry) pairs.
    model_providers: tuple[tuple[str, ProviderEntry], ...] = ()
    data_dir: Path = None  # type: ignore[assignment]  # filled by __post_init__
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        workspace = self.workspace
        for name in ("input_type", "query_input_type", "document_input_type"):
            if getattr(self, name) == "":
                _set(self, name, None)
        if not _AGENT_ID_RE.match(self.agent_id):
            raise Invalid(
                "agentId",
                "must be letters, digits, '.', '_' or '-' (it is used in file names)",
                show(self.agent_id),
            )
        session_memory = self.session_memory or self.remember_across_conversations
        _set(self, "session_memory", session_memory)
        if self.search_sources is None:  # OpenClaw's searchSources: remembering adds no search
            _set(self, "search_sources", _normalize_sources(self.sources, session_memory, False))
        _set(
            self,
            "sources",
            _normalize_sources(self.sources, session_memory, self.remember_across_conversations),
        )
        _set(self, "extra_paths", _normalize_extra_paths(self.extra_paths, workspace))
        _set(
            self,
            "extra_path_patterns",
            tuple((resolve(p, workspace), str(pattern)) for p, pattern in self.extra_path_patterns),
        )
        if self.store is None:
            _set(self, "store", StoreSettings(path=default_store_path(workspace)))
        if self.sessions_dir is None:
            _set(self, "sessions_dir", default_sessions_dir(self.agent_id))
        if self.result_backend is None:
            _set(self, "result_backend", default_result_backend())
        _set(self, "data_dir", data_dir() if self.data_dir is None else absolute(self.data_dir))
        if self.config_file is not None:
            _set(self, "config_file", absolute(self.config_file))
        _set(self, "warnings", tuple(self.warnings))
        _set(self, "qmd", _qmd_from_workspace(self.qmd, workspace))
        _set(self, "model_providers", tuple(self.model_providers))
        entries = dict(self.model_providers)
        for key in ("provider", "fallback"):
            _set(self, key, check_provider_id(key, getattr(self, key), READ[key].spec.choices,
                                              entries))
        _check_multimodal(self)

    def provider_entry(self, provider: str) -> ProviderEntry | None:
        """The ``models.providers`` entry of ``provider`` (memq's name: ``gemini`` reads
        OpenClaw's ``google``; a custom id reads its own), if the config file has one."""
        return dict(self.model_providers).get(provider)


def _normalize_sources(value: Any, session_memory: bool, remember: bool) -> tuple[str, ...]:
    items = _list_of("sources", value, SOURCES, '"memory" and/or "sessions"')
    if remember:
        items.append("sessions")
    out = [s for s in dict.fromkeys(items) if s == "memory" or session_memory]
    return tuple(out) or ("memory",)


def _normalize_extra_paths(value: Any, workspace: Path) -> tuple[Path, ...]:
    if isinstance(value, str | os.PathLike) or not isinstance(value, Iterable):
        raise Invalid("extraPaths", "must be a list of paths", show(str(value)))
    out: dict[Path, None] = {}
    for item in value:
        if not isinstance(item, str | os.PathLike):
            raise Invalid("extraPaths", "must be a list of paths", show(item))
        if isinstance(item, str) and not item.strip():
            continue
        out[resolve(item, workspace)] = None
    return tuple(out)


def _qmd_from_workspace(qmd: QmdSettings, workspace: Path) -> QmdSettings:
    """``qmd`` with its paths absolute: ``paths[]``, ``sessions.exportDir`` and a relative
    ``command`` with a folder (OpenClaw runs qmd in the workspace) are taken from it."""
    command = qmd.command
    if os.sep in command and not os.path.isabs(os.path.expanduser(command)):
        command = str(resolve(command, workspace))
    elif command.startswith("~"):
        command = str(absolute(command))
    paths = tuple(dataclasses.replace(p, path=resolve(p.path, workspace)) for p in qmd.paths)
    if command == qmd.command and paths == qmd.paths:
        return qmd
    return dataclasses.replace(qmd, command=command, paths=paths)


def _check_multimodal(s: Settings) -> None:
    if not s.multimodal.active:
        return
    model = re.sub(r"^(models/)?((gemini|google)/)?", "", s.model.strip())
    if s.provider != "gemini" or model not in MULTIMODAL_MODELS:
        raise Invalid(
            "multimodal.enabled",
            f'needs provider "gemini" and model "{MULTIMODAL_MODELS[0]}" (or its preview\'s '
            f'id "{MULTIMODAL_MODELS[1]}")',
            show(f"provider {s.provider}, model {s.model or '(default)'}"),
        )
    if s.fallback != "none":
        raise Invalid(
            "multimodal.enabled",
            'does not support a fallback; set fallback = "none"',
            show(s.fallback),
        )


# ---------------------------------------------------------------------------------------------
# Where each class sits in the Settings tree, and so which keys it holds


@cache
def nested(cls: type) -> dict[str, type]:
    """The fields of a settings class that hold another settings class, by name."""
    hints = typing.get_type_hints(cls)
    return {
        f.name: hint
        for f in dataclasses.fields(cls)
        if isinstance(hint := hints[f.name], type) and issubclass(hint, _Validated)
    }


@cache
def owner(cls: type) -> str:
    """The attribute path of a settings class from :class:`Settings` (``"query.hybrid"``)."""
    paths: dict[type, str] = {}

    def walk(c: type, path: str) -> None:
        paths[c] = path
        for name, sub in nested(c).items():
            walk(sub, f"{path}.{name}" if path else name)

    walk(Settings, "")
    return paths[cls]


@cache
def checked_fields(cls: type) -> dict[str, Key]:
    """The fields of a settings class that a key sets, with their keys, in field order but
    with the simple kinds first (as memq always checked them, so the first of several errors
    reported stays the same)."""
    keys = keys_at(owner(cls))
    bound = [(f.name, keys[f.name]) for f in dataclasses.fields(cls) if f.name in keys]
    bound.sort(key=lambda item: item[1].spec.kind not in SIMPLE_KINDS)
    return {name: key for name, key in bound if key.read}


def settings_to_dict(s: Settings) -> dict[str, Any]:
    """The resolved settings as camelCase JSON-ready data, secrets shown as ``***``."""
    out: dict[str, Any] = {}
    for key in KEYS:
        if key.attr is None:
            continue
        *tables, leaf = key.path.split(".")
        node = out
        for name in tables:
            node = node.setdefault(name, {})
        node[leaf] = key.spec.to_json(attrgetter(key.attr)(s))
    return out
