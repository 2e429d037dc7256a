"""Amazon Bedrock embeddings, as OpenClaw 2026.9.6's amazon-bedrock plugin makes them.

``POST https://bedrock-runtime.<region>.amazonaws.com/model/<modelId>/invoke`` (the model id
URL-encoded: ``amazon.titan-embed-text-v2%3A0``) with ``Content-Type`` and ``Accept``
``application/json``, signed with AWS Signature Version 4 (service ``bedrock``;
:mod:`pipeline.embeddings.aws_sigv4`), or sent with ``Authorization: Bearer`` when
``AWS_BEARER_TOKEN_BEDROCK`` is set (a Bedrock API key, which the AWS SDK prefers).

The body depends on the model's family (OpenClaw's catalogue, :data:`MODELS`; an unknown id
is guessed from its prefix, Titan v1 otherwise; ``us.``/``eu.``/... inference-profile prefixes
and ``:2:8k`` throughput suffixes are looked through):

- Titan v2: ``{inputText, dimensions, normalize: true}``, one text per request;
- Titan v1 (and G1, image v1): ``{inputText}``;
- Nova: ``{taskType: SINGLE_EMBEDDING, singleEmbeddingParams: {embeddingPurpose:
  GENERIC_INDEX, embeddingDimension, text: {truncationMode: END, value}}}``;
- TwelveLabs Marengo: ``{inputType: text, text: {inputText}}``;
- Cohere v3/v4: ``{texts, input_type: search_query|search_document, truncate: END}`` (v4 adds
  ``embedding_types: [float]`` and ``output_dimension``), many texts per request.

``dimensions`` is ``outputDimensionality`` (checked against the model's allowed widths) or the
model's default. The region: a ``bedrock-runtime.<region>.`` host in ``remote.baseUrl`` (which
OpenClaw reads for its region only), ``AWS_REGION``, ``AWS_DEFAULT_REGION``, ``us-east-1``. The
endpoint is the AWS SDK's: ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``, ``AWS_ENDPOINT_URL``, else the
regional one. Credentials are read again for every request (rotated keys are picked up); the
secret key, session token and bearer token appear in no repr, message or spec.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from pipeline.embeddings.aws_sigv4 import AwsCredentials, find_credentials, sign
from pipeline.embeddings.http import MAX_MESSAGE_CHARS, Scrubber, error_for_response, shown_url
from pipeline.embeddings.limits import HARD_MAX_INPUT_BYTES
from pipeline.embeddings.remote import RemoteProvider
from pipeline.errors import (
    EmbeddingError,
    MissingApiKey,
    ProviderRefused,
    ProviderRetryable,
    ProviderUnavailable,
)

__all__ = ["DEFAULT_MODEL", "MODELS", "BedrockProvider", "ModelSpec", "bedrock_endpoint",
           "bedrock_region", "model_spec", "normalise_bedrock_model"]

DEFAULT_MODEL = "amazon.titan-embed-text-v2:0"
DEFAULT_REGION = "us-east-1"
SERVICE = "bedrock"
BEARER_ENV = "AWS_BEARER_TOKEN_BEDROCK"
#: Cohere on Bedrock takes at most 96 texts per request.
COHERE_MAX_TEXTS = 96
#: Requests in flight at once for the one-text-per-request models (OpenClaw sends a batch's
#: all at once; memq caps them).
PARALLEL_REQUESTS = 8


@dataclass(frozen=True)
class ModelSpec:
    """A Bedrock embedding model: its input limit in tokens, default width, allowed widths
    (None: fixed) and request family."""

    max_tokens: int
    dims: int
    family: str
    valid_dims: tuple[int, ...] | None = None


#: OpenClaw's model catalogue (extensions/amazon-bedrock/embedding-provider.ts).
MODELS: dict[str, ModelSpec] = {
    "amazon.titan-embed-text-v2:0": ModelSpec(8192, 1024, "titan-v2", (256, 512, 1024)),
    "amazon.titan-embed-text-v1": ModelSpec(8000, 1536, "titan-v1"),
    "amazon.titan-embed-g1-text-02": ModelSpec(8000, 1536, "titan-v1"),
    "amazon.titan-embed-image-v1": ModelSpec(128, 1024, "titan-v1"),
    "cohere.embed-english-v3": ModelSpec(512, 1024, "cohere-v3"),
    "cohere.embed-multilingual-v3": ModelSpec(512, 1024, "cohere-v3"),
    "cohere.embed-v4:0": ModelSpec(128000, 1536, "cohere-v4", (256, 384, 512, 768, 1024, 1536)),
    "amazon.nova-2-multimodal-embeddings-v1:0": ModelSpec(8192, 1024, "nova",
                                                          (256, 384, 1024, 3072)),
    "twelvelabs.marengo-embed-2-7-v1:0": ModelSpec(512, 1024, "twelvelabs"),
    "twelvelabs.marengo-embed-3-0-v1:0": ModelSpec(512, 512, "twelvelabs"),
}
_PROFILE_PREFIX_RE = re.compile(r"^(?:us|eu|ap|apac|au|jp|global)\.")
_MODEL_PREFIX_RE = re.compile(r"^(?:bedrock|amazon-bedrock|aws)/")
_REGION_RE = re.compile(r"bedrock-runtime\.([a-z0-9-]+)\.")
_FAMILY_PREFIXES = (("amazon.titan-embed-text-v2", "titan-v2"), ("amazon.titan-embed", "titan-v1"),
                    ("amazon.nova", "nova"), ("cohere.embed-v4", "cohere-v4"),
                    ("cohere.embed", "cohere-v3"), ("twelvelabs.", "twelvelabs"))


def normalise_bedrock_model(model: str | None) -> str:
    """The model id without a ``bedrock/``, ``amazon-bedrock/`` or ``aws/`` prefix; the
    default model when empty."""
    text = (model or "").strip()
    return _MODEL_PREFIX_RE.sub("", text) if text else DEFAULT_MODEL


def model_spec(model: str) -> ModelSpec | None:
    """The catalogue entry of ``model``, looking through an inference-profile prefix and
    throughput suffixes (``amazon.titan-embed-text-v1:2:8k``)."""
    bare = _PROFILE_PREFIX_RE.sub("", model)
    if bare in MODELS:
        return MODELS[bare]
    parts = bare.split(":")
    for end in range(len(parts) - 1, 0, -1):
        spec = MODELS.get(":".join(parts[:end]))
        if spec is not None:
            return spec
    return None


def _family(model: str) -> str:
    spec = model_spec(model)
    if spec is not None:
        return spec.family
    bare = _PROFILE_PREFIX_RE.sub("", model).lower()
    return next((family for prefix, family in _FAMILY_PREFIXES if bare.startswith(prefix)),
                "titan-v1")


def bedrock_region(base_url: str | None, env: Mapping[str, str]) -> str:
    """OpenClaw's region: from a ``bedrock-runtime.<region>.`` URL, ``AWS_REGION``,
    ``AWS_DEFAULT_REGION``, else ``us-east-1``."""
    found = _REGION_RE.search(base_url or "")
    if found:
        return found.group(1)
    return env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION


def bedrock_endpoint(region: str, env: Mapping[str, str]) -> str:
    """The AWS SDK's endpoint for bedrock-runtime: the service's or the global endpoint
    variable, else the regional endpoint."""
    for name in ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "AWS_ENDPOINT_URL"):
        value = (env.get(name) or "").strip()
        if value:
            return value.rstrip("/")
    return regional_endpoint(region)


def regional_endpoint(region: str) -> str:
    """``https://bedrock-runtime.<region>.amazonaws.com``."""
    return f"https://bedrock-runtime.{region}.amazonaws.com"


def _aws_message(response: httpx.Response) -> str:
    """The ``message`` of an AWS error body, else its text."""
    try:
        body = response.json()
    except ValueError:
        body = None
    message = body.get("message") or body.get("Message") if isinstance(body, dict) else None
    return str(message) if message else (response.text.strip() or response.reason_phrase)


def _missing_credentials() -> MissingApiKey:
    return MissingApiKey('No API key found for provider "bedrock". AWS credentials are not '
                         "available. Set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE "
                         "(a profile with keys in ~/.aws/credentials or ~/.aws/config), or "
                         "AWS_BEARER_TOKEN_BEDROCK, or name another provider (memq reads no SSO, "
                         "credential_process, web identity or instance-role credentials)")


@dataclass(frozen=True, repr=False)
class _Auth:
    """How one request is authorised: SigV4 credentials, or a Bedrock bearer token."""

    credentials: AwsCredentials | None = None
    bearer: str | None = None

    @property
    def secrets(self) -> tuple[str, ...]:
        return (self.bearer,) if self.bearer else self.credentials.secrets  # type: ignore[union-attr]


def find_auth(env: Mapping[str, str]) -> _Auth | None:
    """A bearer token (``AWS_BEARER_TOKEN_BEDROCK``) first, as the AWS SDK prefers it, else
    SigV4 credentials (:func:`~pipeline.embeddings.aws_sigv4.find_credentials`)."""
    bearer = (env.get(BEARER_ENV) or "").strip()
    if bearer:
        return _Auth(bearer=bearer)
    credentials = find_credentials(env)
    return _Auth(credentials=credentials) if credentials is not None else None


class BedrockProvider(RemoteProvider):
    """Bedrock's ``InvokeModel`` for Titan, Cohere, Nova and TwelveLabs embedding models."""

    name = "bedrock"
    default_model = DEFAULT_MODEL
    default_base_url = regional_endpoint(DEFAULT_REGION)

    def __init__(self, model: str | None = None, *, region: str = DEFAULT_REGION,
                 endpoint: str | None = None, dimensions: int | None = None,
                 env: Mapping[str, str] | None = None, timeout: float | None = None) -> None:
        self._env = os.environ if env is None else env
        if find_auth(self._env) is None:
            raise _missing_credentials()
        model = normalise_bedrock_model(model)
        self.region = region
        self.default_base_url = regional_endpoint(region)  # type: ignore[misc]
        super().__init__(model, base_url=endpoint or self.default_base_url, timeout=timeout,
                         key_required=False)
        self.model = model  # as written (case kept), only the bedrock/ prefix gone
        spec = model_spec(model)
        self.family = _family(model)
        allowed = spec.valid_dims if spec else None
        if dimensions is not None and allowed and dimensions not in allowed:
            raise ProviderUnavailable(f"Invalid dimensions {dimensions} for {model}. Valid values: "
                                      f"{', '.join(map(str, allowed))}")
        self.dimensions = dimensions if dimensions is not None else (spec.dims if spec else None)
        self._dims = self.dimensions
        self.max_input_bytes = min(spec.max_tokens if spec else 8192, HARD_MAX_INPUT_BYTES)
        self.has_key = True
        if self.family.startswith("cohere"):
            self.max_items = COHERE_MAX_TEXTS  # type: ignore[misc]
        self._client = httpx.Client(timeout=self._batch_timeout, follow_redirects=False)

    def request_options(self) -> dict[str, Any]:
        """What a worker needs to send the same requests: the region and the width."""
        return {"region": self.region, "dimensions": self.dimensions}

    def _key_extra(self) -> dict[str, Any]:
        """OpenClaw's cache key data: region and dimensions besides provider and model."""
        return {"region": self.region, "dimensions": self.dimensions}

    def close(self) -> None:
        super().close()
        self._client.close()

    # -- requests ---------------------------------------------------------------------------

    def _embed_request(self, texts: Sequence[Any], kind: str, timeout: float) -> list[Any]:
        if self.family.startswith("cohere"):
            body = self._cohere_body(list(texts), "search_query" if kind == "query"
                                     else "search_document")
            return self._cohere_vectors(self._invoke(body, timeout))
        if len(texts) == 1:
            return [self._single(texts[0], timeout)]
        # One request per text, as OpenClaw sends them: a few at a time.
        with ThreadPoolExecutor(max_workers=min(len(texts), PARALLEL_REQUESTS)) as pool:
            return list(pool.map(lambda text: self._single(text, timeout), texts))

    def _single(self, text: str, timeout: float) -> Any:
        if not text.strip() and self._dims:  # OpenClaw sends no request for a blank text
            return [0.0] * self._dims
        return self._single_vector(self._invoke(self._single_body(text), timeout))

    def _single_body(self, text: str) -> dict[str, Any]:
        dims = self.dimensions
        if self.family == "titan-v2":
            return {"inputText": text, **({"dimensions": dims, "normalize": True} if dims else {})}
        if self.family == "nova":
            return {"taskType": "SINGLE_EMBEDDING", "singleEmbeddingParams": {
                "embeddingPurpose": "GENERIC_INDEX", "embeddingDimension": dims or 1024,
                "text": {"truncationMode": "END", "value": text}}}
        if self.family == "twelvelabs":
            return {"inputType": "text", "text": {"inputText": text}}
        return {"inputText": text}

    def _cohere_body(self, texts: list[str], input_type: str) -> dict[str, Any]:
        body: dict[str, Any] = {"texts": texts, "input_type": input_type, "truncate": "END"}
        if self.family == "cohere-v4":
            body["embedding_types"] = ["float"]
            if self.dimensions is not None:
                body["output_dimension"] = self.dimensions
        return body

    def _malformed(self) -> EmbeddingError:
        return EmbeddingError(f"{self.name}: model {self.model!r}: Amazon Bedrock embedding "
                              "response returned malformed JSON")

    def _single_vector(self, data: dict[str, Any]) -> Any:
        if self.family == "nova":
            found = data.get("embeddings")
            first = found[0] if isinstance(found, list) and found else None
            return self._numbers(first.get("embedding") if isinstance(first, dict) else None)
        if self.family == "twelvelabs":
            inner = data.get("data")
            if isinstance(inner, list):
                inner = inner[0] if inner else None
            if isinstance(inner, dict):
                return self._numbers(inner.get("embedding"))
        return self._numbers(data.get("embedding"))

    def _cohere_vectors(self, data: dict[str, Any]) -> list[Any]:
        found = data.get("embeddings")
        if self.family == "cohere-v4" and isinstance(found, dict):
            found = found.get("float")
        if not isinstance(found, list) or not found:
            raise self._malformed()
        return [self._numbers(row) for row in found]

    def _numbers(self, value: Any) -> list[float]:
        if not isinstance(value, list) or not all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in value):
            raise self._malformed()
        return value

    def _invoke(self, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One signed ``InvokeModel`` call; its JSON answer."""
        auth = find_auth(self._env)
        if auth is None:
            raise _missing_credentials()
        scrub = Scrubber(auth.secrets)
        path = f"/model/{quote(self.model, safe='')}/invoke"
        url = self.base_url + path
        where = f"{self.name}: POST {shown_url(self.base_url)}{path}"
        payload = json.dumps(body).encode()
        headers = self._signer(auth)(url, payload)
        try:
            response = self._client.post(url, content=payload, headers=headers, timeout=timeout)
        except httpx.TimeoutException:
            raise ProviderRetryable(f"{where}: timed out after {timeout:g} s") from None
        except httpx.TransportError as exc:
            raise ProviderRetryable(f"{where}: connection error: "
                                    f"{scrub(str(exc))[:MAX_MESSAGE_CHARS]}") from None
        if response.status_code in (401, 403):
            shown = scrub(" ".join(_aws_message(response).split()))[:MAX_MESSAGE_CHARS]
            raise ProviderRefused(f"{self.name}: HTTP {response.status_code}: {shown} (check the "
                                  "AWS credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/"
                                  "AWS_SESSION_TOKEN, AWS_PROFILE or AWS_BEARER_TOKEN_BEDROCK, "
                                  f"their access to {self.model} in {self.region})")
        if response.status_code >= 300:
            raise error_for_response(self.name, response, scrub)
        try:
            data = response.json()
        except ValueError:
            raise self._malformed() from None
        if not isinstance(data, dict):
            raise self._malformed()
        return data

    def _signer(self, auth: _Auth) -> Callable[[str, bytes], dict[str, str]]:
        base = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth.bearer:
            return lambda url, payload: {**base, "Authorization": f"Bearer {auth.bearer}"}
        credentials = auth.credentials
        assert credentials is not None
        return lambda url, payload: sign("POST", url, base, payload, credentials=credentials,
                                         region=self.region, service=SERVICE)

    def __repr__(self) -> str:
        return (f"BedrockProvider(model={self.model!r}, region={self.region!r}, "
                f"endpoint={shown_url(self.base_url)!r})")
