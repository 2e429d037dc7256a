"""The messages the fleet passes, typed and versioned, and the one float32 vector codec.

Every message names its memory (``memory``), the store generation it is for (``store``: the
real path, so a late message cannot write into the generation a rebuild swapped in), and the
embedding provider as a secret-free :class:`ProviderSpec`. None of them ever holds a secret:
workers resolve API keys and endpoints from their own environment and configuration.

On the wire a message is JSON (Celery's serializer): ``to_json()`` gives the dict, and
``from_json()`` reads it back through :class:`MessageFields`, whose getters check every field's
type and shape: a message written by an incompatible memq (another ``v``), of another kind, or
malformed in any way (a missing key, a wrong type, NaN, a number out of range, a vector that is
not base64 of float32) is refused with :class:`~pipeline.errors.MessageRefused` naming the
field, and nothing else ever escapes ``from_json``. Vectors travel as base64 of little-endian
float32.

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
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, Protocol, TypedDict, TypeVar, get_args, get_type_hints

import numpy as np

from pipeline.errors import MessageRefused
from pipeline.message_fields import (
    DEFAULT_ROUTE,
    Check,
    MediaPart,
    MessageFields,
    ProviderSpec,
    Route,
    check_base64,
    check_flag,
    check_json,
    check_number,
    check_one_of,
    check_optional_text,
    check_row,
    check_text,
    check_vector,
    check_whole,
    refusal,
    shown,
)

#: The version every message carries; bumped when a field changes meaning.
VERSION = 1


def encode_vector(vector: np.ndarray) -> str:
    """A vector as base64 of its little-endian float32 bytes (JSON-safe)."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def _checked(data: Any, what: str, kind: str | None = None) -> MessageFields:
    """The fields of a top-level message: a JSON object of this memq's version (and of
    ``kind``, when given); ``what`` names it in refusals."""
    fields = MessageFields(data, f"{what} message")
    version = fields.get("v")
    if type(version) is not int or version != VERSION:
        raise MessageRefused(f"{what} message of version {shown(version)} (this memq reads "
                             f"version {VERSION}): the fleet runs mixed memq versions; upgrade "
                             "them all")
    if kind is not None and fields.get("kind") != kind:
        raise MessageRefused(f"{what} message must be of kind {kind!r}, not "
                             f"{shown(fields.get('kind'))}")
    fields.where = what
    return fields


@dataclass(frozen=True)
class ChunkText:
    """One chunk to embed: its stable id, the hash of its text, the text (for a media chunk, its
    label) and, for a media chunk, the file's bytes."""

    id: str
    hash: str
    text: str
    media: MediaPart | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "hash": self.hash, "text": self.text}
        if self.media is not None:
            out["media"] = {"mime_type": self.media.mime_type, "data": self.media.data}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "a chunk") -> ChunkText:
        fields = MessageFields(data, where)
        media = None
        if fields.get("media") is not None:
            part = fields.fields("media")
            media = MediaPart(part.text("mime_type"), part.read("data", check_base64))
        return cls(fields.text("id"), fields.text("hash"), fields.text("text"), media)


@dataclass(frozen=True)
class EmbedJob:
    """Chunks of one memory to embed with one provider (``embed.<provider>``).

    ``attempt`` counts deliveries after a worker crash (:func:`after_crash`).
    """

    memory: str
    spec: ProviderSpec
    store: str
    chunks: tuple[ChunkText, ...]
    attempt: int = 0
    route: Route = DEFAULT_ROUTE

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "kind": "embed", "memory": self.memory, "spec": self.spec.to_dict(),
                "store": self.store, "chunks": [c.to_json() for c in self.chunks],
                "attempt": self.attempt, "route": self.route.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EmbedJob:
        fields = _checked(data, "embedding job", "embed")
        return cls(fields.name("memory"), fields.read("spec", ProviderSpec.from_dict),
                   fields.path("store"), fields.each("chunks", ChunkText.from_json),
                   fields.whole("attempt", 0), fields.read("route", Route.from_json, DEFAULT_ROUTE))

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


@dataclass(frozen=True)
class ChunkVector:
    """A chunk's vector, with the hash of the text it was computed from."""

    id: str
    hash: str
    vector: np.ndarray


@dataclass(frozen=True)
class EmbedResult:
    """What an embedding job produced, for the memory's single writer (``store``)."""

    memory: str
    spec: ProviderSpec
    store: str
    vectors: tuple[ChunkVector, ...] = ()
    failed: tuple[tuple[str, str], ...] = ()  # (chunk id, reason)
    held: tuple[tuple[str, str], ...] = ()
    route: Route = DEFAULT_ROUTE

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "kind": "result", "memory": self.memory,
                "spec": self.spec.to_dict(), "store": self.store,
                "vectors": [[v.id, v.hash, encode_vector(v.vector)] for v in self.vectors],
                "failed": [list(f) for f in self.failed], "held": [list(h) for h in self.held],
                "route": self.route.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EmbedResult:
        fields = _checked(data, "embedding result", "result")
        vectors = fields.each("vectors", check_row(check_text, check_text, check_vector))
        _one_width(fields, "vectors", [v for _, _, v in vectors])
        return cls(fields.name("memory"), fields.read("spec", ProviderSpec.from_dict),
                   fields.path("store"), tuple(ChunkVector(*v) for v in vectors),
                   fields.each("failed", check_row(check_text, check_text)),
                   fields.each("held", check_row(check_text, check_text), ()),
                   fields.read("route", Route.from_json, DEFAULT_ROUTE))


def _one_width(fields: MessageFields, key: str, vectors: Sequence[np.ndarray]) -> None:
    """The vectors of one message are of one width (they go into one index)."""
    widths = sorted({len(v) for v in vectors})
    if len(widths) > 1:
        raise MessageRefused(f"{fields.where}.{key} mixes vectors of widths {widths}")


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

@dataclass(frozen=True)
class BatchOptions:
    """The batch settings a job runs with, kept in its row so a resumed job keeps them."""

    poll_s: float
    timeout_s: float
    concurrency: int

    def to_json(self) -> dict[str, float]:
        return {"poll_s": self.poll_s, "timeout_s": self.timeout_s,
                "concurrency": self.concurrency}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "batch options") -> BatchOptions:
        fields = MessageFields(data, where)
        return cls(fields.number("poll_s"), fields.number("timeout_s"),
                   fields.whole("concurrency", minimum=1))


@dataclass(frozen=True)
class BatchJobRef:
    """What every message of one batch job carries: the job (its row in the store), its memory,
    provider, store generation and options."""

    job: str
    memory: str
    spec: ProviderSpec
    store: str
    options: BatchOptions
    route: Route = DEFAULT_ROUTE

    def _ref_json(self, kind: str) -> dict[str, Any]:
        return {"v": VERSION, "kind": kind, "job": self.job, "memory": self.memory,
                "spec": self.spec.to_dict(), "store": self.store,
                "options": self.options.to_json(), "route": self.route.to_json()}

    @staticmethod
    def _ref_fields(fields: MessageFields) -> tuple[Any, ...]:
        return (fields.text("job"), fields.name("memory"),
                fields.read("spec", ProviderSpec.from_dict), fields.path("store"),
                fields.read("options", BatchOptions.from_json),
                fields.read("route", Route.from_json, DEFAULT_ROUTE))

    def ref(self) -> BatchJobRef:
        """Just the job's reference (for the updates a step sends the writer)."""
        return BatchJobRef(self.job, self.memory, self.spec, self.store, self.options,
                           self.route)


def new_token() -> str:
    """A fresh lease token for a batch job's message chain."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class BatchSubmit(BatchJobRef):
    """Upload these chunks and create the remote job (``batch.<provider>``). ``token`` is the
    job's lease token (:class:`pipeline.batch.workflow.Leases`)."""

    chunks: tuple[tuple[str, str], ...] = ()  # (chunk id, text)
    token: str = ""

    def to_json(self) -> dict[str, Any]:
        return {**self._ref_json("batch_submit"), "chunks": [list(c) for c in self.chunks],
                "token": self.token}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchSubmit:
        fields = _checked(data, "batch submit", "batch_submit")
        return cls(*cls._ref_fields(fields),
                   chunks=fields.each("chunks", check_row(check_text, check_text)),
                   token=fields.text("token"))


@dataclass(frozen=True)
class BatchPoll(BatchJobRef):
    """Poll the remote job once (``batch.<provider>``); ``ids`` are its chunk ids, to account
    for every line of its output."""

    token: str = ""
    remote: RemoteBatchRecord = field(default_factory=dict)  # type: ignore[assignment]
    deadline: float = 0.0
    ids: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {**self._ref_json("batch_poll"), "token": self.token, "remote": dict(self.remote),
                "deadline": self.deadline, "ids": list(self.ids)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchPoll:
        fields = _checked(data, "batch poll", "batch_poll")
        return cls(*cls._ref_fields(fields), token=fields.text("token"),
                   remote=fields.read("remote", _remote_batch),
                   deadline=fields.number("deadline"), ids=fields.each("ids", check_text))

    def with_remote(self, remote: Mapping[str, Any]) -> BatchPoll:
        """The next poll, with the job's state as last seen."""
        return replace(self, remote=dict(remote))


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


def _remote_batch(value: Any, where: str) -> RemoteBatchRecord:
    """A :class:`RemoteBatchRecord`: its text fields required, the optional ones null or
    absent."""
    fields = MessageFields(value, where)
    record = {key: fields.text(key) if hint is str else fields.optional_text(key)
              for key, hint in get_type_hints(RemoteBatchRecord).items()}
    return RemoteBatchRecord(**record)  # type: ignore[typeddict-item]


#: The events a :class:`BatchUpdate` reports.
BatchEvent = Literal["state", "vectors", "finished"]
BATCH_EVENTS: tuple[str, ...] = get_args(BatchEvent)


@dataclass(frozen=True)
class BatchUpdate(BatchJobRef):
    """A batch job's news for the writer (``store``): its remote state changed (``state``),
    some of its vectors (``vectors``: chunk id → vector), or its end (``finished``: the outcome,
    the chunk ids it embedded, an error)."""

    event: BatchEvent = "state"
    remote: RemoteBatchRecord | None = None
    vectors: tuple[tuple[str, np.ndarray], ...] = ()
    outcome: str | None = None
    embedded: tuple[str, ...] = ()
    error: str | None = None

    def __post_init__(self) -> None:
        if self.event not in BATCH_EVENTS:
            raise MessageRefused(f"unknown batch update {self.event!r}")

    def to_json(self) -> dict[str, Any]:
        return {**self._ref_json("batch_update"), "event": self.event,
                "remote": dict(self.remote) if self.remote is not None else None,
                "vectors": [[cid, encode_vector(v)] for cid, v in self.vectors],
                "outcome": self.outcome, "embedded": list(self.embedded), "error": self.error}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchUpdate:
        fields = _checked(data, "batch update", "batch_update")
        event = fields.choice("event", BATCH_EVENTS)
        remote = fields.read("remote", _remote_batch, None)
        if event == "state" and remote is None:
            raise MessageRefused(f"{fields.where}: a state update must carry the remote record")
        vectors = fields.each("vectors", check_row(check_text, check_vector), ())
        _one_width(fields, "vectors", [v for _, v in vectors])
        return cls(*cls._ref_fields(fields), event=event, remote=remote, vectors=vectors,
                   outcome=fields.optional_text("outcome"),
                   embedded=fields.each("embedded", check_text, ()),
                   error=fields.optional_text("error"))


# -- index jobs -------------------------------------------------------------------------------

@dataclass(frozen=True)
class IndexRequest:
    """An index pass of one memory, run by the writer host that owns its store
    (``memq index --remote``, or a sync asked for by a host that does not hold the store:
    ``interactive``); the Celery task id is the job id."""

    memory: str
    retry_failed: bool = False
    shard: int = 0
    interactive: bool = False
    rebuild: str | None = None  # why to build a new index beside the live one (reindex)

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
        fields = _checked(data, "index request", "index")
        route = fields.read("route", Route.from_json, DEFAULT_ROUTE)
        return cls(fields.name("memory"), fields.flag("retry_failed", False), route.shard,
                   route.interactive, fields.optional_text("rebuild"))


#: Why a QMD backend's write job runs (:mod:`pipeline.qmd.jobs`).
QmdReason = Literal["boot", "changed", "due"]


@dataclass(frozen=True)
class QmdJobRequest:
    """A QMD backend's write job for one memory (``boot``, ``changed`` or ``due``: see
    :mod:`pipeline.qmd.jobs`), run by the host that owns the memory."""

    memory: str
    reason: QmdReason = "due"
    shard: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "kind": "qmd-job", "memory": self.memory, "reason": self.reason,
                "route": Route(self.shard).to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QmdJobRequest:
        fields = _checked(data, "qmd job request", "qmd-job")
        return cls(fields.name("memory"), fields.choice("reason", get_args(QmdReason), "due"),
                   fields.read("route", Route.from_json, DEFAULT_ROUTE).shard)


# -- files from a producer on another host ---------------------------------------------------

#: What happened to a file: new or changed bytes (``write``), the same bytes under a new stat
#: (``touch``), or gone (``delete``).
FileOp = Literal["write", "touch", "delete"]
FileSource = Literal["memory", "sessions"]
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _sha256(value: Any, where: str) -> str:
    text = check_text(value, where)
    if text and not _SHA256.fullmatch(text):
        raise refusal(where, "a sha256 hex digest", value)
    return text


@dataclass(frozen=True)
class FileChange:
    """One memory file as the producer that holds it saw it change: its path relative to the
    workspace (as the store keeps it), its source, its stat, the sha256 of its bytes, and the
    bytes themselves for a ``write``: as ``text`` when they are UTF-8 text, else as base64
    ``data`` (an image, bytes a local pass would refuse). ``error`` says why a file could not
    be read at all (it then has no bytes)."""

    path: str
    source: FileSource
    op: FileOp
    mtime_ns: int = 0
    size: int = 0
    hash: str = ""
    text: str | None = None
    data: str | None = None
    error: str | None = None

    def raw(self) -> bytes | None:
        """The file's bytes (None for a touch, a delete or an unreadable file)."""
        if self.text is not None:
            return self.text.encode("utf-8")
        if self.data is not None:
            return base64.b64decode(self.data)
        return None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "a file change") -> FileChange:
        fields = MessageFields(data, where)
        return cls(fields.text("path"), fields.choice("source", get_args(FileSource)),  # type: ignore[arg-type]
                   fields.choice("op", get_args(FileOp)),  # type: ignore[arg-type]
                   fields.whole("mtime_ns", 0), fields.whole("size", 0),
                   fields.read("hash", _sha256, ""), fields.optional_text("text"),
                   fields.read("data", check_base64, None), fields.optional_text("error"))

    @property
    def weight(self) -> int:
        """About how many bytes this change adds to a message."""
        return len(self.path) + len(self.text or "") + len(self.data or "") + 200


@dataclass(frozen=True)
class FileChanges:
    """Part ``part`` of a producer pass (job ``job``) over ``memory``'s files, for the writer
    of its shard (``control.<shard>``), which applies them exactly as a local pass would; the
    ``last`` part also queues the embedding work. ``files`` is how many files the pass looked
    at, ``errors`` what it could not read (a folder it cannot list: its files are kept);
    ``retry_failed`` queues the memory's failed chunks again; ``folder`` identifies the folder
    the files were read from (host, device, inode: :mod:`pipeline.ingest.safety`)."""

    memory: str
    job: str
    changes: tuple[FileChange, ...] = ()
    part: int = 0
    last: bool = True
    files: int = 0
    errors: tuple[str, ...] = ()
    origin: str = "remote"
    shard: int = 0
    interactive: bool = False
    retry_failed: bool = False
    folder: str | None = None

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
        fields = _checked(data, "file changes", "file-changes")
        route = fields.read("route", Route.from_json, DEFAULT_ROUTE)
        return cls(fields.name("memory"), fields.text("job"),
                   fields.each("changes", FileChange.from_json), fields.whole("part", 0),
                   fields.flag("last", True), fields.whole("files", 0),
                   fields.each("errors", check_text, ()), fields.text("origin", "remote"),
                   route.shard, route.interactive, fields.flag("retry_failed", False),
                   fields.optional_text("folder"))


# -- reads from any host ----------------------------------------------------------------------

#: What a reader is asked (:class:`QueryRequest`).
QueryOp = Literal["search", "get", "status", "stale", "append", "jobs", "manifest", "export"]
_OPTIONAL_WHOLE: Check[int | None] = (  # noqa: E731
    lambda v, where: None if v is None else check_whole(0)(v, where))


def _score(value: Any, where: str) -> float | None:
    if value is None:
        return None
    number = check_number(value, where)
    if number > 1:
        raise refusal(where, "a number from 0 to 1", value)
    return number


#: At most this many active project keys per search (OpenClaw keeps 4 per session).
MAX_PROJECT_KEYS = 64


def _project_keys(value: Any, where: str) -> list[str] | None:
    """None, or a list of at most :data:`MAX_PROJECT_KEYS` texts (the active project keys)."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_PROJECT_KEYS:
        raise refusal(where, f"a list of at most {MAX_PROJECT_KEYS} project keys", value)
    return [check_text(key, f"{where}[{n}]") for n, key in enumerate(value)]


#: What each read takes: argument name -> (its check, required).
QUERY_ARGS: dict[str, dict[str, tuple[Check[Any], bool]]] = {
    "search": {"query": (check_text, True), "maxResults": (_OPTIONAL_WHOLE, False),
               "minScore": (_score, False), "citations": (check_optional_text, False),
               "stale": (check_flag, False), "filesDigest": (check_optional_text, False),
               "corpus": (check_optional_text, False), "projects": (_project_keys, False)},
    "get": {"path": (check_text, True), "from": (_OPTIONAL_WHOLE, False),
            "lines": (_OPTIONAL_WHOLE, False)},
    "status": {},
    "stale": {},
    "append": {"text": (check_text, True), "target": (check_text, False)},
    "jobs": {"limit": (_OPTIONAL_WHOLE, False), "id": (check_optional_text, False)},
    "manifest": {},
    "export": {"token": (check_optional_text, False), "offset": (_OPTIONAL_WHOLE, False),
               "size": (_OPTIONAL_WHOLE, False), "close": (check_flag, False)},
}


def _query_args(op: str, args: Any, where: str) -> dict[str, Any]:
    """``args`` read by :data:`QUERY_ARGS`' checks for ``op`` (MessageRefused otherwise)."""
    fields = MessageFields(args, where)
    allowed = QUERY_ARGS[op]
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise MessageRefused(f"{where} has an unknown argument {shown(unknown[0])}")
    return {name: fields.read(name, check) if required else fields.read(name, check, None)
            for name, (check, required) in allowed.items() if required or name in fields}


@dataclass(frozen=True)
class QueryRequest:
    """A read of one memory (:data:`QUERY_ARGS`: ``search``, ``get``, ``status``, ``stale``,
    ``jobs``, ``manifest``, ``export`` of a copy of its store, or the ``append`` of a note to
    its files), sent to its shard's
    ``query`` queue and answered by a reader on the host that holds the memory's store."""

    memory: str
    op: QueryOp
    args: Mapping[str, Any] = field(default_factory=dict)
    shard: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "kind": "query", "memory": self.memory, "op": self.op,
                "args": dict(self.args), "route": Route(self.shard, True).to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueryRequest:
        fields = _checked(data, "query", "query")
        op = fields.choice("op", get_args(QueryOp))
        return cls(fields.name("memory"), op,  # type: ignore[arg-type]
                   _query_args(op, fields.get("args", {}), f"query {op}"),
                   fields.read("route", Route.from_json, DEFAULT_ROUTE).shard)


#: Why a reader did not answer: the message was refused (another memory, another shard), the
#: path or note was refused, the memory is turned off, or the reader failed.
ReplyError = Literal["refused", "path", "append", "disabled", "workspace", "failed"]
REPLY_ERRORS: tuple[str, ...] = get_args(ReplyError)


@dataclass(frozen=True)
class QueryReply:
    """A reader's answer: ``answer`` (the operation's JSON shape), or ``error`` with its
    ``kind`` (:data:`REPLY_ERRORS`); ``node`` names the reader."""

    answer: Any = None
    error: str | None = None
    kind: ReplyError | None = None
    node: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "kind": "query-reply", "answer": self.answer, "error": self.error,
                "error_kind": self.kind, "node": self.node}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueryReply:
        fields = _checked(data, "query reply", "query-reply")
        kind = fields.read("error_kind", check_one_of(REPLY_ERRORS), None)
        return cls(fields.read("answer", check_json, None), fields.optional_text("error"),
                   kind, fields.optional_text("node"))  # type: ignore[arg-type]
