"""Path rules: ``~`` from the given environment, fixed bases for relative paths, default places.

Every function takes the environment as an argument (``load_settings(env=...)`` must be able
to replace ``os.environ``, tests included).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path


def home(env: Mapping[str, str]) -> Path:
    value = env.get("HOME")
    return Path(value) if value else Path.home()


def expand(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> str:
    """``~`` expansion using ``env['HOME']`` (so tests and explicit environments are honoured)."""
    text = os.fspath(path)
    if env is not None and (text == "~" or text.startswith("~/") or text.startswith("~" + os.sep)):
        return str(home(env)) + text[1:]
    return os.path.expanduser(text)


def absolute(path: str | os.PathLike[str]) -> Path:
    """``~`` expanded with the process environment, made absolute from the cwd."""
    return Path(os.path.abspath(os.path.expanduser(os.fspath(path))))


def resolve(path: str | os.PathLike[str], base: Path, env: Mapping[str, str] | None = None) -> Path:
    """Absolute, normalised (``..`` folded, symlinks kept), relative paths taken from ``base``."""
    expanded = expand(path, env)
    return Path(os.path.normpath(os.path.join(base, expanded)))


def xdg(env: Mapping[str, str], var: str, fallback: str) -> Path:
    """An XDG base directory: ``$var`` if absolute, else ``~/fallback``."""
    value = env.get(var, "")
    if value and os.path.isabs(value):  # the XDG spec says to ignore relative values
        return Path(value)
    return home(env) / fallback


def _data_dir(env: Mapping[str, str]) -> Path:
    memq_home = env.get("MEMQ_HOME")
    if memq_home:
        return resolve(memq_home, Path.cwd(), env)
    return xdg(env, "XDG_DATA_HOME", ".local/share") / "memq"


def data_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where memq keeps the stores it names itself: ``$MEMQ_HOME``, else
    ``$XDG_DATA_HOME/memq``, else ``~/.local/share/memq``."""
    return _data_dir(os.environ if env is None else env)


def default_store_path(
    workspace: str | os.PathLike[str], env: Mapping[str, str] | None = None
) -> Path:
    """One SQLite file per workspace, outside it: ``<data dir>/<name>-<sha10>.sqlite``.

    The data dir is ``$MEMQ_HOME``, else ``$XDG_DATA_HOME/memq``, else ``~/.local/share/memq``;
    the hash is the first 10 hex digits of sha256 of the workspace's real path, so the same
    folder reached through a symlink shares its index.
    """
    env = os.environ if env is None else env
    real = os.path.realpath(os.path.abspath(expand(workspace, env)))
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:10]
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(real)).strip("._") or "workspace"
    return _data_dir(env) / f"{name}-{digest}.sqlite"


def default_result_backend(env: Mapping[str, str] | None = None) -> str:
    """The job log every memq process of this host shares: Celery's database result backend
    in a SQLite file of the data dir (``db+sqlite:///<data dir>/jobs.sqlite``)."""
    return f"db+sqlite:///{_data_dir(os.environ if env is None else env) / 'jobs.sqlite'}"


def openclaw_state_dir(env: Mapping[str, str]) -> Path:
    """``$OPENCLAW_STATE_DIR``, else ``~/.openclaw``."""
    state = env.get("OPENCLAW_STATE_DIR")
    return resolve(state, Path.cwd(), env) if state else home(env) / ".openclaw"


def default_sessions_dir(agent_id: str, env: Mapping[str, str] | None = None) -> Path:
    """OpenClaw's transcripts folder: ``$OPENCLAW_STATE_DIR|~/.openclaw/agents/<id>/sessions``."""
    env = os.environ if env is None else env
    return openclaw_state_dir(env) / "agents" / agent_id / "sessions"
