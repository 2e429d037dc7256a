"""Built providers, kept for the life of their owner (a :class:`~memq.Memory`, a worker).

Building a provider can be expensive (a local model loads its weights; a remote one opens a
connection pool), so each owner keeps one per spec and closes them when it is done.
"""

from __future__ import annotations

import threading

from pipeline.config import Settings
from pipeline.embeddings.base import EmbeddingProvider
from pipeline.embeddings.registry import build_from_spec, chosen_local
from pipeline.message_fields import ProviderSpec


def _key(spec: ProviderSpec) -> str:
    return repr(sorted(spec.to_dict().items()))


class ProviderPool:
    """One provider per spec, built on first use with the owner's settings (thread-safe)."""

    def __init__(self) -> None:
        self._providers: dict[str, EmbeddingProvider] = {}
        self._lock = threading.Lock()

    def get(self, spec: ProviderSpec, settings: Settings) -> EmbeddingProvider:
        """The provider ``spec`` names, built with ``settings`` the first time (raises
        :class:`~pipeline.errors.ProviderUnavailable` when this host cannot build it)."""
        key = _key(spec)
        with self._lock:
            if key not in self._providers:
                self._providers[key] = build_from_spec(spec, settings)
            return self._providers[key]

    def preload(self, settings: Settings) -> None:
        """Start loading the local model these settings index with (when its file is on disk)
        on a background thread, so that llama.cpp reads it while the caller imports and opens
        the rest; :meth:`get` of the same spec gives that provider, whose first embedding
        waits for the load. Nothing happens for other providers."""
        chosen = chosen_local(settings)
        if chosen is None:
            return
        provider, spec = chosen
        with self._lock:
            self._providers.setdefault(_key(spec), provider)
            provider = self._providers[_key(spec)]
        warm = getattr(provider, "warm", None)
        if warm is not None:
            warm()

    def close(self) -> None:
        """Free every provider (native models before interpreter teardown: llama.cpp's
        finalizer fails after it)."""
        with self._lock:
            providers, self._providers = list(self._providers.values()), {}
        for provider in providers:
            close = getattr(provider, "close", None)
            if close is not None:
                close()
