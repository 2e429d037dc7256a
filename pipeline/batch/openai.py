"""OpenAI's Batch API for embeddings (and, through :mod:`pipeline.batch.voyage`, Voyage's copy).

Upload a JSONL file (``POST /files``, ``purpose=batch``), create the job (``POST /batches``,
``endpoint: /v1/embeddings``, window 24 h), poll ``GET /batches/{id}``, then read
``GET /files/{output_file_id}/content`` and the error file. A job holds at most 50,000
requests and 200 MB. Output lines come in any order; failed requests (and, for an expired or
cancelled job, the requests never run) are in the error file.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, ClassVar
from urllib.parse import quote

from pipeline.batch.api import BatchOutput, BatchRequest, BatchState, RemoteBatch
from pipeline.batch.jsonl import OutputCollector, build_jsonl, encode_line, read_jsonl
from pipeline.batch.transport import BatchHttp, multipart_form
from pipeline.embeddings.remote import RemoteProvider
from pipeline.errors import EmbeddingError, ProviderRetryable

__all__ = ["OpenAIBatchApi", "expected_width"]

_STATES = {
    "validating": BatchState.SUBMITTED,
    "in_progress": BatchState.RUNNING,
    "finalizing": BatchState.RUNNING,
    "cancelling": BatchState.RUNNING,
    "completed": BatchState.COMPLETED,
    "failed": BatchState.FAILED,
    "expired": BatchState.EXPIRED,
    "cancelled": BatchState.CANCELLED,
}


def expected_width(provider: RemoteProvider) -> int | None:
    """The model's vector width when memq knows it (else the output's first vector sets it)."""
    return getattr(provider, "output_dimensionality", None) or \
        type(provider).known_dims.get(provider.model)


def path_id(remote_id: str) -> str:
    """An id from the store or a message, safe inside a URL path."""
    return quote(remote_id, safe="")


class OpenAIBatchApi:
    """The :class:`~pipeline.batch.api.BatchApi` of OpenAI (and OpenAI-compatible) endpoints."""

    provider: ClassVar[str] = "openai"
    max_requests: ClassVar[int] = 50_000
    max_bytes: ClassVar[int] = 200 * 1000 * 1000
    completion_window: ClassVar[str] = "24h"

    def __init__(self, provider: RemoteProvider) -> None:
        self._provider = provider
        self.model = provider.model
        self.http = BatchHttp.sharing(provider.http)
        self._width = expected_width(provider)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, {self.http!r})"

    # -- what Voyage changes ----------------------------------------------------------------

    def _line(self, request: BatchRequest) -> dict[str, Any]:
        return {"custom_id": request.custom_id, "method": "POST", "url": "/v1/embeddings",
                "body": {"model": self.model, "input": request.text,
                         "encoding_format": "float"}}

    def _create_body(self, file_id: str, display_name: str) -> dict[str, Any]:
        return {"input_file_id": file_id, "endpoint": "/v1/embeddings",
                "completion_window": self.completion_window,
                "metadata": {"source": "memq", "name": display_name[:512]}}

    # -- the BatchApi interface -------------------------------------------------------------

    def line_size(self, request: BatchRequest) -> int:
        return len(encode_line(self._line(request)))

    def submit(self, requests: Sequence[BatchRequest], *, display_name: str) -> RemoteBatch:
        data = build_jsonl(self.provider, requests, self._line, max_requests=self.max_requests,
                           max_bytes=self.max_bytes)
        body, content_type = multipart_form({"purpose": "batch"}, "file",
                                            f"{display_name}.jsonl", data, "application/jsonl")
        uploaded = self.http.json("POST", "/files", content=body,
                                  headers={"Content-Type": content_type})
        file_id = uploaded.get("id") if isinstance(uploaded, dict) else None
        if not isinstance(file_id, str) or not file_id:
            raise ProviderRetryable(f"{self.provider}: the file upload answered no file id")
        try:
            job = self.http.json("POST", "/batches", body=self._create_body(file_id, display_name),
                                 disables_batch_on_404=True)
            return self._remote(job)
        except EmbeddingError:
            self.http.discard(f"/files/{path_id(file_id)}")
            raise

    def poll(self, batch: RemoteBatch) -> RemoteBatch:
        return self._remote(self.http.json("GET", f"/batches/{path_id(batch.remote_id)}"))

    def cancel(self, batch: RemoteBatch) -> RemoteBatch:
        return self._remote(self.http.json("POST",
                                           f"/batches/{path_id(batch.remote_id)}/cancel"))

    def results(self, batch: RemoteBatch, expected_ids: Collection[str]) -> BatchOutput:
        batch.require_stopped()
        collector = OutputCollector(expected_ids, self._width)
        for file_id in (batch.output_file, batch.error_file):
            if file_id:
                for line in read_jsonl(self._download(file_id)):
                    self._take(collector, line)
        return collector.output()

    def close(self) -> None:
        self._provider.close()

    # -- helpers ----------------------------------------------------------------------------

    def _download(self, file_id: str) -> bytes:
        return self.http.send("GET", f"/files/{path_id(file_id)}/content").content

    def _take(self, collector: OutputCollector, line: dict[str, Any]) -> None:
        """One output or error line: ``{custom_id, response: {status_code, body}, error}``."""
        custom_id = line.get("custom_id")
        response = line.get("response") if isinstance(line.get("response"), dict) else {}
        body = response.get("body") if isinstance(response.get("body"), dict) else {}
        error = line.get("error") or body.get("error")
        if error or response.get("status_code") != 200:
            collector.error(custom_id, self._reason(error, response.get("status_code")))
            return
        data = body.get("data")
        first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
        collector.vector(custom_id, first.get("embedding"))

    def _reason(self, error: Any, status: Any) -> str:
        if isinstance(error, dict):
            words = [str(error[k]) for k in ("code", "message") if error.get(k)]
            if words:
                return self.http.scrub(": ".join(words))
        if isinstance(error, str) and error:
            return self.http.scrub(error)
        return f"HTTP {status}" if status else "failed"

    def _remote(self, job: Any) -> RemoteBatch:
        if not isinstance(job, dict) or not isinstance(job.get("id"), str):
            raise ProviderRetryable(f"{self.provider}: the batch answer has no id")
        raw = str(job.get("status") or "")
        return RemoteBatch(
            provider=self.provider, remote_id=job["id"],
            state=_STATES.get(raw, BatchState.UNKNOWN), raw_state=raw or "unknown",
            input_file=job.get("input_file_id"), output_file=job.get("output_file_id"),
            error_file=job.get("error_file_id"), message=self._message(job))

    def _message(self, job: dict[str, Any]) -> str | None:
        """Validation errors (``errors.data[]``) and the request counts, for status lines."""
        errors = job.get("errors")
        data = errors.get("data") if isinstance(errors, dict) else None
        parts = []
        if isinstance(data, list):
            for item in data[:3]:
                if isinstance(item, dict):
                    where = f"line {item['line']}: " if item.get("line") is not None else ""
                    parts.append(f"{where}{item.get('code') or ''} {item.get('message') or ''}")
        counts = job.get("request_counts")
        if isinstance(counts, dict) and counts.get("total"):
            parts.append(f"{counts.get('completed', 0)}/{counts['total']} done, "
                         f"{counts.get('failed', 0)} failed")
        return self.http.scrub("; ".join(p.strip() for p in parts)) if parts else None
