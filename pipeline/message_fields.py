"""What every message is made of: the field types that check a message's values (pydantic
``Annotated`` types whose validators word a refusal the way memq always has), the reader that
turns a JSON object into a message (:func:`read_message`), and the small values messages carry
that the store and the providers use on their own: :class:`Route`, :class:`ProviderSpec`,
:class:`MediaPart`.

Apart from :mod:`pipeline.messages` so that what reads an index's provider spec (a one-shot
``memq search``) does not build every message class. A refused field raises
:class:`~pipeline.errors.MessageRefused` naming it (``embedding job.spec.options.x must be a
finite number, not nan``); a pydantic ``ValidationError`` never leaves :func:`read_message`.

Every message is a frozen pydantic dataclass of :data:`WIRE`: strict (a Python caller must hand
each field its exact type: a tuple, not a list; a :class:`Route`, not a dict) and without extra
fields. Dataclasses rather than ``BaseModel`` because the fleet builds its messages positionally
(``EmbedJob(memory, spec, store, chunks)``) and tools such as :func:`dataclasses.replace` keep
working. :func:`read_message` validates the wire the way pydantic's strict JSON mode would (a
JSON list for a tuple, a JSON object for a nested message): the scalar types below check their
values themselves, so their strictness does not depend on the mode.
"""

from __future__ import annotations

import base64
import binascii
import copy
import dataclasses
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import field
from typing import Annotated, Any, TypeVar

import numpy as np
from pydantic import ConfigDict, GetCoreSchemaHandler, ValidationError, ValidationInfo
from pydantic.dataclasses import dataclass

from pipeline.errors import MessageRefused

#: The configuration of every message class: strict, no field it does not declare.
WIRE = ConfigDict(strict=True, extra="forbid")

#: The largest whole number a message may carry (SQLite's integers are 64-bit).
MAX_WHOLE = 2**63 - 1
#: How deeply the free-form JSON of a message (provider options, a batch job's remote record)
#: may nest.
MAX_DEPTH = 32

M = TypeVar("M")


# -- refusals ---------------------------------------------------------------------------------

def shown(value: Any) -> str:
    """A short description of a refused value (never the whole of a large one)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_WHOLE:
        return "a number too large"
    if isinstance(value, bool | int | float | type(None)):
        return repr(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"{value[:37]!r}..."
    return type(value).__name__


class Refusal(ValueError):
    """A field's refusal inside a validator (see :func:`refused`)."""

    def __init__(self, why: str, at: str = "") -> None:
        super().__init__(why)
        self.why, self.at = why, at


def refused(why: str, at: str = "") -> Refusal:
    """A field's refusal inside a validator: ``why`` completes the sentence that starts with
    the field's name (``must be text, not 1``); ``at`` names a place inside the field."""
    return Refusal(why, at)


def wanted(what: str, value: Any, at: str = "") -> Refusal:
    """``must be <what>, not <value>``."""
    return refused(f"must be {what}, not {shown(value)}", at)


def _place(where: str, loc: Iterable[int | str]) -> str:
    return where + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)


def refusal(error: ValidationError, where: str) -> MessageRefused:
    """The first of ``error``'s complaints as a :class:`MessageRefused` naming its field."""
    first = error.errors(include_url=False)[0]
    loc, kind, ctx = first["loc"], first["type"], first.get("ctx") or {}
    place = _place(where, loc)
    if isinstance(ctx.get("error"), Refusal):
        return MessageRefused(f"{place}{ctx['error'].at} {ctx['error'].why}")
    if kind.startswith("missing") and loc and isinstance(loc[-1], int):
        return MessageRefused(f"{_place(where, loc[:-1])} is a list without an item "
                              f"[{loc[-1]}]")
    if kind.startswith("missing") and loc:
        return MessageRefused(f"{_place(where, loc[:-1])} has no {loc[-1]!r}")
    if kind in ("unexpected_keyword_argument", "extra_forbidden") and loc:
        return MessageRefused(f"{_place(where, loc[:-1])} has an unknown field {loc[-1]!r}")
    if kind in ("tuple_type", "list_type"):
        return MessageRefused(f"{place} must be a list, not {shown(first.get('input'))}")
    if kind in ("too_short", "too_long"):
        return MessageRefused(f"{place} must be a list of {ctx.get('max_length', '?')} "
                              f"values, not of {ctx.get('actual_length', '?')}")
    if kind.startswith(("dataclass", "dict", "model")):
        return MessageRefused(f"{place} must be a JSON object, not {shown(first.get('input'))}")
    return MessageRefused(f"{place} is refused: {first['msg']}")


def read_message(cls: type[M], data: Any, where: str, *, wire: bool = True) -> M:
    """``data`` (a JSON object) read as ``cls``; :class:`MessageRefused` naming the field
    that is wrong, and nothing else, when it is not one. ``wire=False`` reads what a Python
    caller handed (the shapes only the wire checks are not checked)."""
    if not isinstance(data, Mapping):
        raise MessageRefused(f"{where} must be a JSON object, not {shown(data)}")
    try:
        return cls.__pydantic_validator__.validate_python(  # type: ignore[attr-defined]
            data, strict=False, context=_FROM_THE_WIRE if wire else None)
    except ValidationError as error:
        raise refusal(error, where) from None


# -- the checks of one value ------------------------------------------------------------------

def check_text(value: Any) -> str:
    """A JSON string that SQLite and the providers can take (UTF-8: no lone surrogates)."""
    if not isinstance(value, str):
        raise wanted("text", value)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise refused("is not valid Unicode text (a lone surrogate)") from None
    return value


def _optional(check: Callable[[Any], M]) -> Callable[[Any], M | None]:
    def optional(value: Any) -> M | None:
        return None if value is None else check(value)
    return optional


#: A memory's name: an agent id as OpenClaw writes one (:mod:`pipeline.config.agent_id`), the
#: form every memory name has, so a name that could escape into a path never reaches a worker.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _name(value: Any) -> str:
    if not _NAME.fullmatch(check_text(value)):
        raise wanted("a memory name (letters, digits, '_' or '-', at most 64)", value)
    return value


def _path(value: Any) -> str:
    """A store generation's real path: absolute, without NUL."""
    if "\0" in check_text(value) or not os.path.isabs(value):
        raise wanted("an absolute file path", value)
    return value


def _sha256(value: Any) -> str:
    if check_text(value) and not _SHA256.fullmatch(value):
        raise wanted("a sha256 hex digest", value)
    return value


def whole(minimum: int = 0) -> Callable[[Any], int]:
    """The check of a whole number from ``minimum`` to :data:`MAX_WHOLE`."""
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) \
                or not minimum <= value <= MAX_WHOLE:
            raise wanted(f"a whole number >= {minimum}", value)
        return value
    return check


def _number(value: Any) -> float:
    """A finite number >= 0 (seconds, a deadline)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise wanted("a number", value)
    if isinstance(value, int) and abs(value) > MAX_WHOLE:
        raise wanted("a finite number >= 0", value)
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise wanted("a finite number >= 0", value)
    return number


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise wanted("true or false", value)
    return value


def one_of(choices: Sequence[str]) -> Callable[[Any], str]:
    """The check of one of ``choices`` (a ``Literal``'s values)."""
    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in choices:
            raise wanted("one of " + ", ".join(map(repr, choices)), value)
        return value
    return check


def check_vector(value: Any) -> np.ndarray:
    """A vector: base64 of one or more finite little-endian float32 values (its wire form), or
    a 1-D array of finite numbers (held as float32)."""
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise wanted("a base64 float32 vector", value) from None
        if not raw or len(raw) % 4:
            raise refused(f"must hold one or more float32 values ({len(raw)} bytes)")
        vector = np.frombuffer(raw, dtype="<f4")
    elif isinstance(value, np.ndarray):
        vector = np.asarray(value, dtype="<f4")
        if vector.ndim != 1 or not vector.size:
            raise refused(f"must be a vector of one or more values, not of shape {value.shape}")
    else:
        raise wanted("a base64 float32 vector", value)
    if not np.isfinite(vector).all():
        raise refused("holds a value that is not a finite number")
    return vector


def _built_vector(value: Any) -> np.ndarray:
    """A vector a Python caller hands a message: as on the wire, or any sequence of numbers."""
    if isinstance(value, list | tuple):
        try:
            value = np.asarray(value, dtype="<f4")
        except (TypeError, ValueError):
            raise wanted("a vector of numbers", value) from None
    return check_vector(value)


def _base64(value: Any) -> str:
    try:
        base64.b64decode(check_text(value), validate=True)
    except (binascii.Error, ValueError):
        raise wanted("base64 data", value) from None
    return value


def _json(value: Any, at: str = "", depth: int = 0) -> Any:
    """Plain JSON: objects with text keys, lists, text, finite numbers, booleans, null."""
    if depth > MAX_DEPTH:
        raise refused(f"nests deeper than {MAX_DEPTH} levels", at)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) > MAX_WHOLE:
            raise wanted(f"a whole number >= {-MAX_WHOLE}", value, at)
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise wanted("a finite number", value, at)
        return value
    if isinstance(value, str):
        try:
            return check_text(value)
        except Refusal as error:
            raise refused(error.why, at) from None
    if isinstance(value, list | tuple):
        return [_json(v, f"{at}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise wanted("text", key, f"{at} key")
            out[_json(key, f"{at} key", depth)] = _json(item, f"{at}.{key}", depth + 1)
        return out
    raise wanted("JSON", value, at)


def _json_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise wanted("a JSON object", value)
    return _json(value)


def text_fields(value: Any, required: Sequence[str], optional: Sequence[str]
                ) -> dict[str, str | None]:
    """A JSON object of exactly these text fields (``optional`` ones null or absent, read as
    None), in this order."""
    if not isinstance(value, Mapping):
        raise wanted("a JSON object", value)
    unknown = sorted(set(value) - {*required, *optional}, key=str)
    if unknown:
        raise refused(f"has an unknown field {shown(unknown[0])}")
    out: dict[str, str | None] = {}
    for key in [*required, *optional]:
        if value.get(key) is None and key in optional:
            out[key] = None
        elif key not in value:
            raise refused(f"has no {key!r}")
        else:
            try:
                out[key] = check_text(value[key])
            except Refusal as error:
                raise refused(error.why, f".{key}") from None
    return out


# -- the field types --------------------------------------------------------------------------

#: The validation context of a message read from the wire (:func:`read_message`).
_FROM_THE_WIRE = {"wire": True}


@dataclasses.dataclass(frozen=True)
class Checked:
    """``Annotated`` metadata: the field's value is what ``check`` returns for it (which raises
    :func:`refused` for a value it refuses), whatever pydantic's mode. ``on_the_wire`` checks
    the shape of a value read from the wire only (a memory name, an absolute path): the code
    that builds a message is trusted with those, a message from another host is not."""

    check: Callable[[Any], Any]
    on_the_wire: Callable[[Any], Any] | None = None

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler
                                     ) -> dict[str, Any]:
        """A plain validator's core schema (pydantic_core's ``*_plain_validator_function``,
        written out: the inner type's own schema is never built)."""
        if self.on_the_wire is None:
            return {"type": "function-plain",
                    "function": {"type": "no-info", "function": self.check}}
        check, on_the_wire = self.check, self.on_the_wire

        def validate(value: Any, info: ValidationInfo) -> Any:
            return on_the_wire(value) if info.context is _FROM_THE_WIRE else check(value)
        return {"type": "function-plain", "function": {"type": "with-info", "function": validate}}


Text = Annotated[str, Checked(check_text)]
OptionalText = Annotated[str | None, Checked(_optional(check_text))]
#: A memory's name (see ``_NAME``).
MemoryName = Annotated[str, Checked(check_text, _name)]
#: A store generation's real path.
StorePath = Annotated[str, Checked(check_text, _path)]
#: A sha256 hex digest, or empty (not known).
Sha256 = Annotated[str, Checked(check_text, _sha256)]
Whole = Annotated[int, Checked(whole(0))]
OptionalWhole = Annotated[int | None, Checked(_optional(whole(0)))]
#: A finite number >= 0 (seconds, a deadline), held as a float.
Seconds = Annotated[float, Checked(_number)]
Flag = Annotated[bool, Checked(_flag)]
OptionalFlag = Annotated[bool | None, Checked(_optional(_flag))]
Base64Text = Annotated[str, Checked(check_text, _base64)]
OptionalBase64 = Annotated[str | None, Checked(_optional(check_text), _optional(_base64))]
Vector = Annotated[np.ndarray, Checked(_built_vector, check_vector)]
#: Any plain JSON value (nesting at most :data:`MAX_DEPTH` deep, numbers finite).
JsonValue = Annotated[Any, Checked(_json)]
JsonObject = Annotated[dict[str, Any], Checked(_json_object)]


def vectors_of_one_width(vectors: Sequence[np.ndarray], where: str) -> None:
    """The vectors of one message are of one width (they go into one index)."""
    widths = sorted({len(v) for v in vectors})
    if len(widths) > 1:
        raise MessageRefused(f"{where} mixes vectors of widths {widths}")


# -- values the store and the providers use ---------------------------------------------------

@dataclass(frozen=True, config=WIRE)
class Route:
    """Where a memory's messages go: its writer ``shard``, and the lane (``interactive`` work,
    an edit or an append, goes ahead of bulk work, a full index or a backfill)."""

    shard: Whole = 0
    interactive: Flag = False

    def to_json(self) -> dict[str, Any]:
        return {"shard": self.shard, "interactive": self.interactive}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None, where: str = "a message's route"
                  ) -> Route:
        """The route in a message (shard 0, bulk, for a message of a memq without shards)."""
        return cls() if data is None else read_message(cls, data, where)


#: Shard 0, bulk lane: the route of a memory in a fleet without shards.
DEFAULT_ROUTE = Route()


@dataclass(frozen=True, config=WIRE)
class ProviderSpec:
    """Names a provider and model in task messages and in the index. Never holds a secret.

    ``provider_key`` is OpenClaw's cache key (model, endpoint, non-secret headers);
    ``options`` are the non-secret facts a worker needs to build the same provider (dimensions,
    input types, a public base URL, the fleet's rate limit).
    """

    name: Text
    model: Text
    provider_key: Text
    options: JsonObject = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "provider_key": self.provider_key,
                "options": copy.deepcopy(self.options)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "a provider spec") -> ProviderSpec:
        return read_message(cls, data, where)


@dataclass(frozen=True, config=WIRE)
class MediaPart:
    """A media file's bytes inline (base64), for a multimodal chunk's embedding."""

    mime_type: Text
    data: Base64Text
