"""The embedding provider ids of OpenClaw 2026.9.6, and ``models.providers.<id>`` of an
openclaw.json: the credentials, endpoint and headers memory embeddings inherit from the model
provider entries (``resolveApiKeyForProvider`` and the embedding adapters).

A ``provider`` (or ``fallback``) names one of OpenClaw's embedding adapters (:data:`ADAPTERS`),
or a custom ``models.providers.<id>`` entry, which OpenClaw serves through the adapter its
``api`` names: ``openai-completions`` and ``openai-responses`` mean the ``openai-compatible``
adapter, as does an entry with a ``baseUrl`` and no ``api`` (:func:`adapter_of`). memq serves
every adapter but :data:`NOT_YET`, whose agents get a clear error of their own when indexed.

memq reads the entries of the providers it embeds with (:data:`PROVIDER_IDS`, and the custom
entries a ``provider`` or ``fallback`` names; ids match case-insensitively, as OpenClaw's do),
and only ``apiKey``, ``baseUrl``, ``headers``, ``auth`` and ``api`` of them. Everything else in
``models`` is ignored. An ``apiKey`` is kept as written (``"sk-…"``, ``"${VAR}"``, a variable
name or a SecretRef): the providers module resolves it against each process's own environment,
so a worker resolves it from its own, and nothing secret travels in a message.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.config.errors import Invalid, show
from pipeline.config.redact import REDACTED, Headers, redact_url

#: OpenClaw 2026.9.6's memory embedding adapters (``memory.search.provider`` ids; ``auto`` and
#: ``none`` aside).
ADAPTERS: tuple[str, ...] = ("local", "openai", "gemini", "voyage", "mistral", "ollama",
                             "lmstudio", "deepinfra", "openai-compatible", "bedrock",
                             "github-copilot")
#: The adapters memq cannot serve yet, and why (an agent naming one gets this as its error).
#: None since Bedrock and GitHub Copilot (pipeline/embeddings/bedrock.py, copilot.py).
NOT_YET: dict[str, str] = {}
#: memq's provider name -> the ``models.providers`` id OpenClaw reads for it.
PROVIDER_IDS: dict[str, str] = {"openai": "openai", "gemini": "google", "voyage": "voyage",
                                "mistral": "mistral", "ollama": "ollama", "lmstudio": "lmstudio",
                                "deepinfra": "deepinfra",
                                "openai-compatible": "openai-compatible"}
#: ``models.providers.<id>.api`` values OpenClaw embeds through ``openai-compatible``
#: (``OPENAI_COMPATIBLE_MODEL_APIS``).
OPENAI_COMPATIBLE_APIS = ("openai-completions", "openai-responses")
#: SecretRef sources OpenClaw knows; memq reads ``env`` ones (the others need OpenClaw's
#: secrets runtime, and a provider whose key is one says so when it is used).
SECRET_SOURCES = ("env", "file", "exec")


@dataclass(frozen=True, repr=False)
class ProviderEntry:
    """What memq uses of one ``models.providers.<id>`` entry.

    ``api_key`` is the literal text (a key, ``${VAR}`` or a variable name), ``api_key_env`` the
    variable of an ``{source: "env", id}`` SecretRef, ``api_key_source`` the source of a
    SecretRef memq cannot read (``file``, ``exec``). ``auth = "api-key"`` makes the entry's
    key win over the environment, as in OpenClaw. The repr never shows the key.
    """

    path: str  # "models.providers.openai", for messages
    api_key: str | None = None
    api_key_env: str | None = None
    api_key_source: str | None = None
    base_url: str | None = None
    headers: Headers = field(default_factory=Headers)
    auth: str | None = None
    api: str | None = None

    @property
    def has_key(self) -> bool:
        return bool(self.api_key or self.api_key_env or self.api_key_source)

    @property
    def id(self) -> str:
        """The entry's id as written (``MyCorp`` of ``models.providers.MyCorp``)."""
        return self.path.removeprefix("models.providers.")

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, with the key as ``***`` and auth-like header values hidden."""
        return {"apiKey": REDACTED if self.has_key else None, "baseUrl": redact_url(self.base_url),
                "headers": self.headers.redacted(), "auth": self.auth, "api": self.api}

    def __repr__(self) -> str:
        return f"ProviderEntry({self.path}, {self.to_json()!r})"


def parse_model_providers(raw: Any, check_url: Any, check_headers: Any,
                          named: Iterable[Any] = ()) -> dict[str, ProviderEntry]:
    """The entries memq uses from ``models.providers``: those of :data:`PROVIDER_IDS`, by memq
    provider name, and the custom ones ``named`` (the ``provider`` and ``fallback`` values
    that are no adapter), by lower-case id.

    ``check_url`` and ``check_headers`` are the key checks of :mod:`pipeline.config.keys`
    (passed in to keep this module below it). Raises :class:`Invalid` naming the key.
    """
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise Invalid("models.providers", "must be an object of provider entries", show(raw))
    by_id = {str(k).strip().lower(): (str(k), v) for k, v in raw.items()}
    wanted = dict(PROVIDER_IDS)
    for name in named:
        custom = name.strip().lower() if isinstance(name, str) else None
        if custom and custom not in (*ADAPTERS, "auto", "none"):
            wanted[custom] = custom
    out: dict[str, ProviderEntry] = {}
    for name, ident in wanted.items():
        if ident in by_id:
            out[name] = _entry(*by_id[ident], check_url, check_headers)
    return out


def _entry(written: str, value: Any, check_url: Any, check_headers: Any) -> ProviderEntry:
    path = f"models.providers.{written}"
    if not isinstance(value, Mapping):
        raise Invalid(path, "must be an object", show(value))
    kwargs: dict[str, Any] = {"path": path}
    kwargs.update(_api_key(path, value.get("apiKey")))
    if value.get("baseUrl") not in (None, ""):
        kwargs["base_url"] = check_url(f"{path}.baseUrl", value["baseUrl"])
    if value.get("headers") is not None:
        kwargs["headers"] = check_headers(f"{path}.headers", value["headers"])
    for key in ("auth", "api"):
        text = value.get(key)
        if text is not None and not isinstance(text, str):
            raise Invalid(f"{path}.{key}", "must be a string", show(text))
        kwargs[key] = text.strip() if isinstance(text, str) and text.strip() else None
    return ProviderEntry(**kwargs)


def adapter_of(entry: ProviderEntry) -> str | None:
    """The adapter OpenClaw embeds a custom entry's id with (``readConfiguredProviderApiId``):
    ``openai-compatible`` for an OpenAI model ``api`` or a ``baseUrl`` without one, else the
    adapter its ``api`` names; None when it names none (no ``api``, no ``baseUrl``)."""
    if entry.api is None:
        return "openai-compatible" if entry.base_url else None
    api = entry.api.lower()
    return "openai-compatible" if api in OPENAI_COMPATIBLE_APIS else api


def check_provider_id(key: str, value: Any, choices: tuple[str, ...],
                      entries: Mapping[str, ProviderEntry]) -> str:
    """``value`` of ``provider``/``fallback`` (``key``) in its normal form: one of ``choices``
    (any case) or the id of a custom ``models.providers`` entry (``entries``, by memq name);
    :class:`Invalid` otherwise."""
    word = value.strip().lower() if isinstance(value, str) else None
    if word is not None and (word in choices or word in entries):
        return word
    allowed = "one of " + ", ".join(f'"{c}"' for c in choices) + \
        ", or the id of one of an openclaw.json's models.providers entries"
    close = difflib.get_close_matches(word or "", choices, n=1, cutoff=0.6)
    hint = f' (did you mean "{close[0]}"?)' if close else ""
    raise Invalid(key, f"must be {allowed}{hint}", show(value))


def _api_key(path: str, value: Any) -> dict[str, Any]:
    """A string (kept as written) or a SecretRef ``{source, provider?, id}``; never echoed."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, str):
        return {"api_key": value.strip()}
    if isinstance(value, Mapping):
        source, ident = value.get("source"), value.get("id")
        if source in SECRET_SOURCES and isinstance(ident, str) and ident.strip():
            if source == "env":
                return {"api_key_env": ident.strip()}
            return {"api_key_source": source}
        raise Invalid(f"{path}.apiKey", 'must be a string or a SecretRef {source: "env", id: '
                                        '"VARIABLE"}', None)
    raise Invalid(f"{path}.apiKey", "must be a string", None)
