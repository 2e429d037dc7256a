"""The messages the fleet passes, typed and versioned, and the one float32 vector codec.

Every message names its memory (``memory``), the store generation it is for (``store``: the
real path, so a late message cannot write into the generation a rebuild swapped in), and the
embedding provider as a secret-free :class:`ProviderSpec`. None of them ever holds a secret:
workers resolve API keys and endpoints from their own environment and configuration.

On the wire a message is JSON (Celery's serializer): ``to_json()`` gives the dict, and
``from_json()`` refuses one written by an incompatible memq (another ``v``) with
:class:`~pipeline.errors.MessageRefused`. Vectors travel as base64 of little-endian float32.

- :class:`EmbedJob` → ``embed.<provider>`` → :class:`EmbedResult` → the memory's writer;
- :class:`BatchSubmit`, :class:`BatchPoll` → ``batch.<provider>`` → :class:`BatchUpdate` →
  the writer (provider batch-file APIs, :mod:`pipeline.batch.workflow`);
- :class:`IndexRequest` → the writer's ``control`` queue (``memq index --remote``).
- :class:`QmdJobRequest` → the same ``control`` queue (a QMD backend's update job).
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
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol, TypeVar

import numpy as np

from pipeline.errors import MessageRefused

#: The version every message carries; bumped when a field changes meaning.
VERSION = 1


def encode_vector(vector: np.ndarray) -> str:
    """A vector as base64 of its little-endian float32 bytes (JSON-safe)."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def decode_vector(text: str) -> np.ndarray:
    """The inverse of :func:`encode_vector`."""
    return np.frombuffer(base64.b64decode(text), dtype="<f4")


def _checked(data: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise MessageRefused(f"a {kind} message must be a JSON object, not {type(data).__name__}")
    version = data.get("v")
    if version != VERSION:
        raise MessageRefused(f"a {kind} message of version {version!r} (this memq reads version "
                             f"{VERSION}): the fleet runs mixed memq versions; upgrade them all")
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
    def from_json(cls, data: Mapping[str, Any] | None) -> Route:
        """The route in a message (shard 0, bulk, for a message of a memq without shards)."""
        if not data:
            return cls()
        shard = data.get("shard", 0)
        if not isinstance(shard, int) or isinstance(shard, bool) or shard < 0:
            raise MessageRefused(f"a message's shard must be a whole number >= 0, not {shard!r}")
        return cls(shard, bool(data.get("interactive", False)))


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
    def from_dict(cls, data: Mapping[str, Any]) -> ProviderSpec:
        return cls(data["name"], data["model"], data["provider_key"], dict(data.get("options", {})))


@dataclass(frozen=True)
class MediaPart:
    """A media file's bytes inline (base64), for a multimodal chunk's embedding."""

    mime_type: str
    data: str


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
    def from_json(cls, data: Mapping[str, Any]) -> ChunkText:
        media = data.get("media")
        return cls(data["id"], data["hash"], data["text"],
                   MediaPart(media["mime_type"], media["data"]) if media else None)


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
        data = _checked(data, "embedding job")
        return cls(data["memory"], ProviderSpec.from_dict(data["spec"]), data["store"],
                   tuple(ChunkText.from_json(c) for c in data["chunks"]),
                   int(data.get("attempt", 0)), Route.from_json(data.get("route")))

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
        data = _checked(data, "embedding result")
        return cls(data["memory"], ProviderSpec.from_dict(data["spec"]), data["store"],
                   tuple(ChunkVector(cid, h, decode_vector(v)) for cid, h, v in data["vectors"]),
                   tuple((cid, why) for cid, why in data["failed"]),
                   tuple((cid, why) for cid, why in data.get("held", ())),
                   Route.from_json(data.get("route")))


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
    def from_json(cls, data: Mapping[str, Any]) -> BatchOptions:
        return cls(float(data["poll_s"]), float(data["timeout_s"]), int(data["concurrency"]))


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
    def _ref_fields(data: Mapping[str, Any]) -> tuple[Any, ...]:
        return (data["job"], data["memory"], ProviderSpec.from_dict(data["spec"]), data["store"],
                BatchOptions.from_json(data["options"]), Route.from_json(data.get("route")))

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
        data = _checked(data, "batch submit")
        return cls(*cls._ref_fields(data), chunks=tuple((cid, text) for cid, text in
                                                         data["chunks"]), token=data["token"])


@dataclass(frozen=True)
class BatchPoll(BatchJobRef):
    """Poll the remote job once (``batch.<provider>``); ``ids`` are its chunk ids, to account
    for every line of its output."""

    token: str = ""
    remote: Mapping[str, Any] = field(default_factory=dict)  # RemoteBatch.to_dict()
    deadline: float = 0.0
    ids: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {**self._ref_json("batch_poll"), "token": self.token, "remote": dict(self.remote),
                "deadline": self.deadline, "ids": list(self.ids)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchPoll:
        data = _checked(data, "batch poll")
        return cls(*cls._ref_fields(data), token=data["token"], remote=dict(data["remote"]),
                   deadline=float(data["deadline"]), ids=tuple(data["ids"]))

    def with_remote(self, remote: Mapping[str, Any]) -> BatchPoll:
        """The next poll, with the job's state as last seen."""
        return replace(self, remote=dict(remote))


#: The events a :class:`BatchUpdate` reports.
BATCH_EVENTS = ("state", "vectors", "finished")


@dataclass(frozen=True)
class BatchUpdate(BatchJobRef):
    """A batch job's news for the writer (``store``): its remote state changed (``state``),
    some of its vectors (``vectors``: chunk id → vector), or its end (``finished``: the outcome,
    the chunk ids it embedded, an error)."""

    event: str = "state"
    remote: Mapping[str, Any] | None = None
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
        data = _checked(data, "batch update")
        return cls(*cls._ref_fields(data), event=data["event"], remote=data.get("remote"),
                   vectors=tuple((cid, decode_vector(v)) for cid, v in data.get("vectors", ())),
                   outcome=data.get("outcome"), embedded=tuple(data.get("embedded", ())),
                   error=data.get("error"))


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
        data = _checked(data, "index request")
        route = Route.from_json(data.get("route"))
        rebuild = data.get("rebuild")
        if rebuild is not None and not isinstance(rebuild, str):
            raise MessageRefused("index request: rebuild must be a string")
        return cls(str(data["memory"]), bool(data.get("retry_failed", False)), route.shard,
                   route.interactive, rebuild)


@dataclass(frozen=True)
class QmdJobRequest:
    """A QMD backend's write job for one memory (``boot``, ``changed`` or ``due``: see
    :mod:`pipeline.qmd.jobs`), run by the host that owns the memory."""

    memory: str
    reason: str = "due"
    shard: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "kind": "qmd-job", "memory": self.memory, "reason": self.reason,
                "route": Route(self.shard).to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QmdJobRequest:
        data = _checked(data, "qmd job request")
        reason = data.get("reason", "due")
        if reason not in ("boot", "changed", "due"):
            raise MessageRefused(f"qmd job request: unknown reason {reason!r}")
        return cls(str(data["memory"]), str(reason), Route.from_json(data.get("route")).shard)


# -- reads from any host ----------------------------------------------------------------------

_OPTIONAL_INT = (int, type(None))
_OPTIONAL_NUMBER = (int, float, type(None))
_OPTIONAL_STR = (str, type(None))
#: What each read takes: argument name -> (allowed types, required).
QUERY_ARGS: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "search": {"query": ((str,), True), "maxResults": (_OPTIONAL_INT, False),
               "minScore": (_OPTIONAL_NUMBER, False), "citations": (_OPTIONAL_STR, False),
               "stale": ((bool,), False)},
    "get": {"path": ((str,), True), "from": (_OPTIONAL_INT, False),
            "lines": (_OPTIONAL_INT, False)},
    "status": {},
    "stale": {},
    "append": {"text": ((str,), True), "target": ((str,), False)},
    "jobs": {"limit": (_OPTIONAL_INT, False), "id": (_OPTIONAL_STR, False)},
}


def _query_args(op: Any, args: Any) -> dict[str, Any]:
    """``args`` checked against :data:`QUERY_ARGS` for ``op`` (MessageRefused otherwise)."""
    if op not in QUERY_ARGS:
        raise MessageRefused(f"query: unknown operation {op!r} (known: {', '.join(QUERY_ARGS)})")
    if not isinstance(args, Mapping):
        raise MessageRefused(f"query {op}: arguments must be an object")
    allowed = QUERY_ARGS[op]
    for name, value in args.items():
        if name not in allowed:
            raise MessageRefused(f"query {op}: unknown argument {name!r}")
        types, _ = allowed[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise MessageRefused(f"query {op}: {name} must be "
                                 f"{' or '.join(t.__name__ for t in types)}")
    missing = [name for name, (_, required) in allowed.items() if required and name not in args]
    if missing:
        raise MessageRefused(f"query {op}: missing {', '.join(missing)}")
    return dict(args)


@dataclass(frozen=True)
class QueryRequest:
    """A read of one memory (:data:`QUERY_ARGS`: ``search``, ``get``, ``status``, ``stale``,
    ``jobs``, or the ``append`` of a note to its files), sent to its shard's ``query`` queue and
    answered by a reader on the host that holds the memory's store."""

    memory: str
    op: str
    args: Mapping[str, Any] = field(default_factory=dict)
    shard: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", _query_args(self.op, self.args))

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "kind": "query", "memory": self.memory, "op": self.op,
                "args": dict(self.args), "route": Route(self.shard, True).to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueryRequest:
        data = _checked(data, "query")
        memory = data.get("memory")
        if not isinstance(memory, str) or not memory:
            raise MessageRefused("query: memory must be a non-empty string")
        return cls(memory, data.get("op"), data.get("args", {}),
                   Route.from_json(data.get("route")).shard)


#: Why a reader did not answer: the message was refused (another memory, another shard), the
#: path or note was refused, the memory is turned off, or the reader failed.
REPLY_ERRORS = ("refused", "path", "append", "disabled", "workspace", "failed")


@dataclass(frozen=True)
class QueryReply:
    """A reader's answer: ``answer`` (the operation's JSON shape), or ``error`` with its
    ``kind`` (:data:`REPLY_ERRORS`); ``node`` names the reader."""

    answer: Any = None
    error: str | None = None
    kind: str | None = None
    node: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "kind": "query-reply", "answer": self.answer, "error": self.error,
                "error_kind": self.kind, "node": self.node}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueryReply:
        data = _checked(data, "query reply")
        kind = data.get("error_kind")
        if kind is not None and kind not in REPLY_ERRORS:
            raise MessageRefused(f"query reply: unknown error kind {kind!r}")
        error, node = data.get("error"), data.get("node")
        if not isinstance(error, _OPTIONAL_STR) or not isinstance(node, _OPTIONAL_STR):
            raise MessageRefused("query reply: error and node must be strings")
        return cls(data.get("answer"), error, kind, node)
