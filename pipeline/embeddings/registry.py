"""Choosing the embedding provider, and rebuilding it from the spec a message carries.

``provider: auto`` picks the local GGUF model when one is there (the user's ``local.modelPath``,
or memq's default MiniLM, converted on first use), else the remote providers in OpenClaw's order
(added by a later release), else keyword-only mode. Keyword-only is never silent: the reason
travels to ``memq status`` and to every search result.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.config import Settings
from pipeline.embeddings.base import EmbeddingError, EmbeddingProvider, ProviderUnavailable

KNOWN_PROVIDERS = ("local", "openai", "gemini", "voyage", "mistral", "ollama")
IMPLEMENTED = ("local",)


@dataclass(frozen=True)
class ProviderSpec:
    """Names a provider and model in task messages and in the index. Never holds a secret."""

    name: str
    model: str
    provider_key: str
    options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProviderSpec:
        return cls(data["name"], data["model"], data["provider_key"], dict(data.get("options", {})))


@dataclass(frozen=True)
class ProviderChoice:
    """The outcome of provider selection: a provider, or keyword-only mode and why."""

    provider: EmbeddingProvider | None
    spec: ProviderSpec | None
    reason: str | None = None

    @property
    def mode(self) -> str:
        return "hybrid" if self.provider is not None else "keyword-only"


def provider_key(name: str, model: str) -> str:
    """OpenClaw's cache key for providers without endpoint options: sha256 of provider+model."""
    blob = json.dumps({"provider": name, "model": model}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _local(settings: Settings, model_path: str | None) -> EmbeddingProvider:
    from pipeline.embeddings.local import LocalProvider

    return LocalProvider(model_path, threads=settings.local.threads,
                         cache_dir=settings.local.model_cache_dir)


def _spec_for(provider: EmbeddingProvider, options: dict[str, Any]) -> ProviderSpec:
    return ProviderSpec(provider.name, provider.model, provider_key(provider.name, provider.model),
                        options)


def _build(name: str, settings: Settings) -> tuple[EmbeddingProvider, ProviderSpec]:
    if name == "local":
        path = settings.local.model_path
        provider = _local(settings, path)
        return provider, _spec_for(provider, {"model_path": path})
    if name in KNOWN_PROVIDERS:
        raise ProviderUnavailable(f"provider {name!r} is not implemented in this memq release "
                                  f"(available: {', '.join(IMPLEMENTED)})")
    raise ProviderUnavailable(f"unknown provider {name!r}")


def _local_model_present(settings: Settings) -> bool:
    path = settings.local.model_path
    if path:
        return not path.startswith(("hf:", "http:", "https:")) and Path(path).expanduser().is_file()
    from pipeline.embeddings.default_model import default_model_available

    return default_model_available(settings.local.model_cache_dir)


def choose_provider(settings: Settings, *, fetch_default_model: bool = True) -> ProviderChoice:
    """Pick the provider for indexing, per ``provider`` and ``fallback``.

    With ``fetch_default_model`` the default local model may be fetched and converted (once,
    cached); without it, auto only takes a local model that is already on disk.
    """
    if not settings.enabled:
        return ProviderChoice(None, None, "memory search embeddings disabled (enabled=false)")
    if settings.provider == "none":
        return ProviderChoice(None, None, "provider is 'none': keyword-only by configuration")
    if settings.provider != "auto":
        try:
            return ProviderChoice(*_build(settings.provider, settings))
        except EmbeddingError as primary:
            if settings.fallback in ("none", settings.provider):
                raise
            try:
                provider, spec = _build(settings.fallback, settings)
            except EmbeddingError as secondary:
                raise EmbeddingError(f"{primary}; fallback {settings.fallback!r}: {secondary}"
                                     ) from secondary
            return ProviderChoice(provider, spec,
                                  f"fallback {settings.fallback!r} used: {primary}")
    reasons: list[str] = []
    if settings.local.model_path or fetch_default_model or _local_model_present(settings):
        try:
            provider, spec = _build("local", settings)
            if settings.local.model_path is None:
                from pipeline.embeddings.default_model import default_model_path

                default_model_path(settings.local.model_cache_dir)  # fetch + convert, or raise
            return ProviderChoice(provider, spec, "auto: local model")
        except ProviderUnavailable as exc:
            reasons.append(f"local: {exc}")
    else:
        reasons.append("local: no model on disk")
    reasons.append("remote providers (openai, gemini, voyage, mistral): not in this release")
    return ProviderChoice(None, None, "no embedding provider available: " + "; ".join(reasons))


def build_from_spec(spec: ProviderSpec, settings: Settings) -> EmbeddingProvider:
    """Rebuild the provider a message or an index names, with this host's own settings.

    Refuses when this host's provider turns out to be another model than the spec says: a
    worker configured differently from the producer must not write foreign vectors.
    """
    if spec.name == "local":
        provider = _local(settings, spec.options.get("model_path"))
    else:
        provider, _ = _build(spec.name, settings)
    if provider.model != spec.model:
        raise ProviderUnavailable(f"this host's {spec.name} model is {provider.model!r}, "
                                  f"the job needs {spec.model!r}")
    return provider
