"""Finding the config file and parsing it: TOML, or JSON with the JSON5-ish bits OpenClaw has."""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.config.errors import ConfigError
from pipeline.config.paths import resolve, xdg


def find_config_file(
    workspace: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Path | None:
    """The config file memq would read (without an explicit ``config_file`` argument).

    ``$MEMQ_CONFIG`` (``none`` disables config files), else ``<workspace or cwd>/memq.toml`` or
    ``memq.json``, else ``$XDG_CONFIG_HOME/memq/config.toml`` (or ``config.json``), else None.
    """
    return discover(None, workspace, os.environ if env is None else env, [])


def discover(
    config_file: str | os.PathLike[str] | None,
    workspace: str | os.PathLike[str] | None,
    env: Mapping[str, str],
    warnings: list[str],
) -> Path | None:
    """The config file to read: the argument, ``$MEMQ_CONFIG``, the workspace's, the user's."""
    if config_file is not None:
        path = resolve(config_file, Path.cwd(), env)
        if not path.is_file():
            raise ConfigError(
                f"config file {path} does not exist (given as config_file)", source=str(path)
            )
        return path
    named = env.get("MEMQ_CONFIG", "").strip()
    if named:
        if named.lower() == "none":
            return None
        path = resolve(named, Path.cwd(), env)
        if not path.is_file():
            raise ConfigError(
                f"MEMQ_CONFIG: config file {path} does not exist",
                key="MEMQ_CONFIG",
                source="environment variable MEMQ_CONFIG",
            )
        return path
    base = resolve(workspace, Path.cwd(), env) if workspace is not None else Path.cwd()
    local = [p for p in (base / "memq.toml", base / "memq.json") if p.is_file()]
    if len(local) > 1:
        warnings.append(f"both {local[0]} and {local[1]} exist; using {local[0]}")
    if local:
        return local[0]
    config_dir = xdg(env, "XDG_CONFIG_HOME", ".config") / "memq"
    for candidate in (config_dir / "config.toml", config_dir / "config.json"):
        if candidate.is_file():
            return candidate
    return None


def relax_json(text: str) -> str:
    """JSON5-ish to JSON: drop // and /* */ comments and trailing commas, quote bare keys,
    turn single-quoted strings into double-quoted ones. Line numbers are preserved."""
    out: list[str] = []
    last = ""  # last significant character emitted
    last_index = -1  # its index in ``out``
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j, buf = i + 1, ['"']
            while j < n and text[j] != c:
                if text[j] == "\\" and j + 1 < n:
                    buf.append("'" if text[j + 1] == "'" else text[j : j + 2])
                    j += 2
                    continue
                buf.append('\\"' if text[j] == '"' else text[j])
                j += 1
            buf.append('"')
            out.append("".join(buf))
            last, last_index = '"', len(out) - 1
            i = j + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c in "}]" and last == ",":
            out[last_index] = " "
            out.append(c)
            last, last_index = c, len(out) - 1
            i += 1
        elif (c.isalpha() or c in "_$") and last in ("{", ","):
            match = re.compile(r"[A-Za-z_$][\w$-]*").match(text, i)
            word = match.group(0) if match else c
            rest = text[i + len(word) :].lstrip(" \t\r\n")
            out.append(f'"{word}"' if rest.startswith(":") else word)
            last, last_index = word[-1], len(out) - 1
            i += len(word)
        else:
            out.append(c)
            if not c.isspace():
                last, last_index = c, len(out) - 1
            i += 1
    return "".join(out)


def read_file(path: Path) -> dict[str, Any]:
    """The file's top-level table; TOML unless it is named .json/.json5 or starts with ``{``."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(f"cannot read config file {path}: {reason}", source=str(path)) from None
    suffix = path.suffix.lower()
    as_json = suffix in (".json", ".json5") or (suffix != ".toml" and text.lstrip().startswith("{"))
    if as_json:
        try:
            # Strict JSON first: relax_json is a character loop, and a fleet's workers parse
            # an openclaw.json of many agents once per memory (JSON5-ish text falls through).
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None
        try:
            if data is None:
                data = json.loads(relax_json(text))
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}",
                source=str(path),
            ) from None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}", source=str(path)) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the top level must be a table/object of settings", source=str(path)
        )
    return data
