"""The one HTTP layer every remote provider uses: timeouts, and provider errors mapped to
:class:`EmbeddingError` with the facts the workers' retry policy needs.

What is retryable (and why):

* 429 rate limits, 5xx, timeouts and connection errors: the same request may well succeed
  later. ``retry_after`` carries the wait the provider asked for (``Retry-After`` or
  ``retry-after-ms`` headers, Gemini's ``google.rpc.RetryInfo.retryDelay``, or OpenAI's
  "try again in 41.7s" text).
* Not a 429 that says the money or the daily quota ran out (OpenAI ``insufficient_quota``,
  Gemini ``...PerDay...`` quotas): it stays exhausted for hours, so retrying only burns time.
* Not 400/401/403/404: the request or the credentials are wrong. A 400 that says the input is
  too long raises :class:`~pipeline.errors.InputTooLong` so a multi-text request can be split
  and retried.

No error text ever holds the API key or an auth header's value: every message is scrubbed of
the secrets the client was built with, and of anything that looks like a key.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from pipeline.config import redact_url
from pipeline.errors import (
    EmbeddingError,
    InputTooLong,
    ProviderRefused,
    ProviderRetryable,
    ProviderThrottled,
)

__all__ = ["BATCH_TIMEOUT_S", "QUERY_TIMEOUT_S", "HttpClient", "error_for_response"]

#: OpenClaw's timeouts: 60 s for a query embedding, 2 min for a batch of documents (remote).
QUERY_TIMEOUT_S = 60.0
BATCH_TIMEOUT_S = 120.0
MAX_MESSAGE_CHARS = 300

# Not "exceeded your current quota": Gemini says that for per-minute limits too, and only its
# QuotaFailure details tell a per-minute quota (retry) from a per-day one (don't).
_QUOTA_RE = re.compile(r"insufficient_quota|billing_hard_limit|per ?day|daily", re.IGNORECASE)
_CONTEXT_RE = re.compile(
    r"context[ _]length|maximum context|too many tokens|too long|exceeds the (?:max|context)"
    r"|input token count|input length",
    re.IGNORECASE,
)
_TRY_AGAIN_RE = re.compile(r"try again in (\d+(?:\.\d+)?)\s*(ms|s)\b", re.IGNORECASE)
_KEYLIKE_RE = re.compile(r"\b(?:sk-|AIza|pa-|Bearer\s+)[A-Za-z0-9_\-.]{6,}")
_REDACTED = "***"


def _seconds(text: str | None) -> float | None:
    """A Retry-After value: delta-seconds, or an HTTP date."""
    if not text:
        return None
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _duration(text: Any) -> float | None:
    """A protobuf Duration in JSON form ("23s", "1.5s")."""
    if isinstance(text, str) and text.endswith("s"):
        try:
            return max(0.0, float(text[:-1]))
        except ValueError:
            return None
    return None


def _error_fields(body: Any) -> tuple[str, str, list[Any]]:
    """(message, code/type/status words, details) from any of the providers' error bodies."""
    if not isinstance(body, dict):
        return "", "", []
    err = body.get("error", body)
    if isinstance(err, str):  # Ollama: {"error": "..."}
        return err, "", []
    if not isinstance(err, dict):
        return str(err), "", []
    message = err.get("message") or err.get("detail") or body.get("detail") or ""
    if not isinstance(message, str):
        message = json.dumps(message)
    words = " ".join(str(err.get(k) or "") for k in ("code", "type", "status"))
    details = err.get("details") if isinstance(err.get("details"), list) else []
    return message, words, details


def _retry_after(response: httpx.Response, message: str, details: list[Any]) -> float | None:
    ms = response.headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    header = _seconds(response.headers.get("retry-after"))
    if header is not None:
        return header
    for detail in details:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("RetryInfo"):
            delay = _duration(detail.get("retryDelay"))
            if delay is not None:
                return delay
    match = _TRY_AGAIN_RE.search(message)
    if match:
        value = float(match.group(1))
        return value / 1000 if match.group(2).lower() == "ms" else value
    return None


def _is_quota(message: str, words: str, details: list[Any]) -> bool:
    if _QUOTA_RE.search(words) or _QUOTA_RE.search(message):
        return True
    return any(_QUOTA_RE.search(json.dumps(d)) for d in details if isinstance(d, dict)
               and "QuotaFailure" in str(d.get("@type", "")))


def _json_error(response: httpx.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and "error" in body


def shown_url(url: str) -> str:
    """A URL fit for messages: no user-info password, no query string (which may hold a key)."""
    return (redact_url(url) or "").split("?", 1)[0].split("#", 1)[0]


class Scrubber:
    """Removes known secrets (and key-looking strings) from text meant for humans."""

    def __init__(self, secrets: Iterable[str | None]) -> None:
        self._secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, _REDACTED)
        return _KEYLIKE_RE.sub(_REDACTED, text)


def error_for_response(label: str, response: httpx.Response, scrub: Scrubber) -> EmbeddingError:
    """Map a non-2xx response to an :class:`EmbeddingError` (see the module docstring)."""
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    message, words, details = _error_fields(body)
    if not message:
        message = response.text.strip() or response.reason_phrase
    shown = scrub(" ".join(message.split()))[:MAX_MESSAGE_CHARS]
    text = f"{label}: HTTP {status}: {shown}"
    if status == 429:
        if _is_quota(message, words, details):
            return EmbeddingError(f"{text} (quota exhausted: not retried; check the account's "
                                  "plan and billing)")
        return ProviderThrottled(text,
                              retry_after=_retry_after(response, message, details))
    if status >= 500 or status == 408:
        return ProviderRetryable(text,
                              retry_after=_retry_after(response, message, details))
    if status in (400, 413, 422) and _CONTEXT_RE.search(message):
        return InputTooLong(text)
    if status in (401, 403) or "api key" in message.lower():
        text += " (check the API key: remote.apiKey or the provider's environment variable)"
        return ProviderRefused(text)
    return EmbeddingError(text)


class HttpClient:
    """A pooled JSON-over-HTTP client for one provider endpoint.

    ``secrets`` are the values (API key, auth headers) that must never appear in an error.
    """

    def __init__(self, label: str, base_url: str, headers: Mapping[str, str], *,
                 timeout: float = BATCH_TIMEOUT_S, secrets: Iterable[str | None] = ()) -> None:
        self.label = label
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._scrub = Scrubber(secrets)
        self._client = httpx.Client(headers=dict(headers), timeout=timeout,
                                    follow_redirects=False)

    def __repr__(self) -> str:
        return f"HttpClient({self.label!r}, {shown_url(self.base_url)!r})"

    def post_json(self, path: str, body: Any, *, timeout: float | None = None,
                  ok_missing: bool = False) -> Any:
        """POST ``body`` as JSON to ``base_url + path``; return the decoded JSON answer.

        With ``ok_missing`` a bare 404 (no JSON error: the route does not exist) returns None
        instead of raising, for endpoint probing; a JSON 404 ("model not found") still raises.
        """
        url = self.base_url + path
        where = f"{self.label}: POST {shown_url(self.base_url)}{path}"
        try:
            response = self._client.post(url, json=body, timeout=timeout or self.timeout)
        except httpx.TimeoutException:
            raise ProviderRetryable(f"{where}: timed out after {timeout or self.timeout:g} s"
                                    ) from None
        except httpx.TransportError as exc:
            raise ProviderRetryable(f"{where}: connection error: "
                                 f"{self._scrub(str(exc))[:MAX_MESSAGE_CHARS]}") from None
        if ok_missing and response.status_code == 404 and not _json_error(response):
            return None
        if response.status_code >= 300:
            raise error_for_response(self.label, response, self._scrub)
        try:
            return response.json()
        except ValueError:
            raise ProviderRetryable(f"{where}: the answer is not valid JSON "
                                 f"({len(response.content)} bytes)") from None

    def close(self) -> None:
        self._client.close()
