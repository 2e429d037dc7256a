"""Google Gemini embeddings (``generativelanguage.googleapis.com/v1beta``).

Queries go to ``models/{m}:embedContent`` with ``taskType: RETRIEVAL_QUERY``; chunks to
``models/{m}:batchEmbedContents`` with ``RETRIEVAL_DOCUMENT``, at most 100 per request (the
API's cap, which OpenClaw ignores: #134015). OpenClaw's ``queryInputType`` /
``documentInputType`` (``inputType`` for both) choose other task types for the primary
provider (OpenClaw has the override but never passes it); they travel in the job spec and
are part of the index fingerprint, and the document one of the provider key. Auth is the
``x-goog-api-key`` header, never a ``?key=`` query parameter, so the key cannot leak through a
logged URL.
``outputDimensionality`` (128 to 3072, as OpenClaw 2026.9.6's
``resolveGeminiOutputDimensionality``): Gemini Embedding 2 (``gemini-embedding-2``, and its
preview's legacy id ``gemini-embedding-2-preview``) sends 3072 when it is unset;
``gemini-embedding-001`` sends it only when it is set; other models never. It is part of the
provider key (and so of the index fingerprint) because it changes the vectors; unset on
``gemini-embedding-001`` leaves the key of an existing index as it was.

The stable ``gemini-embedding-2`` takes no ``taskType`` for text: the task goes in front of
the text instead (:data:`TASK_PREFIXES`, Google's and OpenClaw's: ``task: search result |
query: …`` for a query, ``title: none | text: …`` for a document), and a media entry gets
neither. The preview keeps ``taskType``.

Gemini Embedding 2 also embeds image and audio files (:mod:`pipeline.ingest.multimodal`): a
media document is one request entry whose parts are its label text and an
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

#: Gemini Embedding 2: the stable model, then its preview's legacy id (multimodal, 3072 wide).
EMBEDDING_2_MODELS = ("gemini-embedding-2", "gemini-embedding-2-preview")
STABLE_MODEL = EMBEDDING_2_MODELS[0]
#: ``outputDimensionality`` bounds, and Gemini Embedding 2's width when it is unset.
MIN_DIMENSIONS, MAX_DIMENSIONS, EMBEDDING_2_DIMENSIONS = 128, 3072, 3072
#: OpenClaw's task types (the defaults); ``queryInputType`` / ``documentInputType`` (or
#: ``inputType`` for both) choose others from :data:`KNOWN_TASK_TYPES`.
TASK_TYPES = {"query": "RETRIEVAL_QUERY", "document": "RETRIEVAL_DOCUMENT"}
#: The task types of Gemini's embedding API (``TaskType`` in its reference).
KNOWN_TASK_TYPES = ("RETRIEVAL_QUERY", "RETRIEVAL_DOCUMENT", "SEMANTIC_SIMILARITY",
                    "CLASSIFICATION", "CLUSTERING", "QUESTION_ANSWERING", "FACT_VERIFICATION",
                    "CODE_RETRIEVAL_QUERY")
_TASK_KEYS = {"query": "queryInputType", "document": "documentInputType"}
#: The text gemini-embedding-2 puts in front of an input for each task type (OpenClaw's
#: ``GEMINI_EMBEDDING_2_TASK_PREFIXES``; CODE_RETRIEVAL_QUERY has none: its text goes bare).
TASK_PREFIXES = {
    "RETRIEVAL_QUERY": "task: search result | query:",
    "RETRIEVAL_DOCUMENT": "title: none | text:",
    "SEMANTIC_SIMILARITY": "task: sentence similarity | query:",
    "CLASSIFICATION": "task: classification | query:",
    "CLUSTERING": "task: clustering | query:",
    "QUESTION_ANSWERING": "task: question answering | query:",
    "FACT_VERIFICATION": "task: fact checking | query:",
}
#: Query task types a document is embedded as RETRIEVAL_DOCUMENT for, with gemini-embedding-2.
_QUERY_ONLY = ("RETRIEVAL_QUERY", "QUESTION_ANSWERING", "FACT_VERIFICATION")


def dimensions_for(model: str, requested: int | None) -> int | None:
    """The ``outputDimensionality`` sent for ``model`` (OpenClaw's
    ``resolveGeminiOutputDimensionality``); :class:`ProviderUnavailable` for a requested
    width outside 128..3072 on a model that takes one."""
    if model not in (*EMBEDDING_2_MODELS, "gemini-embedding-001"):
        return None
    if requested is None:
        return EMBEDDING_2_DIMENSIONS if model in EMBEDDING_2_MODELS else None
    if isinstance(requested, bool) or not isinstance(requested, int) \
            or not MIN_DIMENSIONS <= requested <= MAX_DIMENSIONS:
        raise ProviderUnavailable(
            f"gemini: outputDimensionality must be a whole number from {MIN_DIMENSIONS} to "
            f"{MAX_DIMENSIONS} for {model} (768, 1536 or 3072 recommended); got {requested!r}")
    return requested


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
        "gemini-embedding-001": 3072, "text-embedding-004": 768,
        **dict.fromkeys(EMBEDDING_2_MODELS, EMBEDDING_2_DIMENSIONS),
    }
    max_items = 100

    def __init__(self, model: str | None = None, *, output_dimensionality: int | None = None,
                 query_task_type: str | None = None, document_task_type: str | None = None,
                 **kwargs: Any) -> None:
        #: The ``taskType`` sent with queries and with documents (chunks, batch lines).
        self.task_types = {"query": check_task_type("query", query_task_type),
                           "document": check_task_type("document", document_task_type)}
        resolved = (model or self.default_model).strip()
        resolved = resolved.removeprefix("models/").removeprefix("gemini/").removeprefix(
            "google/")
        self.output_dimensionality = dimensions_for(resolved, output_dimensionality)
        #: gemini-embedding-2 takes the task as a prefix of the text (not as ``taskType``).
        self.prefixes_tasks = resolved == STABLE_MODEL
        super().__init__(model, **kwargs)
        self.accepts_media = self.model in EMBEDDING_2_MODELS

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

    def request(self, item: DocumentInput, kind: str) -> dict[str, Any]:
        """One input's request entry (``kind``: "query" or "document"), as sent to
        ``embedContent``, ``batchEmbedContents`` and in batch files."""
        task = self.task_types[kind]
        if isinstance(item, str):
            parts: list[dict[str, Any]] = [{"text": item}]
        else:
            parts = [{"text": item.text},
                     {"inlineData": {"mimeType": item.mime_type, "data": item.data}}]
        req: dict[str, Any] = {"content": {"parts": parts}}
        if not self.prefixes_tasks:
            req["taskType"] = task
        elif isinstance(item, str):  # (a media entry gets neither prefix nor taskType)
            if kind == "document" and task in _QUERY_ONLY:
                task = "RETRIEVAL_DOCUMENT"
            if task in TASK_PREFIXES:
                parts[0]["text"] = f"{TASK_PREFIXES[task]} {item}"
        if self.output_dimensionality is not None:
            req["outputDimensionality"] = self.output_dimensionality
        return req

    def _embed_request(self, texts: Sequence[DocumentInput], kind: str, timeout: float
                       ) -> list[Any]:
        path = f"/models/{self.model}"
        if kind == "query" and len(texts) == 1:
            body = self.http.post_json(f"{path}:embedContent", self.request(texts[0], kind),
                                       timeout=timeout)
            return [_values(self.name, (body or {}).get("embedding")
                            if isinstance(body, dict) else None)]
        requests = [{"model": f"models/{self.model}", **self.request(t, kind)} for t in texts]
        body = self.http.post_json(f"{path}:batchEmbedContents", {"requests": requests},
                                   timeout=timeout)
        items = body.get("embeddings") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise EmbeddingError(f"{self.name}: the answer has no embeddings[] list")
        return [_values(self.name, item) for item in items]
