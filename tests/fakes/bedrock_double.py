"""A real HTTP server on 127.0.0.1 that answers Bedrock Runtime's ``InvokeModel`` as AWS does.

``POST /model/<modelId>/invoke`` (the id URL-encoded) with Titan, Cohere, Nova and TwelveLabs
bodies. Every request is authenticated the way AWS does it, with its own SigV4 verifier
(written here from AWS's specification, not imported from memq):

- ``Authorization: AWS4-HMAC-SHA256 Credential=<key id>/<day>/<region>/bedrock/aws4_request,
  SignedHeaders=..., Signature=...``: the key id must be known, the scope's day must be
  ``X-Amz-Date``'s, the region the double's and the service ``bedrock``; ``host`` and
  ``x-amz-date`` (and ``x-amz-security-token`` when sent) must be signed; the date within
  5 minutes; a temporary key needs its session token, an expired one is refused. The
  signature is recomputed from the request as received (method, path encoded once more,
  query, signed headers, the body's sha256) with the key's secret; a mismatch is AWS's 403
  ``InvalidSignatureException``.
- ``Authorization: Bearer <Bedrock API key>`` (``AWS_BEARER_TOKEN_BEDROCK``) when the key is
  one of ``bearer_tokens``.

Bodies are checked per family (unknown keys are AWS's 400 "extraneous key"), ``Content-Type``
and ``Accept`` must be ``application/json``. Errors carry AWS's JSON ``{"message"}`` and
``x-amzn-ErrorType`` header. Faults come as a script (:class:`Fault` ``429``, ``500``,
``503``). Vectors are :func:`~tests.fakes.provider_doubles.double_vector` of the text, salted
with the model id.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import numpy as np

from tests.fakes.provider_doubles import (
    Fault,
    LoopbackDouble,
    Seen,
    _json,
    double_vector,
    record,
)

__all__ = ["BedrockDouble", "Fault", "TemporaryKey"]

#: model id -> (family, default width, allowed widths)
MODELS: dict[str, tuple[str, int, tuple[int, ...]]] = {
    "amazon.titan-embed-text-v2:0": ("titan-v2", 1024, (256, 512, 1024)),
    "amazon.titan-embed-text-v1": ("titan-v1", 1536, ()),
    "amazon.titan-embed-g1-text-02": ("titan-v1", 1536, ()),
    "cohere.embed-english-v3": ("cohere-v3", 1024, ()),
    "cohere.embed-multilingual-v3": ("cohere-v3", 1024, ()),
    "cohere.embed-v4:0": ("cohere-v4", 1536, (256, 384, 512, 768, 1024, 1536)),
    "amazon.nova-2-multimodal-embeddings-v1:0": ("nova", 1024, (256, 384, 1024, 3072)),
    "twelvelabs.marengo-embed-3-0-v1:0": ("twelvelabs", 512, ()),
}
_AUTH_RE = re.compile(r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request,"
                      r"\s*SignedHeaders=([a-z0-9;-]+),\s*Signature=([0-9a-f]{64})$")
_FAULTS = {"429": (429, "ThrottlingException", "Too many requests, please wait before trying "
                                                "again."),
           "500": (500, "InternalServerException", "The server encountered an internal error"),
           "503": (503, "ServiceUnavailableException", "Bedrock is unable to process your "
                                                       "request.")}


@dataclass(frozen=True, repr=False)
class TemporaryKey:
    """Temporary credentials: the secret, the session token, and whether it has expired."""

    secret: str
    session_token: str
    expired: bool = False


def _aws_error(status: int, kind: str, message: str) -> tuple[int, dict[str, str], bytes, float]:
    return _json(status, {"message": message},
                 {"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/",
                  "x-amzn-RequestId": "00000000-0000-0000-0000-000000000000"})


def _expected_signature(secret: str, method: str, raw_path: str, headers: dict[str, str],
                        signed: list[str], body: bytes, amz_date: str, scope: str,
                        region: str, service: str) -> str:
    """SigV4 as AWS's documentation states it, from the request as the server received it."""
    path, _, query = raw_path.partition("?")
    canonical_uri = "/".join(quote(seg, safe="-_.~") for seg in path.split("/")) or "/"
    params = sorted((quote(unquote(k), safe="-_.~"), quote(unquote(v), safe="-_.~"))
                    for k, _, v in (p.partition("=") for p in query.split("&") if p))
    canonical_query = "&".join(f"{k}={v}" for k, v in params)
    canonical_headers = "".join(h + ":" + " ".join(headers.get(h, "").split()) + "\n"
                                for h in signed)
    request = "\n".join([method, canonical_uri, canonical_query, canonical_headers,
                         ";".join(signed), hashlib.sha256(body).hexdigest()])
    string_to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                                hashlib.sha256(request.encode()).hexdigest()])
    k_date = hmac.new(f"AWS4{secret}".encode(), amz_date[:8].encode(), hashlib.sha256).digest()
    k_region = hmac.new(k_date, region.encode(), hashlib.sha256).digest()
    k_service = hmac.new(k_region, service.encode(), hashlib.sha256).digest()
    k_signing = hmac.new(k_service, b"aws4_request", hashlib.sha256).digest()
    return hmac.new(k_signing, string_to_sign.encode(), hashlib.sha256).hexdigest()


@dataclass
class BedrockDouble(LoopbackDouble):
    """A running fake Bedrock Runtime endpoint; use as a context manager. ``keys`` maps access
    key ids to their secret (or a :class:`TemporaryKey`)."""

    keys: dict[str, str | TemporaryKey] = field(default_factory=dict, repr=False)
    region: str = "us-east-1"
    bearer_tokens: tuple[str, ...] = field(default=(), repr=False)
    script: list[Fault] = field(default_factory=list)
    requests: list[Seen] = field(default_factory=list, repr=False)
    #: Seconds a signature's date may differ from the double's clock (AWS: 5 minutes).
    max_skew_s: float = 300.0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = None

    @property
    def url(self) -> str:
        """The endpoint (``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``)."""
        return self.root


    def invocations(self) -> list[Seen]:
        """The ``InvokeModel`` requests received (any outcome)."""
        return [r for r in self.requests if r.path.startswith("/model/")]

    @staticmethod
    def vector(model: str, text: str, dims: int) -> np.ndarray:
        """The double's embedding of ``text`` by ``model`` at width ``dims``."""
        return double_vector(text, dims, salt=model)

    # -- serving ----------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: dict[str, str], raw: bytes
               ) -> tuple[int, dict[str, str], bytes, float]:
        """(status, headers, body, delay) for one request (called by the shared handler)."""
        seen = record(self.requests, self._lock, method, path, headers, raw)
        answer = self._answer(method, path, headers, raw, seen.body)
        seen.status = answer[0]
        return answer

    def _answer(self, method: str, path: str, headers: dict[str, str], raw: bytes,
                body: Any) -> tuple[int, dict[str, str], bytes, float]:
        refusal = self._authenticate(method, path, headers, raw)
        if refusal is not None:
            return refusal
        with self._lock:
            fault = self.script.pop(0) if self.script else None
        if fault is not None:
            return _aws_error(*_FAULTS[fault.kind])
        found = re.fullmatch(r"/model/([^/]+)/invoke", urlsplit(path).path)
        if method != "POST" or found is None:
            return _aws_error(404, "UnknownOperationException", "Unknown operation")
        model = re.sub(r"^(?:us|eu|ap|apac|au|jp|global)\.", "", unquote(found.group(1)))
        if model not in MODELS:  # (an inference profile id names its model after the prefix)
            return _aws_error(400, "ValidationException",
                              "The provided model identifier is invalid.")
        if headers.get("content-type") != "application/json" or \
                headers.get("accept") != "application/json":
            return _aws_error(415, "UnsupportedMediaTypeException", "Unsupported media type")
        if not isinstance(body, dict):
            return _aws_error(400, "ValidationException", "Malformed input request, please "
                                                          "reformat your input and try again.")
        return self._embed(model, body)

    def _authenticate(self, method: str, path: str, headers: dict[str, str], raw: bytes
                      ) -> tuple[int, dict[str, str], bytes, float] | None:
        auth = headers.get("authorization", "")
        if auth.startswith("Bearer "):
            if auth[7:] in self.bearer_tokens:
                return None
            return _aws_error(403, "UnrecognizedClientException",
                              "Authentication failed: Please make sure your API Key is valid.")
        found = _AUTH_RE.match(auth)
        if found is None:
            return _aws_error(403, "MissingAuthenticationTokenException",
                              "Missing Authentication Token")
        key_id, day, region, service, signed_text, got = found.groups()
        key = self.keys.get(key_id)
        if key is None:
            return _aws_error(403, "UnrecognizedClientException",
                              "The security token included in the request is invalid.")
        secret = key.secret if isinstance(key, TemporaryKey) else key
        signed = signed_text.split(";")
        amz_date = headers.get("x-amz-date", "")
        if "host" not in signed or "x-amz-date" not in signed or day != amz_date[:8]:
            return _aws_error(403, "IncompleteSignatureException",
                              "Authorization header requires host and x-amz-date to be signed, "
                              "and the credential scope's date to be X-Amz-Date's")
        if region != self.region or service != "bedrock":
            return _aws_error(403, "InvalidSignatureException",
                              f"Credential should be scoped to a valid region ('{self.region}') "
                              "and to the service 'bedrock'.")
        token = headers.get("x-amz-security-token")
        if token is not None and "x-amz-security-token" not in signed:
            return _aws_error(403, "InvalidSignatureException",
                              "x-amz-security-token must be signed")
        try:
            when = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        except ValueError:
            return _aws_error(403, "IncompleteSignatureException", "Invalid X-Amz-Date")
        if abs(time.time() - when.timestamp()) > self.max_skew_s:
            return _aws_error(403, "InvalidSignatureException",
                              f"Signature expired: {amz_date} is now earlier than the allowed "
                              "window.")
        expected = _expected_signature(secret, method, path, headers, signed, raw, amz_date,
                                       f"{day}/{region}/{service}/aws4_request", region, service)
        if not hmac.compare_digest(expected, got):
            return _aws_error(403, "InvalidSignatureException",
                              "The request signature we calculated does not match the "
                              "signature you provided. Check your AWS Secret Access Key and "
                              "signing method. Consult the service documentation for details.")
        if isinstance(key, TemporaryKey):
            if token != key.session_token:
                return _aws_error(403, "UnrecognizedClientException",
                                  "The security token included in the request is invalid.")
            if key.expired:
                return _aws_error(403, "ExpiredTokenException",
                                  "The security token included in the request is expired")
        elif token is not None:
            return _aws_error(403, "UnrecognizedClientException",
                              "The security token included in the request is invalid.")
        return None

    def _embed(self, model: str, body: dict[str, Any]
               ) -> tuple[int, dict[str, str], bytes, float]:
        family, default, allowed = MODELS[model]
        allowed_keys = {"titan-v2": {"inputText", "dimensions", "normalize", "embeddingTypes"},
                        "titan-v1": {"inputText"},
                        "cohere-v3": {"texts", "input_type", "truncate", "embedding_types"},
                        "cohere-v4": {"texts", "input_type", "truncate", "embedding_types",
                                      "output_dimension", "images", "inputs"},
                        "nova": {"taskType", "singleEmbeddingParams"},
                        "twelvelabs": {"inputType", "text"}}[family]
        extra = sorted(set(body) - allowed_keys)
        if extra:
            return _aws_error(400, "ValidationException",
                              f"Malformed input request: extraneous key [{extra[0]}] is not "
                              "permitted, please reformat your input and try again.")
        bad = _aws_error(400, "ValidationException", "Malformed input request, please reformat "
                                                     "your input and try again.")
        if family.startswith("cohere"):
            texts = body.get("texts")
            if (not isinstance(texts, list) or not 0 < len(texts) <= 96
                    or body.get("input_type") not in ("search_document", "search_query",
                                                      "classification", "clustering")):
                return bad
            dims = body.get("output_dimension", default) if family == "cohere-v4" else default
            if allowed and dims not in allowed:
                return bad
            vectors = [self.vector(model, t, dims).tolist() for t in texts]
            if family == "cohere-v4" and "float" in (body.get("embedding_types") or []):
                return _json(200, {"id": "emb-1", "embeddings": {"float": vectors},
                                   "response_type": "embeddings_by_type", "texts": texts})
            return _json(200, {"id": "emb-1", "embeddings": vectors,
                               "response_type": "embeddings_floats", "texts": texts})
        if family == "nova":
            params = body.get("singleEmbeddingParams") or {}
            text = (params.get("text") or {}).get("value")
            dims = params.get("embeddingDimension", default)
            if body.get("taskType") != "SINGLE_EMBEDDING" or not isinstance(text, str) \
                    or dims not in allowed:
                return bad
            return _json(200, {"embeddings": [{"embeddingType": "TEXT", "embedding":
                                               self.vector(model, text, dims).tolist()}]})
        if family == "twelvelabs":
            text = (body.get("text") or {}).get("inputText")
            if body.get("inputType") != "text" or not isinstance(text, str):
                return bad
            return _json(200, {"data": [{"embedding": self.vector(model, text, default)
                                         .tolist()}]})
        text = body.get("inputText")
        if not isinstance(text, str) or not text:
            return bad
        dims = body.get("dimensions", default)
        if family == "titan-v2" and dims not in allowed:
            return bad
        vector = self.vector(model, text, dims)
        if body.get("normalize"):
            vector = vector / np.linalg.norm(vector)
        return _json(200, {"embedding": vector.tolist(),
                           "inputTextTokenCount": len(text.split())})
