"""load_settings: environment over file over defaults, resolved into :class:`Settings`.

The settings tree is filled generically from :data:`~pipeline.config.keys.KEYS`: each key's
raw value goes to the field its row names, and the dataclass checks it. The few keys whose
value needs more than a check (paths taken from the right base, ``{agentId}``, a SecretRef…)
have a resolver in :data:`_RESOLVERS`. Every check failure is re-raised naming the file or
variable the value came from.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

from pipeline.config.agent_id import is_valid_agent_id, normalize_agent_id_strict
from pipeline.config.collect import file_entries
from pipeline.config.env import env_entries
from pipeline.config.errors import ConfigError, Entry, Invalid, message, show
from pipeline.config.files import discover
from pipeline.config.keys import (
    MAX_CANDIDATE_MULTIPLIER,
    OPT_STR,
    READ,
    STR,
    Spec,
    check_headers,
    check_url,
    keys_at,
)
from pipeline.config.paths import (
    data_dir,
    default_result_backend,
    default_sessions_dir,
    default_store_path,
    expand,
    resolve,
)
from pipeline.config.providers import parse_model_providers
from pipeline.config.qmd_values import command_word
from pipeline.config.settings import Settings, nested


def load_settings(
    config_file: Path | str | None = None,
    workspace: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    agent: str | None = None,
) -> Settings:
    """Resolve memq's settings (of ``agent``, the OpenClaw agent id, when given).

    Precedence, highest first: the ``workspace`` and ``agent`` arguments, environment
    variables, the config file, defaults. The file is ``config_file``, else ``$MEMQ_CONFIG``, else
    ``<workspace or cwd>/memq.toml`` / ``memq.json``, else ``$XDG_CONFIG_HOME/memq/config.toml``
    (see :func:`find_config_file`). ``env`` replaces ``os.environ`` (API keys are not read here).
    """
    env = os.environ if env is None else env
    env = {k: v for k, v in env.items() if isinstance(v, str)}
    cwd = Path.cwd()
    warnings: list[str] = []
    entries, redis = env_entries(env)
    if agent is not None:
        entries["agentId"] = Entry(agent, "agent", "(argument)", "argument", cwd)

    ws_for_discovery: Path | None = None
    if workspace is not None:
        ws_for_discovery = resolve(workspace, cwd, env)
    elif "workspace" in entries:
        ws_for_discovery = resolve(entries["workspace"].value, cwd, env)
    path = discover(config_file, ws_for_discovery, env, warnings)
    agent_hint = entries["agentId"].value if "agentId" in entries else None
    from_file = file_entries(path, agent_hint, env, warnings) if path is not None else {}

    # Environment beats the file, except REDIS_URL, a generic variable, which only fills in
    # when neither MEMQ_BROKER_URL nor the file's brokerUrl sets the broker.
    merged = {**from_file, **entries}
    merged.update((k, e) for k, e in from_file.items() if e.pinned)  # the memory chosen
    if redis is not None and "brokerUrl" not in merged:
        merged["brokerUrl"] = redis
    return _Loader(merged, path, env, warnings).settings(workspace)


@dataclass
class _Loader:
    """The merged raw values, and what the resolvers need to know besides."""

    entries: dict[str, Entry]
    config_path: Path | None
    env: Mapping[str, str]
    warnings: list[str]
    workspace: Path = field(default_factory=Path.cwd)
    agent_id: str = "main"

    def settings(self, workspace_arg: Path | str | None) -> Settings:
        self.workspace = self._workspace(workspace_arg)
        if "agentId" in self.entries:
            self.agent_id = self._agent_id()
        settings: Settings = self.build(Settings, "")
        self._warn(settings)
        return dataclasses.replace(settings, data_dir=data_dir(self.env),
                                   warnings=tuple(dict.fromkeys(self.warnings)))

    def build(self, cls: type, owner: str) -> Any:
        """The settings object ``cls`` at attribute path ``owner``, its nested ones first."""
        kwargs = {
            name: self.build(sub, f"{owner}.{name}" if owner else name)
            for name, sub in nested(cls).items()
        }
        fields = {f.name for f in dataclasses.fields(cls)}
        keys = {key.path: name for name, key in keys_at(owner).items()}
        plain = {p: n for p, n in keys.items() if p in self.entries and p not in _RESOLVERS}
        for path in (p for p, name in plain.items() if name not in fields):
            self.checked(path)  # a key memq checks but keeps no value of (store.driver)
        for path, resolver in _RESOLVERS.items():
            if path in keys:
                kwargs.update(resolver(self, self.entries.get(path)))
        # The dataclass checks these values (and names the key when one is wrong).
        kwargs.update((name, self.entries[p].value) for p, name in plain.items() if name in fields)
        try:
            return cls(**kwargs)
        except Invalid as exc:
            raise self.located(exc) from None

    def checked(self, key: str, spec: Spec | None = None) -> Any:
        """The value of ``key``'s entry checked against its spec (or ``spec``)."""
        try:
            return (spec or READ[key].spec).check(key, self.entries[key].value)
        except Invalid as exc:
            raise self.located(exc) from None

    def located(self, exc: Invalid) -> ConfigError:
        """The check failure as an error naming the file or variable the value came from."""
        bad = exc.key or ""
        parts = bad.split(".")
        for n in range(len(parts), 0, -1):  # "remote.headers.X-Key" belongs to "remote.headers"
            entry = self.entries.get(".".join(parts[:n]))
            if entry is not None:
                return entry.fail(bad, exc.problem, exc.got, suffix=bad[len(".".join(parts[:n])) :])
        where = f"in {self.config_path}" if self.config_path else None
        return ConfigError(
            message(bad, exc.problem, exc.got, where),
            key=bad,
            source=str(self.config_path) if self.config_path else None,
        )

    def _agent_id(self) -> str:
        """The canonical agent id (OpenClaw's: ``Ops`` is ``ops``); an id OpenClaw would have
        to rewrite beyond its case is refused, naming what OpenClaw would read."""
        raw = self.checked("agentId")
        canonical = normalize_agent_id_strict(raw)
        if canonical is None or not is_valid_agent_id(raw):
            entry = self.entries["agentId"]
            hint = f' (OpenClaw reads it as "{canonical}")' if canonical else ""
            raise entry.fail("agentId", "must be letters, digits, '_' or '-', starting with a "
                             f"letter or digit (it is used in file names){hint}", show(raw))
        return canonical

    def _workspace(self, workspace_arg: Path | str | None) -> Path:
        """Argument > MEMQ_WORKSPACE > file > cwd; relative paths from where they were given."""
        entry = self.entries.get("workspace")
        if workspace_arg is not None:
            workspace = resolve(workspace_arg, Path.cwd(), self.env)
        elif entry is not None:
            if not isinstance(entry.value, str) or not entry.value.strip():
                raise entry.fail("workspace", "must be a directory path", show(entry.value))
            workspace = resolve(entry.value.strip(), entry.base, self.env)
        else:
            workspace = Path.cwd()
        if workspace.exists() and not workspace.is_dir():
            if entry is not None and workspace_arg is None:
                raise entry.fail("workspace", "must be a directory", show(str(workspace)))
            raise ConfigError(f"workspace: {workspace} is not a directory", key="workspace")
        if not workspace.exists():
            self.warnings.append(f"workspace {workspace} does not exist yet")
        return workspace

    def _clamped(self, settings: Settings, key: str) -> bool:
        """Whether ``settings`` hold less for ``key`` than the (valid) value given."""
        entry = self.entries.get(key)
        return entry is not None and attrgetter(READ[key].attr)(settings) < entry.value

    def _warn(self, s: Settings) -> None:
        if self._clamped(s, "chunking.overlap"):
            self.warnings.append(f"chunking.overlap clamped to {s.chunking.overlap} (tokens - 1)")
        if self._clamped(s, "query.hybrid.candidateMultiplier"):
            self.warnings.append(
                f"query.hybrid.candidateMultiplier clamped to {MAX_CANDIDATE_MULTIPLIER}"
            )
        sources = self.entries.get("sources")
        if sources is not None and "sessions" in sources.value and "sessions" not in s.sources:
            self.warnings.append(
                'sources lists "sessions" but experimental.sessionMemory is off, so '
                "session transcripts are not indexed (as in OpenClaw)"
            )
        if s.fallback != "none" and s.fallback == s.provider:
            self.warnings.append(f'fallback "{s.fallback}" is the same as the provider')
        if any(s.store.path.is_relative_to(d) for d in (s.workspace / "memory", *s.extra_paths)):
            self.warnings.append(
                f"store.path {s.store.path} is inside a memory folder; keep the "
                "index outside the files it indexes"
            )


# ---------------------------------------------------------------------------------------------
# Keys whose value needs more than a check. Each gets the key's entry (None when unset) and
# returns keyword arguments for the settings class that holds the key.


def _store_path(ld: _Loader, entry: Entry | None) -> dict[str, Any]:
    if entry is None:
        return {"path": default_store_path(ld.workspace, ld.env)}
    raw = entry.value
    if not isinstance(raw, str) or not raw.strip():
        raise entry.fail("store.path", "must be a file path", show(raw))
    path = resolve(raw.strip().replace("{agentId}", ld.agent_id), entry.base, ld.env)
    if path.is_dir():
        raise entry.fail("store.path", "must be a file, not a directory", show(str(path)))
    return {"path": path}


def _extension_path(ld: _Loader, entry: Entry | None) -> dict[str, Any]:
    """A path with a folder is made absolute; a bare name is left to SQLite's own search."""
    if entry is None or not (text := ld.checked("store.vector.extensionPath")):
        return {}
    expanded = expand(text, ld.env)
    has_dir = os.sep in expanded or (os.altsep is not None and os.altsep in expanded)
    return {"extension_path": str(resolve(expanded, entry.base, ld.env)) if has_dir else expanded}


def _api_key(key: str) -> Callable[[_Loader, Entry | None], dict[str, Any]]:
    """The resolver of an API key (``remote.apiKey``, ``rerank.apiKey``): a string, or an
    OpenClaw SecretRef naming an environment variable. The value is never echoed."""

    def resolve_key(ld: _Loader, entry: Entry | None) -> dict[str, Any]:
        if entry is None:
            return {}
        value = entry.value
        if value is None or isinstance(value, str):
            return {"api_key": value.strip() if isinstance(value, str) and value.strip()
                    else None}
        if isinstance(value, Mapping):
            source, ident = value.get("source"), value.get("id")
            if source == "env" and isinstance(ident, str) and ident.strip():
                return {"api_key_env": ident.strip()}
            raise entry.fail(key, 'memq supports a string or an OpenClaw SecretRef '
                                  '{source: "env", id: "VARIABLE"} here', None)
        raise entry.fail(key, "must be a string", None)

    return resolve_key


def _model_providers(ld: _Loader, entry: Entry | None) -> dict[str, Any]:
    """An openclaw.json's ``models.providers``: the entries of the embedding providers, and
    the custom entries ``provider`` and ``fallback`` name."""
    if entry is None:
        return {}
    named = [ld.entries[key].value for key in ("provider", "fallback") if key in ld.entries]
    try:
        entries = parse_model_providers(entry.value, check_url, check_headers, named)
    except Invalid as exc:
        where = f"in {ld.config_path}" if ld.config_path else None
        raise ConfigError(message(exc.key or "models.providers", exc.problem, exc.got, where),
                          key=exc.key, source=entry.source) from None
    return {"model_providers": tuple(entries.items())}


def _model_path(key: str) -> Callable[[_Loader, Entry | None], dict[str, Any]]:
    """The resolver of a model file (``local.modelPath``, ``rerank.modelPath``): local paths
    are made absolute; ``hf:``/``huggingface:`` URIs and URLs are kept as written."""

    def resolve_path(ld: _Loader, entry: Entry | None) -> dict[str, Any]:
        if entry is None:
            return {}
        path = ld.checked(key)
        if path and not re.match(r"^(hf:|huggingface:|[A-Za-z][A-Za-z0-9+.-]*://)", path):
            path = str(resolve(path, entry.base, ld.env))
        return {"model_path": path or None}

    return resolve_path


def _model_cache_dir(ld: _Loader, entry: Entry | None) -> dict[str, Any]:
    if entry is None:
        return {}
    text = ld.checked("local.modelCacheDir", OPT_STR)
    return {"model_cache_dir": resolve(text, entry.base, ld.env) if text else None}


def _extra_paths(ld: _Loader, entry: Entry | None) -> dict[str, Any]:
    """extraPaths are relative to the workspace (OpenClaw), whichever layer set them."""
    paths: list[Path] = []
    patterns: list[tuple[Path, str]] = []
    plain: set[Path] = set()
    for item, _base in entry.value if entry is not None else ():
        raw = item["path"] if isinstance(item, Mapping) else item
        if not raw.strip():
            continue
        resolved = resolve(raw.strip(), ld.workspace, ld.env)
        paths.append(resolved)
        if isinstance(item, Mapping) and item.get("pattern"):
            patterns.append((resolved, item["pattern"]))
        else:
            plain.add(resolved)
    # A folder also listed without a pattern keeps all its files: its globs would only narrow.
    patterns = [(p, pattern) for p, pattern in patterns if p not in plain]
    return {"extra_paths": tuple(paths), "extra_path_patterns": tuple(patterns)}


def _sessions_dir(ld: _Loader, entry: Entry | None) -> dict[str, Any]:
    if entry is None:
        return {"sessions_dir": default_sessions_dir(ld.agent_id, ld.env)}
    text = ld.checked("sessionsDir", STR)
    if not text:
        raise entry.fail("sessionsDir", "must be a directory path", '""')
    return {"sessions_dir": resolve(text.replace("{agentId}", ld.agent_id), entry.base, ld.env)}


def _sources(ld: _Loader, entry: Entry | None) -> dict[str, Any]:
    if entry is None:
        return {}
    if not isinstance(entry.value, list):
        raise entry.fail(
            "sources", 'must be a list of "memory" and/or "sessions"', show(entry.value)
        )
    return {"sources": entry.value}


def _qmd_command(ld: _Loader, entry: Entry | None) -> dict[str, Any]:
    """OpenClaw spawns the first shell word of ``memory.qmd.command`` and drops the rest; a
    relative path with a folder is taken from the workspace (OpenClaw runs qmd there)."""
    if entry is None:
        return {}
    text = ld.checked("qmd.command")
    if not text:
        raise entry.fail("qmd.command", "must name the qmd executable", '""')
    word = command_word(text)
    if word != text.strip().strip("'\""):
        ld.warnings.append(f'{entry.name}: only the executable "{word}" is used; the rest of '
                           f"the command is ignored (as in OpenClaw)")
    expanded = expand(word, ld.env)
    if os.sep in expanded:
        expanded = str(resolve(expanded, ld.workspace, ld.env))
    return {"command": expanded}


def _qmd_paths(ld: _Loader, entry: Entry | None) -> dict[str, Any]:
    """``memory.qmd.paths[].path`` is taken from the workspace, ``~`` from ``env``."""
    if entry is None:
        return {}
    return {"paths": tuple(dataclasses.replace(p, path=resolve(p.path, ld.workspace, ld.env))
                           for p in ld.checked("qmd.paths"))}


def _result_backend(ld: _Loader, entry: Entry | None) -> dict[str, Any]:
    """``resultBackend``: the job log's database (default: a SQLite file in the data dir)."""
    if entry is None or entry.value is None:
        return {"result_backend": default_result_backend(ld.env)}
    return {"result_backend": ld.checked("resultBackend")}


def _qmd_export_dir(ld: _Loader, entry: Entry | None) -> dict[str, Any]:
    """``memory.qmd.sessions.exportDir`` is taken from the workspace (OpenClaw)."""
    if entry is None or entry.value is None:
        return {}
    text = ld.checked("qmd.sessions.exportDir", OPT_STR)
    return {"export_dir": resolve(text, ld.workspace, ld.env) if text else None}


#: In the order they run (which decides the first of several errors reported).
_RESOLVERS: dict[str, Callable[[_Loader, Entry | None], dict[str, Any]]] = {
    "workspace": lambda ld, entry: {"workspace": ld.workspace},
    "agentId": lambda ld, entry: {"agent_id": ld.agent_id},  # canonical (``_agent_id``)
    "store.path": _store_path,
    "store.vector.extensionPath": _extension_path,
    "remote.apiKey": _api_key("remote.apiKey"),
    "rerank.apiKey": _api_key("rerank.apiKey"),
    "models.providers": _model_providers,
    "local.modelPath": _model_path("local.modelPath"),
    "rerank.modelPath": _model_path("rerank.modelPath"),
    "local.modelCacheDir": _model_cache_dir,
    "extraPaths": _extra_paths,
    "sessionsDir": _sessions_dir,
    "sources": _sources,
    "qmd.command": _qmd_command,
    "qmd.paths": _qmd_paths,
    "qmd.sessions.exportDir": _qmd_export_dir,
    "resultBackend": _result_backend,
    "configFile": lambda ld, entry: {"config_file": ld.config_path},
}
