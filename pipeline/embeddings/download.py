"""Downloading a model file for ``local.modelPath = "hf:..."`` or an http(s) URL.

* **Resumable.** Bytes go to ``<file>.part`` next to the target; a later attempt (in this call
  after a dropped connection, or in a later process) asks for the rest with
  ``Range: bytes=<have>-``. A server that ignores the range (200) is read from the start.
* **Verified.** The size must match what the server stated (``X-Linked-Size``, which Hugging
  Face's ``/resolve/`` endpoint sends on its redirect, else ``Content-Range`` or
  ``Content-Length``), the file must start with the GGUF magic, and when the server states the
  sha256 (``X-Linked-Etag``: the LFS object id; or the hub's own ``ETag`` when it is 64 hex
  digits, the rule huggingface_hub's ``get_hf_file_metadata`` follows) the content must hash to
  it. A mismatch removes the ``.part`` so the next try starts clean.
* **Atomic and single.** The finished ``.part`` is renamed onto the target, so readers see a
  whole file or none; an ``fcntl`` lock on ``.<file>.lock`` makes a second process (or thread)
  wait for the first download and then use its file.
* **Quiet about secrets.** ``HF_TOKEN`` (else huggingface_hub's token file) is sent as
  ``Authorization: Bearer`` only to the Hugging Face endpoint; httpx drops it on a redirect to
  another origin (the CDN). Error text names the configured source and URLs without their query
  string, and is scrubbed of the token.
* A tqdm progress bar goes to stderr when stderr is a terminal.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.embeddings.default_model import locked
from pipeline.embeddings.http import Scrubber, shown_url
from pipeline.embeddings.model_source import ModelSource, origin
from pipeline.errors import DownloadInterrupted, ModelDownloadError

__all__ = ["ModelDownloadError", "fetch_model", "hf_token"]

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
CONNECT_TIMEOUT_S = 15.0
READ_TIMEOUT_S = 60.0
USER_AGENT = "memq (model download)"
GGUF_MAGIC = b"GGUF"
_SHA256_ETAG = re.compile(r'^(?:W/)?"?([0-9a-fA-F]{64})"?$')
_CONTENT_RANGE = re.compile(r"^bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)$")


class _Retry(Exception):
    """A transient failure (dropped connection, timeout, 5xx): try again, resuming."""


@dataclass
class _Expected:
    size: int | None = None
    sha256: str | None = None


def hf_token(env: Mapping[str, str] | None = None) -> str | None:
    """``$HF_TOKEN``, else the token file huggingface_hub writes (``$HF_TOKEN_PATH``, else
    ``$HF_HOME/token``, default ``~/.cache/huggingface/token``), else None."""
    env = os.environ if env is None else env
    if token := env.get("HF_TOKEN", "").strip():
        return token
    home = env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface")
    try:
        text = Path(env.get("HF_TOKEN_PATH") or os.path.join(home, "token")).expanduser()
        return text.read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def fetch_model(source: ModelSource, *, env: Mapping[str, str] | None = None,
                progress: bool | None = None) -> Path:
    """The model file of ``source``: the copy on disk, else downloaded into the cache.

    ``env`` (default ``os.environ``) gives the token; ``progress`` forces the progress bar on
    or off (default: when stderr is a terminal). Raises :class:`ModelDownloadError`.
    """
    found = source.present()
    if found is not None:
        return found
    target = source.target
    try:
        with locked(target.parent / f".{target.name}.lock"):
            found = source.present()  # another process finished it while we waited
            if found is not None:
                return found
            token = hf_token(env) if source.hub else None
            show = sys.stderr.isatty() if progress is None else progress
            _Download(source, token, show).run()
    except OSError as exc:
        raise DownloadInterrupted(f"{source.shown}: cannot write the model into "
                                  f"{target.parent}: {exc}") from exc
    return target


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _sha256(etag: str | None) -> str | None:
    match = _SHA256_ETAG.match(etag.strip()) if etag else None
    return match.group(1).lower() if match else None


def _content_range(text: str | None) -> tuple[int | None, int | None]:
    """(first byte, total size) of a ``Content-Range`` header; None for what it does not say."""
    match = _CONTENT_RANGE.match((text or "").strip())
    if not match:
        return None, None
    first, _, total = match.groups()
    return _int(first), _int(total) if total != "*" else None


class _Download:
    """One download of ``source.url`` into ``<target>.part``, then verified and renamed."""

    def __init__(self, source: ModelSource, token: str | None, progress: bool) -> None:
        self.source = source
        self.part = source.target.with_name(source.target.name + ".part")
        self.headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.has_token = bool(token)
        self.scrub = Scrubber([token])
        self.progress = progress
        self.received = 0
        self._bar: Any = None

    def _error(self, what: str, *, retryable: bool = False) -> ModelDownloadError:
        """The error for ``what``; ``retryable``: a :class:`DownloadInterrupted`."""
        kind = DownloadInterrupted if retryable else ModelDownloadError
        return kind(self.scrub(f"{self.source.shown}: {what}"))

    def run(self) -> None:
        import httpx

        self.part.parent.mkdir(parents=True, exist_ok=True)
        log.info("downloading %s into %s", self.source.shown, self.source.target)
        timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        try:
            with httpx.Client(headers=self.headers, timeout=timeout,
                              follow_redirects=True) as client:
                expected = self._attempts(client)
        finally:
            if self._bar is not None:
                self._bar.close()
        self._verify(expected)
        os.replace(self.part, self.source.target)
        _fsync_dir(self.source.target.parent)

    def _attempts(self, client: Any) -> _Expected:
        attempt = 1
        while True:
            try:
                return self._attempt(client)
            except _Retry as exc:
                if attempt >= MAX_ATTEMPTS:
                    raise self._error(f"download failed after {MAX_ATTEMPTS} attempts ({exc}); "
                                      f"{self._part_size()} bytes kept in {self.part.name}, "
                                      "the next try resumes", retryable=True) from None
                log.warning("model download interrupted (%s); resuming", exc)
                time.sleep(min(8.0, 0.5 * 2 ** (attempt - 1)))
                attempt += 1

    def _part_size(self) -> int:
        try:
            return self.part.stat().st_size
        except FileNotFoundError:
            return 0

    def _attempt(self, client: Any) -> _Expected:
        import httpx

        have = self._part_size()
        headers = {"Range": f"bytes={have}-"} if have else {}
        try:
            with client.stream("GET", self.source.url, headers=headers) as resp:
                expected = self._expected(resp)
                if resp.status_code == 416:  # the .part already holds the whole file, or junk
                    _, total = _content_range(resp.headers.get("Content-Range"))
                    if total is not None and total == have:
                        expected.size = expected.size or total
                        return expected
                    self.part.unlink(missing_ok=True)
                    raise _Retry("the partial download does not fit the server's file; "
                                 "starting again")
                if resp.status_code not in (200, 206):
                    raise self._status_error(resp)
                if resp.status_code == 206:
                    first, total = _content_range(resp.headers.get("Content-Range"))
                    if first != have:
                        self.part.unlink(missing_ok=True)
                        raise _Retry(f"asked for bytes from {have}, got from {first}")
                    expected.size = expected.size or total
                else:  # 200: the whole file, whatever was asked
                    have = 0
                    if resp.headers.get("Content-Encoding", "identity") == "identity":
                        expected.size = expected.size or _int(resp.headers.get("Content-Length"))
                self._receive(resp, have, expected.size)
        except httpx.ConnectError as exc:
            if not self.received:  # nothing came through: the network or host is not there
                raise self._error(f"cannot connect to {shown_url(self.source.url)}: {exc}",
                                  retryable=True) from None
            raise _Retry(self.scrub(f"reconnecting failed: {exc}")) from None
        except httpx.TransportError as exc:  # timeouts, dropped connections, cut bodies
            raise _Retry(self.scrub(f"{type(exc).__name__}: {exc}")) from None
        got = self._part_size()
        if expected.size is not None and got < expected.size:
            raise _Retry(f"the connection ended after {got} of {expected.size} bytes")
        return expected

    def _expected(self, resp: Any) -> _Expected:
        """Size and sha256 as the server states them, from the redirect chain and the answer."""
        out = _Expected()
        hub = origin(self.source.url)
        for r in (*resp.history, resp):
            out.size = out.size or _int(r.headers.get("X-Linked-Size"))
            out.sha256 = out.sha256 or _sha256(r.headers.get("X-Linked-Etag"))
            if self.source.hub and origin(str(r.url)) == hub:
                out.sha256 = out.sha256 or _sha256(r.headers.get("ETag"))
        return out

    def _status_error(self, resp: Any) -> Exception:
        status = resp.status_code
        where = shown_url(str(resp.url))
        if status in (408, 429) or status >= 500:
            return _Retry(f"HTTP {status} from {where}")
        if status == 404:
            return self._error(f"not found (HTTP 404 from {where})")
        if status in (401, 403):
            if self.has_token:
                why = "the token (HF_TOKEN) was refused or has no access to this model"
            elif self.source.hub:
                why = "the model is gated or private: set HF_TOKEN to a token with access"
            else:
                why = "the server wants credentials"
            return self._error(f"access denied (HTTP {status} from {where}): {why}")
        return self._error(f"HTTP {status} from {where}")

    def _receive(self, resp: Any, have: int, total: int | None) -> None:
        bar = self._progress_bar(total, have)
        with open(self.part, "ab" if have else "wb") as fh:
            for chunk in resp.iter_bytes():  # as received: a buffer would be lost on a drop
                fh.write(chunk)
                self.received += len(chunk)
                if bar is not None:
                    bar.update(len(chunk))
            fh.flush()
            os.fsync(fh.fileno())

    def _progress_bar(self, total: int | None, have: int) -> Any:
        if not self.progress:
            return None
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=have, unit="B", unit_scale=True,
                             unit_divisor=1024, desc=self.source.file_name, file=sys.stderr)
        else:
            self._bar.reset(total=total)
            self._bar.update(have)
        return self._bar

    def _verify(self, expected: _Expected) -> None:
        size = self._part_size()
        if expected.size is not None and size != expected.size:
            self.part.unlink(missing_ok=True)
            raise self._error(f"size mismatch: received {size} bytes, the server stated "
                              f"{expected.size}; the partial file was removed", retryable=True)
        with open(self.part, "rb") as fh:
            head = fh.read(len(GGUF_MAGIC))
        if head != GGUF_MAGIC:
            self.part.unlink(missing_ok=True)
            raise self._error(f"the server sent something that is not a GGUF file "
                              f"(it starts with {head!r}); it was removed")
        if expected.sha256 is None:
            return
        with open(self.part, "rb") as fh:
            actual = hashlib.file_digest(fh, "sha256").hexdigest()
        if actual != expected.sha256:
            self.part.unlink(missing_ok=True)
            raise self._error(f"checksum mismatch: sha256 {actual}, the server stated "
                              f"{expected.sha256}; the download was removed, try again",
                              retryable=True)


def _fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (POSIX); a filesystem that cannot is left as is."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
