"""HTTP for the batch clients: the sync provider's own client (auth headers, timeouts, secret
scrubbing, error mapping), plus the verbs the Files and Batches APIs need (GET, DELETE, raw
uploads and downloads).

The batch client shares the provider's connection pool and headers, so the API key reaches
every batch call (upload and download included; OpenClaw's Gemini batch path loses it) and
never leaves the client's headers.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Mapping
from typing import Any

import httpx

from pipeline.embeddings.http import MAX_MESSAGE_CHARS, HttpClient, error_for_response, shown_url
from pipeline.errors import BatchUnavailable, EmbeddingError, ProviderRetryable

__all__ = ["BatchHttp", "multipart_form", "multipart_related"]


class BatchHttp(HttpClient):
    """An :class:`HttpClient` that also speaks GET/DELETE and raw bodies.

    Built with :meth:`sharing` from a provider's client, whose headers carry the credentials.
    """

    @classmethod
    def sharing(cls, http: HttpClient) -> BatchHttp:
        """A batch client over ``http``'s connection pool, headers and scrubber (not a copy:
        closing either closes both)."""
        batch = cls.__new__(cls)
        batch.label, batch.base_url, batch.timeout = http.label, http.base_url, http.timeout
        batch._scrub, batch._client = http._scrub, http._client
        return batch

    def scrub(self, text: str) -> str:
        """``text`` without the client's secrets, cut to a message's length."""
        return self._scrub(" ".join(text.split()))[:MAX_MESSAGE_CHARS]

    def send(self, method: str, path: str, *, body: Any = None, content: bytes | None = None,
             headers: Mapping[str, str] | None = None, url: str | None = None,
             disables_batch_on_404: bool = False) -> httpx.Response:
        """One request to ``base_url + path`` (or the absolute ``url``); a non-2xx answer
        raises :class:`EmbeddingError`. With ``disables_batch_on_404`` a 404 raises
        :class:`BatchUnavailable` (the batch API does not exist for this account or model)."""
        target = url or self.base_url + path
        where = f"{self.label}: {method} {shown_url(target)}"
        if body is not None:
            content = json.dumps(body).encode()
            headers = {"Content-Type": "application/json", **(headers or {})}
        try:
            response = self._client.request(method, target, content=content,
                                            headers=dict(headers or {}))
        except httpx.TimeoutException:
            raise ProviderRetryable(f"{where}: timed out after {self.timeout:g} s") from None
        except httpx.TransportError as exc:
            raise ProviderRetryable(f"{where}: connection error: {self.scrub(str(exc))}") from None
        if response.status_code >= 300:
            error = error_for_response(self.label, response, self._scrub)
            if disables_batch_on_404 and response.status_code == 404:
                raise BatchUnavailable(str(error)) from None
            raise error
        return response

    def discard(self, path: str) -> None:
        """DELETE ``path``, best effort: used after a failed create, where a stray upload is
        only storage and the create's error is the one worth raising."""
        with contextlib.suppress(EmbeddingError):
            self.send("DELETE", path)

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        """:meth:`send`, then the answer decoded as JSON (an undecodable answer is retryable:
        a proxy's error page, a cut connection)."""
        response = self.send(method, path, **kwargs)
        try:
            return response.json()
        except ValueError:
            raise ProviderRetryable(f"{self.label}: {method} {path}: the answer is not valid JSON "
                                 f"({len(response.content)} bytes)") from None


def _boundary() -> str:
    return f"memq-{uuid.uuid4().hex}"


def multipart_form(fields: Mapping[str, str], file_field: str, filename: str, data: bytes,
                   content_type: str) -> tuple[bytes, str]:
    """A ``multipart/form-data`` body (the OpenAI Files API): (body, Content-Type header).

    Built here rather than by httpx because the provider client's default JSON Content-Type
    would override the one httpx derives for ``files=``.
    """
    boundary = _boundary()
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
             f"{value}\r\n".encode() for name, value in fields.items()]
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; '
                 f'filename="{filename}"\r\nContent-Type: {content_type}\r\n\r\n'.encode()
                 + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def multipart_related(metadata: Any, data: bytes, content_type: str) -> tuple[bytes, str]:
    """A ``multipart/related`` body (Google's one-shot upload): JSON metadata, then the file."""
    boundary = _boundary()
    body = (f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
            f"{json.dumps(metadata)}\r\n--{boundary}\r\nContent-Type: {content_type}\r\n\r\n"
            ).encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/related; boundary={boundary}"
