"""The Files and Batches APIs of the provider doubles (OpenAI, Voyage, Gemini), on a clock the
test controls.

Each :class:`~tests.fakes.provider_doubles.ProviderDouble` of those styles owns a
:class:`BatchService` (``double.batches``). Jobs walk through the API's real states one step
per :meth:`BatchService.advance` (or, with ``polls_per_step``, on their own every N polls, so
``celery worker`` processes can run a job to the end with no test thread stepping it). What
the coming jobs do is set by :class:`BatchPlan`: complete, fail validation, expire with
partial output, or stick in a state no client knows; per-line errors inside a completed job
(by a predicate on the text or a seeded rate); create answering 404 ("not available").

Output lines are shuffled, and their vectors are exactly the sync double's for the same text,
so batch and sync results agree. Shapes: ``shared/reference/peers-and-apis.md`` §E, checked
with the official SDKs in ``tests/test_batch_doubles.py``.
"""

from __future__ import annotations

import email.parser
import email.policy
import itertools
import json
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.fakes.provider_doubles import ProviderDouble, _error, double_vector

__all__ = ["BatchPlan", "BatchService", "Job"]

Answer = tuple[int, dict[str, str], bytes, float]

#: Each style's state words along each outcome's path (the last is where the job stops).
TIMELINES = {
    "openai": {
        "complete": ("validating", "in_progress", "finalizing", "completed"),
        "fail": ("validating", "failed"),
        "expire": ("validating", "in_progress", "expired"),
        "stuck": ("validating", "paused"),
    },
    "gemini": {
        "complete": ("BATCH_STATE_PENDING", "BATCH_STATE_RUNNING", "BATCH_STATE_SUCCEEDED"),
        "fail": ("BATCH_STATE_PENDING", "BATCH_STATE_FAILED"),
        "expire": ("BATCH_STATE_PENDING", "BATCH_STATE_RUNNING", "BATCH_STATE_EXPIRED"),
        "stuck": ("BATCH_STATE_PENDING", "BATCH_STATE_UNSPECIFIED"),
    },
}
TIMELINES["voyage"] = TIMELINES["openai"]
_DONE = {"completed", "failed", "expired", "cancelled", "BATCH_STATE_SUCCEEDED",
         "BATCH_STATE_FAILED", "BATCH_STATE_EXPIRED", "BATCH_STATE_CANCELLED"}
_PARTIAL = {"expired", "cancelled", "BATCH_STATE_EXPIRED", "BATCH_STATE_CANCELLED"}


@dataclass
class BatchPlan:
    """How jobs created from now on behave.

    ``outcome``: "complete", "fail" (validation), "expire" (``partial`` of the lines done, the
    rest in the error file), "stuck" (an unknown state forever). ``line_error`` (a predicate on
    the text) and ``error_rate`` (seeded) fail single lines of a job that runs.
    ``not_available`` makes create answer ``not_available_status`` (404) as a service
    without the batch API does.
    """

    outcome: str = "complete"
    line_error: Callable[[str], bool] | None = None
    error_rate: float = 0.0
    partial: float = 0.5
    not_available: bool = False
    not_available_status: int = 404


@dataclass
class Job:
    """One remote job as the double keeps it."""

    id: str
    model: str
    input_file: str
    display_name: str
    requests: list[tuple[str, dict[str, Any]]]  # (custom id, the line's body / request)
    params: dict[str, Any]
    plan: BatchPlan
    step: int = 0
    state: str = ""
    polls: int = 0
    output_file: str | None = None
    error_file: str | None = None
    created: int = 0
    line_errors: set[str] = field(default_factory=set)

    @property
    def done(self) -> bool:
        return self.state in _DONE


@dataclass
class _File:
    name: str
    data: bytes
    purpose: str = "batch"
    mime: str = "application/jsonl"


class BatchService:
    """The Files + Batches routes of one double; see the module docstring."""

    def __init__(self, double: ProviderDouble, *, seed: int = 0) -> None:
        self.double = double
        self.style = double.style
        self.plan = BatchPlan()
        #: When set, a job moves one step every this many GETs of it (auto mode).
        self.polls_per_step: int | None = None
        self.files: dict[str, _File] = {}
        self.jobs: dict[str, Job] = {}
        self.deleted: list[str] = []
        self._rng = random.Random(seed)
        self._ids = itertools.count(1)
        self._lock = threading.RLock()
        self._uploads: dict[str, dict[str, Any]] = {}

    # -- what tests drive -------------------------------------------------------------------

    def advance(self, steps: int = 1) -> None:
        """Move every unfinished job ``steps`` states along its path (the test's clock)."""
        with self._lock:
            for job in self.jobs.values():
                for _ in range(steps):
                    self._step(job)

    def job(self, remote_id: str) -> Job:
        return self.jobs[remote_id.removeprefix("batches/")]

    def is_upload_session(self, path: str) -> bool:
        """A resumable upload's session URL, which (as at Google) is itself the credential:
        google-genai sends the bytes there without the API key."""
        token = (parse_qs(urlsplit(path).query).get("upload_id") or [""])[0]
        return token in self._uploads

    def is_route(self, path: str) -> bool:
        return any(self._route(m, path) is not None for m in ("GET", "POST", "DELETE"))

    # -- serving ----------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Answer | None:
        """The answer to a Files/Batches request, or None when ``path`` is none of those."""
        route = self._route(method, path)
        if route is None:
            return None
        name, arg = route
        with self._lock:
            return getattr(self, f"_{name}")(arg, headers, raw, path)

    def _route(self, method: str, path: str) -> tuple[str, str] | None:
        bare = urlsplit(path).path
        if self.style == "gemini":
            return _gemini_route(method, bare)
        return _openai_route(method, bare)

    # -- the OpenAI / Voyage routes ---------------------------------------------------------

    def _upload_form(self, _: str, headers: dict[str, str], raw: bytes, __: str) -> Answer:
        parts = _multipart(headers.get("content-type", ""), raw)
        purpose = next((p.get_content() for p in parts if p.get_param("name", header=
                        "content-disposition") == "purpose"), None)
        upload = next((p for p in parts if p.get_filename()), None)
        if purpose != "batch" or upload is None:
            return self._error(400, "Invalid file upload: purpose must be 'batch' and a file "
                                    "is required")
        data = upload.get_payload(decode=True) or b""
        file = self.add_file(data, upload.get_filename() or "input.jsonl")
        return _json(200, self._file_object(file))

    def _file_content(self, file_id: str, *_: Any) -> Answer:
        file = self.files.get(file_id)
        if file is None:
            return self._error(404, f"No such File object: {file_id}")
        return 200, {"Content-Type": "application/octet-stream"}, file.data, 0.0

    def _file_delete(self, file_id: str, *_: Any) -> Answer:
        if self.files.pop(file_id, None) is None:
            return self._error(404, f"No such File object: {file_id}")
        self.deleted.append(file_id)
        if self.style == "gemini":
            return _json(200, {})
        return _json(200, {"id": file_id, "object": "file", "deleted": True})

    def _create(self, _: str, __: dict[str, str], raw: bytes, ___: str) -> Answer:
        if self.plan.not_available:
            return self._error(self.plan.not_available_status, "Invalid URL (POST /v1/batches)")
        body = _loads(raw)
        file = self.files.get(str(body.get("input_file_id")))
        if body.get("endpoint") != "/v1/embeddings" or file is None:
            return self._error(400, "input_file_id must name an uploaded file and endpoint "
                                    "must be /v1/embeddings")
        window = "12h" if self.style == "voyage" else "24h"
        if body.get("completion_window") != window:
            return self._error(400, f"completion_window must be {window}")
        lines = [json.loads(line) for line in file.data.splitlines() if line.strip()]
        if self.style == "voyage":
            params = body.get("request_params") or {}
            model = params.get("model")
            requests = [(line["custom_id"], {**params, **line["body"]}) for line in lines]
        else:
            params = {}
            model = lines[0]["body"]["model"] if lines else None
            requests = [(line["custom_id"], line["body"]) for line in lines]
        job = self._new_job(str(model), file.name, str((body.get("metadata") or {}).get(
            "name", "")), requests, params)
        return _json(200, self._openai_job(job))

    def _retrieve(self, job_id: str, *_: Any) -> Answer:
        job = self.jobs.get(job_id)
        if job is None:
            return self._error(404, f"No batch found with id '{job_id}'.")
        self._polled(job)
        return _json(200, self._openai_job(job))

    def _cancel(self, job_id: str, *_: Any) -> Answer:
        job = self.jobs.get(job_id)
        if job is None:
            return self._error(404, f"No batch found with id '{job_id}'.")
        if job.done:
            return self._error(409, f"Cannot cancel a batch with status '{job.state}'.")
        job.state = "cancelling"
        return _json(200, self._openai_job(job))

    def _openai_job(self, job: Job) -> dict[str, Any]:
        failed = len(job.line_errors) if job.done else 0
        finished = (len(job.requests) if job.state == "completed" else
                    self._done_count(job) if job.state in _PARTIAL else 0)
        out: dict[str, Any] = {
            "id": job.id, "object": "batch", "endpoint": "/v1/embeddings",
            "errors": None, "input_file_id": job.input_file,
            "completion_window": "12h" if self.style == "voyage" else "24h",
            "status": job.state, "output_file_id": job.output_file,
            "error_file_id": job.error_file, "created_at": self._time(job.created),
            "request_counts": {"total": len(job.requests), "completed": finished - failed,
                               "failed": failed},
            "metadata": {"name": job.display_name},
        }
        if self.style == "voyage":
            out["request_params"] = job.params
            out["expected_completion_at"] = self._time(job.created + 12 * 3600)
        if job.state == "failed":
            out["errors"] = {"object": "list", "data": [{
                "code": "invalid_request", "line": 1, "param": "body.input",
                "message": "The request body is invalid for /v1/embeddings."}]}
        return out

    def _time(self, seconds: int) -> Any:
        """OpenAI stamps Unix integers; Voyage ISO-8601 strings."""
        if self.style == "voyage":
            return datetime.fromtimestamp(seconds, UTC).isoformat()
        return seconds

    def _file_object(self, file: _File) -> dict[str, Any]:
        return {"id": file.name, "object": "file", "bytes": len(file.data),
                "created_at": self._time(1_760_000_000), "filename": "input.jsonl",
                "purpose": file.purpose, "status": "processed", "status_details": None}

    # -- the Gemini routes ------------------------------------------------------------------

    def _gemini_upload(self, _: str, headers: dict[str, str], raw: bytes, path: str) -> Answer:
        """``multipart`` (one request) or ``resumable`` (start, then upload+finalize)."""
        token = (parse_qs(urlsplit(path).query).get("upload_id") or [""])[0]
        if token:
            if "finalize" not in headers.get("x-goog-upload-command", ""):
                return self._error(400, "expected X-Goog-Upload-Command: upload, finalize")
            meta = self._uploads.pop(token, None)
            if meta is None:
                return self._error(404, "unknown upload session")
            file = self.add_file(raw, str(meta.get("displayName") or ""),
                                  str(meta.get("mimeType") or "application/jsonl"))
            status, hdrs, payload, _ = _json(200, {"file": self._gemini_file(file)})
            return status, {**hdrs, "X-Goog-Upload-Status": "final"}, payload, 0.0
        protocol = headers.get("x-goog-upload-protocol", "")
        if protocol == "resumable":
            if headers.get("x-goog-upload-command") != "start":
                return self._error(400, "expected X-Goog-Upload-Command: start")
            token = f"up{next(self._ids)}"
            self._uploads[token] = (_loads(raw).get("file") or {})
            url = f"{self.double.root}/upload/v1beta/files?upload_id={token}"
            return 200, {"X-Goog-Upload-URL": url, "X-Goog-Upload-Status": "active",
                         "Content-Type": "application/json"}, b"", 0.0
        parts = _multipart(headers.get("content-type", ""), raw)
        if len(parts) != 2 or not headers.get("content-type", "").startswith(
                "multipart/related"):
            return self._error(400, "expected a multipart/related upload: metadata, then file")
        meta = json.loads(parts[0].get_content()).get("file") or {}
        file = self.add_file(parts[1].get_payload(decode=True) or b"",
                              str(meta.get("displayName") or ""),
                              str(meta.get("mimeType") or parts[1].get_content_type()))
        return _json(200, {"file": self._gemini_file(file)})

    def _gemini_download(self, file_id: str, headers: dict[str, str], raw: bytes, path: str
                         ) -> Answer:
        file = self.files.get(file_id)
        if file is None:
            return self._error(404, f"File files/{file_id} not found.")
        if parse_qs(urlsplit(path).query).get("alt") != ["media"]:
            return _json(200, self._gemini_file(file))
        return 200, {"Content-Type": file.mime}, file.data, 0.0

    def _gemini_create(self, model: str, _: dict[str, str], raw: bytes, __: str) -> Answer:
        if self.plan.not_available:
            return self._error(self.plan.not_available_status, f"models/{model} is not found "
                               "for API version v1beta, or asyncBatchEmbedContent not available "
                               "for it.")
        batch = _loads(raw).get("batch") or {}
        config = batch.get("inputConfig") or batch.get("input_config") or {}
        name = str(config.get("fileName") or config.get("file_name") or "")
        file = self.files.get(name.removeprefix("files/"))
        if file is None:
            return self._error(400, "inputConfig.fileName must name an uploaded file")
        lines = [json.loads(line) for line in file.data.splitlines() if line.strip()]
        requests = [(str(line.get("key")), line.get("request") or {}) for line in lines]
        job = self._new_job(model, file.name, str(batch.get("displayName", "")), requests, {})
        return _json(200, self._gemini_operation(job))

    def _gemini_get(self, job_id: str, *_: Any) -> Answer:
        job = self.jobs.get(job_id)
        if job is None:
            return self._error(404, f"Batch batches/{job_id} not found.")
        self._polled(job)
        return _json(200, self._gemini_operation(job))

    def _gemini_cancel(self, job_id: str, *_: Any) -> Answer:
        job = self.jobs.get(job_id)
        if job is None:
            return self._error(404, f"Batch batches/{job_id} not found.")
        if job.done:
            return self._error(400, f"Batch is in terminal state {job.state}.")
        job.state = "BATCH_STATE_CANCELLED"
        self._finish(job)
        return _json(200, {})

    def _gemini_operation(self, job: Job) -> dict[str, Any]:
        stats = {"requestCount": str(len(job.requests))}
        if job.done:
            failed = len(job.line_errors)
            ok = self._done_count(job) - failed
            stats.update({"successfulRequestCount": str(ok), "failedRequestCount": str(failed),
                          "pendingRequestCount": str(len(job.requests) - ok - failed)})
        meta: dict[str, Any] = {
            "@type": "type.googleapis.com/google.ai.generativelanguage.v1beta.EmbedContentBatch",
            "model": f"models/{job.model}", "displayName": job.display_name,
            "inputConfig": {"fileName": job.input_file}, "batchStats": stats,
            "createTime": "2026-01-01T00:00:00Z", "updateTime": "2026-01-01T00:00:01Z",
            "state": job.state, "name": job.id,
        }
        if job.output_file:
            meta["output"] = {"responsesFile": job.output_file}
        out: dict[str, Any] = {"name": job.id, "metadata": meta, "done": job.done}
        if job.state == "BATCH_STATE_FAILED":
            out["error"] = {"code": 3, "message": "Invalid request at line 1: content is "
                                                  "required."}
        elif job.done:
            out["response"] = dict(meta)
        return out

    def _gemini_file(self, file: _File) -> dict[str, Any]:
        return {"name": f"files/{file.name}", "displayName": file.name, "mimeType": file.mime,
                "sizeBytes": str(len(file.data)), "createTime": "2026-01-01T00:00:00Z",
                "state": "ACTIVE", "source": "UPLOADED",
                "uri": f"{self.double.root}/v1beta/files/{file.name}"}

    # -- jobs -------------------------------------------------------------------------------

    def add_file(self, data: bytes, label: str, mime: str = "application/jsonl") -> _File:
        """Store a file as if uploaded (tests may seed input files directly)."""
        n = next(self._ids)
        name = f"file-{n:04d}{self._rng.randrange(16**8):08x}" if self.style != "gemini" \
            else f"f{n:04d}{self._rng.randrange(16**6):06x}"
        self.files[name] = _File(name, data, mime=mime)
        return self.files[name]

    def _new_job(self, model: str, input_file: str, display_name: str,
                 requests: list[tuple[str, dict[str, Any]]], params: dict[str, Any]) -> Job:
        n = next(self._ids)
        job_id = f"batch_{n:04d}{self._rng.randrange(16**8):08x}" if self.style != "gemini" \
            else f"batches/b{n:04d}{self._rng.randrange(16**6):06x}"
        job = Job(job_id, model.removeprefix("models/"), input_file, display_name,
                  requests, params, plan=self.plan, created=1_760_000_000 + n)
        job.state = TIMELINES[self.style][job.plan.outcome][0]
        self.jobs[job_id.removeprefix("batches/")] = job
        return job

    def _polled(self, job: Job) -> None:
        job.polls += 1
        if self.polls_per_step and job.polls % self.polls_per_step == 0:
            self._step(job)

    def _step(self, job: Job) -> None:
        if job.done:
            return
        if job.state == "cancelling":
            job.state = "cancelled"
            self._finish(job)
            return
        path = TIMELINES[self.style][job.plan.outcome]
        job.step = min(job.step + 1, len(path) - 1)
        job.state = path[job.step]
        if job.done:
            self._finish(job)

    def _done_count(self, job: Job) -> int:
        if job.state in ("completed", "BATCH_STATE_SUCCEEDED"):
            return len(job.requests)
        if job.state in _PARTIAL:
            return int(len(job.requests) * job.plan.partial)
        return 0

    def _finish(self, job: Job) -> None:
        """Write the output (and error) file of a job that just stopped."""
        ran = job.requests[:self._done_count(job)]
        plan = job.plan
        good, bad = [], []
        for custom_id, request in ran:
            text = _request_text(request)
            if (plan.line_error is not None and plan.line_error(text)) or (
                    plan.error_rate and self._rng.random() < plan.error_rate):
                job.line_errors.add(custom_id)
                bad.append(self._error_line(custom_id, "invalid_input", "Invalid input: the "
                                            "double was told to fail this line."))
            else:
                good.append(self._success_line(job, custom_id, request))
        never = job.requests[len(ran):]
        if self.style != "gemini" and job.state in _PARTIAL:
            code = "batch_expired" if job.state == "expired" else "batch_cancelled"
            bad += [self._error_line(cid, code, "This line could not be executed because the "
                                     f"batch was {job.state}.")
                    for cid, _ in never]
        if self.style == "gemini":
            good += bad  # one responses file holds successes and failures
            bad = []
        self._rng.shuffle(good)
        self._rng.shuffle(bad)
        if good:
            job.output_file = self._named(self.add_file(_jsonl(good), f"{job.id}-output"))
        if bad:
            job.error_file = self._named(self.add_file(_jsonl(bad), f"{job.id}-errors"))

    def _named(self, file: _File) -> str:
        return f"files/{file.name}" if self.style == "gemini" else file.name

    def _success_line(self, job: Job, custom_id: str, request: dict[str, Any]) -> dict[str, Any]:
        text = _request_text(request)
        values = [float(x) for x in double_vector(text, self.double.model_dims(job.model,
                                                                                request))]
        if self.style == "gemini":
            return {"key": custom_id, "response": {"embedding": {"values": values}}}
        body = {"object": "list", "model": job.model, "data": [
            {"object": "embedding", "index": 0, "embedding": values}],
            "usage": {"prompt_tokens": 3, "total_tokens": 3}}
        return {"id": f"batch_req_{self._rng.randrange(16**12):012x}", "custom_id": custom_id,
                "response": {"status_code": 200, "request_id": f"req_{custom_id[:8]}",
                             "body": body}, "error": None}

    def _error_line(self, custom_id: str, code: str, message: str) -> dict[str, Any]:
        if self.style == "gemini":
            return {"key": custom_id, "error": {"code": 3, "message": message,
                                                "status": "INVALID_ARGUMENT"}}
        return {"id": f"batch_req_{self._rng.randrange(16**12):012x}", "custom_id": custom_id,
                "response": None, "error": {"code": code, "message": message}}

    def _error(self, status: int, message: str) -> Answer:
        return _error(self.style, status, message)


# ---------------------------------------------------------------------------------------------
# Wire helpers


def _openai_route(method: str, path: str) -> tuple[str, str] | None:
    parts = path.removeprefix("/v1/").split("/")
    if not path.startswith("/v1/") or parts[0] not in ("files", "batches"):
        return None
    if parts[0] == "files":
        if method == "POST" and len(parts) == 1:
            return "upload_form", ""
        if method == "GET" and len(parts) == 3 and parts[2] == "content":
            return "file_content", unquote(parts[1])
        if method == "DELETE" and len(parts) == 2:
            return "file_delete", unquote(parts[1])
        return None
    if method == "POST" and len(parts) == 1:
        return "create", ""
    if method == "GET" and len(parts) == 2:
        return "retrieve", unquote(parts[1])
    if method == "POST" and len(parts) == 3 and parts[2] == "cancel":
        return "cancel", unquote(parts[1])
    return None


def _gemini_route(method: str, path: str) -> tuple[str, str] | None:
    if path == "/upload/v1beta/files" and method == "POST":
        return "gemini_upload", ""
    for prefix in ("/download/v1beta/files/", "/v1beta/files/"):
        if path.startswith(prefix) and path.endswith(":download") and method == "GET":
            return "gemini_download", unquote(path[len(prefix):-len(":download")])
    if path.startswith("/v1beta/files/") and method == "DELETE":
        return "file_delete", unquote(path[len("/v1beta/files/"):])
    if path.startswith("/v1beta/models/") and path.endswith(":asyncBatchEmbedContent") \
            and method == "POST":
        return "gemini_create", unquote(path[len("/v1beta/models/"):-len(
            ":asyncBatchEmbedContent")])
    if path.startswith("/v1beta/batches/"):
        rest = unquote(path[len("/v1beta/batches/"):])
        if method == "POST" and rest.endswith(":cancel"):
            return "gemini_cancel", rest.removesuffix(":cancel")
        if method == "GET" and "/" not in rest and ":" not in rest:
            return "gemini_get", rest
    return None


def _multipart(content_type: str, raw: bytes) -> list[Any]:
    """The parts of a multipart body (form-data or related), parsed by the standard library."""
    if not content_type.startswith("multipart/"):
        return []
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    return list(message.iter_parts()) if message.is_multipart() else []


def _request_text(request: dict[str, Any]) -> str:
    """The text of one batch line's request (OpenAI/Voyage ``input``, Gemini ``content``)."""
    value = request.get("input")
    if isinstance(value, list):
        value = value[0] if value else ""
    if isinstance(value, str):
        return value
    parts = (request.get("content") or {}).get("parts") or []
    return "".join(p.get("text", "") for p in parts if isinstance(p, dict))


def _loads(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def _json(status: int, data: Any) -> Answer:
    return status, {"Content-Type": "application/json"}, json.dumps(data).encode(), 0.0
