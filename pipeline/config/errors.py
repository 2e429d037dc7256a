"""Config errors, and the raw values that know where they came from so errors can say so."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import ConfigError


class Invalid(ConfigError):
    """A value failed a check; raised before we know where the value came from.

    The loader catches it and re-raises a :class:`ConfigError` that names the file or variable.
    """

    def __init__(self, key: str, problem: str, got: str | None) -> None:
        self.problem = problem
        self.got = got
        super().__init__(message(key, problem, got, None), key=key)


def message(name: str, problem: str, got: str | None, where: str | None) -> str:
    """``name: problem; got value (where)``, the shape of every value error."""
    text = f"{name}: {problem}"
    if got is not None:
        text += f"; got {got}"
    if where:
        text += f" ({where})"
    return text


def show(value: Any) -> str:
    """A config-looking rendering of a (non-secret) bad value, kept short."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass
class Entry:
    """One raw value from a config file or the environment, and where it came from."""

    value: Any
    name: str  # what the user wrote: "query.minScore", "agents.defaults.memorySearch.x", "MEMQ_X"
    where: str  # "in /path/memq.toml" or "environment variable"
    source: str  # ConfigError.source
    base: Path  # relative paths in this value are taken from here
    env_var: str | None = None
    #: Set by a config file's roster for what names the memory chosen (its canonical name, a
    #: listed memory's workspace): it beats the environment (``MEMQ_AGENT_ID``/``MEMQ_WORKSPACE``
    #: name the file's own memory, not a listed one).
    pinned: bool = False

    def fail(self, key: str, problem: str, got: str | None, suffix: str = "") -> ConfigError:
        """The error for this value failing a check on ``key``."""
        name = f"{self.name} (sets {key})" if self.env_var else self.name + suffix
        return ConfigError(message(name, problem, got, self.where), key=key, source=self.source)
