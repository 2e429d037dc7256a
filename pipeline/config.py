"""memq settings: OpenClaw's ``agents.defaults.memorySearch`` keys and defaults.

Settings come from (highest first) explicit arguments, environment variables, a config file and
the defaults below, which are OpenClaw's (2026.3.25, ``src/agents/memory-search.ts``) except
where ``docs/configuration.md`` says memq differs.

The config file is TOML or JSON. memq's own file (``memq.toml`` / ``memq.json``) carries the
camelCase memorySearch keys at the top level (``provider``, ``chunking.tokens``,
``query.hybrid.vectorWeight``…) plus memq's keys (``workspace``, ``brokerUrl``, ``agentId``,
``sessionsDir``, ``local.threads``). An OpenClaw ``openclaw.json`` (JSON5-ish: comments, trailing
commas and bare keys are tolerated) is read too: memq takes ``agents.defaults.memorySearch``,
the newer ``memory.search``, the agent's own overrides and its workspace, and ignores the rest.

Every problem raises :class:`ConfigError`, whose message names the key (or environment
variable), the bad value, what is allowed and where the value came from. Secrets (``remote.apiKey``,
auth-like ``remote.headers``, passwords in URLs) never appear in reprs or error messages.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import os
import re
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_CACHE_MAX_ENTRIES",
    "ENV_VARS",
    "FALLBACKS",
    "PROVIDERS",
    "SOURCES",
    "BatchSettings",
    "CacheSettings",
    "ChunkingSettings",
    "ConfigError",
    "Headers",
    "HybridSettings",
    "LocalSettings",
    "MmrSettings",
    "MultimodalSettings",
    "QuerySettings",
    "RemoteSettings",
    "SessionSyncSettings",
    "Settings",
    "StoreSettings",
    "SyncSettings",
    "TemporalDecaySettings",
    "WatchSettings",
    "default_store_path",
    "find_config_file",
    "is_sensitive_header",
    "load_settings",
    "redact_url",
    "settings_to_dict",
]

PROVIDERS: tuple[str, ...] = (
    "auto", "local", "openai", "gemini", "voyage", "mistral", "ollama", "none",
)  # fmt: skip
FALLBACKS: tuple[str, ...] = tuple(p for p in PROVIDERS if p != "auto")
SOURCES: tuple[str, ...] = ("memory", "sessions")
FTS_TOKENIZERS: tuple[str, ...] = ("unicode61", "trigram")
CITATIONS: tuple[str, ...] = ("auto", "on", "off")
FUSIONS: tuple[str, ...] = ("weighted", "rrf")
MODALITIES: tuple[str, ...] = ("image", "audio")
MULTIMODAL_MODEL = "gemini-embedding-2-preview"

#: memq caps the embedding cache by default; OpenClaw 2026.3 left it unbounded (#114612,
#: #131121) and later releases cap it at 50,000.
DEFAULT_CACHE_MAX_ENTRIES = 100_000
MAX_CANDIDATE_MULTIPLIER = 20
DEFAULT_MULTIMODAL_MAX_FILE_BYTES = 10 * 1024 * 1024

_AGENT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_SENSITIVE_HEADER_WORDS = (
    "auth",
    "key",
    "token",
    "secret",
    "password",
    "cookie",
    "credential",
    "signature",
    "session",
)
_NULL_WORDS = ("none", "null", "unbounded", "unlimited", "auto")
_REDACTED = "***"


# ---------------------------------------------------------------------------------------------
# Errors


class ConfigError(ValueError):
    """A setting is wrong.

    The message names the key path (``query.minScore``) or the environment variable, the bad
    value (never a secret), what is allowed, and the file it came from. ``key`` is the dotted
    camelCase key path (or None for file-level problems); ``source`` is the config file's path,
    ``"environment variable NAME"``, or None.
    """

    def __init__(self, message: str, *, key: str | None = None, source: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.source = source


class _Invalid(ConfigError):
    """A value failed a check; raised before we know where the value came from.

    The loader catches it and re-raises a :class:`ConfigError` that names the file or variable.
    """

    def __init__(self, key: str, problem: str, got: str | None) -> None:
        self.problem = problem
        self.got = got
        super().__init__(_message(key, problem, got, None), key=key)


def _message(name: str, problem: str, got: str | None, where: str | None) -> str:
    text = f"{name}: {problem}"
    if got is not None:
        text += f"; got {got}"
    if where:
        text += f" ({where})"
    return text


def _show(value: Any) -> str:
    """A config-looking rendering of a (non-secret) bad value, kept short."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# ---------------------------------------------------------------------------------------------
# Key specifications: one row per leaf key, camelCase path relative to the memorySearch section.


@dataclass(frozen=True)
class _Spec:
    kind: str  # bool | int | float | str | enum | list | headers | secret | any
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    nullable: bool = False
    null_hint: str = ""
    top_only: bool = False  # memq-file top level only (not inside an OpenClaw memorySearch)
    ignored: bool = False  # accepted for OpenClaw compatibility; memq does not use it
    secret: bool = False

    def describe(self) -> str:
        if self.kind == "bool":
            text = "true or false"
        elif self.kind == "int":
            lo, hi = _fmt_num(self.lo), _fmt_num(self.hi)
            if self.hi is None:
                text = f"a whole number >= {lo}"
            else:
                text = f"a whole number from {lo} to {hi}"
        elif self.kind == "float":
            text = f"a number from {_fmt_num(self.lo)} to {_fmt_num(self.hi)}"
        elif self.kind == "enum":
            text = "one of " + ", ".join(f'"{c}"' for c in self.choices)
        else:
            text = "a string"
        if self.nullable and self.null_hint:
            text += f", or {self.null_hint}"
        return text


def _fmt_num(x: float | None) -> str:
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else str(x)


def _int(lo: int, hi: int | None = None, **kw: Any) -> _Spec:
    return _Spec("int", lo=lo, hi=hi, **kw)


_BOOL = _Spec("bool")
_UNIT = _Spec("float", lo=0, hi=1)
_STR = _Spec("str")
_OPT_STR = _Spec("str", nullable=True)

_SPECS: dict[str, _Spec] = {
    # memq's own keys
    "workspace": _Spec("str", top_only=True),
    "brokerUrl": _Spec("str", nullable=True, top_only=True),
    "agentId": _Spec("str", top_only=True),
    "sessionsDir": _Spec("str", top_only=True),
    # OpenClaw's memory.citations (top level in memq's file)
    "citations": _Spec("enum", choices=CITATIONS, top_only=True),
    "watch.polling": _Spec("any", top_only=True),  # "auto", true or false: WatchSettings
    "watch.pollIntervalMs": _int(10, top_only=True),
    # OpenClaw memorySearch
    "enabled": _BOOL,
    "provider": _Spec("enum", choices=PROVIDERS),
    "fallback": _Spec("enum", choices=FALLBACKS),
    "model": _STR,
    "sources": _Spec("list"),
    "extraPaths": _Spec("list"),
    "rememberAcrossConversations": _BOOL,
    "outputDimensionality": _int(1, nullable=True),
    "inputType": _OPT_STR,
    "queryInputType": _OPT_STR,
    "documentInputType": _OPT_STR,
    "experimental.sessionMemory": _BOOL,
    "multimodal.enabled": _BOOL,
    "multimodal.modalities": _Spec("list"),
    "multimodal.maxFileBytes": _int(1),
    "qmd.extraCollections": _Spec("any", ignored=True),
    "remote.baseUrl": _Spec("str", nullable=True),
    "remote.apiKey": _Spec("secret", nullable=True, secret=True),
    "remote.headers": _Spec("headers"),
    "remote.batch.enabled": _BOOL,
    "remote.batch.wait": _BOOL,
    "remote.batch.concurrency": _int(1),
    "remote.batch.pollIntervalMs": _int(0),
    "remote.batch.timeoutMinutes": _int(1),
    "remote.rateLimit.requestsPerMinute": _int(1, nullable=True, null_hint="null for no limit"),
    "remote.rateLimit.tokensPerMinute": _int(1, nullable=True, null_hint="null for no limit"),
    "local.modelPath": _OPT_STR,
    "local.modelCacheDir": _OPT_STR,
    "local.threads": _int(1, nullable=True, null_hint='"auto" (or null) to let llama.cpp decide'),
    "store.driver": _Spec("enum", choices=("sqlite",)),
    "store.path": _STR,
    "store.fts.tokenizer": _Spec("enum", choices=FTS_TOKENIZERS),
    "store.vector.enabled": _BOOL,
    "store.vector.extensionPath": _OPT_STR,
    "chunking.tokens": _int(1),
    "chunking.overlap": _int(0),
    "sync.onSessionStart": _BOOL,
    "sync.onSearch": _BOOL,
    "sync.watch": _BOOL,
    "sync.watchDebounceMs": _int(0),
    "sync.intervalMinutes": _int(0),
    "sync.sessions.deltaBytes": _int(0),
    "sync.sessions.deltaMessages": _int(0),
    "sync.sessions.postCompactionForce": _BOOL,
    "query.maxResults": _int(1),
    "query.minScore": _UNIT,
    "query.hybrid.enabled": _BOOL,
    "query.hybrid.vectorWeight": _UNIT,
    "query.hybrid.textWeight": _UNIT,
    "query.hybrid.candidateMultiplier": _int(1),
    "query.hybrid.fusion": _Spec("enum", choices=FUSIONS),
    "query.hybrid.rrfK": _int(1),
    "query.hybrid.mmr.enabled": _BOOL,
    "query.hybrid.mmr.lambda": _UNIT,
    "query.hybrid.temporalDecay.enabled": _BOOL,
    "query.hybrid.temporalDecay.halfLifeDays": _int(1),
    "cache.enabled": _BOOL,
    "cache.maxEntries": _int(1, nullable=True, null_hint='"unbounded" (or null) for no cap'),
}

_TABLES: frozenset[str] = frozenset(
    path.rsplit(".", i)[0] for path in _SPECS for i in range(1, path.count(".") + 1)
)

#: Environment variables and the key each one sets.
ENV_VARS: dict[str, str] = {
    "MEMQ_WORKSPACE": "workspace",
    "MEMQ_STORE_PATH": "store.path",
    "MEMQ_BROKER_URL": "brokerUrl",
    "MEMQ_PROVIDER": "provider",
    "MEMQ_FALLBACK": "fallback",
    "MEMQ_MODEL": "model",
    "MEMQ_LOCAL_MODEL_PATH": "local.modelPath",
    "MEMQ_LOCAL_THREADS": "local.threads",
    "MEMQ_CACHE_DIR": "local.modelCacheDir",
    "MEMQ_EXTRA_PATHS": "extraPaths",
    "MEMQ_AGENT_ID": "agentId",
    "MEMQ_SESSIONS_DIR": "sessionsDir",
    "MEMQ_WATCH_POLLING": "watch.polling",
    "MEMQ_WATCH_POLL_INTERVAL_MS": "watch.pollIntervalMs",
}


def _children(prefix: str) -> list[str]:
    """Names directly under a table path ("" for the top level)."""
    start = prefix + "." if prefix else ""
    names = {p[len(start) :].split(".", 1)[0] for p in (*_SPECS, *_TABLES) if p.startswith(start)}
    return sorted(names)


def _check(key: str, value: Any) -> Any:
    """Validate and normalise one scalar value against its spec; raise :class:`_Invalid`."""
    spec = _SPECS[key]
    if value is None:
        if spec.nullable:
            return None
        raise _Invalid(key, f"must be {spec.describe()}", "null")
    kind = spec.kind
    if kind == "bool":
        if isinstance(value, bool):
            return value
    elif kind == "int":
        if spec.nullable and isinstance(value, str) and value.strip().lower() in _NULL_WORDS:
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        in_range = (
            isinstance(value, int)
            and not isinstance(value, bool)
            and ((spec.lo is None or value >= spec.lo) and (spec.hi is None or value <= spec.hi))
        )
        if in_range:
            return value
    elif kind == "float":
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
            if math.isfinite(number) and spec.lo <= number <= spec.hi:  # type: ignore[operator]
                return number
    elif kind == "enum":
        if isinstance(value, str):
            word = value.strip().lower()
            if word in spec.choices:
                return word
            close = difflib.get_close_matches(word, spec.choices, n=1, cutoff=0.6)
            hint = f' (did you mean "{close[0]}"?)' if close else ""
            raise _Invalid(key, f"must be {spec.describe()}{hint}", _show(value))
    elif kind == "str":
        if isinstance(value, str):
            return value.strip()
    else:  # pragma: no cover - list/headers/secret are checked by their own helpers
        return value
    raise _Invalid(key, f"must be {spec.describe()}", _show(value))


def _set_checked(obj: Any, fields: Mapping[str, str]) -> None:
    """In ``__post_init__``: check each field (attribute -> key path) and store the normal form."""
    for attr, key in fields.items():
        object.__setattr__(obj, attr, _check(key, getattr(obj, attr)))


# ---------------------------------------------------------------------------------------------
# Redaction helpers


def is_sensitive_header(name: str) -> bool:
    """Whether a header's value is a credential (Authorization, X-Api-Key, Cookie, *token*…)."""
    lowered = name.lower()
    return any(word in lowered for word in _SENSITIVE_HEADER_WORDS)


def redact_url(url: str | None) -> str | None:
    """The URL with any password (or bare user-info, which may be a token) replaced by ***."""
    if url is None:
        return None
    try:
        parts = urlsplit(url)
        password, username = parts.password, parts.username
    except ValueError:
        return _REDACTED
    if "@" not in parts.netloc:
        # Not a well-formed authority: hide whatever precedes an "@" after the scheme.
        return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*:/*)?.*@", r"\1***@", url) if "@" in url else url
    host = parts.netloc.rsplit("@", 1)[1]
    userinfo = f"{username or ''}:{_REDACTED}" if password is not None else _REDACTED
    return parts._replace(netloc=f"{userinfo}@{host}").geturl()


class Headers(Mapping[str, str]):
    """An immutable, hashable ``str -> str`` mapping whose repr hides credential values."""

    __slots__ = ("_data",)

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        self._data: dict[str, str] = dict(items)

    def __getitem__(self, name: str) -> str:
        return self._data[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    def redacted(self) -> dict[str, str]:
        """A plain dict with credential values replaced by ``***``."""
        return {k: (_REDACTED if is_sensitive_header(k) else v) for k, v in self._data.items()}

    def __repr__(self) -> str:
        return f"Headers({self.redacted()!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Headers, (self._data,))


def _check_headers(key: str, value: Any) -> Headers:
    if not isinstance(value, Mapping):
        raise _Invalid(key, 'must be a table of header name = "value" strings', _show(value))
    out: dict[str, str] = {}
    for name, header_value in value.items():
        if not isinstance(name, str) or not _HEADER_NAME_RE.match(name):
            raise _Invalid(
                key, "header names must be HTTP tokens (letters, digits, -)", _show(name)
            )
        if not isinstance(header_value, str) or "\n" in header_value or "\r" in header_value:
            shown = _REDACTED if is_sensitive_header(name) else _show(header_value)
            raise _Invalid(f"{key}.{name}", "must be a one-line string", shown)
        out[name] = header_value
    return Headers(out)


# ---------------------------------------------------------------------------------------------
# The settings


@dataclass(frozen=True)
class ChunkingSettings:
    """``chunking.*``: chunk size and overlap in OpenClaw "tokens" (4 UTF-16 chars each).

    ``overlap`` is clamped to ``tokens - 1`` as OpenClaw does.
    """

    tokens: int = 400
    overlap: int = 80

    def __post_init__(self) -> None:
        _set_checked(self, {"tokens": "chunking.tokens", "overlap": "chunking.overlap"})
        object.__setattr__(self, "overlap", min(self.overlap, max(0, self.tokens - 1)))


@dataclass(frozen=True)
class MmrSettings:
    """``query.hybrid.mmr.*``: maximal-marginal-relevance re-ranking (off by default)."""

    enabled: bool = False
    lambda_: float = 0.7  # config key "lambda"

    def __post_init__(self) -> None:
        _set_checked(
            self, {"enabled": "query.hybrid.mmr.enabled", "lambda_": "query.hybrid.mmr.lambda"}
        )


@dataclass(frozen=True)
class TemporalDecaySettings:
    """``query.hybrid.temporalDecay.*``: exponential decay by note age (off by default)."""

    enabled: bool = False
    half_life_days: int = 30

    def __post_init__(self) -> None:
        _set_checked(
            self,
            {
                "enabled": "query.hybrid.temporalDecay.enabled",
                "half_life_days": "query.hybrid.temporalDecay.halfLifeDays",
            },
        )


@dataclass(frozen=True)
class HybridSettings:
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
    mmr: MmrSettings = field(default_factory=MmrSettings)
    temporal_decay: TemporalDecaySettings = field(default_factory=TemporalDecaySettings)

    def __post_init__(self) -> None:
        _set_checked(
            self,
            {
                "enabled": "query.hybrid.enabled",
                "vector_weight": "query.hybrid.vectorWeight",
                "text_weight": "query.hybrid.textWeight",
                "candidate_multiplier": "query.hybrid.candidateMultiplier",
                "fusion": "query.hybrid.fusion",
                "rrf_k": "query.hybrid.rrfK",
            },
        )
        object.__setattr__(
            self, "candidate_multiplier", min(self.candidate_multiplier, MAX_CANDIDATE_MULTIPLIER)
        )
        if self.vector_weight == 0 and self.text_weight == 0:
            raise _Invalid(
                "query.hybrid.vectorWeight",
                "cannot be 0 while query.hybrid.textWeight is 0 too (one signal must count)",
                "0 and textWeight 0",
            )

    def normalized_weights(self) -> tuple[float, float]:
        """``(vector, text)`` scaled to sum 1, as OpenClaw merges scores."""
        total = self.vector_weight + self.text_weight
        return self.vector_weight / total, self.text_weight / total


@dataclass(frozen=True)
class QuerySettings:
    """``query.*``: result count and score threshold for ``memory_search``."""

    max_results: int = 6
    min_score: float = 0.35
    hybrid: HybridSettings = field(default_factory=HybridSettings)

    def __post_init__(self) -> None:
        _set_checked(self, {"max_results": "query.maxResults", "min_score": "query.minScore"})

    def candidates(self) -> int:
        """Candidates fetched per side: min(200, maxResults x candidateMultiplier) as OpenClaw."""
        return min(200, self.max_results * self.hybrid.candidate_multiplier)


@dataclass(frozen=True)
class CacheSettings:
    """``cache.*``: the embedding cache. ``max_entries=None`` means unbounded."""

    enabled: bool = True
    max_entries: int | None = DEFAULT_CACHE_MAX_ENTRIES

    def __post_init__(self) -> None:
        _set_checked(self, {"enabled": "cache.enabled", "max_entries": "cache.maxEntries"})


@dataclass(frozen=True)
class StoreSettings:
    """``store.*``: the SQLite file (absolute path) and its FTS5 / sqlite-vec options."""

    path: Path
    vector_enabled: bool = True
    extension_path: str | None = None
    fts_tokenizer: str = "unicode61"

    def __post_init__(self) -> None:
        if not isinstance(self.path, str | os.PathLike):
            raise _Invalid("store.path", "must be a file path", _show(self.path))
        object.__setattr__(self, "path", Path(os.path.abspath(os.path.expanduser(self.path))))
        _set_checked(
            self,
            {
                "vector_enabled": "store.vector.enabled",
                "extension_path": "store.vector.extensionPath",
                "fts_tokenizer": "store.fts.tokenizer",
            },
        )


@dataclass(frozen=True)
class SessionSyncSettings:
    """``sync.sessions.*``: when a session transcript counts as changed."""

    delta_bytes: int = 100_000
    delta_messages: int = 50
    post_compaction_force: bool = True

    def __post_init__(self) -> None:
        _set_checked(
            self,
            {
                "delta_bytes": "sync.sessions.deltaBytes",
                "delta_messages": "sync.sessions.deltaMessages",
                "post_compaction_force": "sync.sessions.postCompactionForce",
            },
        )


@dataclass(frozen=True)
class SyncSettings:
    """``sync.*``: when the index is brought up to date."""

    watch: bool = True
    watch_debounce_ms: int = 1500
    on_session_start: bool = True
    on_search: bool = True
    interval_minutes: int = 0
    sessions: SessionSyncSettings = field(default_factory=SessionSyncSettings)

    def __post_init__(self) -> None:
        _set_checked(
            self,
            {
                "watch": "sync.watch",
                "watch_debounce_ms": "sync.watchDebounceMs",
                "on_session_start": "sync.onSessionStart",
                "on_search": "sync.onSearch",
                "interval_minutes": "sync.intervalMinutes",
            },
        )


_POLLING_WORDS = {"auto": None, "true": True, "on": True, "yes": True, "1": True,
                  "false": False, "off": False, "no": False, "0": False}


@dataclass(frozen=True)
class WatchSettings:
    """``watch.*`` (memq's own): how ``memq watch`` learns that files changed.

    ``polling`` is None for "auto" (native events, polling where they cannot work), or True /
    False to force one; ``poll_interval_ms`` is the polling observer's scan period.
    """

    polling: bool | None = None
    poll_interval_ms: int = 1000

    def __post_init__(self) -> None:
        _set_checked(self, {"poll_interval_ms": "watch.pollIntervalMs"})
        value = self.polling
        if isinstance(value, str) and value.strip().lower() in _POLLING_WORDS:
            value = _POLLING_WORDS[value.strip().lower()]
        if value is not None and not isinstance(value, bool):
            raise _Invalid("watch.polling", 'must be "auto", true or false', _show(value))
        object.__setattr__(self, "polling", value)


@dataclass(frozen=True)
class BatchSettings:
    """``remote.batch.*``: provider batch-file APIs (OpenAI, Gemini, Voyage)."""

    enabled: bool = False
    wait: bool = True
    concurrency: int = 2
    poll_interval_ms: int = 2000
    timeout_minutes: int = 60

    def __post_init__(self) -> None:
        _set_checked(
            self,
            {
                "enabled": "remote.batch.enabled",
                "wait": "remote.batch.wait",
                "concurrency": "remote.batch.concurrency",
                "poll_interval_ms": "remote.batch.pollIntervalMs",
                "timeout_minutes": "remote.batch.timeoutMinutes",
            },
        )


@dataclass(frozen=True, repr=False)
class RemoteSettings:
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
        _set_checked(self, {"requests_per_minute": "remote.rateLimit.requestsPerMinute",
                            "tokens_per_minute": "remote.rateLimit.tokensPerMinute"})
        if self.base_url is not None:
            object.__setattr__(
                self, "base_url", _check_url("remote.baseUrl", self.base_url, ("http", "https"))
            )
        if self.api_key is not None and not isinstance(self.api_key, str):
            raise _Invalid("remote.apiKey", "must be a string", None)
        if self.api_key_env is not None and not (
            isinstance(self.api_key_env, str) and self.api_key_env.strip()
        ):
            raise _Invalid("remote.apiKey", "the env SecretRef id must name a variable", None)
        object.__setattr__(self, "headers", _check_headers("remote.headers", self.headers))

    def __repr__(self) -> str:
        key = None if self.api_key is None else _REDACTED
        return (
            f"RemoteSettings(base_url={redact_url(self.base_url)!r}, api_key={key!r}, "
            f"headers={self.headers!r}, batch={self.batch!r}, "
            f"api_key_env={self.api_key_env!r}, "
            f"requests_per_minute={self.requests_per_minute!r}, "
            f"tokens_per_minute={self.tokens_per_minute!r})"
        )


@dataclass(frozen=True)
class LocalSettings:
    """``local.*``: the in-process llama.cpp model. ``threads=None`` lets llama.cpp decide."""

    model_path: str | None = None
    model_cache_dir: Path | None = None
    threads: int | None = None

    def __post_init__(self) -> None:
        _set_checked(self, {"model_path": "local.modelPath", "threads": "local.threads"})
        if self.model_path == "":
            object.__setattr__(self, "model_path", None)
        if self.model_cache_dir is not None:
            if not isinstance(self.model_cache_dir, str | os.PathLike):
                raise _Invalid(
                    "local.modelCacheDir", "must be a directory path", _show(self.model_cache_dir)
                )
            object.__setattr__(self, "model_cache_dir", _abs(self.model_cache_dir))


@dataclass(frozen=True)
class MultimodalSettings:
    """``multimodal.*``: image/audio files under extraPaths (Gemini embedding 2 only)."""

    enabled: bool = False
    modalities: tuple[str, ...] = ()
    max_file_bytes: int = DEFAULT_MULTIMODAL_MAX_FILE_BYTES

    def __post_init__(self) -> None:
        _set_checked(
            self, {"enabled": "multimodal.enabled", "max_file_bytes": "multimodal.maxFileBytes"}
        )
        object.__setattr__(self, "modalities", _check_modalities(self.modalities, self.enabled))

    @property
    def active(self) -> bool:
        return self.enabled and bool(self.modalities)


def _check_modalities(value: Any, enabled: bool) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise _Invalid(
            "multimodal.modalities", 'must be a list of "image", "audio" or "all"', _show(value)
        )
    items = list(value)
    for item in items:
        if item not in (*MODALITIES, "all"):
            raise _Invalid(
                "multimodal.modalities", 'must be a list of "image", "audio" or "all"', _show(item)
            )
    if not enabled:
        return ()
    if not items or "all" in items:  # OpenClaw: unset or "all" means every modality
        return MODALITIES
    return tuple(m for m in MODALITIES if m in items)


@dataclass(frozen=True, repr=False)
class Settings:
    """Everything memq needs to know, resolved: paths absolute, defaults filled in.

    ``sources`` is the effective list (OpenClaw drops ``sessions`` unless session memory is on,
    and an empty list means ``("memory",)``). ``session_memory`` is ``experimental.sessionMemory``
    or ``rememberAcrossConversations``. ``store`` defaults to :func:`default_store_path` and
    ``sessions_dir`` to OpenClaw's transcripts folder for ``agent_id``. ``warnings`` lists things
    worth showing in ``memq status`` (clamped values, ignored keys...).
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
    cache: CacheSettings = field(default_factory=CacheSettings)
    store: StoreSettings = None  # type: ignore[assignment]  # filled by __post_init__
    sync: SyncSettings = field(default_factory=SyncSettings)
    remote: RemoteSettings = field(default_factory=RemoteSettings)
    local: LocalSettings = field(default_factory=LocalSettings)
    session_memory: bool = False
    broker_url: str | None = None
    agent_id: str = "main"
    config_file: Path | None = None
    # Additions beyond the first contract:
    multimodal: MultimodalSettings = field(default_factory=MultimodalSettings)
    watch: WatchSettings = field(default_factory=WatchSettings)
    remember_across_conversations: bool = False
    output_dimensionality: int | None = None
    input_type: str | None = None
    query_input_type: str | None = None
    document_input_type: str | None = None
    extra_path_patterns: tuple[tuple[Path, str], ...] = ()
    sessions_dir: Path = None  # type: ignore[assignment]  # filled by __post_init__
    citations: str = "auto"
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.workspace, str | os.PathLike):
            raise _Invalid("workspace", "must be a directory path", _show(self.workspace))
        workspace = _abs(self.workspace)
        object.__setattr__(self, "workspace", workspace)
        _set_checked(
            self,
            {
                "enabled": "enabled",
                "provider": "provider",
                "fallback": "fallback",
                "model": "model",
                "remember_across_conversations": "rememberAcrossConversations",
                "output_dimensionality": "outputDimensionality",
                "input_type": "inputType",
                "query_input_type": "queryInputType",
                "document_input_type": "documentInputType",
                "session_memory": "experimental.sessionMemory",
                "agent_id": "agentId",
                "citations": "citations",
            },
        )
        for attr in ("input_type", "query_input_type", "document_input_type"):
            if getattr(self, attr) == "":
                object.__setattr__(self, attr, None)
        if not _AGENT_ID_RE.match(self.agent_id):
            raise _Invalid(
                "agentId",
                "must be letters, digits, '.', '_' or '-' (it is used in file names)",
                _show(self.agent_id),
            )
        if self.broker_url is not None:
            object.__setattr__(self, "broker_url", _check_url("brokerUrl", self.broker_url))
        session_memory = self.session_memory or self.remember_across_conversations
        object.__setattr__(self, "session_memory", session_memory)
        object.__setattr__(
            self,
            "sources",
            _normalize_sources(self.sources, session_memory, self.remember_across_conversations),
        )
        object.__setattr__(self, "extra_paths", _normalize_extra_paths(self.extra_paths, workspace))
        object.__setattr__(
            self,
            "extra_path_patterns",
            tuple(
                (_resolve(p, workspace), str(pattern)) for p, pattern in self.extra_path_patterns
            ),
        )
        if self.store is None:
            object.__setattr__(self, "store", StoreSettings(path=default_store_path(workspace)))
        if self.sessions_dir is None:
            object.__setattr__(self, "sessions_dir", default_sessions_dir(self.agent_id))
        else:
            object.__setattr__(self, "sessions_dir", _abs(self.sessions_dir))
        if self.config_file is not None:
            object.__setattr__(self, "config_file", _abs(self.config_file))
        object.__setattr__(self, "warnings", tuple(self.warnings))
        _check_multimodal(self)

    def __repr__(self) -> str:
        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "broker_url":
                value = redact_url(value)
            parts.append(f"{f.name}={value!r}")
        return f"Settings({', '.join(parts)})"


def _check_url(key: str, url: Any, schemes: tuple[str, ...] | None = None) -> str:
    if not isinstance(url, str):
        raise _Invalid(key, "must be a URL string", _show(url))
    url = url.strip()
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:
        scheme = ""
    if not scheme or "://" not in url or (schemes is not None and scheme not in schemes):
        allowed = " or ".join(f"{s}://" for s in schemes) if schemes else "a scheme (redis://…)"
        raise _Invalid(key, f"must be a URL starting with {allowed}", _show(redact_url(url)))
    return url


def _normalize_sources(value: Any, session_memory: bool, remember: bool) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise _Invalid("sources", 'must be a list of "memory" and/or "sessions"', _show(value))
    items = list(value)
    for item in items:
        if item not in SOURCES:
            raise _Invalid("sources", 'must be a list of "memory" and/or "sessions"', _show(item))
    if remember:
        items.append("sessions")
    out = [s for s in dict.fromkeys(items) if s == "memory" or session_memory]
    return tuple(out) or ("memory",)


def _normalize_extra_paths(value: Any, workspace: Path) -> tuple[Path, ...]:
    if isinstance(value, str | os.PathLike) or not isinstance(value, Iterable):
        raise _Invalid("extraPaths", "must be a list of paths", _show(str(value)))
    out: dict[Path, None] = {}
    for item in value:
        if not isinstance(item, str | os.PathLike):
            raise _Invalid("extraPaths", "must be a list of paths", _show(item))
        if isinstance(item, str) and not item.strip():
            continue
        out[_resolve(item, workspace)] = None
    return tuple(out)


def _check_multimodal(s: Settings) -> None:
    if not s.multimodal.active:
        return
    model = re.sub(r"^(models/)?((gemini|google)/)?", "", s.model.strip())
    if s.provider != "gemini" or model != MULTIMODAL_MODEL:
        raise _Invalid(
            "multimodal.enabled",
            f'needs provider "gemini" and model "{MULTIMODAL_MODEL}"',
            _show(f"provider {s.provider}, model {s.model or '(default)'}"),
        )
    if s.fallback != "none":
        raise _Invalid(
            "multimodal.enabled",
            'does not support a fallback; set fallback = "none"',
            _show(s.fallback),
        )


# ---------------------------------------------------------------------------------------------
# Paths


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME")
    return Path(home) if home else Path.home()


def _expand(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> str:
    """``~`` expansion using ``env['HOME']`` (so tests and explicit environments are honoured)."""
    text = os.fspath(path)
    if env is not None and (text == "~" or text.startswith("~/") or text.startswith("~" + os.sep)):
        return str(_home(env)) + text[1:]
    return os.path.expanduser(text)


def _abs(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.abspath(os.path.expanduser(os.fspath(path))))


def _resolve(
    path: str | os.PathLike[str], base: Path, env: Mapping[str, str] | None = None
) -> Path:
    """Absolute, normalised (``..`` folded, symlinks kept), relative paths taken from ``base``."""
    expanded = _expand(path, env)
    return Path(os.path.normpath(os.path.join(base, expanded)))


def _xdg(env: Mapping[str, str], var: str, fallback: str) -> Path:
    value = env.get(var, "")
    if value and os.path.isabs(value):  # the XDG spec says to ignore relative values
        return Path(value)
    return _home(env) / fallback


def _data_dir(env: Mapping[str, str]) -> Path:
    memq_home = env.get("MEMQ_HOME")
    if memq_home:
        return _resolve(memq_home, Path.cwd(), env)
    return _xdg(env, "XDG_DATA_HOME", ".local/share") / "memq"


def default_store_path(
    workspace: str | os.PathLike[str], env: Mapping[str, str] | None = None
) -> Path:
    """One SQLite file per workspace, outside it: ``<data dir>/<name>-<sha10>.sqlite``.

    The data dir is ``$MEMQ_HOME``, else ``$XDG_DATA_HOME/memq``, else ``~/.local/share/memq``;
    the hash is the first 10 hex digits of sha256 of the workspace's real path, so the same
    folder reached through a symlink shares its index.
    """
    env = os.environ if env is None else env
    real = os.path.realpath(os.path.abspath(_expand(workspace, env)))
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:10]
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(real)).strip("._") or "workspace"
    return _data_dir(env) / f"{name}-{digest}.sqlite"


def _openclaw_state_dir(env: Mapping[str, str]) -> Path:
    state = env.get("OPENCLAW_STATE_DIR")
    return _resolve(state, Path.cwd(), env) if state else _home(env) / ".openclaw"


def default_sessions_dir(agent_id: str, env: Mapping[str, str] | None = None) -> Path:
    """OpenClaw's transcripts folder: ``$OPENCLAW_STATE_DIR|~/.openclaw/agents/<id>/sessions``."""
    env = os.environ if env is None else env
    return _openclaw_state_dir(env) / "agents" / agent_id / "sessions"


def find_config_file(
    workspace: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Path | None:
    """The config file memq would read (without an explicit ``config_file`` argument).

    ``$MEMQ_CONFIG`` (``none`` disables config files), else ``<workspace or cwd>/memq.toml`` or
    ``memq.json``, else ``$XDG_CONFIG_HOME/memq/config.toml`` (or ``config.json``), else None.
    """
    return _discover(None, workspace, os.environ if env is None else env, [])


def _discover(
    config_file: str | os.PathLike[str] | None,
    workspace: str | os.PathLike[str] | None,
    env: Mapping[str, str],
    warnings: list[str],
) -> Path | None:
    if config_file is not None:
        path = _resolve(config_file, Path.cwd(), env)
        if not path.is_file():
            raise ConfigError(
                f"config file {path} does not exist (given as config_file)", source=str(path)
            )
        return path
    named = env.get("MEMQ_CONFIG", "").strip()
    if named:
        if named.lower() == "none":
            return None
        path = _resolve(named, Path.cwd(), env)
        if not path.is_file():
            raise ConfigError(
                f"MEMQ_CONFIG: config file {path} does not exist",
                key="MEMQ_CONFIG",
                source="environment variable MEMQ_CONFIG",
            )
        return path
    base = _resolve(workspace, Path.cwd(), env) if workspace is not None else Path.cwd()
    local = [p for p in (base / "memq.toml", base / "memq.json") if p.is_file()]
    if len(local) > 1:
        warnings.append(f"both {local[0]} and {local[1]} exist; using {local[0]}")
    if local:
        return local[0]
    config_dir = _xdg(env, "XDG_CONFIG_HOME", ".config") / "memq"
    for candidate in (config_dir / "config.toml", config_dir / "config.json"):
        if candidate.is_file():
            return candidate
    return None


# ---------------------------------------------------------------------------------------------
# Reading files


def _relax_json(text: str) -> str:
    """JSON5-ish to JSON: drop // and /* */ comments and trailing commas, quote bare keys,
    turn single-quoted strings into double-quoted ones. Line numbers are preserved."""
    out: list[str] = []
    last = ""  # last significant character emitted
    last_index = -1  # its index in ``out``
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j, buf = i + 1, ['"']
            while j < n and text[j] != c:
                if text[j] == "\\" and j + 1 < n:
                    buf.append("'" if text[j + 1] == "'" else text[j : j + 2])
                    j += 2
                    continue
                buf.append('\\"' if text[j] == '"' else text[j])
                j += 1
            buf.append('"')
            out.append("".join(buf))
            last, last_index = '"', len(out) - 1
            i = j + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c in "}]" and last == ",":
            out[last_index] = " "
            out.append(c)
            last, last_index = c, len(out) - 1
            i += 1
        elif (c.isalpha() or c in "_$") and last in ("{", ","):
            match = re.compile(r"[A-Za-z_$][\w$-]*").match(text, i)
            word = match.group(0) if match else c
            rest = text[i + len(word) :].lstrip(" \t\r\n")
            out.append(f'"{word}"' if rest.startswith(":") else word)
            last, last_index = word[-1], len(out) - 1
            i += len(word)
        else:
            out.append(c)
            if not c.isspace():
                last, last_index = c, len(out) - 1
            i += 1
    return "".join(out)


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(f"cannot read config file {path}: {reason}", source=str(path)) from None
    suffix = path.suffix.lower()
    as_json = suffix in (".json", ".json5") or (suffix != ".toml" and text.lstrip().startswith("{"))
    if as_json:
        try:
            data = json.loads(_relax_json(text))
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}",
                source=str(path),
            ) from None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}", source=str(path)) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the top level must be a table/object of settings", source=str(path)
        )
    return data


# ---------------------------------------------------------------------------------------------
# Collecting raw values from the file and the environment


@dataclass
class _Entry:
    value: Any
    name: str  # what the user wrote: "query.minScore", "agents.defaults.memorySearch.x", "MEMQ_X"
    where: str  # "in /path/memq.toml" or "environment variable"
    source: str  # ConfigError.source
    base: Path  # relative paths in this value are taken from here
    env_var: str | None = None

    def fail(self, key: str, problem: str, got: str | None, suffix: str = "") -> ConfigError:
        name = f"{self.name} (sets {key})" if self.env_var else self.name + suffix
        return ConfigError(_message(name, problem, got, self.where), key=key, source=self.source)


class _Collector:
    def __init__(self, path: Path, warnings: list[str]) -> None:
        self.path = path
        self.where = f"in {path}"
        self.base = path.parent
        self.entries: dict[str, _Entry] = {}
        self.warnings = warnings

    def walk(self, data: Mapping[str, Any], *, display: str, top: bool, prefix: str = "") -> None:
        for name, value in data.items():
            key = f"{prefix}{name}"
            shown = f"{display}{key}"
            spec = _SPECS.get(key)
            if spec is not None and (top or not spec.top_only):
                if spec.ignored:
                    self.warnings.append(
                        f"{shown} is an OpenClaw setting memq does not use; ignored ({self.where})"
                    )
                    continue
                entry = _Entry(value, shown, self.where, str(self.path), self.base)
                if key == "extraPaths":
                    self._add_extra_paths(key, entry)
                else:
                    self.entries[key] = entry
            elif key in _TABLES:
                if not isinstance(value, Mapping):
                    raise ConfigError(
                        _message(shown, "must be a table of settings", _show(value), self.where),
                        key=key,
                        source=str(self.path),
                    )
                self.walk(value, display=display, top=top, prefix=f"{key}.")
            else:
                raise self._unknown(key, shown, display, top)

    def _add_extra_paths(self, key: str, entry: _Entry) -> None:
        value = entry.value
        if not isinstance(value, list):
            raise entry.fail(
                key, "must be a list of paths (strings or {path, pattern} tables)", _show(value)
            )
        for item in value:
            ok = isinstance(item, str) or (
                isinstance(item, Mapping)
                and isinstance(item.get("path"), str)
                and set(item) <= {"path", "pattern"}
                and isinstance(item.get("pattern", ""), str)
            )
            if not ok:
                raise entry.fail(key, "items must be paths or {path, pattern} tables", _show(item))
        previous = self.entries.get(key)
        if previous is not None:  # OpenClaw concatenates extraPaths across config layers
            entry.value = [*previous.value, *((i, entry.base) for i in value)]
        else:
            entry.value = [(i, entry.base) for i in value]
        self.entries[key] = entry

    def _unknown(self, key: str, shown: str, display: str, top: bool) -> ConfigError:
        prefix, _, leaf = key.rpartition(".")
        siblings = [
            c
            for c in _children(prefix)
            if top or not _SPECS.get(f"{prefix}.{c}".lstrip("."), _STR).top_only
        ]

        def norm(s: str) -> str:
            return s.replace("_", "").replace("-", "").lower()

        guess = [s for s in siblings if norm(s) == norm(leaf)] or difflib.get_close_matches(
            leaf, siblings, n=1, cutoff=0.6
        )
        suggestion = f"{prefix}.{guess[0]}".lstrip(".") if guess else None
        if suggestion is None:  # maybe the key is right but in the wrong table
            leaves = {p: p.rsplit(".", 1)[-1] for p in _SPECS if top or not _SPECS[p].top_only}
            exact = [p for p, lf in leaves.items() if norm(lf) == norm(leaf)]
            close = difflib.get_close_matches(leaf, list(leaves.values()), n=1, cutoff=0.75)
            found = exact or [p for p, lf in leaves.items() if close and lf == close[0]]
            suggestion = found[0] if found else None
        text = f'unknown key "{shown}" ({self.where})'
        if suggestion is not None:
            text += f'; did you mean "{display}{suggestion}"?'
        elif key in ("memorySearch", "agents", "memory") and top:
            text += (
                "; memq.toml takes OpenClaw's memorySearch keys at the top level (to read "
                "an OpenClaw config, point MEMQ_CONFIG at openclaw.json)"
            )
        else:
            known = ", ".join(siblings)
            text += f"; known keys{' in ' + display + prefix if prefix else ''}: {known}"
        return ConfigError(text, key=key, source=str(self.path))


def _is_openclaw(path: Path, data: Mapping[str, Any]) -> bool:
    if path.name.lower().startswith("openclaw"):
        return True
    memq_top = set(_children(""))
    return bool({"agents", "memory"} & set(data)) and not (memq_top & set(data))


def _dict_at(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def _collect_openclaw(
    c: _Collector, data: Mapping[str, Any], agent_hint: str | None, env: Mapping[str, str]
) -> tuple[str, _Entry]:
    """Read an openclaw.json; return the agent id and the workspace entry."""
    agents = _dict_at(data, "agents")
    listed = _dict_at(agents, "list")
    entries = [a for a in listed if isinstance(a, Mapping)] if isinstance(listed, list) else []
    if agent_hint:
        agent_id = agent_hint
    else:
        chosen = next(
            (a for a in entries if a.get("default") is True), entries[0] if entries else None
        )
        agent_id = str(chosen.get("id")) if chosen and chosen.get("id") else "main"
    index = next(
        (i for i, a in enumerate(entries) if str(a.get("id", "")).lower() == agent_id.lower()), None
    )
    agent = entries[index] if index is not None else {}
    layers = [
        ("agents.defaults.memorySearch.", _dict_at(agents, "defaults", "memorySearch")),
        ("memory.search.", _dict_at(data, "memory", "search")),
    ]
    if index is not None:
        layers += [
            (f"agents.list[{index}].memorySearch.", agent.get("memorySearch")),
            (f"agents.list[{index}].memory.search.", _dict_at(agent, "memory", "search")),
        ]
    for display, section in layers:
        if section is None:
            continue
        if not isinstance(section, Mapping):
            raise ConfigError(
                _message(display[:-1], "must be an object of settings", _show(section), c.where),
                source=str(c.path),
            )
        c.walk(section, display=display, top=False)
    citations = _dict_at(data, "memory", "citations")
    if citations is not None:
        c.entries["citations"] = _Entry(citations, "memory.citations", c.where, str(c.path), c.base)
    if "store.path" in c.entries:
        ignored = c.entries.pop("store.path")
        c.warnings.append(
            f"{ignored.name} points at OpenClaw's own index; memq keeps a separate "
            "one (set MEMQ_STORE_PATH or store.path in memq.toml to choose it)"
        )
    if index is not None and agent.get("workspace"):
        ws = _Entry(
            agent["workspace"], f"agents.list[{index}].workspace", c.where, str(c.path), c.base
        )
    elif _dict_at(agents, "defaults", "workspace"):
        ws = _Entry(
            agents["defaults"]["workspace"],
            "agents.defaults.workspace",
            c.where,
            str(c.path),
            c.base,
        )
    else:
        ws = _Entry(
            str(_openclaw_state_dir(env) / "workspace"),
            "OpenClaw's default workspace",
            c.where,
            str(c.path),
            c.base,
        )
    return agent_id, ws


def _parse_env(var: str, key: str, text: str, env: Mapping[str, str]) -> _Entry:
    entry = _Entry(
        None, var, "environment variable", f"environment variable {var}", Path.cwd(), env_var=var
    )
    spec = _SPECS[key]
    raw = text.strip()
    if spec.kind == "int":
        if spec.nullable and raw.lower() in _NULL_WORDS:
            entry.value = None
        else:
            try:
                entry.value = int(raw)
            except ValueError:
                raise entry.fail(key, f"must be {spec.describe()}", _show(text)) from None
    elif key == "extraPaths":
        entry.value = [(p, Path.cwd()) for p in text.split(os.pathsep) if p.strip()]
    else:
        entry.value = raw
    return entry


# ---------------------------------------------------------------------------------------------
# Loading


def load_settings(
    config_file: Path | str | None = None,
    workspace: Path | str | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve memq's settings.

    Precedence, highest first: the ``workspace`` argument, environment variables, the config
    file, defaults. The file is ``config_file``, else ``$MEMQ_CONFIG``, else
    ``<workspace or cwd>/memq.toml`` / ``memq.json``, else ``$XDG_CONFIG_HOME/memq/config.toml``
    (see :func:`find_config_file`). ``env`` replaces ``os.environ`` (API keys are not read here).
    """
    env = os.environ if env is None else env
    env = {k: v for k, v in env.items() if isinstance(v, str)}
    cwd = Path.cwd()
    warnings: list[str] = []
    entries: dict[str, _Entry] = {}
    for var, key in ENV_VARS.items():
        if env.get(var, "").strip():
            entries[key] = _parse_env(var, key, env[var], env)
    if "brokerUrl" not in entries and env.get("REDIS_URL", "").strip():
        entries["_redisUrl"] = _parse_env("REDIS_URL", "brokerUrl", env["REDIS_URL"], env)

    ws_for_discovery: Path | None = None
    if workspace is not None:
        ws_for_discovery = _resolve(workspace, cwd, env)
    elif "workspace" in entries:
        ws_for_discovery = _resolve(entries["workspace"].value, cwd, env)
    path = _discover(config_file, ws_for_discovery, env, warnings)

    file_entries: dict[str, _Entry] = {}
    agent_id_hint = entries["agentId"].value if "agentId" in entries else None
    if path is not None:
        collector = _Collector(path, warnings)
        data = _read_file(path)
        if _is_openclaw(path, data):
            agent_id, ws_entry = _collect_openclaw(collector, data, agent_id_hint, env)
            collector.entries["workspace"] = ws_entry
            collector.entries.setdefault(
                "agentId",
                _Entry(
                    agent_id, "the OpenClaw default agent", collector.where, str(path), path.parent
                ),
            )
        else:
            collector.walk(data, display="", top=True)
        file_entries = collector.entries

    # Environment beats the file, except REDIS_URL, a generic variable, which only fills in
    # when neither MEMQ_BROKER_URL nor the file's brokerUrl sets the broker.
    redis = entries.pop("_redisUrl", None)
    merged = {**file_entries, **entries}
    if redis is not None and "brokerUrl" not in merged:
        merged["brokerUrl"] = redis
    return _build(merged, path, workspace, env, warnings)


def _build(
    entries: dict[str, _Entry],
    config_path: Path | None,
    workspace_arg: Path | str | None,
    env: Mapping[str, str],
    warnings: list[str],
) -> Settings:
    cwd = Path.cwd()

    def located(key: str, exc: _Invalid) -> ConfigError:
        """Re-raise a check failure naming the file or variable the value came from."""
        bad = exc.key or key
        parts = bad.split(".")
        for n in range(len(parts), 0, -1):  # "remote.headers.X-Key" belongs to "remote.headers"
            entry = entries.get(".".join(parts[:n]))
            if entry is not None:
                return entry.fail(bad, exc.problem, exc.got, suffix=bad[len(".".join(parts[:n])) :])
        where = f"in {config_path}" if config_path else None
        return ConfigError(
            _message(bad, exc.problem, exc.got, where),
            key=bad,
            source=str(config_path) if config_path else None,
        )

    def kw(fields: Mapping[str, str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for attr, key in fields.items():
            if key in entries:
                try:
                    out[attr] = _check(key, entries[key].value)
                except _Invalid as exc:
                    raise located(key, exc) from None
        return out

    def make(cls: type, fields: Mapping[str, str], **extra: Any) -> Any:
        try:
            return cls(**kw(fields), **extra)
        except _Invalid as exc:
            raise located(exc.key or "", exc) from None

    # Workspace: argument > MEMQ_WORKSPACE > file > cwd.
    if workspace_arg is not None:
        workspace = _resolve(workspace_arg, cwd, env)
    elif "workspace" in entries:
        entry = entries["workspace"]
        if not isinstance(entry.value, str) or not entry.value.strip():
            raise entry.fail("workspace", "must be a directory path", _show(entry.value))
        workspace = _resolve(entry.value.strip(), entry.base, env)
    else:
        workspace = cwd
    if workspace.exists() and not workspace.is_dir():
        entry = entries.get("workspace")
        if entry is not None and workspace_arg is None:
            raise entry.fail("workspace", "must be a directory", _show(str(workspace)))
        raise ConfigError(f"workspace: {workspace} is not a directory", key="workspace")
    if not workspace.exists():
        warnings.append(f"workspace {workspace} does not exist yet")

    top = kw({"agent_id": "agentId"})
    agent_id = top.get("agent_id", "main")

    chunking = make(ChunkingSettings, {"tokens": "chunking.tokens", "overlap": "chunking.overlap"})
    if "chunking.overlap" in entries and chunking.overlap < entries["chunking.overlap"].value:
        warnings.append(f"chunking.overlap clamped to {chunking.overlap} (tokens - 1)")
    mmr = make(
        MmrSettings, {"enabled": "query.hybrid.mmr.enabled", "lambda_": "query.hybrid.mmr.lambda"}
    )
    decay = make(
        TemporalDecaySettings,
        {
            "enabled": "query.hybrid.temporalDecay.enabled",
            "half_life_days": "query.hybrid.temporalDecay.halfLifeDays",
        },
    )
    hybrid = make(
        HybridSettings,
        {
            "enabled": "query.hybrid.enabled",
            "vector_weight": "query.hybrid.vectorWeight",
            "text_weight": "query.hybrid.textWeight",
            "candidate_multiplier": "query.hybrid.candidateMultiplier",
            "fusion": "query.hybrid.fusion",
            "rrf_k": "query.hybrid.rrfK",
        },
        mmr=mmr,
        temporal_decay=decay,
    )
    raw_multiplier = entries.get("query.hybrid.candidateMultiplier")
    if raw_multiplier is not None and hybrid.candidate_multiplier < _check(
        "query.hybrid.candidateMultiplier", raw_multiplier.value
    ):
        warnings.append(f"query.hybrid.candidateMultiplier clamped to {MAX_CANDIDATE_MULTIPLIER}")
    query = make(
        QuerySettings,
        {"max_results": "query.maxResults", "min_score": "query.minScore"},
        hybrid=hybrid,
    )
    cache = make(CacheSettings, {"enabled": "cache.enabled", "max_entries": "cache.maxEntries"})
    kw({"driver": "store.driver"})  # only "sqlite" is valid; nothing to keep

    store_entry = entries.get("store.path")
    if store_entry is not None:
        raw = store_entry.value
        if not isinstance(raw, str) or not raw.strip():
            raise store_entry.fail("store.path", "must be a file path", _show(raw))
        store_path = _resolve(raw.strip().replace("{agentId}", agent_id), store_entry.base, env)
        if store_path.is_dir():
            raise store_entry.fail(
                "store.path", "must be a file, not a directory", _show(str(store_path))
            )
    else:
        store_path = default_store_path(workspace, env)
    extension = entries.get("store.vector.extensionPath")
    extension_path = None
    if extension is not None:
        try:
            text = _check("store.vector.extensionPath", extension.value)
        except _Invalid as exc:
            raise located("store.vector.extensionPath", exc) from None
        if text:
            expanded = _expand(text, env)
            has_dir = os.sep in expanded or (os.altsep is not None and os.altsep in expanded)
            extension_path = str(_resolve(expanded, extension.base, env)) if has_dir else expanded
    store = make(
        StoreSettings,
        {"vector_enabled": "store.vector.enabled", "fts_tokenizer": "store.fts.tokenizer"},
        path=store_path,
        extension_path=extension_path,
    )

    sessions = make(
        SessionSyncSettings,
        {
            "delta_bytes": "sync.sessions.deltaBytes",
            "delta_messages": "sync.sessions.deltaMessages",
            "post_compaction_force": "sync.sessions.postCompactionForce",
        },
    )
    sync = make(
        SyncSettings,
        {
            "watch": "sync.watch",
            "watch_debounce_ms": "sync.watchDebounceMs",
            "on_session_start": "sync.onSessionStart",
            "on_search": "sync.onSearch",
            "interval_minutes": "sync.intervalMinutes",
        },
        sessions=sessions,
    )
    batch = make(
        BatchSettings,
        {
            "enabled": "remote.batch.enabled",
            "wait": "remote.batch.wait",
            "concurrency": "remote.batch.concurrency",
            "poll_interval_ms": "remote.batch.pollIntervalMs",
            "timeout_minutes": "remote.batch.timeoutMinutes",
        },
    )
    remote_kw: dict[str, Any] = {"batch": batch}
    if "remote.baseUrl" in entries:
        remote_kw["base_url"] = entries["remote.baseUrl"].value
    if "remote.headers" in entries:
        remote_kw["headers"] = entries["remote.headers"].value
    if "remote.apiKey" in entries:
        remote_kw.update(_api_key(entries["remote.apiKey"]))
    remote = make(RemoteSettings, {"requests_per_minute": "remote.rateLimit.requestsPerMinute",
                                   "tokens_per_minute": "remote.rateLimit.tokensPerMinute"},
                  **remote_kw)

    local_kw: dict[str, Any] = {}
    model_entry = entries.get("local.modelPath")
    if model_entry is not None:
        try:
            model_path = _check("local.modelPath", model_entry.value)
        except _Invalid as exc:
            raise located("local.modelPath", exc) from None
        if model_path and not re.match(r"^(hf:|[A-Za-z][A-Za-z0-9+.-]*://)", model_path):
            model_path = str(_resolve(model_path, model_entry.base, env))
        local_kw["model_path"] = model_path or None
    cache_dir = entries.get("local.modelCacheDir")
    if cache_dir is not None:
        try:
            text = _check("local.modelCacheDir", cache_dir.value)
        except _Invalid as exc:
            raise located("local.modelCacheDir", exc) from None
        local_kw["model_cache_dir"] = _resolve(text, cache_dir.base, env) if text else None
    local = make(LocalSettings, {"threads": "local.threads"}, **local_kw)

    multimodal_kw: dict[str, Any] = {}
    if "multimodal.modalities" in entries:
        multimodal_kw["modalities"] = entries["multimodal.modalities"].value
    multimodal = make(
        MultimodalSettings,
        {"enabled": "multimodal.enabled", "max_file_bytes": "multimodal.maxFileBytes"},
        **multimodal_kw,
    )

    watch = make(
        WatchSettings,
        {"poll_interval_ms": "watch.pollIntervalMs"},
        **({"polling": entries["watch.polling"].value} if "watch.polling" in entries else {}),
    )

    extra_paths: list[Path] = []
    patterns: list[tuple[Path, str]] = []
    extra = entries.get("extraPaths")
    for item, _base in extra.value if extra is not None else ():
        raw_path = item["path"] if isinstance(item, Mapping) else item
        if not raw_path.strip():
            continue
        # extraPaths are relative to the workspace (OpenClaw), whichever layer set them.
        resolved = _resolve(raw_path.strip(), workspace, env)
        extra_paths.append(resolved)
        if isinstance(item, Mapping) and item.get("pattern"):
            patterns.append((resolved, item["pattern"]))

    sessions_dir_entry = entries.get("sessionsDir")
    if sessions_dir_entry is not None:
        try:
            text = _check("sessionsDir", sessions_dir_entry.value)
        except _Invalid as exc:
            raise located("sessionsDir", exc) from None
        if not text:
            raise sessions_dir_entry.fail("sessionsDir", "must be a directory path", '""')
        sessions_dir = _resolve(text.replace("{agentId}", agent_id), sessions_dir_entry.base, env)
    else:
        sessions_dir = default_sessions_dir(agent_id, env)

    sources_entry = entries.get("sources")
    if sources_entry is not None and not isinstance(sources_entry.value, list):
        raise sources_entry.fail(
            "sources", 'must be a list of "memory" and/or "sessions"', _show(sources_entry.value)
        )
    broker = entries.get("brokerUrl")

    settings = make(
        Settings,
        {
            "enabled": "enabled",
            "provider": "provider",
            "fallback": "fallback",
            "model": "model",
            "session_memory": "experimental.sessionMemory",
            "remember_across_conversations": "rememberAcrossConversations",
            "output_dimensionality": "outputDimensionality",
            "input_type": "inputType",
            "query_input_type": "queryInputType",
            "document_input_type": "documentInputType",
            "agent_id": "agentId",
            "citations": "citations",
        },
        workspace=workspace,
        extra_paths=tuple(extra_paths),
        extra_path_patterns=tuple(patterns),
        chunking=chunking,
        query=query,
        cache=cache,
        store=store,
        sync=sync,
        remote=remote,
        local=local,
        multimodal=multimodal,
        watch=watch,
        sessions_dir=sessions_dir,
        config_file=config_path,
        **({"sources": sources_entry.value} if sources_entry is not None else {}),
        **({"broker_url": broker.value} if broker is not None else {}),
    )

    if (
        sources_entry is not None
        and "sessions" in sources_entry.value
        and ("sessions" not in settings.sources)
    ):
        warnings.append(
            'sources lists "sessions" but experimental.sessionMemory is off, so '
            "session transcripts are not indexed (as in OpenClaw)"
        )
    if settings.fallback != "none" and settings.fallback == settings.provider:
        warnings.append(f'fallback "{settings.fallback}" is the same as the provider')
    memory_dirs = [settings.workspace / "memory", *settings.extra_paths]
    if any(settings.store.path.is_relative_to(d) for d in memory_dirs):
        warnings.append(
            f"store.path {settings.store.path} is inside a memory folder; keep the "
            "index outside the files it indexes"
        )
    return dataclasses.replace(settings, warnings=tuple(dict.fromkeys(warnings)))


def _api_key(entry: _Entry) -> dict[str, Any]:
    value = entry.value
    if value is None or isinstance(value, str):
        return {"api_key": value.strip() if isinstance(value, str) and value.strip() else None}
    if isinstance(value, Mapping):
        source, ident = value.get("source"), value.get("id")
        if source == "env" and isinstance(ident, str) and ident.strip():
            return {"api_key_env": ident.strip()}
        raise entry.fail(
            "remote.apiKey",
            'memq supports a string or an OpenClaw SecretRef {source: "env", id: "VARIABLE"} here',
            None,
        )
    raise entry.fail("remote.apiKey", "must be a string", None)


# ---------------------------------------------------------------------------------------------
# Output


def settings_to_dict(s: Settings) -> dict[str, Any]:
    """The resolved settings as camelCase JSON-ready data, secrets shown as ``***``."""
    hybrid = s.query.hybrid
    return {
        "workspace": str(s.workspace),
        "enabled": s.enabled,
        "provider": s.provider,
        "fallback": s.fallback,
        "model": s.model,
        "sources": list(s.sources),
        "extraPaths": [str(p) for p in s.extra_paths],
        "extraPathPatterns": {str(p): pat for p, pat in s.extra_path_patterns},
        "rememberAcrossConversations": s.remember_across_conversations,
        "experimental": {"sessionMemory": s.session_memory},
        "outputDimensionality": s.output_dimensionality,
        "inputType": s.input_type,
        "queryInputType": s.query_input_type,
        "documentInputType": s.document_input_type,
        "multimodal": {
            "enabled": s.multimodal.enabled,
            "modalities": list(s.multimodal.modalities),
            "maxFileBytes": s.multimodal.max_file_bytes,
        },
        "watch": {
            "polling": "auto" if s.watch.polling is None else s.watch.polling,
            "pollIntervalMs": s.watch.poll_interval_ms,
        },
        "chunking": {"tokens": s.chunking.tokens, "overlap": s.chunking.overlap},
        "query": {
            "maxResults": s.query.max_results,
            "minScore": s.query.min_score,
            "hybrid": {
                "enabled": hybrid.enabled,
                "vectorWeight": hybrid.vector_weight,
                "textWeight": hybrid.text_weight,
                "candidateMultiplier": hybrid.candidate_multiplier,
                "fusion": hybrid.fusion,
                "rrfK": hybrid.rrf_k,
                "mmr": {"enabled": hybrid.mmr.enabled, "lambda": hybrid.mmr.lambda_},
                "temporalDecay": {
                    "enabled": hybrid.temporal_decay.enabled,
                    "halfLifeDays": hybrid.temporal_decay.half_life_days,
                },
            },
        },
        "cache": {"enabled": s.cache.enabled, "maxEntries": s.cache.max_entries},
        "store": {
            "driver": "sqlite",
            "path": str(s.store.path),
            "fts": {"tokenizer": s.store.fts_tokenizer},
            "vector": {"enabled": s.store.vector_enabled, "extensionPath": s.store.extension_path},
        },
        "sync": {
            "onSessionStart": s.sync.on_session_start,
            "onSearch": s.sync.on_search,
            "watch": s.sync.watch,
            "watchDebounceMs": s.sync.watch_debounce_ms,
            "intervalMinutes": s.sync.interval_minutes,
            "sessions": {
                "deltaBytes": s.sync.sessions.delta_bytes,
                "deltaMessages": s.sync.sessions.delta_messages,
                "postCompactionForce": s.sync.sessions.post_compaction_force,
            },
        },
        "remote": {
            "baseUrl": redact_url(s.remote.base_url),
            "apiKey": None if s.remote.api_key is None else _REDACTED,
            "apiKeyEnv": s.remote.api_key_env,
            "headers": Headers(s.remote.headers).redacted(),
            "batch": {
                "enabled": s.remote.batch.enabled,
                "wait": s.remote.batch.wait,
                "concurrency": s.remote.batch.concurrency,
                "pollIntervalMs": s.remote.batch.poll_interval_ms,
                "timeoutMinutes": s.remote.batch.timeout_minutes,
            },
            "rateLimit": {
                "requestsPerMinute": s.remote.requests_per_minute,
                "tokensPerMinute": s.remote.tokens_per_minute,
            },
        },
        "local": {
            "modelPath": s.local.model_path,
            "modelCacheDir": None
            if s.local.model_cache_dir is None
            else str(s.local.model_cache_dir),
            "threads": s.local.threads,
        },
        "brokerUrl": redact_url(s.broker_url),
        "agentId": s.agent_id,
        "sessionsDir": str(s.sessions_dir),
        "citations": s.citations,
        "configFile": None if s.config_file is None else str(s.config_file),
        "warnings": list(s.warnings),
    }
