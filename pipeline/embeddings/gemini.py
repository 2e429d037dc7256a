"""Google Gemini embeddings (``generativelanguage.googleapis.com/v1beta``).

Queries go to ``models/{m}:embedContent`` with ``taskType: RETRIEVAL_QUERY``; chunks to
``models/{m}:batchEmbedContents`` with ``RETRIEVAL_DOCUMENT``, at most 100 per request (the
API's cap, which OpenClaw ignores: #134015). OpenClaw's ``queryInputType`` /
``documentInputType`` (``inputType`` for both) choose other task types for the primary
provider (OpenClaw has the override but never passes it); they travel in the job spec and
are part of the index fingerprint, and the document one of the provider key. Auth is the
``x-goog-api-key`` header, never a ``?key=`` query parameter, so the key cannot leak through a
logged URL.
``outputDimensionality`` (768, 1536 or 3072) applies to gemini-embedding-2-preview only, as in
OpenClaw; it is part of the provider key because it changes the vectors.

That model also embeds image and audio files (:mod:`pipeline.ingest.multimodal`): a media
document is one request entry whose parts are its label text and an
``inlineData {mimeType, data}`` part (base64), through ``batchEmbedContents`` like text,
never the asynchronous batch API.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from pipeline.embeddings.base import DocumentInput
from pipeline.embeddings.remote import RemoteProvider
from pipeline.errors import EmbeddingError, ProviderUnavailable

__all__ = ["GeminiProvider"]

DIMENSIONAL_MODEL = "gemini-embedding-2-preview"
ALLOWED_DIMENSIONS = (768, 1536, 3072)
#: OpenClaw's task types (the defaults); ``queryInputType`` / ``documentInputType`` (or
#: ``inputType`` for both) choose others from :data:`KNOWN_TASK_TYPES`.
TASK_TYPES = {"query": "RETRIEVAL_QUERY", "document": "RETRIEVAL_DOCUMENT"}
#: The task types of Gemini's embedding API (``TaskType`` in its reference).
KNOWN_TASK_TYPES = ("RETRIEVAL_QUERY", "RETRIEVAL_DOCUMENT", "SEMANTIC_SIMILARITY",
                    "CLASSIFICATION", "CLUSTERING", "QUESTION_ANSWERING", "FACT_VERIFICATION",
                    "CODE_RETRIEVAL_QUERY")
_TASK_KEYS = {"query": "queryInputType", "document": "documentInputType"}


def check_task_type(kind: str, value: str | None) -> str:
    """The task type for ``kind`` ("query" or "document"): ``value`` in Gemini's spelling
    (case-insensitive), or OpenClaw's default when None; anything else is refused."""
    if value is None or not str(value).strip():
        return TASK_TYPES[kind]
    normal = str(value).strip().upper()
    if normal not in KNOWN_TASK_TYPES:
        raise ProviderUnavailable(
            f"gemini: {_TASK_KEYS[kind]} (or inputType) must be one of "
            f"{', '.join(KNOWN_TASK_TYPES)}; got {str(value)!r}")
    return normal


def _values(label: str, item: Any) -> Any:
    if not isinstance(item, dict) or not isinstance(item.get("values"), list):
        raise EmbeddingError(f"{label}: the answer has an embedding without values[]")
    return item["values"]


class GeminiProvider(RemoteProvider):
    """Gemini ``embedContent`` / ``batchEmbedContents`` (gemini-embedding-001 by default)."""

    name = "gemini"
    default_model = "gemini-embedding-001"
    default_base_url = "https://generativelanguage.googleapis.com/v1beta"
    env_keys = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    known_dims: ClassVar[dict[str, int]] = {
        "gemini-embedding-001": 3072, "text-embedding-004": 768, DIMENSIONAL_MODEL: 3072,
    }
    max_items = 100

    def __init__(self, model: str | None = None, *, output_dimensionality: int | None = None,
                 query_task_type: str | None = None, document_task_type: str | None = None,
                 **kwargs: Any) -> None:
        self.output_dimensionality: int | None = None
        #: The ``taskType`` sent with queries and with documents (chunks, batch lines).
        self.task_types = {"query": check_task_type("query", query_task_type),
                           "document": check_task_type("document", document_task_type)}
        resolved = (model or self.default_model).strip()
        if resolved.removeprefix("models/").removeprefix("gemini/").removeprefix(
                "google/") == DIMENSIONAL_MODEL:
            dims = output_dimensionality or 3072
            if dims not in ALLOWED_DIMENSIONS:
                raise ProviderUnavailable(
                    f"gemini: outputDimensionality must be one of {ALLOWED_DIMENSIONS} for "
                    f"{DIMENSIONAL_MODEL}; got {dims}")
            self.output_dimensionality = dims
        super().__init__(model, **kwargs)
        self.accepts_media = self.output_dimensionality is not None

    def _auth_headers(self, api_key: str) -> dict[str, str]:
        return {"x-goog-api-key": api_key}

    def _clean_base_url(self, url: str) -> str:
        return url.rstrip("/").removesuffix("/openai")

    def _expected_dims(self) -> int | None:
        return self.output_dimensionality or super()._expected_dims()

    def _key_extra(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"outputDimensionality": self.output_dimensionality}
        # Cached vectors are documents': only their task type changes them. Absent when it is
        # the default, so the provider key of an index built before it was configurable stays.
        if self.task_types["document"] != TASK_TYPES["document"]:
            extra["documentTaskType"] = self.task_types["document"]
        return extra

    def custom_task_types(self) -> dict[str, str]:
        """The task types that differ from OpenClaw's defaults, as job-spec options
        (``query_task_type``, ``document_task_type``)."""
        return {f"{kind}_task_type": value for kind, value in self.task_types.items()
                if value != TASK_TYPES[kind]}

    def _request(self, item: DocumentInput, kind: str) -> dict[str, Any]:
        parts: list[dict[str, Any]] = [{"text": item}] if isinstance(item, str) else [
            {"text": item.text}, {"inlineData": {"mimeType": item.mime_type, "data": item.data}}]
        req: dict[str, Any] = {"content": {"parts": parts}, "taskType": self.task_types[kind]}
        if self.output_dimensionality is not None:
            req["outputDimensionality"] = self.output_dimensionality
        return req

    def _embed_request(self, texts: Sequence[DocumentInput], kind: str, timeout: float
                       ) -> list[Any]:
        path = f"/models/{self.model}"
        if kind == "query" and len(texts) == 1:
            body = self.http.post_json(f"{path}:embedContent", self._request(texts[0], kind),
                                       timeout=timeout)
            return [_values(self.name, (body or {}).get("embedding")
                            if isinstance(body, dict) else None)]
        requests = [{"model": f"models/{self.model}", **self._request(t, kind)} for t in texts]
        body = self.http.post_json(f"{path}:batchEmbedContents", {"requests": requests},
                                   timeout=timeout)
        items = body.get("embeddings") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise EmbeddingError(f"{self.name}: the answer has no embeddings[] list")
        return [_values(self.name, item) for item in items]
