"""Choosing the embedding provider, and rebuilding it from the spec a message carries.

``provider: auto`` picks the local GGUF model when one is there (the user's ``local.modelPath``,
or memq's default MiniLM, converted on first use), else openai, gemini, voyage and mistral in
OpenClaw's order: a missing API key skips a provider quietly, any other error is kept in the
reason. Ollama is never auto-selected. Nobody available means keyword-only mode, and the reason
travels to ``memq status`` and to every search result.

A provider id names one of OpenClaw 2026.9.6's adapters, or a custom ``models.providers.<id>``
entry served by the adapter its ``api`` names (:func:`served_by`): ``openai-compatible``,
``lmstudio``, ``ollama`` and ``openai`` serve it under its own id, with its own entry (its
endpoint, key and headers, no environment key); any other adapter serves it as itself.
``bedrock`` (:mod:`pipeline.embeddings.bedrock`: AWS credentials, SigV4) and
``github-copilot`` (:mod:`pipeline.embeddings.copilot`: the GitHub token check) have builders
of their own (:func:`_bedrock`, :func:`_copilot`): neither takes an API key the way the others
do. An adapter of :data:`~pipeline.config.NOT_YET` that memq has no class for raises
:class:`ProviderUnavailable` saying so, which fails that memory alone (or hands it to its
``fallback``).

``fallback`` is built when the primary cannot be, with the fallback provider's **own** default
model (OpenClaw #142364 handed it the primary's model name). ``remote.*`` (baseUrl, apiKey,
headers) and ``model`` belong to the primary provider; a fallback uses its defaults, its
environment key and its ``models.providers`` entry. Every remote provider's key, endpoint and
headers follow OpenClaw's order: ``remote.*``, the environment, an openclaw.json's
``models.providers.<id>`` (whose key and headers go only to its own endpoint). A local GGUF
that llama.cpp could not load (:mod:`pipeline.embeddings.gguf_check`) counts as missing.

A :class:`ProviderSpec` travels in every task message, so it never holds a secret: workers
read API keys from their own config and environment, and refuse a job whose provider key
(endpoint, model, non-secret headers) differs from what their own settings build.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.config import ADAPTERS, NOT_YET, Settings, adapter_of
from pipeline.embeddings.base import EmbeddingProvider, provider_key
from pipeline.embeddings.destination import (
    HEADER_AUTH,
    REFUSING,
    check_credentials,
    has_authorization,
    owns_destination,
)
from pipeline.errors import EmbeddingError, MissingApiKey, ProviderUnavailable
from pipeline.message_fields import ProviderSpec

if TYPE_CHECKING:
    from pipeline.embeddings.local import LocalProvider

KNOWN_PROVIDERS = ("local", "openai", "gemini", "voyage", "mistral", "ollama", "lmstudio",
                   "deepinfra", "openai-compatible", "bedrock", "github-copilot")
IMPLEMENTED = KNOWN_PROVIDERS
AUTO_REMOTE_ORDER = ("openai", "gemini", "voyage", "mistral")
_REMOTE_CLASSES = {
    "openai": ("pipeline.embeddings.openai", "OpenAIProvider"),
    "gemini": ("pipeline.embeddings.gemini", "GeminiProvider"),
    "voyage": ("pipeline.embeddings.voyage", "VoyageProvider"),
    "mistral": ("pipeline.embeddings.mistral", "MistralProvider"),
    "ollama": ("pipeline.embeddings.ollama", "OllamaProvider"),
    "lmstudio": ("pipeline.embeddings.compatible", "LmStudioProvider"),
    "deepinfra": ("pipeline.embeddings.compatible", "DeepInfraProvider"),
    "openai-compatible": ("pipeline.embeddings.compatible", "OpenAICompatibleProvider"),
    "bedrock": ("pipeline.embeddings.bedrock", "BedrockProvider"),
    "github-copilot": ("pipeline.embeddings.copilot", "CopilotProvider"),
}
#: The adapters that serve a custom ``models.providers`` id under that id, with its entry
#: (OpenClaw's pass ``options.provider`` on to the entry lookup); the others ignore it.
_KEEP_CUSTOM_ID = ("openai", "openai-compatible", "lmstudio", "ollama")


@dataclass(frozen=True)
class ProviderChoice:
    """The outcome of provider selection: a provider, or keyword-only mode and why."""

    provider: EmbeddingProvider | None
    spec: ProviderSpec | None
    reason: str | None = None
    #: The configured provider this choice replaces (``provider``), when ``fallback`` was used.
    fallback_from: str | None = None

    @property
    def mode(self) -> str:
        return "hybrid" if self.provider is not None else "keyword-only"


def _local(settings: Settings, model_path: str | None, window_tokens: int) -> LocalProvider:
    from pipeline.embeddings.local import LocalProvider

    provider = LocalProvider(model_path, threads=settings.local.threads,
                             streams=settings.local.streams,
                             cache_dir=settings.local.model_cache_dir,
                             window_tokens=window_tokens)
    if model_path:
        from pipeline.embeddings.model_source import is_downloadable, model_source

        path = (model_source(model_path, settings.local.model_cache_dir).present()
                if is_downloadable(model_path) else Path(model_path).expanduser())
        if path is not None:  # (a model not downloaded yet is checked once it is)
            check_local_model(path)
    return provider


#: Models found whole by :func:`check_local_model`, by path and stat (see ``_model_stamp``).
_whole_models: set[tuple[object, ...]] = set()
_WHOLE_MODELS_MAX = 64


def _model_stamp(path: Path) -> tuple[object, ...] | None:
    """What tells a model file apart from its replacement: path, device, inode, size, and
    modification and change times (None when it cannot be read)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def check_local_model(path: Path) -> None:
    """Refuse a GGUF that llama.cpp would fail to load (truncated, not a GGUF, unknown tensor
    types) like a missing one, with :class:`ProviderUnavailable` naming the file: the caller
    goes to the ``fallback`` (or, for ``auto``, the remote providers) instead of sending every
    chunk to workers that cannot load it.

    A file found whole is remembered for this process by its path and stat, so indexing many
    memories with one model reads its header once; a file changed since (another size, inode
    or time) is read again, and a broken one is never remembered."""
    from pipeline.embeddings import gguf_check
    from pipeline.errors import GGUFHeaderError

    stamp = _model_stamp(path)
    if stamp is not None and stamp in _whole_models:
        return
    try:
        gguf_check.check_gguf(path)
    except (GGUFHeaderError, OSError) as exc:
        raise ProviderUnavailable(f"local model {path} is not a loadable GGUF file ({exc}); "
                                  "replace it (a downloaded hf:/URL model: delete it and "
                                  "`memq index` downloads it again)") from None
    if stamp is not None and _model_stamp(path) == stamp:  # not replaced while it was read
        if len(_whole_models) >= _WHOLE_MODELS_MAX:
            _whole_models.clear()
        _whole_models.add(stamp)


def remote_class(name: str) -> type:
    module, cls = _REMOTE_CLASSES[name]
    return getattr(importlib.import_module(module), cls)


def served_by(name: str, settings: Settings) -> tuple[str, str | None]:
    """The adapter that serves provider ``name``, and the custom ``models.providers`` id it
    serves under (None: its own). :class:`ProviderUnavailable` when memq cannot serve it: an
    adapter of :data:`~pipeline.config.NOT_YET`, an entry whose ``api`` names no adapter."""
    adapter, custom = name, None
    if name not in ADAPTERS:
        entry = settings.provider_entry(name)
        if entry is None:
            raise ProviderUnavailable(f"unknown provider {name!r} (known: "
                                      f"{', '.join(ADAPTERS)}, or a models.providers id)")
        found = adapter_of(entry)
        if found is None or found not in ADAPTERS:
            what = f'its api "{entry.api}"' if entry.api else "it has neither api nor baseUrl"
            raise ProviderUnavailable(f"{name}: {entry.path} names no embedding adapter ({what}; "
                                      f"OpenClaw 2026.9.6 has {', '.join(ADAPTERS)})")
        adapter, custom = found, (name if found in _KEEP_CUSTOM_ID else None)
    if adapter in NOT_YET and adapter not in _REMOTE_CLASSES:
        via = f" (through {name})" if adapter != name else ""
        raise ProviderUnavailable(f"embedding provider {adapter!r}{via} is not supported by memq "
                                  f"yet: {NOT_YET[adapter]}; name another provider for this "
                                  "memory, or a fallback")
    return adapter, custom


def _public_base_url(url: str | None) -> str | None:
    """A base URL that may travel in messages: one with credentials in it (user-info or a
    query string) stays home, and workers take it from their own config."""
    return url if url and "@" not in url and "?" not in url else None


def _remote(name: str, settings: Settings, *, primary: bool, model: str | None = None,
            options: Mapping[str, Any] | None = None,
            env: Mapping[str, str] | None = None) -> EmbeddingProvider:
    """Build a remote provider. The key: ``remote.apiKey`` (primary only), the environment,
    the ``models.providers`` entry (:func:`~pipeline.embeddings.remote.resolve_api_key`).
    ``options`` is a job spec's (a worker rebuilding the producer's provider)."""
    from pipeline.embeddings.remote import resolve_api_key

    adapter, custom = served_by(name, settings)
    if adapter in _OWN_BUILDERS:
        return _OWN_BUILDERS[adapter](settings, primary=primary, model=model,
                                      options=options, env=os.environ if env is None else env)
    cls = remote_class(adapter)
    remote = settings.remote
    from_spec = options is not None
    options = dict(options or {})
    entry = settings.provider_entry(custom or adapter)
    base_url = (options.get("base_url") or (remote.base_url if primary else None)
                or (entry.base_url if entry else None))
    # OpenClaw: the environment's key and the models.providers entry's key and headers go only
    # to the provider's own destination (see pipeline.embeddings.destination).
    owns = owns_destination(base_url or cls.default_base_url,
                            (entry.base_url if entry else None) or cls.default_base_url)
    if entry is not None and not owns:
        entry = None
    headers = dict(entry.headers) if entry is not None else {}
    headers.update(remote.headers if primary else {})
    headers.update(options.get("headers") or {})
    refusing = adapter in REFUSING
    header_auth = adapter in HEADER_AUTH and has_authorization(headers)
    # A custom id has no environment variable of its own (OpenClaw knows none for it). Unlike
    # OpenClaw, memq lets the environment's key (OPENAI_API_KEY, ...) go to a configured
    # remote.baseUrl, as it always has: a worker without the config builds the producer's
    # provider from the job's endpoint and its own environment.
    env_keys = () if custom else cls.env_keys
    try:
        api_key = None if header_auth else resolve_api_key(
            env_keys, configured=remote.api_key if primary else None,
            configured_env=remote.api_key_env if primary else None,
            env=os.environ if env is None else env, entry=entry)
    except MissingApiKey as exc:
        raise MissingApiKey(f"{name}: {exc}") from None
    if refusing and not owns:
        check_credentials(adapter, name, base_url or cls.default_base_url, api_key=api_key,
                          headers=headers)
    kwargs: dict[str, Any] = {"base_url": base_url, "api_key": api_key, "headers": headers}
    if refusing:  # OpenClaw's requireApiKey where it owns the destination
        kwargs["key_required"] = owns and not header_auth
    if custom:
        kwargs["provider_id"] = custom
    # Options that change the vectors come from the spec when it has them, so a worker builds
    # exactly the producer's provider whatever its own config says.
    if adapter == "gemini":
        kwargs["output_dimensionality"] = options.get("output_dimensionality",
                                                      settings.output_dimensionality)
        # Task types: the spec's (a worker), else the primary's input-type keys; a spec
        # without them means OpenClaw's defaults, whatever this host's config says.
        for kind in ("query", "document"):
            configured = (getattr(settings, f"{kind}_input_type") or settings.input_type
                          if primary and not from_spec else None)
            kwargs[f"{kind}_task_type"] = options.get(f"{kind}_task_type", configured)
    if adapter == "voyage":
        kwargs["query_input_type"] = options.get(
            "query_input_type", settings.query_input_type or settings.input_type)
        kwargs["document_input_type"] = options.get(
            "document_input_type", settings.document_input_type or settings.input_type)
    if adapter == "openai-compatible":  # OpenClaw passes these to the fallback too
        configured = {"dimensions": settings.output_dimensionality,
                      "query_input_type": settings.query_input_type or settings.input_type,
                      "document_input_type": settings.document_input_type or settings.input_type}
        kwargs.update((k, options.get(k) if from_spec else v) for k, v in configured.items())
    timeout = _timeout_override(env)
    if timeout is not None:
        kwargs["timeout"] = timeout
    if options.get("auth"):  # the producer used a key: a keyless worker must not try without
        kwargs["key_required"] = True
    return cls(model or None, **kwargs)


def _bedrock(settings: Settings, *, primary: bool, model: str | None,
             options: Mapping[str, Any] | None, env: Mapping[str, str]) -> EmbeddingProvider:
    """Bedrock: the region from ``remote.baseUrl`` (primary) or the environment, the endpoint
    from the AWS endpoint variables, AWS credentials from the environment or the shared
    files. A job spec's region, endpoint and width win, so a worker signs for the producer's
    region and model."""
    from pipeline.embeddings.bedrock import BedrockProvider, bedrock_endpoint, bedrock_region

    options = options or {}
    region = options.get("region") or bedrock_region(
        settings.remote.base_url if primary else None, env)
    dimensions = (options.get("dimensions") if "dimensions" in options
                  else settings.output_dimensionality)
    return BedrockProvider(model or None, region=region,
                           endpoint=options.get("base_url") or bedrock_endpoint(region, env),
                           dimensions=dimensions, env=env, timeout=_timeout_override(env))


def _copilot(settings: Settings, *, primary: bool, model: str | None,
             options: Mapping[str, Any] | None, env: Mapping[str, str]) -> EmbeddingProvider:
    """GitHub Copilot: the GitHub token from ``remote.apiKey`` (primary) or
    ``COPILOT_GITHUB_TOKEN``; ``remote.baseUrl`` with an explicit key skips the token check, as
    in OpenClaw. A worker rebuilding a job's provider for such an endpoint may take the
    token from its environment (the producer applied OpenClaw's rule; memq lets a worker
    without the config use its own environment's key, as for the other providers)."""
    from pipeline.embeddings.copilot import TOKEN_ENV, CopilotProvider, copilot_domain
    from pipeline.embeddings.remote import resolve_api_key

    options = options or {}
    remote = settings.remote
    try:
        explicit = resolve_api_key((), configured=remote.api_key if primary else None,
                                   configured_env=remote.api_key_env if primary else None,
                                   env=env)
    except MissingApiKey as exc:
        raise MissingApiKey(f"github-copilot: {exc}") from None
    token = explicit or (env.get(TOKEN_ENV) or "").strip() or None
    headers = {**(remote.headers if primary else {}), **(options.get("headers") or {})}
    return CopilotProvider(model or None, github_token=token,
                           base_url=options.get("base_url") or (remote.base_url if primary
                                                                else None),
                           explicit_token=bool(explicit) or options.get("role") is not None,
                           headers=headers,
                           domain=copilot_domain(env), timeout=_timeout_override(env))


#: The adapters built by a function of their own (no API key in OpenClaw's usual sense).
_OWN_BUILDERS = {"bedrock": _bedrock, "github-copilot": _copilot}


def _spec_for(provider: EmbeddingProvider, options: dict[str, Any]) -> ProviderSpec:
    key = getattr(provider, "provider_key", None) or provider_key(provider.name, provider.model)
    return ProviderSpec(provider.name, provider.model, key, options)


def _remote_options(provider: Any, role: str, settings: Settings) -> dict[str, Any]:
    """The non-secret facts a worker needs to rebuild the same remote provider (and the
    fleet-wide rate limit every worker must share)."""
    options: dict[str, Any] = {"role": role, "auth": provider.has_key}
    rpm, tpm = settings.remote.requests_per_minute, settings.remote.tokens_per_minute
    if rpm or tpm:
        options["rate_limit"] = {"requests": rpm, "tokens": tpm}
    from pipeline.embeddings.http import shown_url

    # The endpoint without credentials, as the provider key hashes it: in the index fingerprint.
    options["endpoint"] = shown_url(provider.base_url)
    base = _public_base_url(provider.base_url)
    if base and base != provider.default_base_url:
        options["base_url"] = base
    if provider.public_headers:
        options["headers"] = provider.public_headers
    if provider.name == "gemini":
        options["output_dimensionality"] = provider.output_dimensionality
        options.update(provider.custom_task_types())
    if provider.name == "voyage":
        options["query_input_type"] = provider.input_types["query"]
        options["document_input_type"] = provider.input_types["document"]
    request_options = getattr(provider, "request_options", None)
    if request_options is not None:  # openai-compatible: dimensions, input types
        options.update(request_options())
    return options


def _build(name: str, settings: Settings, *, primary: bool = True, model: str | None = None,
           env: Mapping[str, str] | None = None) -> tuple[EmbeddingProvider, ProviderSpec]:
    if served_by(name, settings)[0] == "local":
        path = settings.local.model_path
        provider = _local(settings, path, settings.local.window_tokens)
        return provider, _spec_for(provider, {"model_path": path, **provider.spec_options})
    chosen = model if model is not None else (settings.model if primary else None)
    provider = _remote(name, settings, primary=primary, model=chosen, env=env)
    return provider, _spec_for(provider, _remote_options(
        provider, "primary" if primary else "fallback", settings))


def _timeout_override(env: Mapping[str, str] | None) -> float | None:
    """``MEMQ_HTTP_TIMEOUT`` (seconds) replaces the 60 s / 2 min remote timeouts; each process
    (producer, worker, query) reads its own."""
    raw = (os.environ if env is None else env).get("MEMQ_HTTP_TIMEOUT", "").strip()
    try:
        return float(raw) if raw and float(raw) > 0 else None
    except ValueError:
        return None


def _local_model_present(settings: Settings) -> bool:
    """Is the local model on disk: the file, a finished download of an ``hf:``/URL model,
    or memq's default model (or its weights)? Never downloads."""
    path = settings.local.model_path
    if path:
        from pipeline.embeddings.model_source import is_downloadable, model_source

        if not is_downloadable(path):
            return Path(path).expanduser().is_file()
        try:
            return model_source(path, settings.local.model_cache_dir).present() is not None
        except ProviderUnavailable:
            return False
    from pipeline.embeddings.default_model import default_model_available

    return default_model_available(settings.local.model_cache_dir)


def chosen_local(settings: Settings) -> tuple[EmbeddingProvider, ProviderSpec] | None:
    """The local provider and its spec when these settings index with it (``provider`` local,
    or auto) and its model is on disk already; None otherwise. Builds the provider only:
    nothing is fetched and no model is loaded."""
    if (not settings.enabled or settings.provider not in ("local", "auto")
            or not _local_model_present(settings)):
        return None
    try:
        return _build("local", settings)
    except EmbeddingError:
        return None


def _downloadable_local(settings: Settings) -> bool:
    from pipeline.embeddings.model_source import is_downloadable

    path = settings.local.model_path
    return path is not None and is_downloadable(path)


def _fetch_local_model(provider: EmbeddingProvider) -> None:
    """Have the local provider's GGUF on disk now (memq's default converted, an ``hf:``/URL
    model downloaded), or raise ProviderUnavailable."""
    from pipeline.embeddings.local import LocalProvider

    if isinstance(provider, LocalProvider):
        check_local_model(provider.model_file())


def _explicit(settings: Settings, env: Mapping[str, str] | None,
              fetch: bool) -> ProviderChoice:
    """``provider: <name>``, with ``fallback`` (own default model) when it cannot be built.
    With ``fetch``, a local model to download is downloaded now (here, where a progress bar
    can be seen; its failure lets the fallback step in)."""
    try:
        provider, spec = _build(settings.provider, settings, env=env)
        if fetch and settings.provider == "local" and _downloadable_local(settings):
            _fetch_local_model(provider)
        return ProviderChoice(provider, spec)
    except EmbeddingError as primary:
        if settings.fallback in ("none", settings.provider):
            raise
        try:
            provider, spec = _build(settings.fallback, settings, primary=False, env=env)
        except EmbeddingError as secondary:
            if isinstance(primary, MissingApiKey) and isinstance(secondary, MissingApiKey):
                return ProviderChoice(None, None, f"no embedding provider available: {primary}; "
                                                  f"fallback {settings.fallback}: {secondary}")
            raise EmbeddingError(f"{primary}; fallback {settings.fallback!r}: {secondary}"
                                 ) from None
        return ProviderChoice(provider, spec, f"fallback {settings.fallback!r} "
                                              f"({spec.model}) used: {primary}",
                              fallback_from=settings.provider)


def choose_provider(settings: Settings, *, fetch_default_model: bool = True,
                    env: Mapping[str, str] | None = None) -> ProviderChoice:
    """Pick the provider for indexing, per ``provider`` and ``fallback``.

    With ``fetch_default_model`` the local model may be fetched: memq's default converted
    (once, cached), an ``hf:``/URL ``local.modelPath`` downloaded into the cache; without it,
    auto only takes a local model that is already on disk. ``env`` replaces ``os.environ``
    for API keys.
    """
    if not settings.enabled:
        return ProviderChoice(None, None, "memory search embeddings disabled (enabled=false)")
    if settings.provider == "none":
        return ProviderChoice(None, None, "provider is 'none': keyword-only by configuration")
    if settings.provider != "auto":
        return _explicit(settings, env, fetch_default_model)
    reasons: list[str] = []
    downloadable = _downloadable_local(settings)
    if (fetch_default_model or _local_model_present(settings)
            or (settings.local.model_path and not downloadable)):
        try:
            provider, spec = _build("local", settings)
            _fetch_local_model(provider)
            return ProviderChoice(provider, spec, "auto: local model")
        except ProviderUnavailable as exc:
            reasons.append(f"local: {exc}")
    elif downloadable:
        reasons.append(f"local: {settings.local.model_path} is not downloaded yet "
                       "(`memq index` downloads it)")
    else:
        reasons.append("local: no model on disk")
    for name in AUTO_REMOTE_ORDER:
        try:
            provider, spec = _build(name, settings, env=env)
        except MissingApiKey as exc:
            reasons.append(str(exc))
            continue
        except EmbeddingError as exc:  # reported, and the next provider is tried
            reasons.append(f"{name}: {exc}")
            continue
        skipped = f" (skipped: {'; '.join(reasons)})" if reasons else ""
        return ProviderChoice(provider, spec, f"auto: {name}{skipped}")
    return ProviderChoice(None, None, "no embedding provider available: " + "; ".join(reasons))


def fallback_note(spec: ProviderSpec | None, settings: Settings, reason: str | None
                  ) -> dict[str, Any] | None:
    """OpenClaw's ``fallback: {from, reason}`` of a search answered by an index built with the
    ``fallback`` provider because the configured one could not be used (None otherwise)."""
    if (spec is None or settings.fallback in ("none", settings.provider)
            or settings.provider in ("auto", "none") or spec.name != settings.fallback):
        return None
    return {"from": settings.provider, "reason": reason or f"{settings.provider} unavailable"}


def build_from_spec(spec: ProviderSpec, settings: Settings) -> EmbeddingProvider:
    """Rebuild the provider a message or an index names, with this host's own settings.

    Refuses when this host's provider turns out to be another model or endpoint than the spec
    says: a worker configured differently from the producer must not write foreign vectors.
    """
    if spec.name == "local":
        # an index made before windows were recorded embedded texts whole (window 0)
        provider = _local(settings, spec.options.get("model_path"),
                          spec.options.get("window_tokens", 0))
    else:
        provider = _remote(spec.name, settings, primary=spec.options.get("role") != "fallback",
                           model=spec.model, options=spec.options)
    if provider.model != spec.model:
        raise ProviderUnavailable(f"this host's {spec.name} model is {provider.model!r}, "
                                  f"the job needs {spec.model!r}")
    key = getattr(provider, "provider_key", None)
    if key is not None and key != spec.provider_key:
        raise ProviderUnavailable(f"this host's {spec.name} endpoint or headers differ from the "
                                  "ones the index was built with (provider key mismatch)")
    return provider
