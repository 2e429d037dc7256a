"""The messages the fleet passes, typed and versioned, and the one float32 vector codec.

Every message names its memory (``memory``), the store generation it is for (``store``: the
real path, so a late message cannot write into the generation a rebuild swapped in), and the
embedding provider as a secret-free :class:`ProviderSpec`. None of them ever holds a secret:
workers resolve API keys and endpoints from their own environment and configuration.

Every message is a frozen pydantic model (:class:`Wire`): strict, without extra fields, built
by keyword or by position (``EmbedJob(memory, spec, store, chunks)``). On the wire a message is
JSON (Celery's serializer): ``to_json()`` gives the dict, and ``from_json()`` reads it back
through the model's schema: a message written by an incompatible memq (another ``v``), of
another kind, or malformed in any way (a missing or unknown key, a wrong type, NaN, a number
out of range, a vector that is not base64 of float32) is refused with
:class:`~pipeline.errors.MessageRefused` naming the field, and nothing else ever escapes
``from_json``. Shapes a sender's own code is trusted with (a memory name, an absolute store
path, a sha256, base64) are checked on the wire only. Vectors travel as base64 of
little-endian float32.

- :class:`EmbedJob` → ``embed.<provider>`` → :class:`EmbedResult` → the memory's writer;
- :class:`BatchSubmit`, :class:`BatchPoll` → ``batch.<provider>`` → :class:`BatchUpdate` →
  the writer (provider batch-file APIs, :mod:`pipeline.batch.workflow`);
- :class:`IndexRequest` → the writer's ``control`` queue (``memq index --remote``).
- :class:`QmdJobRequest` → the same ``control`` queue (a QMD backend's update job).
- :class:`FileChanges` → the same ``control`` queue: what changed in a memory's files, sent
  by the host that holds them when the store is on another host;
- :class:`QueryRequest` → the shard's ``query`` queue, where a reader on the host that holds
  the memory's store answers with a :class:`QueryReply` (a search, a read, a status from any
  host).

Embedding jobs, their results and batch jobs also carry a :class:`Route`: the writer shard of
their memory (``store.<shard>``) and whether they are interactive work, which goes ahead of
bulk work on shared queues. A route is a hint for delivery only: a writer checks for itself
that it owns the memory and its store before writing anything.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import (
    Annotated,
    Any,
    ClassVar,
    Literal,
    NamedTuple,
    Protocol,
    TypedDict,
    TypeVar,
    get_args,
)

import numpy as np
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    SerializerFunctionWrapHandler,
    Strict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from pipeline.errors import MessageRefused
from pipeline.message_fields import (
    DEFAULT_ROUTE,
    MAX_WHOLE,
    MediaPart,
    ProviderSpec,
    Route,
    check_json,
    check_text,
    shown,
)

#: The version every message carries; bumped when a field changes meaning.
VERSION = 1
#: Every message's configuration: frozen, strict, no field it does not declare.
WIRE = ConfigDict(frozen=True, strict=True, extra="forbid", allow_inf_nan=False)
#: The validation context of a message read from the wire (:meth:`Wire.from_json`).
FROM_THE_WIRE = {"wire": True}


def encode_vector(vector: np.ndarray) -> str:
    """A vector as base64 of its little-endian float32 bytes (JSON-safe)."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


# -- refusals ---------------------------------------------------------------------------------

def _no(why: str) -> ValueError:
    """A field's refusal inside a validator: ``why`` follows the field's name."""
    return ValueError(why)


def _wanted(what: str, value: Any) -> ValueError:
    return _no(f" must be {what}, not {shown(value)}")


#: How a pydantic error type reads after "must be" (``{...}``: the error's context).
WANTED = {"string_type": "text", "int_type": "a whole number", "bool_type": "true or false",
          "float_type": "a number", "finite_number": "a finite number",
          "literal_error": "one of {expected}", "tuple_type": "a list", "list_type": "a list",
          "model_type": "a JSON object", "dict_type": "a JSON object",
          "model_attributes_type": "a JSON object", "greater_than_equal": "a number >= {ge}",
          "less_than_equal": "a number <= {le}", "too_long": "at most {max_length} items"}


def _place(where: str, loc: Iterable[int | str]) -> str:
    return where + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)


def refusal(error: ValidationError, where: str) -> MessageRefused:
    """The first of ``error``'s complaints as a :class:`MessageRefused` naming its field
    (``where``: the message's name)."""
    first = error.errors(include_url=False)[0]
    loc, kind, ctx = first["loc"], first["type"], first.get("ctx") or {}
    if kind == "value_error":  # a validator's own refusal (_no)
        return MessageRefused(_place(where, loc) + str(ctx["error"]))
    if kind in ("missing", "missing_argument") and loc:
        return MessageRefused(f"{_place(where, loc[:-1])} has no {loc[-1]!r}")
    if kind.startswith("unexpected") or kind == "extra_forbidden":
        return MessageRefused(f"{_place(where, loc[:-1])} has an unknown field {shown(loc[-1])}")
    wanted = "a whole number >= {ge}" if type(ctx.get("ge")) is int else WANTED.get(kind, "")
    try:
        wanted = wanted.format(**ctx)
    except (KeyError, IndexError, ValueError):
        wanted = ""
    if not wanted:
        return MessageRefused(f"{_place(where, loc)} is refused: {first['msg']}")
    return MessageRefused(f"{_place(where, loc)} must be {wanted}, "
                          f"not {shown(first.get('input'))}")


# -- the field types --------------------------------------------------------------------------

def _on_the_wire(info: ValidationInfo) -> bool:
    return info.context is FROM_THE_WIRE


def _utf8(value: str) -> str:
    try:
        return check_text(value, "")
    except MessageRefused as refused:
        raise _no(str(refused)) from None


def _wire_shape(check: Callable[[str], bool], what: str) -> AfterValidator:
    """Text of a shape checked on the wire only (the sender's own code is trusted with it)."""
    def validate(value: str, info: ValidationInfo) -> str:
        if _on_the_wire(info) and not check(value):
            raise _wanted(what, value)
        return value
    return AfterValidator(validate)


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


Text = Annotated[str, AfterValidator(_utf8)]
#: A memory's name: an agent id as OpenClaw writes one (:mod:`pipeline.config.agent_id`), the
#: form every memory name has, so a name that could escape into a path never reaches a worker.
MemoryName = Annotated[Text, _wire_shape(re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}").fullmatch,
                                         "a memory name (letters, digits, '_' or '-', at most 64)")]
#: A store generation's real path: absolute, without NUL.
StorePath = Annotated[Text, _wire_shape(lambda p: "\0" not in p and os.path.isabs(p),
                                        "an absolute file path")]
#: A sha256 hex digest, or empty (not known).
Sha256 = Annotated[Text, _wire_shape(lambda h: not h or re.fullmatch(r"[0-9a-f]{64}", h),
                                     "a sha256 hex digest")]
Base64 = Annotated[Text, _wire_shape(_is_base64, "base64 data")]
Whole = Annotated[int, Field(ge=0, le=MAX_WHOLE)]
#: A finite number >= 0 (seconds, a deadline).
Seconds = Annotated[float, Field(ge=0)]
T = TypeVar("T")
#: A JSON list, held as a tuple.
Items = Annotated[tuple[T, ...], Strict(False)]


def _json(value: Any, info: ValidationInfo) -> Any:
    if not _on_the_wire(info):  # a reader's answer: to_json writes it as JSON
        return value
    try:
        return check_json(value, "")
    except MessageRefused as refused:
        raise _no(str(refused)) from None


#: Any plain JSON value (finite numbers, text keys, nesting at most 32 deep), on the wire.
JsonValue = Annotated[Any, AfterValidator(_json)]


def _plain(cls: type[T], read: Callable[[Any, str], T], write: Callable[[T], Any]) -> Any:
    """A field holding a plain value of :mod:`pipeline.message_fields`, read by its own reader
    (``where`` "": the refusal follows the field's name) and written by its own writer."""
    def validate(value: Any) -> T:
        if isinstance(value, cls):
            return value
        try:
            return read(value, "")
        except MessageRefused as refused:
            raise _no(str(refused)) from None
    return Annotated[cls, PlainValidator(validate), PlainSerializer(write)]


RouteField = _plain(Route, Route.from_json, Route.to_json)
Spec = _plain(ProviderSpec, ProviderSpec.from_dict, ProviderSpec.to_dict)
Media = _plain(MediaPart, MediaPart.from_json, MediaPart.to_json)


def _vector(value: Any, info: ValidationInfo) -> np.ndarray:
    """Base64 of one or more finite little-endian float32 values (its wire form); from a
    Python caller also an array or a sequence of numbers (held as float32)."""
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise _wanted("a base64 float32 vector", value) from None
        if not raw or len(raw) % 4:
            raise _no(f" must hold one or more float32 values ({len(raw)} bytes)")
        vector = np.frombuffer(raw, dtype="<f4")
    elif _on_the_wire(info) or not isinstance(value, np.ndarray | list | tuple):
        raise _wanted("a base64 float32 vector", value)
    else:
        try:
            vector = np.asarray(value, dtype="<f4")
        except (TypeError, ValueError):
            raise _wanted("a vector of numbers", value) from None
        if vector.ndim != 1 or not vector.size:
            raise _no(f" must be a vector of one or more values, not of shape {vector.shape}")
    if not np.isfinite(vector).all():
        raise _no(" holds a value that is not a finite number")
    return vector


Vector = Annotated[np.ndarray, PlainValidator(_vector), PlainSerializer(encode_vector)]
#: (chunk id, text, reason, ...): a JSON list of exactly these values.
Pair = Annotated[tuple[Text, Text], Strict(False)]


def _one_width(vectors: Iterable[np.ndarray]) -> None:
    """The vectors of one message are of one width (they go into one index)."""
    widths = sorted({len(v) for v in vectors})
    if len(widths) > 1:
        raise _no(f".vectors mixes vectors of widths {widths}")


# -- the message base -------------------------------------------------------------------------

class Wire(BaseModel):
    """A message, or a part of one: a frozen, strict pydantic model without extra fields.

    A top-level message (``KIND`` set) travels as ``{"v": VERSION, "kind": KIND, ...}``;
    ``ROUTED`` ones hold their ``shard`` (and ``interactive`` lane) as fields and send them as
    a :class:`Route` (``"route"``, at ``shard``'s place; ``LANE`` is the lane sent when there
    is no ``interactive`` field); ``OMIT_NONE`` fields are left out while None; ``WIRE_NAMES``
    renames fields on the wire. ``WHAT`` names the message in refusals.
    """

    model_config = WIRE

    WHAT: ClassVar[str] = "a message"
    KIND: ClassVar[str | None] = None
    ROUTED: ClassVar[bool] = False
    LANE: ClassVar[bool] = False
    OMIT_NONE: ClassVar[tuple[str, ...]] = ()
    WIRE_NAMES: ClassVar[dict[str, str]] = {}

    def __init__(self, *args: Any, **fields: Any) -> None:
        """By keyword, or by position in field order; MessageRefused when a field is wrong."""
        names = list(type(self).model_fields)
        if len(args) > len(names):
            raise MessageRefused(f"{self.WHAT} takes at most {len(names)} fields")
        try:
            super().__init__(**dict(zip(names, args, strict=False)), **fields)
        except ValidationError as error:
            raise refusal(error, self.WHAT) from None

    # Only maps positions to names: reading (model_validate) need not call it, and keeps its
    # validation context (what pydantic's own BaseModel.__init__ says of itself).
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @model_serializer(mode="wrap")
    def _wire_form(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = {"v": VERSION, "kind": self.KIND} if self.KIND else {}
        for key, value in handler(self).items():
            if key == "shard" and self.ROUTED:
                lane = getattr(self, "interactive", self.LANE)
                out["route"] = Route(value, lane).to_json()
            elif not (key == "interactive" and self.ROUTED) \
                    and not (value is None and key in self.OMIT_NONE):
                out[self.WIRE_NAMES.get(key, key)] = value
        return out

    def to_json(self) -> dict[str, Any]:
        """The message as JSON (the dict Celery's serializer sends)."""
        return self.model_dump(mode="json", by_alias=True)

    @classmethod
    def from_json(cls: type[W], data: Any, where: str | None = None) -> W:
        """``data`` read as this message: MessageRefused naming the field that is wrong (and
        nothing else) when it is not one."""
        what = where or cls.WHAT
        try:
            fields = cls._fields(data, what) if cls.KIND else data
            return cls.model_validate(fields, context=FROM_THE_WIRE)
        except ValidationError as error:
            raise refusal(error, what) from None
        except MessageRefused:
            raise
        except Exception as error:  # nothing but MessageRefused leaves from_json
            raise MessageRefused(f"{what} is refused ({type(error).__name__})") from None

    @classmethod
    def _fields(cls, data: Any, what: str) -> dict[str, Any]:
        """A top-level message's fields by their Python names: ``v`` and ``kind`` checked and
        dropped, the route unfolded, wire names renamed."""
        if not isinstance(data, Mapping):
            raise MessageRefused(f"{what} message must be a JSON object, not {shown(data)}")
        version = data.get("v")
        if type(version) is not int or version != VERSION:
            raise MessageRefused(f"{what} message of version {shown(version)} (this memq "
                                 f"reads version {VERSION}): the fleet runs mixed memq "
                                 "versions; upgrade them all")
        if data.get("kind") != cls.KIND:
            raise MessageRefused(f"{what} message must be of kind {cls.KIND!r}, not "
                                 f"{shown(data.get('kind'))}")
        python = {wire: name for name, wire in cls.WIRE_NAMES.items()}
        fields: dict[str, Any] = {}
        for key, value in data.items():
            if key in ("v", "kind") or (cls.ROUTED and key == "route"):
                continue
            if key in cls.WIRE_NAMES or (cls.ROUTED and key in ("shard", "interactive")):
                raise MessageRefused(f"{what} has an unknown field {shown(key)}")
            fields[python.get(key, key)] = value
        if cls.ROUTED:
            route = Route.from_json(data.get("route"), f"{what}.route")
            fields["shard"] = route.shard
            if "interactive" in cls.model_fields:
                fields["interactive"] = route.interactive
        return fields


W = TypeVar("W", bound=Wire)


def replace(message: W, **changes: Any) -> W:
    """``message`` with these fields changed, checked as when built (the messages'
    :func:`dataclasses.replace`)."""
    return type(message)(**{**dict(message), **changes})


class ChunkText(Wire):
    """One chunk to embed: its stable id, the hash of its text, the text (for a media chunk, its
    label) and, for a media chunk, the file's bytes."""

    WHAT = "a chunk"
    OMIT_NONE = ("media",)

    id: Text
    hash: Text
    text: Text
    media: Media | None = None


class EmbedJob(Wire):
    """Chunks of one memory to embed with one provider (``embed.<provider>``).

    ``attempt`` counts deliveries after a worker crash (:func:`after_crash`).
    """

    WHAT, KIND = "embedding job", "embed"

    memory: MemoryName
    spec: Spec
    store: StorePath
    chunks: Items[ChunkText]
    attempt: Whole = 0
    route: RouteField = DEFAULT_ROUTE

    @property
    def size(self) -> int:
        """How many chunks the job holds."""
        return len(self.chunks)

    def result(self, vectors: Sequence[ChunkVector] = (),
               failed: Sequence[tuple[str, str]] = (),
               held: Sequence[tuple[str, str]] = ()) -> EmbedResult:
        """This job's result message."""
        return EmbedResult(self.memory, self.spec, self.store, tuple(vectors), tuple(failed),
                           tuple(held), self.route)

    def failed(self, reason: str) -> EmbedResult:
        """A result that marks every chunk of the job failed with ``reason``."""
        return self.result(failed=[(c.id, reason) for c in self.chunks])

    def held(self, reason: str) -> EmbedResult:
        """A result that leaves every chunk pending, with ``reason`` shown in status, for the
        next producer pass to queue again (a rejected key: fix it and run ``memq index``)."""
        return self.result(held=[(c.id, reason) for c in self.chunks])


class ChunkVector(NamedTuple):
    """A chunk's vector, with the hash of the text it was computed from (on the wire: a list
    ``[id, hash, vector]``)."""

    id: Text
    hash: Text
    vector: Vector


class EmbedResult(Wire):
    """What an embedding job produced, for the memory's single writer (``store``)."""

    WHAT, KIND = "embedding result", "result"

    memory: MemoryName
    spec: Spec
    store: StorePath
    vectors: Items[ChunkVector] = ()
    failed: Items[Pair] = ()  # (chunk id, reason)
    held: Items[Pair] = ()
    route: RouteField = DEFAULT_ROUTE

    @model_validator(mode="after")
    def _of_one_width(self) -> EmbedResult:
        _one_width(v.vector for v in self.vectors)
        return self


# -- packing chunks into jobs ----------------------------------------------------------------

#: A local model's job: a group the worker embeds in one go.
JOB_MAX_CHUNKS = 32
JOB_MAX_BYTES = 64 * 1024


class HasText(Protocol):
    """A chunk waiting for a vector, as the store hands it out (id, hash of its text, text)."""

    @property
    def id(self) -> str: ...
    @property
    def hash(self) -> str: ...
    @property
    def text(self) -> str: ...


C = TypeVar("C", bound=HasText)


def pack(chunks: Sequence[C], *, max_chunks: int = JOB_MAX_CHUNKS,
         max_bytes: int = JOB_MAX_BYTES) -> list[list[C]]:
    """Pack chunks, in order, into groups of at most ``max_chunks`` and about ``max_bytes`` of
    UTF-8 text (a chunk larger than that travels alone)."""
    groups: list[list[C]] = []
    current: list[C] = []
    size = 0
    for chunk in chunks:
        weight = len(chunk.text.encode("utf-8"))
        if current and (len(current) >= max_chunks or size + weight > max_bytes):
            groups.append(current)
            current, size = [], 0
        current.append(chunk)
        size += weight
    if current:
        groups.append(current)
    return groups


def embed_jobs(memory: str, spec: ProviderSpec, store: str, chunks: Sequence[C], *,
               max_bytes: int = JOB_MAX_BYTES, route: Route = DEFAULT_ROUTE
               ) -> list[tuple[list[C], EmbedJob]]:
    """The sync embedding jobs for ``chunks`` (text only), each with the chunks it holds."""
    return [(group, EmbedJob(memory, spec, store,
                             tuple(ChunkText(c.id, c.hash, c.text) for c in group), route=route))
            for group in pack(chunks, max_bytes=max_bytes)]


# -- provider batch jobs ----------------------------------------------------------------------

class BatchOptions(Wire):
    """The batch settings a job runs with, kept in its row so a resumed job keeps them."""

    WHAT = "batch options"

    poll_s: Seconds
    timeout_s: Seconds
    concurrency: Annotated[int, Field(ge=1, le=MAX_WHOLE)]


class BatchJobRef(Wire):
    """What every message of one batch job carries: the job (its row in the store), its memory,
    provider, store generation and options."""

    WHAT = "batch job"

    job: Text
    memory: MemoryName
    spec: Spec
    store: StorePath
    options: BatchOptions
    route: RouteField = DEFAULT_ROUTE

    def ref(self) -> BatchJobRef:
        """Just the job's reference (for the updates a step sends the writer)."""
        return BatchJobRef(self.job, self.memory, self.spec, self.store, self.options,
                           self.route)


def new_token() -> str:
    """A fresh lease token for a batch job's message chain."""
    return uuid.uuid4().hex


class BatchSubmit(BatchJobRef):
    """Upload these chunks and create the remote job (``batch.<provider>``). ``token`` is the
    job's lease token (:class:`pipeline.batch.workflow.Leases`)."""

    WHAT, KIND = "batch submit", "batch_submit"

    chunks: Items[Pair]  # (chunk id, text)
    token: Text


class RemoteBatchRecord(TypedDict):
    """A provider batch job as memq last saw it, in batch polls and updates
    (``RemoteBatch.to_dict()`` of :mod:`pipeline.batch.api`)."""

    provider: str
    remote_id: str
    state: str
    raw_state: str
    input_file: str | None
    output_file: str | None
    error_file: str | None
    message: str | None


class RemoteBatchFields(Wire):
    """What a :class:`RemoteBatchRecord` must hold (the optional ones null or absent)."""

    provider: Text
    remote_id: Text
    state: Text
    raw_state: Text
    input_file: Text | None = None
    output_file: Text | None = None
    error_file: Text | None = None
    message: Text | None = None


class AsDict:
    """``Annotated`` metadata: the field holds a plain dict (its type a ``TypedDict``, which
    pydantic is never shown), checked by ``model`` (``given_only``: the keys given are kept,
    else every field)."""

    def __init__(self, model: type[Wire], *, given_only: bool = False) -> None:
        self.model, self.given_only = model, given_only

    def validate(self, value: Any, info: ValidationInfo) -> dict[str, Any]:
        checked = self.model.model_validate(value, context=info.context)
        return checked.model_dump(mode="json", by_alias=True, exclude_unset=self.given_only)

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> dict[str, Any]:
        """A plain validator's core schema (``with_info_plain_validator_function``)."""
        return {"type": "function-plain", "function": {"type": "with-info",
                                                       "function": self.validate}}


RemoteRecord = Annotated[RemoteBatchRecord, AsDict(RemoteBatchFields)]


class BatchPoll(BatchJobRef):
    """Poll the remote job once (``batch.<provider>``); ``ids`` are its chunk ids, to account
    for every line of its output."""

    WHAT, KIND = "batch poll", "batch_poll"

    token: Text
    remote: RemoteRecord
    deadline: Seconds
    ids: Items[Text]

    def with_remote(self, remote: Mapping[str, Any]) -> BatchPoll:
        """The next poll, with the job's state as last seen."""
        return self.model_copy(update={"remote": dict(remote)})


#: The events a :class:`BatchUpdate` reports.
BatchEvent = Literal["state", "vectors", "finished"]
BATCH_EVENTS: tuple[str, ...] = get_args(BatchEvent)


class BatchUpdate(BatchJobRef):
    """A batch job's news for the writer (``store``): its remote state changed (``state``),
    some of its vectors (``vectors``: chunk id → vector), or its end (``finished``: the outcome,
    the chunk ids it embedded, an error)."""

    WHAT, KIND = "batch update", "batch_update"

    event: BatchEvent
    remote: RemoteRecord | None = None
    vectors: Items[Annotated[tuple[Text, Vector], Strict(False)]] = ()
    outcome: Text | None = None
    embedded: Items[Text] = ()
    error: Text | None = None

    @model_validator(mode="after")
    def _consistent(self) -> BatchUpdate:
        if self.event == "state" and self.remote is None:
            raise _no(": a state update must carry the remote record")
        _one_width(v for _, v in self.vectors)
        return self


# -- index jobs -------------------------------------------------------------------------------

class IndexRequest(Wire):
    """An index pass of one memory, run by the writer host that owns its store
    (``memq index --remote``, or a sync asked for by a host that does not hold the store:
    ``interactive``); the Celery task id is the job id."""

    WHAT, KIND, ROUTED, OMIT_NONE = "index request", "index", True, ("rebuild",)

    memory: MemoryName
    retry_failed: bool = False
    shard: Whole = 0
    interactive: bool = False
    rebuild: Text | None = None  # why to build a new index beside the live one (reindex)

    @property
    def route(self) -> Route:
        return Route(self.shard, self.interactive)


#: Why a QMD backend's write job runs (:mod:`pipeline.qmd.jobs`).
QmdReason = Literal["boot", "changed", "due"]


class QmdJobRequest(Wire):
    """A QMD backend's write job for one memory (``boot``, ``changed`` or ``due``: see
    :mod:`pipeline.qmd.jobs`), run by the host that owns the memory."""

    WHAT, KIND, ROUTED = "qmd job request", "qmd-job", True

    memory: MemoryName
    reason: QmdReason = "due"
    shard: Whole = 0


# -- files from a producer on another host ---------------------------------------------------

#: What happened to a file: new or changed bytes (``write``), the same bytes under a new stat
#: (``touch``), or gone (``delete``).
FileOp = Literal["write", "touch", "delete"]
FileSource = Literal["memory", "sessions"]


class FileChange(Wire):
    """One memory file as the producer that holds it saw it change: its path relative to the
    workspace (as the store keeps it), its source, its stat, the sha256 of its bytes, and the
    bytes themselves for a ``write``: as ``text`` when they are UTF-8 text, else as base64
    ``data`` (an image, bytes a local pass would refuse). ``error`` says why a file could not
    be read at all (it then has no bytes)."""

    WHAT, OMIT_NONE = "a file change", ("text", "data", "error")

    path: Text
    source: FileSource
    op: FileOp
    mtime_ns: Whole = 0
    size: Whole = 0
    hash: Sha256 = ""
    text: Text | None = None
    data: Base64 | None = None
    error: Text | None = None

    def raw(self) -> bytes | None:
        """The file's bytes (None for a touch, a delete or an unreadable file)."""
        if self.text is not None:
            return self.text.encode("utf-8")
        if self.data is not None:
            return base64.b64decode(self.data)
        return None

    @property
    def weight(self) -> int:
        """About how many bytes this change adds to a message."""
        return len(self.path) + len(self.text or "") + len(self.data or "") + 200


class FileChanges(Wire):
    """Part ``part`` of a producer pass (job ``job``) over ``memory``'s files, for the writer
    of its shard (``control.<shard>``), which applies them exactly as a local pass would; the
    ``last`` part also queues the embedding work. ``files`` is how many files the pass looked
    at, ``errors`` what it could not read (a folder it cannot list: its files are kept);
    ``retry_failed`` queues the memory's failed chunks again; ``folder`` identifies the folder
    the files were read from (host, device, inode: :mod:`pipeline.ingest.safety`)."""

    WHAT, KIND, ROUTED, OMIT_NONE = "file changes", "file-changes", True, ("folder",)

    memory: MemoryName
    job: Text
    changes: Items[FileChange] = ()
    part: Whole = 0
    last: bool = True
    files: Whole = 0
    errors: Items[Text] = ()
    origin: Text = "remote"
    shard: Whole = 0
    interactive: bool = False
    retry_failed: bool = False
    folder: Text | None = None

    @property
    def route(self) -> Route:
        return Route(self.shard, self.interactive)


# -- reads from any host ----------------------------------------------------------------------

#: What a reader is asked (:class:`QueryRequest`).
QueryOp = Literal["search", "get", "status", "stale", "append", "jobs", "manifest", "export"]
#: At most this many active project keys per search (OpenClaw keeps 4 per session).
MAX_PROJECT_KEYS = 64


class SearchArgs(Wire):
    """``search``: the query, and what narrows or tells about the hits."""

    query: Text
    maxResults: Whole | None = None  # the wire's names
    minScore: Annotated[float, Field(ge=0, le=1)] | None = None
    citations: Text | None = None
    stale: bool | None = None
    filesDigest: Text | None = None  # the asking host's: the reply says ``filesMatch``
    storeDigest: bool | None = None  # the reply carries the store's (``filesDigest``)
    corpus: Text | None = None
    projects: Annotated[list[Text], Field(max_length=MAX_PROJECT_KEYS)] | None = None


class GetArgs(Wire):
    """``get``: a file's lines."""

    path: Text
    from_: Whole | None = Field(None, alias="from")
    lines: Whole | None = None


class NoArgs(Wire):
    """``status``, ``stale``, ``manifest``: no arguments."""


class AppendArgs(Wire):
    """``append``: a note, and the file it goes to (default: today's)."""

    text: Text
    target: Text = "daily"


class JobsArgs(Wire):
    """``jobs``: the recent jobs, or one."""

    limit: Whole | None = None
    id: Text | None = None


class ExportArgs(Wire):
    """``export``: start a copy of the store (no token), read a part of it, or close it."""

    token: Text | None = None
    offset: Whole | None = None
    size: Whole | None = None
    close: bool | None = None


#: The arguments each read takes; a request holds them as the plain JSON object they travel
#: as (by their wire names, only those given).
QUERY_ARGS: dict[str, type[Wire]] = {
    "search": SearchArgs, "get": GetArgs, "status": NoArgs, "stale": NoArgs,
    "append": AppendArgs, "jobs": JobsArgs, "manifest": NoArgs, "export": ExportArgs}


class QueryRequest(Wire):
    """A read of one memory (:data:`QUERY_ARGS`: ``search``, ``get``, ``status``, ``stale``,
    ``jobs``, ``manifest``, ``export`` of a copy of its store, or the ``append`` of a note to
    its files), sent to its shard's ``query`` queue and answered by a reader on the host that
    holds the memory's store; ``args`` are checked on the wire by the op's arguments type
    (:data:`QUERY_ARGS`)."""

    WHAT, KIND, ROUTED, LANE = "query", "query", True, True

    memory: MemoryName
    op: QueryOp
    args: dict[str, Any] = Field(default_factory=dict, validate_default=True)
    shard: Whole = 0

    @field_validator("args", mode="plain")
    @classmethod
    def _of_the_op(cls, value: Any, info: ValidationInfo) -> dict[str, Any]:
        op = info.data.get("op")
        if op is None:  # refused already
            raise _no(" cannot be read for an unknown op")
        if not _on_the_wire(info):  # a Python caller's: the reader checks them on the wire
            if not isinstance(value, Mapping):
                raise _wanted("a JSON object", value)
            return dict(value)
        return AsDict(QUERY_ARGS[op], given_only=True).validate(value, info)


#: Why a reader did not answer: the message was refused (another memory, another shard), the
#: path or note was refused, the memory is turned off, or the reader failed.
ReplyError = Literal["refused", "path", "append", "disabled", "workspace", "failed"]
REPLY_ERRORS: tuple[str, ...] = get_args(ReplyError)


class QueryReply(Wire):
    """A reader's answer: ``answer`` (the operation's JSON shape), or ``error`` with its
    ``kind`` (:data:`REPLY_ERRORS`; ``error_kind`` on the wire); ``node`` names the reader."""

    WHAT, KIND, WIRE_NAMES = "query reply", "query-reply", {"kind": "error_kind"}

    answer: JsonValue = None
    error: Text | None = None
    kind: ReplyError | None = None
    node: Text | None = None
