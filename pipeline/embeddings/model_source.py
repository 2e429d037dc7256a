"""Where a ``local.modelPath`` that is not a file on disk comes from, and where memq keeps it.

Two forms are downloadable, as in OpenClaw (node-llama-cpp's ``resolveModelFile``):

* ``hf:<owner>/<repo>/<path/to/file.gguf>``, optionally ending in ``#<revision>`` (default
  ``main``); ``hf://``, ``huggingface:`` and ``huggingface://`` are the same. It is fetched from
  ``<endpoint>/<owner>/<repo>/resolve/<revision>/<path>``, the endpoint being ``$HF_ENDPOINT``
  (as huggingface_hub and node-llama-cpp read it), else ``https://huggingface.co``.
  node-llama-cpp's tag form (``hf:<owner>/<repo>:Q8_0``), which needs Hugging Face's manifest
  API to pick a file, is refused with a message asking for the file name.
* an ``http://`` or ``https://`` URL of a GGUF file. A Hugging Face ``/blob/`` page URL is
  rewritten to its ``/resolve/`` download URL, as node-llama-cpp does.

Downloads land in ``<cache>/models/hf/<owner>/<repo>/<path>`` (``<repo>@<revision>`` for a
revision other than main) and ``<cache>/models/url/<host>/<hash of the URL>/<file>``, where
``<cache>`` is ``local.modelCacheDir`` (see :func:`~pipeline.embeddings.default_model.cache_root`).
An ``hf:`` model also counts as present at ``<cache>/models/hf_<owner>_<file>`` or
``<cache>/models/<file>`` (copies put there by hand, as before downloads were possible).

Nothing here touches the network: :mod:`pipeline.embeddings.download` does.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from pipeline.embeddings.default_model import cache_root
from pipeline.errors import ProviderUnavailable

__all__ = [
    "HF_PREFIXES", "ModelSource", "hf_endpoint", "is_downloadable", "model_source", "origin",
]

HF_PREFIXES = ("hf://", "huggingface://", "hf:", "huggingface:")
URL_PREFIXES = ("http://", "https://")
DEFAULT_HF_ENDPOINT = "https://huggingface.co"
DEFAULT_REVISION = "main"
_HF_HOSTS = ("huggingface.co", "hf.co")
_BAD_PART = re.compile(r"[\\\x00-\x1f]")


@dataclass(frozen=True)
class ModelSource:
    """A downloadable model: what was configured, the URL to fetch and where it is kept."""

    spec: str  # as configured (never shown with a query string: see ``shown``)
    url: str
    target: Path  # where a download lands
    candidates: tuple[Path, ...]  # where a present copy is looked for, ``target`` first
    hub: bool  # the URL is on the Hugging Face endpoint, so HF_TOKEN may be sent to it

    @property
    def file_name(self) -> str:
        return self.target.name

    @property
    def shown(self) -> str:
        """The configured source, fit for messages (an URL loses its query string)."""
        return self.spec.split("?", 1)[0] if self.spec.startswith(URL_PREFIXES) else self.spec

    def present(self) -> Path | None:
        """The copy already on disk, if any (a non-empty file; never the ``.part``)."""
        for path in self.candidates:
            try:
                if path.is_file() and path.stat().st_size > 0:
                    return path
            except OSError:
                continue
        return None


def is_downloadable(text: str) -> bool:
    """Whether a ``local.modelPath`` names something to download rather than a file."""
    return text.startswith(HF_PREFIXES) or text.lower().startswith(URL_PREFIXES)


def hf_endpoint(env: Mapping[str, str] | None = None) -> str:
    """``$HF_ENDPOINT`` (without a trailing slash), else https://huggingface.co."""
    value = (os.environ if env is None else env).get("HF_ENDPOINT", "").strip()
    return value.rstrip("/") if value.lower().startswith(URL_PREFIXES) else DEFAULT_HF_ENDPOINT


def _checked_part(part: str, uri: str) -> str:
    if part in ("", ".", "..") or _BAD_PART.search(part):
        raise ProviderUnavailable(f"{uri!r} is not a usable hf: model URI "
                                  "(empty, '.', '..' or control characters in a path part)")
    return part


def _hf_source(uri: str, cache: Path, env: Mapping[str, str] | None) -> ModelSource:
    body = next(uri[len(p):] for p in HF_PREFIXES if uri.startswith(p))
    body, _, revision = body.partition("#")
    revision = revision or DEFAULT_REVISION
    parts = body.strip("/").split("/")
    if len(parts) < 3:
        if len(parts) == 2 and ":" in parts[1]:
            raise ProviderUnavailable(
                f"{uri}: the tag form hf:<owner>/<repo>:<quant> is not supported; name the "
                "file: hf:<owner>/<repo>/<file.gguf>")
        raise ProviderUnavailable(
            f"{uri!r} is not a usable hf: model URI (expected hf:<owner>/<repo>/<file.gguf>)")
    owner, repo, *rel = (_checked_part(p, uri) for p in parts)
    _checked_part(revision, uri)
    endpoint = hf_endpoint(env)
    url = "/".join([endpoint, quote(owner, safe=""), quote(repo, safe=""), "resolve",
                    quote(revision, safe=""), *(quote(p, safe="") for p in rel)])
    models = cache / "models"
    folder = repo if revision == DEFAULT_REVISION else f"{repo}@{quote(revision, safe='')}"
    target = models.joinpath("hf", owner, folder, *rel)
    candidates = [target]
    if revision == DEFAULT_REVISION:
        candidates += [models / f"hf_{owner}_{rel[-1]}", models / rel[-1]]
    return ModelSource(uri, url, target, tuple(candidates), hub=True)


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of a URL, the port made explicit: what "same origin" compares."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(
        scheme)


def _on_hub(url: str, env: Mapping[str, str] | None) -> bool:
    """Whether ``url`` is on the Hugging Face endpoint's origin (the only one sent HF_TOKEN)."""
    endpoint = hf_endpoint(env)
    if origin(url) == origin(endpoint):
        return True
    scheme, host, port = origin(url)
    return endpoint == DEFAULT_HF_ENDPOINT and scheme == "https" and port == 443 \
        and host in _HF_HOSTS


def _url_source(url: str, cache: Path, env: Mapping[str, str] | None) -> ModelSource:
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        hub = _on_hub(url, env)
    except ValueError as exc:
        raise ProviderUnavailable(f"{url.split('?', 1)[0]!r} is not a usable model URL") from exc
    if not host:
        raise ProviderUnavailable(f"{url.split('?', 1)[0]!r} is not a usable model URL (no host)")
    segments = parts.path.split("/")
    if hub and len(segments) > 3 and segments[3] == "blob":  # a page, not the file: /resolve/
        segments[3] = "resolve"
        url = urlunsplit(parts._replace(path="/".join(segments)))
    name = PurePosixPath(unquote(parts.path)).name
    if name in ("", ".", "..") or _BAD_PART.search(name):
        raise ProviderUnavailable(f"{url.split('?', 1)[0]!r} names no model file")
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    target = cache / "models" / "url" / host / digest / name
    return ModelSource(url, url, target, (target,), hub=hub)


def model_source(text: str, cache_dir: Path | str | None = None,
                 env: Mapping[str, str] | None = None) -> ModelSource:
    """Parse a downloadable ``local.modelPath``; raises ProviderUnavailable if it is malformed.

    ``env`` (default ``os.environ``) gives ``HF_ENDPOINT``.
    """
    cache = cache_root(cache_dir)
    if text.startswith(HF_PREFIXES):
        return _hf_source(text, cache, env)
    if text.lower().startswith(URL_PREFIXES):
        return _url_source(text, cache, env)
    raise ProviderUnavailable(f"{text!r} is neither an hf: URI nor an http(s) URL")
