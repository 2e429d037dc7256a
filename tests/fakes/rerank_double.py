"""A real HTTP ``/rerank`` server on 127.0.0.1: the Jina/Cohere shape memq's reranker calls.

``POST /v1/rerank`` with ``{model, query, documents, top_n}`` and ``Authorization: Bearer
<key>`` answers ``{model, results: [{index, relevance_score}], usage}``, best first, at most
``top_n`` results. A document's score is its term overlap with the query (the share of the
query's distinct words it contains, words being lower-case ``\\w+`` runs), so a test can
predict the reranked order; ``logits=True`` answers ``10 × overlap − 5`` instead, as
llama.cpp's server gives raw logits. A wrong key is a 401 whose body echoes the key presented
(as OpenAI's "Incorrect API key provided: …" does), to prove the client never repeats it.

Faults come as a script, one per coming request: ``Fault("stall", seconds=…)`` answers late,
``Fault("500")``, ``Fault("401")``, ``Fault("malformed")`` (cut JSON) and ``Fault("partial")``
(one result short). Every request is recorded in ``requests`` (the shared
:class:`~tests.fakes.provider_doubles.Seen`).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.provider_doubles import Fault, LoopbackDouble, Seen, _json, record

__all__ = ["Fault", "RerankDouble", "overlap"]

_WORD = re.compile(r"\w+")
PATH = "/v1/rerank"


def overlap(query: str, document: str) -> float:
    """The share of the query's distinct words that ``document`` contains (0..1)."""
    wanted = set(_WORD.findall(query.lower()))
    if not wanted:
        return 0.0
    return len(wanted & set(_WORD.findall(document.lower()))) / len(wanted)


@dataclass
class RerankDouble(LoopbackDouble):
    """A running fake ``/rerank`` endpoint; use as a context manager."""

    api_key: str | None = "jina_test_rerank_key_0123"
    logits: bool = False
    script: list[Fault] = field(default_factory=list)
    requests: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = None

    @property
    def url(self) -> str:
        """The base URL memq is configured with (``rerank.baseUrl``)."""
        return self.root + "/v1"


    def handle(self, method: str, path: str, headers: dict[str, str], raw: bytes
               ) -> tuple[int, dict[str, str], bytes, float]:
        """(status, headers, body, delay) for one request (called by the shared handler)."""
        seen = record(self.requests, self._lock, method, path, headers, raw)
        with self._lock:
            fault = self.script.pop(0) if self.script else None
        seen.status, out_headers, payload, delay = self._answer(path, headers, seen.body, fault)
        return seen.status, out_headers, payload, delay

    def _answer(self, path: str, headers: dict[str, str], body: Any, fault: Fault | None
                ) -> tuple[int, dict[str, str], bytes, float]:
        if path != PATH:
            return 404, {"Content-Type": "text/plain"}, b"404 page not found", 0.0
        presented = headers.get("authorization")
        if (self.api_key is not None and presented != f"Bearer {self.api_key}") or (
                fault is not None and fault.kind == "401"):
            return _json(401, {"detail": f"Incorrect API key provided: {presented}."})
        if fault is not None and fault.kind == "500":
            return _json(500, {"detail": "internal error"})
        if fault is not None and fault.kind == "malformed":
            return 200, {"Content-Type": "application/json"}, b'{"results": [ {"ind', 0.0
        if not isinstance(body, dict) or not isinstance(body.get("query"), str) or not (
                isinstance(body.get("documents"), list)):
            return _json(400, {"detail": "query and documents are required"})
        docs = [str(d) for d in body["documents"]]
        scored = sorted(((i, overlap(body["query"], d)) for i, d in enumerate(docs)),
                        key=lambda item: (-item[1], item[0]))
        scored = scored[:int(body.get("top_n") or len(docs))]
        if fault is not None and fault.kind == "partial":
            scored = scored[:-1]
        results = [{"index": i, "relevance_score": 10 * s - 5 if self.logits else s}
                   for i, s in scored]
        status, out, payload, _ = _json(200, {"model": body.get("model"), "results": results,
                                              "usage": {"total_tokens": len(docs)}})
        return status, out, payload, fault.seconds if fault is not None else 0.0
