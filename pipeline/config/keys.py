"""The config keys: one row per key in :data:`KEYS`, from which everything else is derived.

A row says the dotted camelCase key (relative to OpenClaw's memorySearch section), the values
it takes (a :class:`Spec`), the :class:`~pipeline.config.settings.Settings` attribute that holds
it, and the environment variable that sets it. The dataclasses validate their fields with these
specs, the file reader knows the accepted keys and tables from them, the loader fills the
dataclasses from them, and ``settings_to_dict`` prints them, in the order of the table.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any
from urllib.parse import urlsplit

from pipeline.config.errors import Invalid, show
from pipeline.config.paths import absolute
from pipeline.config.providers import ADAPTERS
from pipeline.config.qmd_values import (
    BACKENDS,
    QMD_SEARCH_MODES,
    check_duration,
    check_paths,
    check_scope,
)
from pipeline.config.redact import REDACTED, Headers, is_sensitive_header, redact_url

PROVIDERS: tuple[str, ...] = ("auto", *ADAPTERS, "none")
FALLBACKS: tuple[str, ...] = tuple(p for p in PROVIDERS if p != "auto")
SOURCES: tuple[str, ...] = ("memory", "sessions")
FTS_TOKENIZERS: tuple[str, ...] = ("unicode61", "trigram")
CITATIONS: tuple[str, ...] = ("auto", "on", "off")
FUSIONS: tuple[str, ...] = ("weighted", "rrf")
#: ``query.hybrid.keywordScore``: the weighted merge's keyword score, a share of the best hit's
#: BM25 or each hit at its length (:mod:`pipeline.search.calibration`, issue 36 item 2).
KEYWORD_SCORES: tuple[str, ...] = ("best", "length")
#: ``query.hybrid.temporalDecay.mode`` (memq's own): OpenClaw's decay of every dated note, or
#: "superseded": an older note is demoted only under a newer candidate like it
#: (:mod:`pipeline.search.superseded`, issue 36 goal 4).
DECAY_MODES: tuple[str, ...] = ("decay", "superseded")
#: ``rerank.provider``: an HTTP ``/rerank`` endpoint (Jina, Cohere, Voyage, llama.cpp's server
#: shape), or "local" (a GGUF cross-encoder run in process by llama.cpp).
RERANK_PROVIDERS: tuple[str, ...] = ("http", "local")
MAX_RERANK_TOP_N = 200
MODALITIES: tuple[str, ...] = ("image", "audio")
#: The Gemini models that embed images and audio: the stable one, and its preview's legacy id.
MULTIMODAL_MODELS: tuple[str, ...] = ("gemini-embedding-2", "gemini-embedding-2-preview")
MULTIMODAL_MODEL = MULTIMODAL_MODELS[0]

#: memq caps the embedding cache by default; OpenClaw 2026.3 left it unbounded (#114612,
#: #131121) and later releases cap it at 50,000.
DEFAULT_CACHE_MAX_ENTRIES = 100_000
MAX_CANDIDATE_MULTIPLIER = 20
DEFAULT_MULTIMODAL_MAX_FILE_BYTES = 10 * 1024 * 1024

NULL_WORDS = ("none", "null", "unbounded", "unlimited", "auto")
#: The words an "auto_bool" key takes for auto (None), true and false.
AUTO_BOOL_WORDS: dict[str, bool | None] = {
    "auto": None, "true": True, "on": True, "yes": True, "1": True,
    "false": False, "off": False, "no": False, "0": False,
}  # fmt: skip
_HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

#: The kinds Spec.check checks; the simple ones come first (see settings.checked_fields).
SIMPLE_KINDS = ("bool", "int", "float", "enum", "str")
_CHECKED = (*SIMPLE_KINDS, "auto_bool", "url", "headers", "secret", "file", "dir", "duration",
            "qmd_paths", "qmd_scope")

#: What "must be …" says for the kinds that are not numbers, booleans or choices.
_DESCRIPTIONS = {
    "headers": 'a table of header name = "value" strings',
    "file": "a file path",
    "dir": "a directory path",
    "url": "a URL string",
    "auto_bool": '"auto", true or false',
    "duration": 'a duration such as "5m"',
}

#: How settings_to_dict shows a (non-None) value of each kind; other kinds are shown as they are.
_TO_JSON = {
    "file": str,
    "dir": str,
    "paths": lambda v: [str(p) for p in v],
    "pairs": lambda v: {str(p): pattern for p, pattern in v},
    "list": list,
    "url": redact_url,
    "secret": lambda v: REDACTED,
    "headers": lambda v: Headers(v).redacted(),
    "qmd_paths": lambda v: [p.to_json() for p in v],
    "qmd_scope": lambda v: v.to_json(),
    "model_providers": lambda v: {name: entry.to_json() for name, entry in v},
    "shards": lambda v: list(v) if isinstance(v, tuple) else v,
}


@dataclass(frozen=True)
class Spec:
    """The values a key takes.

    ``kind`` is bool, auto_bool (true, false or "auto" = None), int, float, enum, str, url,
    secret, headers, file, dir, duration, qmd_paths or qmd_scope (checked here),
    or list, paths, pairs, model_providers, shards or any (normalised by the dataclass or a
    loader resolver, which need other keys for it).
    """

    kind: str
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    nullable: bool = False
    null_hint: str = ""
    schemes: tuple[str, ...] | None = None  # url: the schemes allowed (None: any)

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
        elif self.kind in ("enum", "provider"):
            text = "one of " + ", ".join(f'"{c}"' for c in self.choices)
            if self.kind == "provider":  # checked by Settings, which knows models.providers
                text += ", or a models.providers id"
        else:
            text = _DESCRIPTIONS.get(self.kind, "a string")
        if self.nullable and self.null_hint:
            text += f", or {self.null_hint}"
        return text

    def check(self, key: str, value: Any) -> Any:
        """Validate and normalise one value for ``key``; raise :class:`Invalid`."""
        if self.kind not in _CHECKED:
            return value  # the dataclass normalises it, with the keys it depends on
        if value is None:
            if self.kind == "qmd_scope":
                return check_scope(None)
            if self.nullable or self.kind == "auto_bool":
                return None
            raise Invalid(key, f"must be {self.describe()}", "null")
        kind = self.kind
        if kind == "bool":
            if isinstance(value, bool):
                return value
        elif kind == "auto_bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in AUTO_BOOL_WORDS:
                return AUTO_BOOL_WORDS[value.strip().lower()]
        elif kind == "int":
            if self.nullable and isinstance(value, str) and value.strip().lower() in NULL_WORDS:
                return None
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            in_range = (
                isinstance(value, int)
                and not isinstance(value, bool)
                and (self.lo is None or value >= self.lo)
                and (self.hi is None or value <= self.hi)
            )
            if in_range:
                return value
        elif kind == "float":
            if isinstance(value, int | float) and not isinstance(value, bool):
                number = float(value)
                if math.isfinite(number) and self.lo <= number <= self.hi:  # type: ignore[operator]
                    return number
        elif kind == "enum":
            if isinstance(value, str):
                word = value.strip().lower()
                if word in self.choices:
                    return word
                close = difflib.get_close_matches(word, self.choices, n=1, cutoff=0.6)
                hint = f' (did you mean "{close[0]}"?)' if close else ""
                raise Invalid(key, f"must be {self.describe()}{hint}", show(value))
        elif kind == "str":
            if isinstance(value, str):
                return value.strip()
        elif kind == "url":
            return _check_url(key, value, self.schemes)
        elif kind == "headers":
            return _check_headers(key, value)
        elif kind == "duration":
            return check_duration(key, value)
        elif kind == "qmd_paths":
            return check_paths(value)
        elif kind == "qmd_scope":
            return check_scope(value)
        elif kind == "secret":
            if isinstance(value, str):
                return value
            raise Invalid(key, "must be a string", None)  # never echo a would-be secret
        elif isinstance(value, str | os.PathLike):  # file or dir
            return absolute(value)
        raise Invalid(key, f"must be {self.describe()}", show(value))

    def to_json(self, value: Any) -> Any:
        """The value as settings_to_dict shows it: JSON-ready, secrets as ``***``."""
        if value is None:
            return "auto" if self.kind == "auto_bool" else None
        return _TO_JSON.get(self.kind, lambda v: v)(value)


def check_url(key: str, url: Any) -> str:
    """An ``http(s)://`` URL for ``key``, or :class:`Invalid` (its password hidden)."""
    return _check_url(key, url, ("http", "https"))


def check_headers(key: str, value: Any) -> Headers:
    """A table of one-line header strings for ``key``, or :class:`Invalid`."""
    return _check_headers(key, value)


def _fmt_num(x: float | None) -> str:
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else str(x)


def _check_url(key: str, url: Any, schemes: tuple[str, ...] | None) -> str:
    if not isinstance(url, str):
        raise Invalid(key, "must be a URL string", show(url))
    url = url.strip()
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:
        scheme = ""
    if not scheme or "://" not in url or (schemes is not None and scheme not in schemes):
        allowed = " or ".join(f"{s}://" for s in schemes) if schemes else "a scheme (redis://…)"
        raise Invalid(key, f"must be a URL starting with {allowed}", show(redact_url(url)))
    return url


def _check_headers(key: str, value: Any) -> Headers:
    if not isinstance(value, Mapping):
        raise Invalid(key, f"must be {_DESCRIPTIONS['headers']}", show(value))
    out: dict[str, str] = {}
    for name, header_value in value.items():
        if not isinstance(name, str) or not _HEADER_NAME_RE.match(name):
            raise Invalid(key, "header names must be HTTP tokens (letters, digits, -)", show(name))
        if not isinstance(header_value, str) or "\n" in header_value or "\r" in header_value:
            shown = REDACTED if is_sensitive_header(name) else show(header_value)
            raise Invalid(f"{key}.{name}", "must be a one-line string", shown)
        out[name] = header_value
    return Headers(out)


def _int(lo: int, **kw: Any) -> Spec:
    return Spec("int", lo=lo, **kw)


def _enum(choices: tuple[str, ...]) -> Spec:
    return Spec("enum", choices=choices)


BOOL = Spec("bool")
UNIT = Spec("float", lo=0, hi=1)
STR = Spec("str")
OPT_STR = Spec("str", nullable=True)
LIST = Spec("list")
_RATE = _int(1, nullable=True, null_hint="null for no limit")
_DURATION = Spec("duration")
_AUTO = '"auto" (or null) to let llama.cpp decide'
_AUTO_STREAMS = '"auto" (or null) for one stream per thread'


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


@dataclass(frozen=True)
class Key:
    """One config key.

    ``path`` is the dotted camelCase key. ``attr`` is where :class:`Settings` holds it
    (``"query.hybrid.mmr.lambda_"``): by default the snake_case of ``path``, None for a key
    memq accepts but keeps nowhere. ``env`` is the environment variable that sets it.
    ``top_only`` keys are read only at the top level of memq's file (not inside an OpenClaw
    memorySearch), ``ignored`` ones are accepted with a warning, and ``read=False`` marks a
    value that settings_to_dict shows but no file sets.
    """

    path: str
    spec: Spec
    attr: str | None = ""
    env: str | None = None
    top_only: bool = False
    ignored: bool = False
    read: bool = True

    def __post_init__(self) -> None:
        if self.attr == "":
            object.__setattr__(self, "attr", ".".join(map(_snake, self.path.split("."))))

    def check(self, value: Any) -> Any:
        return self.spec.check(self.path, value)


#: Every key, in the order settings_to_dict shows them.
KEYS: tuple[Key, ...] = (
    Key("workspace", Spec("dir"), env="MEMQ_WORKSPACE", top_only=True),
    Key("enabled", BOOL),
    Key("provider", Spec("provider", choices=PROVIDERS), env="MEMQ_PROVIDER"),
    Key("fallback", Spec("provider", choices=FALLBACKS), env="MEMQ_FALLBACK"),
    Key("model", STR, env="MEMQ_MODEL"),
    Key("sources", LIST),
    Key("extraPaths", Spec("paths"), env="MEMQ_EXTRA_PATHS"),
    Key("extraPathPatterns", Spec("pairs"), read=False),
    Key("rememberAcrossConversations", BOOL),
    Key("searchSources", LIST, read=False),  # what a search without corpus reads
    Key("experimental.sessionMemory", BOOL, attr="session_memory"),
    Key("outputDimensionality", _int(1, nullable=True)),
    Key("inputType", OPT_STR),
    Key("queryInputType", OPT_STR),
    Key("documentInputType", OPT_STR),
    Key("multimodal.enabled", BOOL),
    Key("multimodal.modalities", LIST),
    Key("multimodal.maxFileBytes", _int(1)),
    Key("watch.polling", Spec("auto_bool"), env="MEMQ_WATCH_POLLING", top_only=True),
    Key("watch.pollIntervalMs", _int(10), env="MEMQ_WATCH_POLL_INTERVAL_MS", top_only=True),
    Key("fleet.shards", _int(1), env="MEMQ_FLEET_SHARDS", top_only=True),
    Key("fleet.shard", _int(0, nullable=True, null_hint="null to hash the memory's name")),
    Key("fleet.localShards", Spec("shards"), env="MEMQ_LOCAL_SHARDS", top_only=True),
    Key("fleet.queryTimeoutMs", _int(100), env="MEMQ_QUERY_TIMEOUT_MS", top_only=True),
    Key("fleet.jobsKeepDays", _int(1), env="MEMQ_JOBS_KEEP_DAYS", top_only=True),
    Key("qmd.extraCollections", Spec("any"), attr=None, ignored=True),
    Key("chunking.tokens", _int(1)),
    Key("chunking.overlap", _int(0)),
    Key("query.maxResults", _int(1)),
    Key("query.minScore", UNIT),
    Key("query.hybrid.enabled", BOOL),
    Key("query.hybrid.vectorWeight", UNIT),
    Key("query.hybrid.textWeight", UNIT),
    Key("query.hybrid.candidateMultiplier", _int(1)),
    Key("query.hybrid.fusion", _enum(FUSIONS)),
    Key("query.hybrid.rrfK", _int(1)),
    Key("query.hybrid.keywordScore", _enum(KEYWORD_SCORES)),
    Key("query.hybrid.mmr.enabled", BOOL),
    Key("query.hybrid.mmr.lambda", UNIT, attr="query.hybrid.mmr.lambda_"),
    Key("query.hybrid.temporalDecay.enabled", BOOL),
    Key("query.hybrid.temporalDecay.halfLifeDays", _int(1)),
    Key("query.hybrid.temporalDecay.minFactor", UNIT),  # memq's own floor on the factor
    # memq's own: demote an old note only under a newer look-alike (pipeline.search.superseded)
    Key("query.hybrid.temporalDecay.mode", _enum(DECAY_MODES)),
    Key("query.hybrid.temporalDecay.similarity", UNIT),
    Key("query.hybrid.temporalDecay.band", UNIT),
    Key("query.timeoutMs", _int(100)),
    # memq's own (OpenClaw has no reranker): memory.search.rerank.* in an openclaw.json
    Key("rerank.enabled", BOOL),
    Key("rerank.provider", _enum(RERANK_PROVIDERS)),
    Key("rerank.baseUrl", Spec("url", nullable=True, schemes=("http", "https"))),
    Key("rerank.apiKey", Spec("secret", nullable=True)),
    Key("rerank.apiKeyEnv", OPT_STR, read=False),
    Key("rerank.model", STR),
    Key("rerank.modelPath", OPT_STR),
    Key("rerank.topN", _int(1, hi=MAX_RERANK_TOP_N)),
    Key("rerank.timeoutMs", _int(1)),
    Key("cache.enabled", BOOL),
    Key("cache.maxEntries", _int(1, nullable=True, null_hint='"unbounded" (or null) for no cap')),
    Key("store.driver", _enum(("sqlite",))),
    Key("store.path", Spec("file"), env="MEMQ_STORE_PATH"),
    Key("store.fts.tokenizer", _enum(FTS_TOKENIZERS), attr="store.fts_tokenizer"),
    Key("store.vector.enabled", BOOL, attr="store.vector_enabled"),
    Key("store.vector.extensionPath", OPT_STR, attr="store.extension_path"),
    Key("sync.onSessionStart", BOOL),
    Key("sync.onSearch", BOOL),
    Key("sync.watch", BOOL),
    Key("sync.watchDebounceMs", _int(0)),
    Key("sync.intervalMinutes", _int(0)),
    Key("sync.sessions.deltaBytes", _int(0)),
    Key("sync.sessions.deltaMessages", _int(0)),
    Key("sync.sessions.postCompactionForce", BOOL),
    Key("remote.baseUrl", Spec("url", nullable=True, schemes=("http", "https"))),
    Key("remote.apiKey", Spec("secret", nullable=True)),
    Key("remote.apiKeyEnv", OPT_STR, read=False),
    Key("remote.headers", Spec("headers")),
    Key("remote.batch.enabled", BOOL),
    Key("remote.batch.wait", BOOL),
    Key("remote.batch.concurrency", _int(1)),
    Key("remote.batch.pollIntervalMs", _int(0)),
    Key("remote.batch.timeoutMinutes", _int(1)),
    Key("remote.rateLimit.requestsPerMinute", _RATE, attr="remote.requests_per_minute"),
    Key("remote.rateLimit.tokensPerMinute", _RATE, attr="remote.tokens_per_minute"),
    Key("local.modelPath", OPT_STR, env="MEMQ_LOCAL_MODEL_PATH"),
    Key("local.modelCacheDir", Spec("dir", nullable=True), env="MEMQ_CACHE_DIR"),
    Key("local.threads", _int(1, nullable=True, null_hint=_AUTO), env="MEMQ_LOCAL_THREADS"),
    Key("local.streams", _int(1, nullable=True, null_hint=_AUTO_STREAMS),
        env="MEMQ_LOCAL_STREAMS"),
    Key("local.windowTokens", _int(0), env="MEMQ_LOCAL_WINDOW_TOKENS"),
    # An openclaw.json's models.providers.<id> (apiKey, baseUrl, headers, auth): see providers.py
    Key("models.providers", Spec("model_providers"), attr="model_providers", read=False),
    Key("brokerUrl", Spec("url", nullable=True), env="MEMQ_BROKER_URL", top_only=True),
    Key("resultBackend", Spec("url", nullable=True), env="MEMQ_RESULT_BACKEND", top_only=True),
    Key("agentId", STR, env="MEMQ_AGENT_ID", top_only=True),
    Key("sessionsDir", Spec("dir", nullable=True), env="MEMQ_SESSIONS_DIR", top_only=True),
    # OpenClaw's memory.citations (top level in memq's file)
    Key("citations", _enum(CITATIONS), top_only=True),
    # OpenClaw's memory.backend and memory.qmd.* (top level in memq's file; see qmd_values.py)
    Key("backend", _enum(BACKENDS), top_only=True),
    Key("qmd.command", STR, top_only=True),
    Key("qmd.searchMode", _enum(QMD_SEARCH_MODES), top_only=True),
    Key("qmd.includeDefaultMemory", BOOL, top_only=True),
    Key("qmd.paths", Spec("qmd_paths"), top_only=True),
    Key("qmd.sessions.enabled", BOOL, top_only=True),
    Key("qmd.sessions.retentionDays", _int(0, nullable=True, null_hint="null to keep all"),
        top_only=True),
    Key("qmd.sessions.exportDir", Spec("dir", nullable=True), top_only=True),
    Key("qmd.update.interval", _DURATION, top_only=True),
    Key("qmd.update.debounceMs", _int(0), top_only=True),
    Key("qmd.update.onBoot", BOOL, top_only=True),
    Key("qmd.update.waitForBootSync", BOOL, top_only=True),
    Key("qmd.update.embedInterval", _DURATION, top_only=True),
    Key("qmd.update.commandTimeoutMs", _int(0), top_only=True),
    Key("qmd.update.updateTimeoutMs", _int(0), top_only=True),
    Key("qmd.update.embedTimeoutMs", _int(0), top_only=True),
    Key("qmd.limits.maxResults", _int(1), top_only=True),
    Key("qmd.limits.maxSnippetChars", _int(1), top_only=True),
    Key("qmd.limits.maxInjectedChars", _int(1), top_only=True),
    Key("qmd.limits.timeoutMs", _int(0), top_only=True),
    Key("qmd.scope", Spec("qmd_scope"), top_only=True),
    Key("qmd.mcporter", Spec("any"), attr=None, ignored=True, top_only=True),
    Key("dataDir", Spec("dir"), read=False),
    Key("configFile", Spec("file", nullable=True), read=False),
    Key("warnings", LIST, read=False),
)  # fmt: skip

#: The keys a file or variable may set, by dotted path.
READ: dict[str, Key] = {k.path: k for k in KEYS if k.read}

#: The dotted paths of tables (``query``, ``query.hybrid``…).
TABLES: frozenset[str] = frozenset(
    path.rsplit(".", i)[0] for path in READ for i in range(1, path.count(".") + 1)
)


def children(prefix: str) -> list[str]:
    """Names directly under a table path ("" for the top level)."""
    start = prefix + "." if prefix else ""
    names = {p[len(start) :].split(".", 1)[0] for p in (*READ, *TABLES) if p.startswith(start)}
    return sorted(names)


@cache
def keys_at(owner: str) -> dict[str, Key]:
    """The keys held directly by the settings object at attribute path ``owner`` ("" for
    Settings itself), by attribute name, in table order."""
    out = {}
    for key in KEYS:
        if key.attr is not None:
            parent, _, name = key.attr.rpartition(".")
            if parent == owner:
                out[name] = key
    return out
