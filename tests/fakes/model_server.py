"""A real HTTP server on 127.0.0.1 that serves model files the way Hugging Face does.

It listens twice, as two origins, like ``huggingface.co`` and its CDN:

* the **hub**: ``GET /<owner>/<repo>/resolve/<revision>/<path>`` answers ``302`` to the CDN
  with ``X-Linked-Size`` and ``X-Linked-Etag`` (the LFS sha256, quoted) and ``X-Repo-Commit``,
  as the real resolve endpoint does for an LFS file; a file not in ``files`` is a 404 (with
  ``X-Error-Code: EntryNotFound``). With ``token`` set, a request without
  ``Authorization: Bearer <token>`` is a 401.
* the **CDN**: ``GET /cdn/<owner>/<repo>/<revision>/<path>?X-Amz-Signature=...`` serves the
  bytes with ``Accept-Ranges: bytes``, honouring ``Range: bytes=N-`` (206 with
  ``Content-Range``; 416 past the end). ``GET /plain/<name>`` serves ``plain[name]`` the same
  way: an ordinary web server on another origin than the hub, with no checksum headers.

Knobs a test turns: ``checksum`` ("right", "wrong", "none", or "etag": the sha256 as the hub's
``ETag`` instead of ``X-Linked-Etag``); ``cut_after``/``cuts``: the next ``cuts`` file bodies
stop after ``cut_after`` bytes and the connection is closed (a dropped download);
``ignore_range``: answer 200 with the whole file whatever was asked; ``throttle``: seconds
per 8 KiB sent; ``hold_at``: the next file body stops after that many bytes, sets ``held``
and waits for ``release`` before sending the rest (a download caught in the middle, for as
long as a test needs). Every request is recorded in ``requests``.
"""

from __future__ import annotations

import hashlib
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = ["ModelServer", "Seen"]

PIECE = 8192
_RESOLVE = re.compile(r"^/([^/]+)/([^/]+)/resolve/([^/]+)/(.+)$")
_CDN = re.compile(r"^/cdn/([^/]+)/([^/]+)/([^/]+)/(.+)$")
_RANGE = re.compile(r"^bytes=(\d+)-$")


@dataclass
class Seen:
    origin: str  # "hub" or "cdn"
    method: str
    path: str
    headers: dict[str, str] = field(repr=False)  # may hold a token: not in failure text
    status: int = 0


@dataclass
class ModelServer:
    """Hub + CDN doubles; use as a context manager. ``files`` maps ``owner/repo/path`` (main
    revision) or ``owner/repo@rev/path`` to bytes; ``plain`` maps names to bytes."""

    files: dict[str, bytes] = field(default_factory=dict)
    plain: dict[str, bytes] = field(default_factory=dict)
    token: str | None = None
    checksum: str = "right"
    cut_after: int | None = None
    cuts: int = 0
    ignore_range: bool = False
    throttle: float = 0.0
    hold_at: int | None = None
    requests: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.held = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._servers: dict[str, ThreadingHTTPServer] = {}

    # -- lifecycle --------------------------------------------------------------------------

    def url(self, origin: str = "hub") -> str:
        host, port = self._servers[origin].server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> ModelServer:
        for origin in ("hub", "cdn"):
            owner = self

            class Handler(_Handler):
                server_owner = owner
                role = origin

            server = _Server(("127.0.0.1", 0), Handler)
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
            self._servers[origin] = server
        return self

    def stop(self) -> None:
        for server in self._servers.values():
            server.shutdown()
            server.server_close()
        self._servers.clear()

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what tests read --------------------------------------------------------------------

    def seen(self, origin: str) -> list[Seen]:
        with self._lock:
            return [r for r in self.requests if r.origin == origin]

    # -- answers ----------------------------------------------------------------------------

    def _file(self, owner: str, repo: str, rev: str, path: str) -> bytes | None:
        key = f"{owner}/{repo}/{path}" if rev == "main" else f"{owner}/{repo}@{rev}/{path}"
        return self.files.get(key)

    def _take_hold(self) -> int | None:
        with self._lock:
            hold, self.hold_at = self.hold_at, None
            return hold

    def _take_cut(self) -> int | None:
        with self._lock:
            if self.cut_after is None or self.cuts <= 0:
                return None
            self.cuts -= 1
            return self.cut_after

    def hub(self, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
            return 401, {"X-Error-Code": "GatedRepo"}, b'{"error":"Access to model is restricted"}'
        match = _RESOLVE.match(path)
        if not match:
            return 404, {"X-Error-Code": "RepoNotFound"}, b'{"error":"Repository not found"}'
        owner, repo, rev, rel = (unquote(g) for g in match.groups())
        data = self._file(owner, repo, rev, rel)
        if data is None:
            return 404, {"X-Error-Code": "EntryNotFound"}, b'{"error":"Entry not found"}'
        sha = hashlib.sha256(data).hexdigest()
        out = {"Location": f"{self.url('cdn')}/cdn/{match.group(1)}/{match.group(2)}/"
                           f"{match.group(3)}/{match.group(4)}?X-Amz-Signature=cdn-secret-sig",
               "X-Linked-Size": str(len(data)), "X-Repo-Commit": "0" * 40,
               "ETag": '"' + "1" * 40 + '"'}  # a git blob id, not the content's sha256
        if self.checksum == "right":
            out["X-Linked-Etag"] = f'"{sha}"'
        elif self.checksum == "wrong":
            out["X-Linked-Etag"] = f'"{hashlib.sha256(data + b"x").hexdigest()}"'
        elif self.checksum == "etag":
            out["ETag"] = f'"{sha}"'
        return 302, out, b""

    def cdn(self, path: str) -> bytes | None:
        if path.startswith("/plain/"):
            return self.plain.get(unquote(urlsplit(path).path[len("/plain/"):]))
        match = _CDN.match(urlsplit(path).path)
        if not match:
            return None
        return self._file(*(unquote(g) for g in match.groups()))


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gives up mid-body resets its connection: not news."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server_owner: ModelServer
    role: str
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        owner = self.server_owner
        headers = {k.lower(): v for k, v in self.headers.items()}
        seen = Seen(self.role, "GET", self.path, headers)
        with owner._lock:
            owner.requests.append(seen)
        if self.role == "hub":
            status, out, body = owner.hub(self.path, headers)
            seen.status = status
            self._send(status, out, body)
            return
        data = owner.cdn(self.path)
        if data is None:
            seen.status = 404
            self._send(404, {}, b"no such object")
            return
        self._send_file(data, headers, seen)

    def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_file(self, data: bytes, headers: dict[str, str], seen: Seen) -> None:
        owner = self.server_owner
        match = _RANGE.match(headers.get("range", ""))
        start = int(match.group(1)) if match and not owner.ignore_range else 0
        if start >= len(data) and match and not owner.ignore_range:
            seen.status = 416
            self._send(416, {"Content-Range": f"bytes */{len(data)}"}, b"")
            return
        body = data[start:]
        seen.status = 206 if start or (match and not owner.ignore_range) else 200
        self.send_response(seen.status)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        if seen.status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut = owner._take_cut()
        to_send = body if cut is None else body[:cut]
        try:
            hold = owner._take_hold()
            if hold is not None:
                self.wfile.write(to_send[:hold])
                self.wfile.flush()
                owner.held.set()
                owner.release.wait(120)
                to_send = to_send[hold:]
            for i in range(0, len(to_send), PIECE):
                self.wfile.write(to_send[i:i + PIECE])
                if owner.throttle:
                    self.wfile.flush()
                    time.sleep(owner.throttle)
            self.wfile.flush()
            if cut is not None:  # drop the connection mid-body
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, format: str, *args: Any) -> None:
        pass
