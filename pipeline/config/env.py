"""The raw values environment variables set (``MEMQ_*``, and ``REDIS_URL`` as a last resort)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pipeline.config.errors import Entry, show
from pipeline.config.keys import KEYS, NULL_WORDS, READ

#: Environment variables and the key each one sets.
ENV_VARS: dict[str, str] = {key.env: key.path for key in KEYS if key.env}


def env_entries(env: Mapping[str, str]) -> tuple[dict[str, Entry], Entry | None]:
    """The keys set by ``MEMQ_*`` variables (empty values count as unset), and the broker
    ``REDIS_URL`` names, which the loader uses only if nothing else sets ``brokerUrl``."""
    entries = {key: _parse(var, key, env[var]) for var, key in ENV_VARS.items()
               if env.get(var, "").strip()}  # fmt: skip
    redis = None
    if "brokerUrl" not in entries and env.get("REDIS_URL", "").strip():
        redis = _parse("REDIS_URL", "brokerUrl", env["REDIS_URL"])
    return entries, redis


def _parse(var: str, key: str, text: str) -> Entry:
    entry = Entry(
        None, var, "environment variable", f"environment variable {var}", Path.cwd(), env_var=var
    )
    spec = READ[key].spec
    raw = text.strip()
    if spec.kind == "int":
        if spec.nullable and raw.lower() in NULL_WORDS:
            entry.value = None
        else:
            try:
                entry.value = int(raw)
            except ValueError:
                raise entry.fail(key, f"must be {spec.describe()}", show(text)) from None
    elif spec.kind == "paths":
        entry.value = [(p, Path.cwd()) for p in text.split(os.pathsep) if p.strip()]
    else:
        entry.value = raw
    return entry
