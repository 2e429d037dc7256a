"""Real HTTP servers on 127.0.0.1 that speak the embedding APIs memq calls.

One :class:`ProviderDouble` per API style: ``openai`` (also ``mistral``, and LM Studio's and
DeepInfra's OpenAI-compatible APIs, ``lmstudio`` and ``deepinfra``: same shape, their own
paths), ``voyage``, ``gemini`` and ``ollama``. Each checks the auth header the real service
wants, answers with the real service's JSON shapes (float or base64 vectors,
``data[].index``, Gemini ``values``, Ollama's 2-D ``embeddings``), and records every request so
tests can count and inspect them.
The shapes follow ``shared/reference/peers-and-apis.md`` §E and are proven faithful by driving
the doubles with the providers' own SDKs (``tests/test_provider_doubles.py``).

Vectors are deterministic: a hash of the text seeds them, scaled so they are *not* unit length
(a client that forgets to normalise is caught).

The Gemini double also takes image and audio parts (``inlineData {mimeType, data}``), as
``gemini-embedding-2-preview`` does, and refuses a MIME type that model does not take with the
real API's 400 ``Unsupported MIME type``. To make "found by a text query" mean something, it
*sees* what a file shows the way a test can control: the caption in a PNG ``tEXt`` chunk or in
a WAV ``LIST/INFO ICMT`` comment stands for the picture's or recording's content (without one,
the bytes' sha256 does), and a media entry's vector is the sum of that content's vector and
its text parts' vector. A query for the caption then lands near the file, although neither its
name nor its label shares a word with the caption. Faults are injected either as a script (one
:class:`Fault` per coming request) or at random with a seeded rate: 429 with or without
Retry-After, quota exhaustion, 500/503, stalls, context-length errors, wrong widths and
malformed JSON, each with the provider's own error body.

Worker processes reach a double running in the test process over loopback, so fault storms
are aimed at real ``celery worker`` processes.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import json
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Self

import numpy as np

if TYPE_CHECKING:
    from tests.fakes.batch_doubles import BatchService

__all__ = ["Fault", "ProviderDouble", "double_vector", "media_content", "media_vector"]

STYLES = ("openai", "mistral", "voyage", "gemini", "ollama", "lmstudio", "deepinfra")
PREFIX = {"openai": "/v1", "mistral": "/v1", "voyage": "/v1", "gemini": "/v1beta", "ollama": "",
          "lmstudio": "/v1", "deepinfra": "/v1/openai"}
DEFAULT_DIMS = {"openai": 1536, "mistral": 1024, "voyage": 1024, "gemini": 3072, "ollama": 768,
                "lmstudio": 768, "deepinfra": 1024}
#: The styles that answer OpenAI's ``POST {prefix}/embeddings``.
OPENAI_SHAPED = ("openai", "mistral", "voyage", "lmstudio", "deepinfra")
#: Models whose width differs from their service's default above (as the real services answer).
MODEL_DIMS = {"text-embedding-3-large": 3072, "codestral-embed": 1536, "voyage-3-lite": 512,
              "text-embedding-004": 768}
VECTOR_SCALE = 3.5
#: What gemini-embedding-2-preview takes inline (Google's model page: PNG, JPEG, MP3, WAV).
GEMINI_INLINE_MIME_TYPES = ("image/png", "image/jpeg", "audio/mpeg", "audio/mp3", "audio/wav")


def double_vector(text: str, dims: int, salt: str = "") -> np.ndarray:
    """The double's embedding of ``text``: hash-seeded, length ``VECTOR_SCALE``."""
    seed = int.from_bytes(hashlib.sha256(f"{salt}\0{text}".encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(dims)
    return (v / np.linalg.norm(v) * VECTOR_SCALE).astype(np.float32)


def media_content(data: bytes) -> str:
    """What the double "sees" in a file: its PNG tEXt / WAV ICMT caption, else its sha256."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        pos = 8
        while pos + 8 <= len(data):
            length, kind = int.from_bytes(data[pos:pos + 4], "big"), data[pos + 4:pos + 8]
            if kind == b"tEXt":
                _, _, text = data[pos + 8:pos + 8 + length].partition(b"\0")
                return text.decode("latin-1")
            pos += 12 + length
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        found = data.find(b"ICMT")
        if found >= 0:
            length = int.from_bytes(data[found + 4:found + 8], "little")
            return data[found + 8:found + 8 + length].rstrip(b"\0").decode("latin-1")
    return "sha256:" + hashlib.sha256(data).hexdigest()


def media_vector(text: str, blobs: list[bytes], dims: int) -> np.ndarray:
    """A media entry's vector: its content's vector plus its text parts' vector."""
    v = double_vector(text, dims) + sum(double_vector(media_content(b), dims) for b in blobs)
    return (v / np.linalg.norm(v) * VECTOR_SCALE).astype(np.float32)


@dataclass(frozen=True)
class Fault:
    """One injected failure. ``kind``: 429, quota, 500, 503, stall, context, wrong_dims,
    malformed, 401. ``retry_after`` adds a Retry-After header (429/503) or Gemini RetryInfo;
    ``seconds`` is how long a stall sleeps before answering normally, or an error before it
    is sent."""

    kind: str
    retry_after: float | None = None
    seconds: float = 0.0


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int = 0
    at: float = field(default_factory=time.monotonic)


def record(requests: list[Seen], lock: threading.Lock, method: str, path: str,
           headers: dict[str, str], raw: bytes) -> Seen:
    """One request, its JSON body decoded (None when it is not JSON), appended to
    ``requests`` (a double's record; the rerank double's too)."""
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    seen = Seen(method, path, headers, body)
    with lock:
        requests.append(seen)
    return seen


class LoopbackDouble:
    """A double served over HTTP on 127.0.0.1 (a free port) between :meth:`start` and
    :meth:`stop` (or for a ``with`` block); its ``handle`` method answers each request (see
    ``_Handler``). Subclasses set ``self._server = None`` in their ``__post_init__``."""

    _server: ThreadingHTTPServer | None

    @property
    def root(self) -> str:
        """``http://127.0.0.1:<port>`` of the running double."""
        assert self._server is not None, "start the double first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Self:
        double = self

        class Handler(_Handler):
            owner = double  # type: ignore[assignment]

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class ProviderDouble(LoopbackDouble):
    """A running fake of one provider API; use as a context manager."""

    style: str = "openai"
    api_key: str | None = "sk-test-double"
    dims: int | None = None
    script: list[Fault] = field(default_factory=list)
    fault_rate: float = 0.0
    random_faults: tuple[Fault, ...] = (Fault("429"), Fault("500"))
    seed: int = 0
    max_input_bytes: int | None = None
    legacy_ollama: bool = False
    #: Seconds each embedding answer takes (a real service's round trip, so a test can catch
    #: a worker mid-request).
    latency: float = 0.0
    #: Embedding requests served per second (a sliding one-second window; 0: no limit). Beyond
    #: it the double answers 429 with a Retry-After of when the window frees, as a provider's
    #: per-second rate limit does.
    rate_limit_rps: float = 0.0
    requests: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(f"unknown style {self.style!r}")
        self._fixed_dims = self.dims is not None
        self.dims = self.dims or DEFAULT_DIMS[self.style]
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self._served: collections.deque[float] = collections.deque()
        self._server: ThreadingHTTPServer | None = None
        #: The Files and Batches APIs (openai, voyage, gemini): ``double.batches.advance()``.
        self.batches: BatchService | None = None
        if self.style in ("openai", "voyage", "gemini"):
            from tests.fakes.batch_doubles import BatchService

            self.batches = BatchService(self, seed=self.seed)

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL a client is configured with (``.../v1``, ``.../v1beta``, or the root)."""
        return self.root + PREFIX[self.style]

    # -- what tests read --------------------------------------------------------------------

    def embed_requests(self) -> list[Seen]:
        """The embedding calls (batch and file calls are in ``requests`` too)."""
        return [r for r in self.requests if r.method == "POST" and not self._is_batch(r.path)]

    def _is_batch(self, path: str) -> bool:
        return self.batches is not None and self.batches.is_route(path)

    def model_dims(self, model: str, body: Any) -> int:
        """The vector width the real service answers for ``model`` and the request's options."""
        dims = self.dims or 0
        if not self._fixed_dims:
            dims = MODEL_DIMS.get(model.removeprefix("models/"), dims)
        return _requested_dims(body, dims)

    def vector(self, text: str) -> np.ndarray:
        return double_vector(text, self.dims or 0)

    def stats(self) -> dict[str, Any]:
        seen = self.embed_requests()
        texts = sum(len(_texts(self.style, r.path, r.body)) for r in seen if r.status == 200)
        codes: dict[str, int] = {}
        for r in seen:
            codes[str(r.status)] = codes.get(str(r.status), 0) + 1
        return {"requests": len(seen), "statuses": codes, "texts_embedded": texts}

    # -- serving ----------------------------------------------------------------------------

    def _next_fault(self) -> Fault | None:
        with self._lock:
            if self.script:
                return self.script.pop(0)
            if self.rate_limit_rps:
                now = time.monotonic()
                while self._served and now - self._served[0] >= 1.0:
                    self._served.popleft()
                if len(self._served) >= self.rate_limit_rps:
                    return Fault("429", retry_after=round(1.0 - (now - self._served[0]), 3))
                self._served.append(now)
            if self.fault_rate and self._rng.random() < self.fault_rate:
                return self._rng.choice(self.random_faults)
        return None

    def handle(self, method: str, path: str, headers: dict[str, str], raw: bytes
               ) -> tuple[int, dict[str, str], bytes, float]:
        """(status, headers, body, delay) for one request."""
        seen = record(self.requests, self._lock, method, path, headers, raw)
        body = seen.body
        if self._is_batch(path):
            status, out_headers, payload, delay = self._batch_answer(method, path, headers, raw)
        else:
            status, out_headers, payload, delay = self._answer(path, headers, body)
        seen.status = status
        return status, out_headers, payload, delay

    def _refused(self, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes, float]:
        # Like OpenAI's "Incorrect API key provided: sk-...", echo what was presented, so
        # tests prove the client scrubs keys out of error text.
        presented = headers.get("authorization") or headers.get("x-goog-api-key") or "none"
        return _error(self.style, 401, f"Incorrect API key provided: {presented}.")

    def _batch_answer(self, method: str, path: str, headers: dict[str, str], raw: bytes
                      ) -> tuple[int, dict[str, str], bytes, float]:
        """A Files/Batches call: the same auth and scripted HTTP faults as embeddings."""
        assert self.batches is not None
        if not self._authorised(headers) and not self.batches.is_upload_session(path):
            return self._refused(headers)
        fault = self._next_fault()
        if fault is not None and fault.kind in ("429", "quota", "500", "503", "401"):
            return _error(self.style, fault.kind, fault.kind, retry_after=fault.retry_after)
        answer = self.batches.handle(method, path, headers, raw)
        assert answer is not None
        return answer

    def _answer(self, path: str, headers: dict[str, str], body: Any
                ) -> tuple[int, dict[str, str], bytes, float]:
        route = self._route(path)
        if route is None:
            return 404, {"Content-Type": "text/plain"}, b"404 page not found", 0.0
        if not self._authorised(headers):
            return self._refused(headers)
        texts = _texts(self.style, path, body)
        if texts is None:
            return _error(self.style, 400, "bad_request")
        blobs = _inline_parts(body) if self.style == "gemini" else [[] for _ in texts]
        if isinstance(blobs, str):
            return _error(self.style, 400, blobs)
        fault = self._next_fault()
        delay = self.latency
        if fault is not None:
            if fault.kind == "stall":
                delay += fault.seconds
            elif fault.kind == "malformed":
                return 200, {"Content-Type": "application/json"}, b'{"data": [ {"embed', 0.0
            elif fault.kind != "wrong_dims":
                status, hdrs, payload, _ = _error(self.style, fault.kind, fault.kind,
                                                  retry_after=fault.retry_after)
                return status, hdrs, payload, fault.seconds
        if self.max_input_bytes is not None and any(
            len(t.encode()) > self.max_input_bytes for t in texts
        ):
            return _error(self.style, "context", "context")
        model = str(body.get("model") or path.rsplit("/", 1)[-1].split(":")[0])
        dims = self.model_dims(model, body)
        if fault is not None and fault.kind == "wrong_dims":
            dims += 1
        vectors = [media_vector(t, b, dims) if b else double_vector(t, dims)
                   for t, b in zip(texts, blobs, strict=True)]
        status, hdrs, payload, _ = _json(200, _success(self.style, route, body, vectors))
        return status, hdrs, payload, delay

    def _route(self, path: str) -> str | None:
        path = path.split("?", 1)[0]
        if self.style in OPENAI_SHAPED:
            return "embeddings" if path == f"{PREFIX[self.style]}/embeddings" else None
        if self.style == "gemini":
            if path.startswith("/v1beta/models/") and path.endswith(":embedContent"):
                return "embedContent"
            if path.startswith("/v1beta/models/") and path.endswith(":batchEmbedContents"):
                return "batchEmbedContents"
            return None
        if path == "/api/embed" and not self.legacy_ollama:
            return "embed"
        if path == "/api/embeddings":
            return "embeddings"
        if path == "/v1/embeddings":
            return "openai"
        return None

    def _authorised(self, headers: dict[str, str]) -> bool:
        if self.api_key is None:
            return True
        if self.style == "gemini":
            return headers.get("x-goog-api-key") == self.api_key
        return headers.get("authorization") == f"Bearer {self.api_key}"


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client killed mid-request (a crash test) resets its connection: not news."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    owner: ProviderDouble
    protocol_version = "HTTP/1.1"

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, out_headers, payload, delay = self.owner.handle(method, self.path, headers, raw)
        if delay:
            time.sleep(delay)
        try:
            self.send_response(status)
            for name, value in out_headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test)

    def do_POST(self) -> None:
        self._serve("POST")

    def do_GET(self) -> None:
        self._serve("GET")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# Wire shapes


def _json(status: int, data: Any, headers: dict[str, str] | None = None
          ) -> tuple[int, dict[str, str], bytes, float]:
    return status, {"Content-Type": "application/json", **(headers or {})}, \
        json.dumps(data).encode(), 0.0


def _texts(style: str, path: str, body: Any) -> list[str] | None:
    """The input texts of a request, or None if the request is malformed for this API."""
    if not isinstance(body, dict):
        return None
    if style == "gemini":
        if path.endswith(":embedContent"):
            parts = (body.get("content") or {}).get("parts") or []
            return ["".join(p.get("text", "") for p in parts)]
        reqs = body.get("requests")
        if not isinstance(reqs, list):
            return None
        return ["".join(p.get("text", "") for p in (r.get("content") or {}).get("parts") or [])
                for r in reqs]
    if style == "ollama" and path == "/api/embeddings":
        prompt = body.get("prompt")
        return [prompt] if isinstance(prompt, str) else None
    value = body.get("input")
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None


def _inline_parts(body: dict[str, Any]) -> list[list[bytes]] | str:
    """Each Gemini entry's inline files, or the real API's 400 message for a bad part."""
    entries = body.get("requests") if "requests" in body else [body]
    out: list[list[bytes]] = []
    for i, entry in enumerate(entries):
        blobs = []
        for j, part in enumerate((entry.get("content") or {}).get("parts") or []):
            inline = part.get("inlineData")
            if inline is None:
                continue
            mime = inline.get("mimeType")
            if mime not in GEMINI_INLINE_MIME_TYPES:
                return f"Unsupported MIME type: {mime}"
            try:
                blobs.append(base64.b64decode(inline.get("data") or "", validate=True))
            except ValueError:
                return (f"Invalid value at 'requests[{i}].content.parts[{j}].inline_data.data' "
                        "(TYPE_BYTES), Base64 decoding failed")
        out.append(blobs)
    return out


def _requested_dims(body: Any, dims: int) -> int:
    """Honour outputDimensionality / dimensions / output_dimension like the real services."""
    if not isinstance(body, dict):
        return dims
    for key in ("dimensions", "output_dimension", "outputDimensionality"):
        if isinstance(body.get(key), int):
            return body[key]
    reqs = body.get("requests")
    if isinstance(reqs, list) and reqs and isinstance(reqs[0].get("outputDimensionality"), int):
        return reqs[0]["outputDimensionality"]
    return dims


def _encode(vector: np.ndarray, encoding: Any) -> Any:
    if encoding == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
    return [float(x) for x in vector]


def _success(style: str, route: str, body: dict[str, Any], vectors: list[np.ndarray]) -> Any:
    tokens = sum(max(1, int(np.abs(v).sum()) % 50) for v in vectors)
    if style == "gemini":
        if route == "embedContent":
            return {"embedding": {"values": [float(x) for x in vectors[0]]}}
        return {"embeddings": [{"values": [float(x) for x in v]} for v in vectors]}
    if style == "ollama" and route == "embeddings":
        return {"embedding": [float(x) for x in vectors[0]]}
    if style == "ollama" and route == "embed":
        return {"model": body.get("model"), "embeddings": [[float(x) for x in v] for v in vectors],
                "total_duration": 14143917, "load_duration": 1019500, "prompt_eval_count": tokens}
    encoding = body.get("encoding_format")
    data = [{"object": "embedding", "index": i, "embedding": _encode(v, encoding)}
            for i, v in enumerate(vectors)]
    if style == "mistral":
        return {"id": "embd-0a1b2c", "object": "list", "data": data, "model": body.get("model"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens,
                          "completion_tokens": 0}}
    if style == "voyage":
        return {"object": "list", "data": data, "model": body.get("model"),
                "usage": {"total_tokens": tokens}}
    return {"object": "list", "data": list(reversed(data)), "model": body.get("model"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def _error(style: str, kind: str | int, what: str, *, retry_after: float | None = None
           ) -> tuple[int, dict[str, str], bytes, float]:
    """The provider's own error body for ``kind`` (an HTTP status or a fault name)."""
    status = {"429": 429, "quota": 429, "500": 500, "503": 503, "context": 400,
              "401": 401}.get(str(kind), kind if isinstance(kind, int) else 500)
    headers: dict[str, str] = {}
    if retry_after is not None and style != "gemini":
        headers["Retry-After"] = f"{retry_after:g}"
    message = {
        "429": "Rate limit reached for text-embedding-3-small in organization org-x on requests "
               "per min (RPM): Limit 3000, Used 3000, Requested 1.",
        "quota": "You exceeded your current quota, please check your plan and billing details.",
        "500": "The server had an error while processing your request. Sorry about that!",
        "503": "The engine is currently overloaded, please try again later",
        "context": "This model's maximum context length is 8192 tokens, however you requested "
                   "9000 tokens (9000 in your prompt). Please reduce your prompt.",
    }.get(str(kind), what)
    if style == "gemini":
        gstatus = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE",
                   400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED"}.get(status, "UNKNOWN")
        details: list[dict[str, Any]] = []
        if kind in ("429", "quota"):
            # Per-minute and per-day exhaustion read alike; only the QuotaFailure's quotaId
            # tells them apart (see test_gemini_quota_period_decides).
            message = "Resource has been exhausted (e.g. check quota)."
            period = "PerDay" if kind == "quota" else "PerMinute"
            details.append({"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                            "violations": [{"quotaMetric": "generativelanguage.googleapis.com/"
                                            "embed_content_free_tier_requests",
                                            "quotaId": f"EmbedContentRequests{period}PerProject"
                                                       "PerModel-FreeTier"}]})
        if kind == "context":
            message = "The input token count (9000) exceeds the maximum number of tokens " \
                      "allowed (2048)."
        if kind == 401:
            status, gstatus = 400, "INVALID_ARGUMENT"
            message = f"API key not valid. Please pass a valid API key. ({what})"
        if retry_after is not None:
            details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo",
                            "retryDelay": f"{retry_after:g}s"})
        return _json(status, {"error": {"code": status, "message": message, "status": gstatus,
                                        "details": details}}, headers)
    if style == "ollama":
        if kind == "context":
            message = "the input length exceeds the context length"
        return _json(status, {"error": message}, headers)
    if style == "voyage":
        return _json(status, {"detail": message}, headers)
    if style == "mistral":
        return _json(status, {"object": "error", "message": message, "type": str(kind),
                              "param": None, "code": str(status)}, headers)
    code = {"429": "rate_limit_exceeded", "quota": "insufficient_quota",
            "401": "invalid_api_key"}.get(str(kind))
    etype = {"429": "requests", "quota": "insufficient_quota", "context":
             "invalid_request_error", "401": "invalid_request_error"}.get(str(kind), "server_error")
    return _json(status, {"error": {"message": message, "type": etype, "param": None,
                                    "code": code}}, headers)
