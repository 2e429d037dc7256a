"""The OpenAI-shaped embedding servers of OpenClaw 2026.9.6: ``openai-compatible`` (and every
custom ``models.providers.<id>`` OpenClaw serves with it), ``lmstudio`` and ``deepinfra``.

All three send ``POST {base}/embeddings`` with Bearer auth and read ``data[].embedding``, as
:class:`~pipeline.embeddings.openai.OpenAIProvider` does; they differ in defaults and body:

- ``openai-compatible`` (``createOpenAICompatibleEmbeddingProvider``): no default endpoint nor
  model (both must be configured: ``remote.baseUrl`` or the entry's ``baseUrl``, and
  ``model``), no environment key (it must not inherit OpenAI's), the key optional. The body is
  ``{model, input}`` plus ``dimensions`` (``outputDimensionality``) and ``input_type``
  (``queryInputType`` / ``documentInputType``, or ``inputType`` for both) when configured.
  A ``<id>/`` or ``openai-compatible/`` model prefix is dropped. A custom id keeps its own name
  (queue ``embed.<id>``, provider key, ``models.providers.<id>`` entry).
- ``lmstudio`` (``createLmstudioEmbeddingProvider``): ``http://localhost:1234/v1`` (a
  configured ``.../v1`` or ``.../api/v1`` is the same server), model
  ``text-embedding-nomic-embed-text-v1.5``, key ``LM_API_TOKEN`` or the entry's, optional
  (the ``lmstudio-local`` placeholder is never sent), body ``{model, input}``. OpenClaw first
  asks LM Studio's native API to load the model; memq relies on LM Studio's just-in-time
  loading instead.
- ``deepinfra`` (the ``@openclaw/deepinfra-provider`` plugin, not in the npm package): the
  OpenAI-compatible API at ``https://api.deepinfra.com/v1/openai``, model ``BAAI/bge-m3``,
  key ``DEEPINFRA_API_KEY`` or the entry's, required.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

from pipeline.embeddings.openai import OpenAIProvider
from pipeline.errors import ProviderUnavailable

__all__ = ["DeepInfraProvider", "LmStudioProvider", "OpenAICompatibleProvider"]

#: Keys that are no secret: OpenClaw's local placeholders, never sent as a Bearer token.
PLACEHOLDER_KEYS = ("lmstudio-local", "custom-local", "ollama-local")


def _strip_prefixes(model: str | None, prefixes: Sequence[str]) -> str:
    text = (model or "").strip()
    for prefix in prefixes:
        if prefix and text.startswith(prefix):
            return text[len(prefix):]
    return text


class _Named(OpenAIProvider):
    """An OpenAI-shaped provider that may serve under a custom entry's id, whose model may
    carry that id or the adapter's as a prefix, and whose placeholder keys are not sent."""

    def __init__(self, model: str | None = None, *, provider_id: str | None = None,
                 api_key: str | None = None, **kwargs: Any) -> None:
        model = _strip_prefixes(model, (f"{provider_id or self.name}/", f"{self.name}/"))
        if api_key in PLACEHOLDER_KEYS:
            api_key = None
        super().__init__(model or None, api_key=api_key, provider_id=provider_id, **kwargs)


class OpenAICompatibleProvider(_Named):
    """Any ``/embeddings`` server OpenClaw's ``openai-compatible`` adapter talks to."""

    name = "openai-compatible"
    default_model = ""
    default_base_url = ""
    env_keys = ()
    known_dims: ClassVar[dict[str, int]] = {}

    def __init__(self, model: str | None = None, *, base_url: str | None = None,
                 dimensions: int | None = None, input_type: str | None = None,
                 query_input_type: str | None = None, document_input_type: str | None = None,
                 provider_id: str | None = None, **kwargs: Any) -> None:
        name = provider_id or self.name
        if not (base_url or "").strip():
            raise ProviderUnavailable(
                f"{name}: no endpoint: set remote.baseUrl (or models.providers.{name}.baseUrl) "
                "to your OpenAI-compatible embeddings server, e.g. http://127.0.0.1:8080/v1")
        if not _strip_prefixes(model, (f"{name}/", f"{self.name}/")):
            raise ProviderUnavailable(f"{name}: no model: set model to the embedding model id "
                                      "your server expects")
        if dimensions is not None and (isinstance(dimensions, bool)
                                       or not isinstance(dimensions, int) or dimensions <= 0):
            raise ProviderUnavailable(f"{name}: outputDimensionality must be a whole number "
                                      f">= 1; got {dimensions!r}")
        self.dimensions = dimensions
        #: The ``input_type`` sent with queries and with documents (None: not sent).
        self.input_types = {"query": (query_input_type or input_type or "").strip() or None,
                            "document": (document_input_type or input_type or "").strip()
                            or None}
        kwargs.setdefault("key_required", False)
        super().__init__(model, provider_id=provider_id, base_url=base_url, **kwargs)

    def _expected_dims(self) -> int | None:
        return self.dimensions

    def _key_extra(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.dimensions is not None:
            extra["dimensions"] = self.dimensions
        extra.update((f"{kind}InputType", value) for kind, value in self.input_types.items()
                     if value is not None)
        return extra

    def request_options(self) -> dict[str, Any]:
        """What changes this provider's vectors, as job-spec options (a worker builds the
        producer's provider from them, whatever its own config says)."""
        options: dict[str, Any] = {"dimensions": self.dimensions}
        options.update((f"{kind}_input_type", value) for kind, value in self.input_types.items())
        return options

    def _body(self, texts: Sequence[str], kind: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "input": list(texts)}
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        if self.input_types[kind] is not None:
            body["input_type"] = self.input_types[kind]
        return body


class LmStudioProvider(_Named):
    """An LM Studio server's OpenAI-compatible API."""

    name = "lmstudio"
    default_model = "text-embedding-nomic-embed-text-v1.5"
    default_base_url = "http://localhost:1234/v1"
    env_keys = ("LM_API_TOKEN",)
    known_dims: ClassVar[dict[str, int]] = {}

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("key_required", False)
        super().__init__(model, **kwargs)

    def _clean_base_url(self, url: str) -> str:
        """OpenClaw's ``resolveLmstudioInferenceBase``: the server's root (a trailing ``/v1``
        or ``/api/v1`` dropped, no query or fragment) plus ``/v1``."""
        parts = urlsplit(url.strip())
        path = parts.path.rstrip("/")
        for suffix in ("/api/v1", "/v1"):
            if path.lower().endswith(suffix):
                path = path[: -len(suffix)]
                break
        return urlunsplit((parts.scheme, parts.netloc, path, "", "")) + "/v1"

    def _body(self, texts: Sequence[str], kind: str) -> dict[str, Any]:
        return {"model": self.model, "input": list(texts)}


class DeepInfraProvider(_Named):
    """DeepInfra's OpenAI-compatible embeddings API."""

    name = "deepinfra"
    default_model = "BAAI/bge-m3"
    default_base_url = "https://api.deepinfra.com/v1/openai"
    env_keys = ("DEEPINFRA_API_KEY",)
    known_dims: ClassVar[dict[str, int]] = {"BAAI/bge-m3": 1024}
