"""A real HTTP server on 127.0.0.1 standing in for GitHub's API and the Copilot API together.

- ``GET /copilot_internal/user`` (GitHub): ``Authorization: Bearer <GitHub token>`` must be a
  known token, else GitHub's 401 ``Bad credentials``; a token of an account without Copilot
  is a 403. The answer names the Copilot API base in ``endpoints.api`` (``<root>/capi``, on
  this server), as GitHub's does.
- ``GET /capi/models`` and ``POST /capi/embeddings`` (Copilot): the bearer must be a token
  that passed the user check, not revoked since (a revoked one gets 401 ``token expired``),
  with the headers Copilot's API wants from an IDE client (``Editor-Version``,
  ``Copilot-Integration-Id``; missing, a 400). Models list chat and embedding models in
  Copilot's shape; embeddings answer OpenAI's ``data[].embedding``/``index``.

Faults come as a script for the embeddings endpoint (:class:`Fault` ``429``, ``500``). A
401's body never repeats the token. Vectors are
:func:`~tests.fakes.provider_doubles.double_vector` of the text, salted with the model.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tests.fakes.provider_doubles import (
    Fault,
    LoopbackDouble,
    Seen,
    _json,
    double_vector,
    record,
)

__all__ = ["CopilotDouble", "Fault"]

MODELS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072}


@dataclass
class CopilotDouble(LoopbackDouble):
    """A running fake GitHub + Copilot API; use as a context manager."""

    tokens: tuple[str, ...] = field(default=(), repr=False)
    no_copilot: tuple[str, ...] = field(default=(), repr=False)
    models: tuple[str, ...] = ("text-embedding-3-small", "text-embedding-3-large")
    script: list[Fault] = field(default_factory=list)
    requests: list[Seen] = field(default_factory=list, repr=False)
    #: ``endpoints.api`` to announce instead of this server's ``/capi`` (None: this server's).
    api_url: str | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = None
        self._checked: set[str] = set()
        self._revoked: set[str] = set()


    def vouch(self, token: str) -> None:
        """Let the Copilot API take ``token`` without a user check (a ``remote.baseUrl`` proxy
        in front of it, which OpenClaw sends the configured key as it is)."""
        with self._lock:
            self._checked.add(token)

    def revoke(self, token: str) -> None:
        """Expire ``token``: the Copilot API refuses it until it passes the user check again."""
        with self._lock:
            self._revoked.add(token)
            self._checked.discard(token)

    def paths(self) -> list[tuple[str, str, int]]:
        """(method, path, status) of every request, in order."""
        return [(r.method, r.path, r.status) for r in self.requests]

    @staticmethod
    def vector(model: str, text: str) -> np.ndarray:
        """The double's embedding of ``text`` by ``model``."""
        return double_vector(text, MODELS[model], salt=model)

    # -- serving ----------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: dict[str, str], raw: bytes
               ) -> tuple[int, dict[str, str], bytes, float]:
        """(status, headers, body, delay) for one request (called by the shared handler)."""
        seen = record(self.requests, self._lock, method, path, headers, raw)
        answer = self._answer(method, path, headers, seen.body)
        seen.status = answer[0]
        return answer

    def _bearer(self, headers: dict[str, str]) -> str:
        auth = headers.get("authorization", "")
        return auth[7:] if auth.startswith("Bearer ") else ""

    def _answer(self, method: str, path: str, headers: dict[str, str], body: Any
                ) -> tuple[int, dict[str, str], bytes, float]:
        token = self._bearer(headers)
        if method == "GET" and path == "/copilot_internal/user":
            return self._user(token, headers)
        if not path.startswith("/capi/"):
            return _json(404, {"message": "Not Found"})
        with self._lock:
            valid = token in self._checked and token not in self._revoked
            revoked = token in self._revoked
        if not valid:
            message = "unauthorized: token expired" if revoked else "unauthorized: bad token"
            return _json(401, {"error": {"message": message, "code": "unauthorized"}})
        if not headers.get("editor-version") or not headers.get("copilot-integration-id"):
            return _json(400, {"error": {"message": "missing Editor-Version or "
                                                    "Copilot-Integration-Id header for IDE auth",
                                         "code": "bad_request"}})
        if method == "GET" and path == "/capi/models":
            data = [{"id": "gpt-4o", "object": "model", "capabilities": {"type": "chat"},
                     "supported_endpoints": ["/chat/completions"]}]
            data += [{"id": m, "object": "model", "capabilities": {"type": "embeddings"}}
                     for m in self.models]
            return _json(200, {"data": data, "object": "list"})
        if method == "POST" and path == "/capi/embeddings":
            return self._embeddings(body)
        return _json(404, {"error": {"message": "not found"}})

    def _user(self, token: str, headers: dict[str, str]
              ) -> tuple[int, dict[str, str], bytes, float]:
        if headers.get("accept") != "application/json":
            return _json(415, {"message": "Unsupported Media Type"})
        if token in self.no_copilot:
            return _json(403, {"message": "Resource not accessible by integration",
                               "documentation_url": "https://docs.github.com/rest"})
        if token not in self.tokens:
            return _json(401, {"message": "Bad credentials",
                               "documentation_url": "https://docs.github.com/rest"})
        with self._lock:
            self._checked.add(token)
            self._revoked.discard(token)
        api = self.api_url or f"{self.root}/capi"
        return _json(200, {"login": "octocat", "copilot_plan": "individual",
                           "chat_enabled": True,
                           "endpoints": {"api": api, "proxy": f"{self.root}/proxy",
                                         "telemetry": f"{self.root}/telemetry"}})

    def _embeddings(self, body: Any) -> tuple[int, dict[str, str], bytes, float]:
        with self._lock:
            fault = self.script.pop(0) if self.script else None
        if fault is not None:
            status = int(fault.kind)
            return _json(status, {"error": {"message": "rate limited" if status == 429
                                            else "internal error", "code": str(status)}},
                         {"Retry-After": "0"} if status == 429 else None)
        if not isinstance(body, dict) or body.get("model") not in self.models or \
                not isinstance(body.get("input"), list) or set(body) != {"model", "input"}:
            return _json(400, {"error": {"message": "invalid request", "code": "bad_request"}})
        model = body["model"]
        data = [{"object": "embedding", "index": i,
                 "embedding": self.vector(model, text).tolist()}
                for i, text in enumerate(body["input"])]
        return _json(200, {"object": "list", "data": data[::-1], "model": model,
                           "usage": {"prompt_tokens": 1, "total_tokens": 1}})
