"""Gemini's batch mode for embeddings (``models/{m}:asyncBatchEmbedContent``).

Upload the JSONL through the Files API (one ``multipart/related`` request to
``/upload/v1beta/files``), create the job from the file, poll ``GET batches/{id}`` (an
Operation whose ``metadata`` is the batch), then download ``output.responsesFile`` with
``GET files/{id}:download?alt=media`` (the path google-genai uses). Each line is
``{key, request}`` with the request the sync path would send (``content``, ``taskType:
RETRIEVAL_DOCUMENT`` or gemini-embedding-2's task prefix, ``outputDimensionality?``); each
output line ``{key, response: {embedding: {values}}}`` or ``{key, error}``, in any order.

Every call, upload and download included, carries the ``x-goog-api-key`` header from the
provider's client (OpenClaw's batch path drops it). A 404 on create, or an answer saying
asyncBatchEmbedContent is not available, turns batch mode off for the provider.

Limits: the Files API takes files up to 2 GB; Gemini documents no request count per job, so
memq caps a job at 100,000 requests, the same as Voyage's, to keep each output download modest.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Any, ClassVar

from pipeline.batch.api import BatchOutput, BatchRequest, BatchState, RemoteBatch
from pipeline.batch.jsonl import OutputCollector, build_jsonl, encode_line, read_jsonl
from pipeline.batch.openai import expected_width
from pipeline.batch.transport import BatchHttp, multipart_related
from pipeline.embeddings.gemini import GeminiProvider
from pipeline.errors import BatchUnavailable, EmbeddingError, ProviderRetryable

__all__ = ["GeminiBatchApi"]

_STATES = {
    "PENDING": BatchState.SUBMITTED,
    "QUEUED": BatchState.SUBMITTED,
    "RUNNING": BatchState.RUNNING,
    "SUCCEEDED": BatchState.COMPLETED,
    "FAILED": BatchState.FAILED,
    "CANCELLED": BatchState.CANCELLED,
    "EXPIRED": BatchState.EXPIRED,
}
_NAME_RE = re.compile(r"^(batches|files)/[A-Za-z0-9_-]+$")
_NOT_AVAILABLE_RE = re.compile(r"asyncBatchEmbedContent.*not (?:available|supported)",
                               re.IGNORECASE)


def _state(raw: str) -> BatchState:
    """``BATCH_STATE_RUNNING`` (REST) and ``JOB_STATE_RUNNING`` (SDK) alike."""
    return _STATES.get(raw.removeprefix("BATCH_STATE_").removeprefix("JOB_STATE_"),
                       BatchState.UNKNOWN)


class GeminiBatchApi:
    """The :class:`~pipeline.batch.api.BatchApi` of the Gemini API."""

    provider: ClassVar[str] = "gemini"
    max_requests: ClassVar[int] = 100_000
    max_bytes: ClassVar[int] = 2 * 1000 * 1000 * 1000

    def __init__(self, provider: GeminiProvider) -> None:
        self._provider = provider
        self.model = provider.model
        self.http = BatchHttp.sharing(provider.http)
        self._width = expected_width(provider)
        root, _, version = self.http.base_url.rpartition("/")
        self._upload_url = f"{root}/upload/{version}/files"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, {self.http!r})"

    def line_size(self, request: BatchRequest) -> int:
        return len(encode_line(self._line(request)))

    def submit(self, requests: Sequence[BatchRequest], *, display_name: str) -> RemoteBatch:
        data = build_jsonl(self.provider, requests, self._line, max_requests=self.max_requests,
                           max_bytes=self.max_bytes)
        body, content_type = multipart_related(
            {"file": {"displayName": display_name[:512], "mimeType": "application/jsonl"}},
            data, "application/jsonl")
        uploaded = self.http.json("POST", "", url=self._upload_url, content=body,
                                  headers={"Content-Type": content_type,
                                           "X-Goog-Upload-Protocol": "multipart"})
        file = uploaded.get("file") if isinstance(uploaded, dict) else None
        name = file.get("name") if isinstance(file, dict) else None
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ProviderRetryable(f"{self.provider}: the file upload answered no file name")
        create = {"batch": {"displayName": display_name[:512],
                            "inputConfig": {"fileName": name}}}
        try:
            job = self._create(create)
        except EmbeddingError:
            self.http.discard(f"/{name}")
            raise
        return self._remote(job, input_file=name)

    def poll(self, batch: RemoteBatch) -> RemoteBatch:
        return self._remote(self.http.json("GET", f"/{self._checked(batch.remote_id)}"),
                            input_file=batch.input_file)

    def cancel(self, batch: RemoteBatch) -> RemoteBatch:
        """``:cancel`` answers an empty object; the job's state comes from a poll."""
        self.http.send("POST", f"/{self._checked(batch.remote_id)}:cancel", body={})
        return self.poll(batch)

    def results(self, batch: RemoteBatch, expected_ids: Collection[str]) -> BatchOutput:
        batch.require_stopped()
        collector = OutputCollector(expected_ids, self._width)
        if batch.output_file:
            name = self._checked(batch.output_file)
            data = self.http.send("GET", f"/{name}:download?alt=media").content
            for line in read_jsonl(data):
                self._take(collector, line)
        return collector.output()

    def close(self) -> None:
        self._provider.close()

    # -- helpers ----------------------------------------------------------------------------

    def _line(self, request: BatchRequest) -> dict[str, Any]:
        """A document's entry exactly as the sync path sends it (task type or prefix,
        outputDimensionality)."""
        return {"key": request.custom_id,
                "request": self._provider.request(request.text, "document")}

    def _create(self, body: dict[str, Any]) -> Any:
        try:
            return self.http.json("POST", f"/models/{self.model}:asyncBatchEmbedContent",
                                  body=body, disables_batch_on_404=True)
        except EmbeddingError as exc:
            if _NOT_AVAILABLE_RE.search(str(exc)) and not isinstance(exc, BatchUnavailable):
                raise BatchUnavailable(str(exc)) from None
            raise

    def _checked(self, name: str) -> str:
        """A ``batches/…`` or ``files/…`` name from the store or a message, fit for a URL."""
        if not _NAME_RE.match(name):
            raise EmbeddingError(f"{self.provider}: {name!r} is not a batch or file name")
        return name

    def _take(self, collector: OutputCollector, line: dict[str, Any]) -> None:
        key = line.get("key")
        response = line.get("response") if isinstance(line.get("response"), dict) else {}
        error = line.get("error") or line.get("status") or response.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else str(error)
            collector.error(key, self.http.scrub(str(message or "failed")))
            return
        embedding = response.get("embedding")
        collector.vector(key, embedding.get("values") if isinstance(embedding, dict) else None)

    def _remote(self, op: Any, *, input_file: str | None) -> RemoteBatch:
        """A batch from an Operation (``{name, metadata, done, error?}``) or a bare batch."""
        if not isinstance(op, dict):
            raise ProviderRetryable(f"{self.provider}: the batch answer is not an object")
        meta = op.get("metadata") if isinstance(op.get("metadata"), dict) else op
        name = op.get("name") or meta.get("name")
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ProviderRetryable(f"{self.provider}: the batch answer has no batch name")
        raw = str(meta.get("state") or "")
        output = meta.get("output") if isinstance(meta.get("output"), dict) else {}
        error = op.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        stats = meta.get("batchStats")
        if isinstance(stats, dict) and stats.get("requestCount"):
            counts = (f"{stats.get('successfulRequestCount', 0)}/{stats['requestCount']} done, "
                      f"{stats.get('failedRequestCount', 0)} failed")
            message = f"{message}; {counts}" if message else counts
        return RemoteBatch(provider=self.provider, remote_id=name, state=_state(raw),
                           raw_state=raw or "unknown", input_file=input_file,
                           output_file=output.get("responsesFile"),
                           message=self.http.scrub(message) if message else None)
