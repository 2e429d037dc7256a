"""What every message is made of: the readers that check a message's fields
(:class:`MessageFields`), and the small values messages carry that the store and the providers
use on their own: :class:`Route`, :class:`ProviderSpec`, :class:`MediaPart`.

Apart from :mod:`pipeline.messages` so that what reads an index's provider spec (a one-shot
``memq search``) does not build every message class. A refused field raises
:class:`~pipeline.errors.MessageRefused` naming it.
"""

from __future__ import annotations

import base64
import binascii
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

import numpy as np

from pipeline.errors import MessageRefused

# -- reading a message ------------------------------------------------------------------------

V = TypeVar("V")
#: A check of one JSON value: returns it in its Python form or raises MessageRefused; the
#: second argument names the value in the refusal (``embedding job.chunks[3].id``).
Check = Callable[[Any, str], V]

#: The largest whole number a message may carry (SQLite's integers are 64-bit).
MAX_WHOLE = 2**63 - 1
#: How deeply the free-form JSON of a message (provider options, a batch job's remote record)
#: may nest.
MAX_DEPTH = 32
_REQUIRED: Any = object()


def shown(value: Any) -> str:
    """A short description of a refused value (never the whole of a large one)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_WHOLE:
        return "a number too large"
    if isinstance(value, bool | int | float | type(None)):
        return repr(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"{value[:37]!r}..."
    return type(value).__name__


def refusal(where: str, wanted: str, value: Any) -> MessageRefused:
    return MessageRefused(f"{where} must be {wanted}, not {shown(value)}")


def check_text(value: Any, where: str) -> str:
    """A JSON string that SQLite and the providers can take (UTF-8: no lone surrogates)."""
    if not isinstance(value, str):
        raise refusal(where, "text", value)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise MessageRefused(f"{where} is not valid Unicode text (a lone surrogate)") from None
    return value


def check_optional_text(value: Any, where: str) -> str | None:
    return None if value is None else check_text(value, where)


#: A memory's name: an agent id as OpenClaw writes one (:mod:`pipeline.config.agent_id`), the
#: form every memory name has, so a name that could escape into a path never reaches a worker.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def check_name(value: Any, where: str) -> str:
    text = check_text(value, where)
    if not _NAME.fullmatch(text):
        raise refusal(where, "a memory name (letters, digits, '_' or '-', at most 64)", value)
    return text


def check_path(value: Any, where: str) -> str:
    """A store generation's real path: absolute, without NUL."""
    text = check_text(value, where)
    if "\0" in text or not os.path.isabs(text):
        raise refusal(where, "an absolute file path", value)
    return text


def check_whole(minimum: int = 0) -> Check[int]:
    def check(value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) \
                or not minimum <= value <= MAX_WHOLE:
            raise refusal(where, f"a whole number >= {minimum}", value)
        return value
    return check


def check_number(value: Any, where: str) -> float:
    """A finite number >= 0 (seconds, a deadline)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise refusal(where, "a number", value)
    if isinstance(value, int) and abs(value) > MAX_WHOLE:
        raise refusal(where, "a finite number >= 0", value)
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise refusal(where, "a finite number >= 0", value)
    return number


def check_flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise refusal(where, "true or false", value)
    return value


def check_one_of(choices: Sequence[str]) -> Check[str]:
    def check(value: Any, where: str) -> str:
        if value not in choices or not isinstance(value, str):
            raise refusal(where, "one of " + ", ".join(map(repr, choices)), value)
        return value
    return check


def check_vector(value: Any, where: str) -> np.ndarray:
    """Base64 of one or more finite little-endian float32 values."""
    if not isinstance(value, str):
        raise refusal(where, "a base64 float32 vector", value)
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise refusal(where, "a base64 float32 vector", value) from None
    if not raw or len(raw) % 4:
        raise MessageRefused(f"{where} must hold one or more float32 values "
                             f"({len(raw)} bytes)")
    vector = np.frombuffer(raw, dtype="<f4")
    if not np.isfinite(vector).all():
        raise MessageRefused(f"{where} holds a value that is not a finite number")
    return vector


def check_base64(value: Any, where: str) -> str:
    text = check_text(value, where)
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise refusal(where, "base64 data", value) from None
    return text


def check_json(value: Any, where: str, depth: int = 0) -> Any:
    """Plain JSON: objects with text keys, lists, text, finite numbers, booleans, null."""
    if depth > MAX_DEPTH:
        raise MessageRefused(f"{where} nests deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return check_whole(-MAX_WHOLE)(value, where)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise refusal(where, "a finite number", value)
        return value
    if isinstance(value, str):
        return check_text(value, where)
    if isinstance(value, list | tuple):
        return [check_json(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        return {check_text(k, f"{where} key"): check_json(v, f"{where}.{k}", depth + 1)
                for k, v in value.items()}
    raise refusal(where, "JSON", value)


def check_json_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise refusal(where, "a JSON object", value)
    return check_json(value, where)


def check_row(*checks: Check[Any]) -> Check[tuple[Any, ...]]:
    """A JSON list of exactly ``len(checks)`` values, each read by its check."""
    def read_row(value: Any, where: str) -> tuple[Any, ...]:
        if not isinstance(value, list | tuple) or len(value) != len(checks):
            raise refusal(where, f"a list of {len(checks)} values", value)
        return tuple(check(item, f"{where}[{i}]")
                     for i, (check, item) in enumerate(zip(checks, value, strict=True)))
    return read_row


class MessageFields(Mapping[str, Any]):
    """A message's JSON object (or an object nested in it), read field by field.

    Every getter checks its field and refuses anything else with :class:`MessageRefused`
    naming the field (``embedding job.spec.options``); indexing a missing key refuses too.
    A ``from_json`` that reads each field through a getter raises nothing but
    :class:`MessageRefused`, and what it returns holds only values of the right types.
    """

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, Mapping):
            raise refusal(where, "a JSON object", data)
        self._data = data
        self.where = where

    def __getitem__(self, key: str) -> Any:
        if key not in self._data:
            raise MessageRefused(f"{self.where} has no {key!r}")
        return self._data[key]

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def read(self, key: str, check: Check[V], default: Any = _REQUIRED) -> V:
        """Field ``key`` read by ``check``; ``default`` when absent (or null, when the default
        is None); refused when absent without a default."""
        if key not in self._data or (self._data[key] is None and default is None):
            if default is _REQUIRED:
                raise MessageRefused(f"{self.where} has no {key!r}")
            return default
        return check(self._data[key], f"{self.where}.{key}")

    def each(self, key: str, check: Check[V], default: Any = _REQUIRED) -> tuple[V, ...]:
        """Field ``key``: a JSON list, each item read by ``check``."""
        items = self.read(key, check_list, default)
        return tuple(check(item, f"{self.where}.{key}[{i}]") for i, item in enumerate(items))

    def text(self, key: str, default: Any = _REQUIRED) -> str:
        return self.read(key, check_text, default)

    def optional_text(self, key: str) -> str | None:
        return self.read(key, check_text, None)

    def path(self, key: str) -> str:
        return self.read(key, check_path)

    def name(self, key: str) -> str:
        return self.read(key, check_name)

    def whole(self, key: str, default: Any = _REQUIRED, *, minimum: int = 0) -> int:
        return self.read(key, check_whole(minimum), default)

    def number(self, key: str, default: Any = _REQUIRED) -> float:
        return self.read(key, check_number, default)

    def flag(self, key: str, default: Any = _REQUIRED) -> bool:
        return self.read(key, check_flag, default)

    def choice(self, key: str, choices: Sequence[str], default: Any = _REQUIRED) -> str:
        return self.read(key, check_one_of(choices), default)

    def json_object(self, key: str, default: Any = _REQUIRED) -> dict[str, Any]:
        return self.read(key, check_json_object, default)

    def fields(self, key: str) -> MessageFields:
        """The object nested at ``key``."""
        return self.read(key, MessageFields)


def check_list(value: Any, where: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise refusal(where, "a list", value)
    return value


@dataclass(frozen=True)
class Route:
    """Where a memory's messages go: its writer ``shard``, and the lane (``interactive`` work,
    an edit or an append, goes ahead of bulk work, a full index or a backfill)."""

    shard: int = 0
    interactive: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"shard": self.shard, "interactive": self.interactive}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None, where: str = "a message's route"
                  ) -> Route:
        """The route in a message (shard 0, bulk, for a message of a memq without shards)."""
        if data is None:
            return cls()
        fields = MessageFields(data, where)
        return cls(fields.whole("shard", 0), fields.flag("interactive", False))


#: Shard 0, bulk lane: the route of a memory in a fleet without shards.
DEFAULT_ROUTE = Route()


@dataclass(frozen=True)
class ProviderSpec:
    """Names a provider and model in task messages and in the index. Never holds a secret.

    ``provider_key`` is OpenClaw's cache key (model, endpoint, non-secret headers);
    ``options`` are the non-secret facts a worker needs to build the same provider (dimensions,
    input types, a public base URL, the fleet's rate limit).
    """

    name: str
    model: str
    provider_key: str
    options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "a provider spec") -> ProviderSpec:
        fields = MessageFields(data, where)
        return cls(fields.text("name"), fields.text("model"), fields.text("provider_key"),
                   fields.json_object("options", {}))


@dataclass(frozen=True)
class MediaPart:
    """A media file's bytes inline (base64), for a multimodal chunk's embedding."""

    mime_type: str
    data: str
