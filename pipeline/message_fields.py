"""The small values messages carry that the store and the providers use on their own
(:class:`Route`, :class:`ProviderSpec`, :class:`MediaPart`), with the plain checks that read
them and a message's free-form JSON.

Plain frozen dataclasses, apart from :mod:`pipeline.messages` (pydantic models) so that what
reads an index's provider spec (a one-shot ``memq search``) never imports pydantic. A refused
value raises :class:`~pipeline.errors.MessageRefused` naming it: ``where`` is the place's name
(``embedding job.spec``; the messages pass "" and put the place in front themselves).
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline.errors import MessageRefused

#: The largest whole number a message may carry (SQLite's integers are 64-bit).
MAX_WHOLE = 2**63 - 1
#: How deeply the free-form JSON of a message (provider options, a reply) may nest.
MAX_DEPTH = 32


def shown(value: Any) -> str:
    """A short description of a refused value (never the whole of a large one)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_WHOLE:
        return "a number too large"
    if isinstance(value, bool | int | float | type(None)):
        return repr(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"{value[:37]!r}..."
    return "list" if isinstance(value, tuple) else type(value).__name__


def refusal(where: str, wanted: str, value: Any) -> MessageRefused:
    """``<where> must be <wanted>, not <value>``."""
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


def check_json(value: Any, where: str, depth: int = 0) -> Any:
    """Plain JSON: objects with text keys, lists, text, finite numbers, booleans, null."""
    if depth > MAX_DEPTH:
        raise MessageRefused(f"{where} nests deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) > MAX_WHOLE:
            raise refusal(where, f"a whole number >= {-MAX_WHOLE}", value)
        return value
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


def _object(data: Any, where: str, keys: Mapping[str, bool]) -> Mapping[str, Any]:
    """``data``, a JSON object of these keys (key -> required)."""
    if not isinstance(data, Mapping):
        raise refusal(where, "a JSON object", data)
    for key in data:
        if key not in keys:
            raise MessageRefused(f"{where} has an unknown field {shown(key)}")
    for key, required in keys.items():
        if required and key not in data:
            raise MessageRefused(f"{where} has no {key!r}")
    return data


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
        fields = _object(data, where, {"shard": False, "interactive": False})
        shard, interactive = fields.get("shard", 0), fields.get("interactive", False)
        if type(shard) is not int or not 0 <= shard <= MAX_WHOLE:
            raise refusal(f"{where}.shard", "a whole number >= 0", shard)
        if not isinstance(interactive, bool):
            raise refusal(f"{where}.interactive", "true or false", interactive)
        return cls(shard, interactive)


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
        fields = _object(data, where, {"name": True, "model": True, "provider_key": True,
                                       "options": False})
        options = fields.get("options", {})
        if not isinstance(options, Mapping):
            raise refusal(f"{where}.options", "a JSON object", options)
        return cls(*(check_text(fields[k], f"{where}.{k}") for k in ("name", "model",
                                                                      "provider_key")),
                   check_json(options, f"{where}.options"))


@dataclass(frozen=True)
class MediaPart:
    """A media file's bytes inline (base64), for a multimodal chunk's embedding."""

    mime_type: str
    data: str

    def to_json(self) -> dict[str, Any]:
        return {"mime_type": self.mime_type, "data": self.data}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "a media part") -> MediaPart:
        fields = _object(data, where, {"mime_type": True, "data": True})
        raw = check_text(fields["data"], f"{where}.data")
        try:
            base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise refusal(f"{where}.data", "base64 data", raw) from None
        return cls(check_text(fields["mime_type"], f"{where}.mime_type"), raw)
