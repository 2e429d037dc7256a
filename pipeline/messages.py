"""The messages the fleet passes, typed and versioned, and the one float32 vector codec.

Every message names its memory (``memory``), the store generation it is for (``store``: the
real path, so a late message cannot write into the generation a rebuild swapped in), and the
embedding provider as a secret-free :class:`ProviderSpec`. None of them ever holds a secret:
workers resolve API keys and endpoints from their own environment and configuration.

Every message is a frozen, strict pydantic dataclass without extra fields (see
:mod:`pipeline.message_fields` for why dataclasses): building one with a value of the wrong type
or shape fails at once. On the wire a message is JSON (Celery's serializer): ``to_json()`` gives
the dict, key by key as every memq since version 1 wrote it, and ``from_json()`` reads it back
through the same field types: a message written by an incompatible memq (another ``v``), of
another kind, or malformed in any way (a missing key, an unknown one, a wrong type, NaN, a
number out of range, a vector that is not base64 of float32) is refused with
:class:`~pipeline.errors.MessageRefused` naming the field, and nothing else ever escapes
``from_json``. Vectors travel as base64 of little-endian float32.

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
import dataclasses
import keyword
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import field, replace
from typing import Annotated, Any, ClassVar, Literal, Protocol, TypedDict, TypeVar, get_args

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic.dataclasses import dataclass

from pipeline.errors import MessageRefused
from pipeline.message_fields import (
    DEFAULT_ROUTE,
    WIRE,
    Checked,
    Flag,
    JsonValue,
    MediaPart,
    MemoryName,
    OptionalBase64,
    OptionalFlag,
    OptionalText,
    OptionalWhole,
    ProviderSpec,
    Refusal,
    Route,
    Seconds,
    Sha256,
    StorePath,
    Text,
    Vector,
    Whole,
    check_text,
    check_vector,
    one_of,
    read_message,
    refused,
    shown,
    text_fields,
    vectors_of_one_width,
    wanted,
    whole,
)

#: The version every message carries; bumped when a field changes meaning.
VERSION = 1

C = TypeVar("C")


def encode_vector(vector: np.ndarray) -> str:
    """A vector as base64 of its little-endian float32 bytes (JSON-safe)."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def _choice(kind: Any) -> Any:
    """The field type of a ``Literal``: one of its values, refused in memq's words."""
    return Annotated[kind, Checked(one_of(get_args(kind)))]


def _optional_choice(kind: Any) -> Any:
    check = one_of(get_args(kind))
    return Annotated[kind | None, Checked(lambda v: None if v is None else check(v))]


def _fields(data: Any, what: str, kind: str, required: Sequence[str] = ()) -> dict[str, Any]:
    """The fields of a top-level message, without its ``v`` and ``kind``: a JSON object of this
    memq's version, of ``kind``, holding the ``required`` keys (the ones a Python caller may
    leave out but the wire always carries); ``what`` names it in refusals."""
    if not isinstance(data, Mapping):
        raise MessageRefused(f"{what} message must be a JSON object, not {shown(data)}")
    version = data.get("v")
    if type(version) is not int or version != VERSION:
        raise MessageRefused(f"{what} message of version {shown(version)} (this memq reads "
                             f"version {VERSION}): the fleet runs mixed memq versions; upgrade "
                             "them all")
    if data.get("kind") != kind:
        raise MessageRefused(f"{what} message must be of kind {kind!r}, not "
                             f"{shown(data.get('kind'))}")
    for key in required:
        if key not in data:
            raise MessageRefused(f"{what} has no {key!r}")
    fields = {k: v for k, v in data.items() if k not in ("v", "kind")}
    if "route" in fields and fields["route"] is None:  # a memq without shards
        del fields["route"]
    return fields


def _route_of(fields: dict[str, Any], where: str) -> Route:
    """Pops the route of a message that keeps it as plain fields (``shard``, ``interactive``)."""
    for key in ("shard", "interactive"):
        if key in fields:
            raise MessageRefused(f"{where} has an unknown field {key!r}")
    return Route.from_json(fields.pop("route", None), f"{where}.route")


@dataclass(frozen=True, config=WIRE)
class ChunkText:
    """One chunk to embed: its stable id, the hash of its text, the text (for a media chunk, its
    label) and, for a media chunk, the file's bytes."""

    id: Text
    hash: Text
    text: Text
    media: MediaPart | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "hash": self.hash, "text": self.text}
        if self.media is not None:
            out["media"] = {"mime_type": self.media.mime_type, "data": self.media.data}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "a chunk") -> ChunkText:
        return read_message(cls, data, where)


@dataclass(frozen=True, config=WIRE)
class EmbedJob:
    """Chunks of one memory to embed with one provider (``embed.<provider>``).

    ``attempt`` counts deliveries after a worker crash (:func:`after_crash`).
    """

    memory: MemoryName
    spec: ProviderSpec
    store: StorePath
    chunks: tuple[ChunkText, ...]
    attempt: Whole = 0
    route: Route = DEFAULT_ROUTE

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "kind": "embed", "memory": self.memory, "spec": self.spec.to_dict(),
                "store": self.store, "chunks": [c.to_json() for c in self.chunks],
                "attempt": self.attempt, "route": self.route.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EmbedJob:
        return read_message(cls, _fields(data, "embedding job", "embed"), "embedding job")

    @property
    def size(self) -> int:
        """How many chunks the job holds."""
        return len(self.chunks)

    def result(self, vectors: Sequence[ChunkVector] = (),
               failed: Sequence[tuple[str, str]] = (),
               held: Sequence[tuple[str, str]] = ()) -> EmbedResult:
        """This job's result message."""
        return EmbedResult(self.memory, self.spec, self.store, tuple(vectors),
                           tuple(map(tuple, failed)), tuple(map(tuple, held)), self.route)

    def failed(self, reason: str) -> EmbedResult:
        """A result that marks every chunk of the job failed with ``reason``."""
        return self.result(failed=[(c.id, reason) for c in self.chunks])

    def held(self, reason: str) -> EmbedResult:
        """A result that leaves every chunk pending, with ``reason`` shown in status, for the
        next producer pass to queue again (a rejected key: fix it and run ``memq index``)."""
        return self.result(held=[(c.id, reason) for c in self.chunks])


@dataclass(frozen=True, config=WIRE)
class ChunkVector:
    """A chunk's vector, with the hash of the text it was computed from; on the wire, the row
    ``[id, hash, base64 vector]``."""

    id: Text
    hash: Text
    vector: Vector

    @model_validator(mode="before")
    @classmethod
    def _from_row(cls, data: Any) -> Any:
        if not isinstance(data, list):
            return data
        if len(data) != 3:
            raise wanted("a list of 3 values", data)
        try:
            vector = check_vector(data[2])
        except Refusal as error:
            raise refused(error.why, "[2]") from None
        return {"id": data[0], "hash": data[1], "vector": vector}


@dataclass(frozen=True, config=WIRE)
class EmbedResult:
    """What an embedding job produced, for the memory's single writer (``store``)."""

    memory: MemoryName
    spec: ProviderSpec
    store: StorePath
    vectors: tuple[ChunkVector, ...] = ()
    failed: tuple[tuple[Text, Text], ...] = ()  # (chunk id, reason)
    held: tuple[tuple[Text, Text], ...] = ()
    route: Route = DEFAULT_ROUTE

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "kind": "result", "memory": self.memory,
                "spec": self.spec.to_dict(), "store": self.store,
                "vectors": [[v.id, v.hash, encode_vector(v.vector)] for v in self.vectors],
                "failed": [list(f) for f in self.failed], "held": [list(h) for h in self.held],
                "route": self.route.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EmbedResult:
        fields = _fields(data, "embedding result", "result", ("vectors", "failed"))
        result = read_message(cls, fields, "embedding result")
        vectors_of_one_width([v.vector for v in result.vectors], "embedding result.vectors")
        return result


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


T = TypeVar("T", bound=HasText)


def pack(chunks: Sequence[T], *, max_chunks: int = JOB_MAX_CHUNKS,
         max_bytes: int = JOB_MAX_BYTES) -> list[list[T]]:
    """Pack chunks, in order, into groups of at most ``max_chunks`` and about ``max_bytes`` of
    UTF-8 text (a chunk larger than that travels alone)."""
    groups: list[list[T]] = []
    current: list[T] = []
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


def embed_jobs(memory: str, spec: ProviderSpec, store: str, chunks: Sequence[T], *,
               max_bytes: int = JOB_MAX_BYTES, route: Route = DEFAULT_ROUTE
               ) -> list[tuple[list[T], EmbedJob]]:
    """The sync embedding jobs for ``chunks`` (text only), each with the chunks it holds."""
    return [(group, EmbedJob(memory, spec, store,
                             tuple(ChunkText(c.id, c.hash, c.text) for c in group), route=route))
            for group in pack(chunks, max_bytes=max_bytes)]


# -- provider batch jobs ----------------------------------------------------------------------

@dataclass(frozen=True, config=WIRE)
class BatchOptions:
    """The batch settings a job runs with, kept in its row so a resumed job keeps them."""

    poll_s: Seconds
    timeout_s: Seconds
    concurrency: Annotated[int, Checked(whole(1))]

    def to_json(self) -> dict[str, float]:
        return {"poll_s": self.poll_s, "timeout_s": self.timeout_s,
                "concurrency": self.concurrency}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "batch options") -> BatchOptions:
        return read_message(cls, data, where)


@dataclass(frozen=True, config=WIRE)
class BatchJobRef:
    """What every message of one batch job carries: the job (its row in the store), its memory,
    provider, store generation and options."""

    job: Text
    memory: MemoryName
    spec: ProviderSpec
    store: StorePath
    options: BatchOptions
    route: Route = DEFAULT_ROUTE

    #: The message's kind on the wire, and how refusals name it (the subclasses').
    KIND: ClassVar[str] = ""
    WHAT: ClassVar[str] = ""
    #: The keys the wire always carries although a Python caller may leave them out.
    ON_THE_WIRE: ClassVar[tuple[str, ...]] = ()

    def _ref_json(self) -> dict[str, Any]:
        return {"v": VERSION, "kind": self.KIND, "job": self.job, "memory": self.memory,
                "spec": self.spec.to_dict(), "store": self.store,
                "options": self.options.to_json(), "route": self.route.to_json()}

    @classmethod
    def _read(cls: type[C], data: Any) -> C:
        return read_message(cls, _fields(data, cls.WHAT, cls.KIND, cls.ON_THE_WIRE),  # type: ignore[attr-defined]
                            cls.WHAT)  # type: ignore[attr-defined]

    def ref(self) -> BatchJobRef:
        """Just the job's reference (for the updates a step sends the writer)."""
        return BatchJobRef(self.job, self.memory, self.spec, self.store, self.options,
                           self.route)


def new_token() -> str:
    """A fresh lease token for a batch job's message chain."""
    return uuid.uuid4().hex


@dataclass(frozen=True, config=WIRE)
class BatchSubmit(BatchJobRef):
    """Upload these chunks and create the remote job (``batch.<provider>``). ``token`` is the
    job's lease token (:class:`pipeline.batch.workflow.Leases`)."""

    KIND: ClassVar[str] = "batch_submit"
    WHAT: ClassVar[str] = "batch submit"
    ON_THE_WIRE: ClassVar[tuple[str, ...]] = ("chunks", "token")

    chunks: tuple[tuple[Text, Text], ...] = ()  # (chunk id, text)
    token: Text = ""

    def to_json(self) -> dict[str, Any]:
        return {**self._ref_json(), "chunks": [list(c) for c in self.chunks],
                "token": self.token}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchSubmit:
        return cls._read(data)


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


def _remote_batch(value: Any) -> RemoteBatchRecord:
    """A :class:`RemoteBatchRecord`: its text fields required, the optional ones null or
    absent."""
    return text_fields(value, ("provider", "remote_id", "state", "raw_state"),  # type: ignore[return-value]
                       ("input_file", "output_file", "error_file", "message"))


RemoteRecord = Annotated[RemoteBatchRecord, Checked(_remote_batch)]
OptionalRemoteRecord = Annotated[RemoteBatchRecord | None,
                                 Checked(lambda v: None if v is None else _remote_batch(v))]


@dataclass(frozen=True, config=WIRE)
class BatchPoll(BatchJobRef):
    """Poll the remote job once (``batch.<provider>``); ``ids`` are its chunk ids, to account
    for every line of its output."""

    KIND: ClassVar[str] = "batch_poll"
    WHAT: ClassVar[str] = "batch poll"
    ON_THE_WIRE: ClassVar[tuple[str, ...]] = ("token", "remote", "deadline", "ids")

    token: Text = ""
    remote: RemoteRecord = field(default_factory=dict)  # type: ignore[assignment]
    deadline: Seconds = 0.0
    ids: tuple[Text, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {**self._ref_json(), "token": self.token, "remote": dict(self.remote),
                "deadline": self.deadline, "ids": list(self.ids)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchPoll:
        return cls._read(data)

    def with_remote(self, remote: Mapping[str, Any]) -> BatchPoll:
        """The next poll, with the job's state as last seen."""
        return replace(self, remote=dict(remote))


#: The events a :class:`BatchUpdate` reports.
BatchEvent = Literal["state", "vectors", "finished"]
BATCH_EVENTS: tuple[str, ...] = get_args(BatchEvent)
BatchEventField = _choice(BatchEvent)


@dataclass(frozen=True, config=WIRE)
class BatchUpdate(BatchJobRef):
    """A batch job's news for the writer (``store``): its remote state changed (``state``),
    some of its vectors (``vectors``: chunk id → vector), or its end (``finished``: the outcome,
    the chunk ids it embedded, an error)."""

    KIND: ClassVar[str] = "batch_update"
    WHAT: ClassVar[str] = "batch update"
    ON_THE_WIRE: ClassVar[tuple[str, ...]] = ("event",)

    event: BatchEventField = "state"
    remote: OptionalRemoteRecord = None
    vectors: tuple[tuple[Text, Vector], ...] = ()
    outcome: OptionalText = None
    embedded: tuple[Text, ...] = ()
    error: OptionalText = None

    def to_json(self) -> dict[str, Any]:
        return {**self._ref_json(), "event": self.event,
                "remote": dict(self.remote) if self.remote is not None else None,
                "vectors": [[cid, encode_vector(v)] for cid, v in self.vectors],
                "outcome": self.outcome, "embedded": list(self.embedded), "error": self.error}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchUpdate:
        update = cls._read(data)
        if update.event == "state" and update.remote is None:
            raise MessageRefused(f"{cls.WHAT}: a state update must carry the remote record")
        vectors_of_one_width([v for _, v in update.vectors], f"{cls.WHAT}.vectors")
        return update


# -- index jobs -------------------------------------------------------------------------------

@dataclass(frozen=True, config=WIRE)
class IndexRequest:
    """An index pass of one memory, run by the writer host that owns its store
    (``memq index --remote``, or a sync asked for by a host that does not hold the store:
    ``interactive``); the Celery task id is the job id."""

    memory: MemoryName
    retry_failed: Flag = False
    shard: Whole = 0
    interactive: Flag = False
    rebuild: OptionalText = None  # why to build a new index beside the live one (reindex)

    @property
    def route(self) -> Route:
        return Route(self.shard, self.interactive)

    def to_json(self) -> dict[str, Any]:
        out = {"v": VERSION, "kind": "index", "memory": self.memory,
               "retry_failed": self.retry_failed, "route": self.route.to_json()}
        if self.rebuild is not None:
            out["rebuild"] = self.rebuild
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> IndexRequest:
        fields = _fields(data, "index request", "index")
        route = _route_of(fields, "index request")
        return read_message(cls, {**fields, "shard": route.shard,
                                  "interactive": route.interactive}, "index request")


#: Why a QMD backend's write job runs (:mod:`pipeline.qmd.jobs`).
QmdReason = Literal["boot", "changed", "due"]
QmdReasonField = _choice(QmdReason)


@dataclass(frozen=True, config=WIRE)
class QmdJobRequest:
    """A QMD backend's write job for one memory (``boot``, ``changed`` or ``due``: see
    :mod:`pipeline.qmd.jobs`), run by the host that owns the memory."""

    memory: MemoryName
    reason: QmdReasonField = "due"
    shard: Whole = 0

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "kind": "qmd-job", "memory": self.memory, "reason": self.reason,
                "route": Route(self.shard).to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QmdJobRequest:
        fields = _fields(data, "qmd job request", "qmd-job")
        shard = _route_of(fields, "qmd job request").shard
        return read_message(cls, {**fields, "shard": shard}, "qmd job request")


# -- files from a producer on another host ---------------------------------------------------

#: What happened to a file: new or changed bytes (``write``), the same bytes under a new stat
#: (``touch``), or gone (``delete``).
FileOp = Literal["write", "touch", "delete"]
FileSource = Literal["memory", "sessions"]
FileOpField = _choice(FileOp)
FileSourceField = _choice(FileSource)


@dataclass(frozen=True, config=WIRE)
class FileChange:
    """One memory file as the producer that holds it saw it change: its path relative to the
    workspace (as the store keeps it), its source, its stat, the sha256 of its bytes, and the
    bytes themselves for a ``write``: as ``text`` when they are UTF-8 text, else as base64
    ``data`` (an image, bytes a local pass would refuse). ``error`` says why a file could not
    be read at all (it then has no bytes)."""

    path: Text
    source: FileSourceField
    op: FileOpField
    mtime_ns: Whole = 0
    size: Whole = 0
    hash: Sha256 = ""
    text: OptionalText = None
    data: OptionalBase64 = None
    error: OptionalText = None

    def raw(self) -> bytes | None:
        """The file's bytes (None for a touch, a delete or an unreadable file)."""
        if self.text is not None:
            return self.text.encode("utf-8")
        if self.data is not None:
            return base64.b64decode(self.data)
        return None

    def to_json(self) -> dict[str, Any]:
        values = ((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))
        return {name: value for name, value in values if value is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "a file change") -> FileChange:
        return read_message(cls, data, where)

    @property
    def weight(self) -> int:
        """About how many bytes this change adds to a message."""
        return len(self.path) + len(self.text or "") + len(self.data or "") + 200


@dataclass(frozen=True, config=WIRE)
class FileChanges:
    """Part ``part`` of a producer pass (job ``job``) over ``memory``'s files, for the writer
    of its shard (``control.<shard>``), which applies them exactly as a local pass would; the
    ``last`` part also queues the embedding work. ``files`` is how many files the pass looked
    at, ``errors`` what it could not read (a folder it cannot list: its files are kept);
    ``retry_failed`` queues the memory's failed chunks again; ``folder`` identifies the folder
    the files were read from (host, device, inode: :mod:`pipeline.ingest.safety`)."""

    memory: MemoryName
    job: Text
    changes: tuple[FileChange, ...] = ()
    part: Whole = 0
    last: Flag = True
    files: Whole = 0
    errors: tuple[Text, ...] = ()
    origin: Text = "remote"
    shard: Whole = 0
    interactive: Flag = False
    retry_failed: Flag = False
    folder: OptionalText = None

    @property
    def route(self) -> Route:
        return Route(self.shard, self.interactive)

    def to_json(self) -> dict[str, Any]:
        out = {"v": VERSION, "kind": "file-changes", "memory": self.memory, "job": self.job,
               "changes": [c.to_json() for c in self.changes], "part": self.part,
               "last": self.last, "files": self.files, "errors": list(self.errors),
               "origin": self.origin, "route": self.route.to_json(),
               "retry_failed": self.retry_failed}
        if self.folder is not None:
            out["folder"] = self.folder
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FileChanges:
        fields = _fields(data, "file changes", "file-changes", ("changes",))
        route = _route_of(fields, "file changes")
        return read_message(cls, {**fields, "shard": route.shard,
                                  "interactive": route.interactive}, "file changes")


# -- reads from any host ----------------------------------------------------------------------

#: What a reader is asked (:class:`QueryRequest`).
QueryOp = Literal["search", "get", "status", "stale", "append", "jobs", "manifest", "export"]
QueryOpField = _choice(QueryOp)
#: At most this many active project keys per search (OpenClaw keeps 4 per session).
MAX_PROJECT_KEYS = 64


def _score(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not 0 <= value <= 1 or value != value:
        raise wanted("a number from 0 to 1", value)
    return float(value)


def _project_keys(value: Any) -> list[str] | None:
    """None, or a list of at most :data:`MAX_PROJECT_KEYS` texts (the active project keys)."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_PROJECT_KEYS:
        raise wanted(f"a list of at most {MAX_PROJECT_KEYS} project keys", value)
    for n, key in enumerate(value):
        try:
            check_text(key)
        except Refusal as error:
            raise refused(error.why, f"[{n}]") from None
    return list(value)


class QueryArgs(Mapping[str, Any]):
    """The arguments of one read, one class per op; read like the JSON object they travel as
    (``args["query"]``, ``args.get("maxResults")``): an argument not given (or null) is absent.
    A field named after a Python keyword ends with ``_`` (``from_``); its key does not."""

    def _keys(self) -> Iterator[tuple[str, str]]:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            yield f.name.rstrip("_"), f.name

    def __getitem__(self, key: str) -> Any:
        value = getattr(self, _python_name(key), None) if not key.endswith("_") else None
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return (key for key, name in self._keys() if getattr(self, name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def to_json(self) -> dict[str, Any]:
        return dict(self)

    @classmethod
    def read(cls, data: Any, where: str, *, wire: bool = True) -> QueryArgs:
        """``data``, the arguments of a read as JSON (from the wire, or from a Python caller:
        ``wire=False``), read as ``cls`` (MessageRefused otherwise)."""
        if not isinstance(data, Mapping):
            raise MessageRefused(f"{where} must be a JSON object, not {shown(data)}")
        names = {f.name.rstrip("_"): f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted((k for k in data if k not in names), key=str)
        if unknown:
            raise MessageRefused(f"{where} has an unknown argument {shown(unknown[0])}")
        return read_message(cls, {names[k]: v for k, v in data.items()}, where, wire=wire)


def _python_name(key: str) -> str:
    return key + "_" if keyword.iskeyword(key) else key


Score = Annotated[float | None, Checked(_score)]
#: Checked on the wire only: a sender's keys are whatever its caller passed, and the reader
#: refuses them when they are not a list of at most MAX_PROJECT_KEYS texts.
ProjectKeys = Annotated[list[str] | None, Checked(lambda keys: keys, _project_keys)]


@dataclass(frozen=True, config=WIRE)
class SearchArgs(QueryArgs):
    """``search``: the query, and what narrows or tells about the hits."""

    query: Text
    maxResults: OptionalWhole = None  # the wire's names
    minScore: Score = None
    citations: OptionalText = None
    stale: OptionalFlag = None
    filesDigest: OptionalText = None
    corpus: OptionalText = None
    projects: ProjectKeys = None


@dataclass(frozen=True, config=WIRE)
class GetArgs(QueryArgs):
    """``get``: a file's lines."""

    path: Text
    from_: OptionalWhole = None
    lines: OptionalWhole = None


@dataclass(frozen=True, config=WIRE)
class NoArgs(QueryArgs):
    """``status``, ``stale``, ``manifest``: no arguments."""


@dataclass(frozen=True, config=WIRE)
class AppendArgs(QueryArgs):
    """``append``: a note, and the file it goes to (default: today's)."""

    text: Text
    target: OptionalText = None


@dataclass(frozen=True, config=WIRE)
class JobsArgs(QueryArgs):
    """``jobs``: the recent jobs, or one."""

    limit: OptionalWhole = None
    id: OptionalText = None


@dataclass(frozen=True, config=WIRE)
class ExportArgs(QueryArgs):
    """``export``: start a copy of the store (no token), read a part of it, or close it."""

    token: OptionalText = None
    offset: OptionalWhole = None
    size: OptionalWhole = None
    close: OptionalFlag = None


#: The arguments each read takes.
QUERY_ARGS: dict[str, type[QueryArgs]] = {
    "search": SearchArgs, "get": GetArgs, "status": NoArgs, "stale": NoArgs,
    "append": AppendArgs, "jobs": JobsArgs, "manifest": NoArgs, "export": ExportArgs}
AnyQueryArgs = SearchArgs | GetArgs | NoArgs | AppendArgs | JobsArgs | ExportArgs


@dataclass(frozen=True, config=WIRE)
class QueryRequest:
    """A read of one memory (:data:`QUERY_ARGS`: ``search``, ``get``, ``status``, ``stale``,
    ``jobs``, ``manifest``, ``export`` of a copy of its store, or the ``append`` of a note to
    its files), sent to its shard's ``query`` queue and answered by a reader on the host that
    holds the memory's store. ``args`` may be given as a mapping: it is read as the op's
    arguments class (MessageRefused when it does not fit)."""

    memory: MemoryName
    op: QueryOpField
    args: AnyQueryArgs = Field(default_factory=dict, validate_default=True)  # type: ignore[arg-type]
    shard: Whole = 0

    @field_validator("args", mode="plain")
    @classmethod
    def _args_of_the_op(cls, value: Any, info: ValidationInfo) -> QueryArgs:
        op = info.data.get("op")
        if op is None:  # refused already
            raise refused("cannot be read for an unknown op")
        kind = QUERY_ARGS[op]
        if type(value) is kind:
            return value
        return kind.read(value, f"query {op}", wire=info.context is not None)

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "kind": "query", "memory": self.memory, "op": self.op,
                "args": self.args.to_json(), "route": Route(self.shard, True).to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueryRequest:
        fields = _fields(data, "query", "query")
        shard = _route_of(fields, "query").shard
        return read_message(cls, {**fields, "shard": shard}, "query")


#: Why a reader did not answer: the message was refused (another memory, another shard), the
#: path or note was refused, the memory is turned off, or the reader failed.
ReplyError = Literal["refused", "path", "append", "disabled", "workspace", "failed"]
REPLY_ERRORS: tuple[str, ...] = get_args(ReplyError)
ReplyErrorField = _optional_choice(ReplyError)


@dataclass(frozen=True, config=WIRE)
class QueryReply:
    """A reader's answer: ``answer`` (the operation's JSON shape), or ``error`` with its
    ``kind`` (:data:`REPLY_ERRORS`); ``node`` names the reader."""

    answer: JsonValue = None
    error: OptionalText = None
    kind: ReplyErrorField = None
    node: OptionalText = None

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "kind": "query-reply", "answer": self.answer, "error": self.error,
                "error_kind": self.kind, "node": self.node}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueryReply:
        fields = _fields(data, "query reply", "query-reply")
        if "kind" in fields:  # the attribute: on the wire it is error_kind
            raise MessageRefused("query reply has an unknown field 'kind'")
        if "error_kind" in fields:
            fields["kind"] = fields.pop("error_kind")
        return read_message(cls, fields, "query reply")
