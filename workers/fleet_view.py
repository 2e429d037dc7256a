"""``memq status --fleet``: the whole fleet at a glance, from the config, the stores and the
broker.

- **memories**: every memory of the config (an openclaw.json's ``agents.list``, else the one
  memory of the settings), with its shard, store, and chunk counts read from the store (nothing
  is created for a memory never indexed) and its last index job from the job log; a memory
  whose store is on another host is described by its shard's reader;
- **shards**: for each writer shard, the holder of its writer lease in Redis
  (``memq.writer-lease.<n>``), the live workers consuming ``store.<n>`` (Celery's remote
  control), whether the lease holder is one of them (on a broker without leases: whether
  anyone consumes it), the live readers consuming ``query.<n>``, and its memories;
- **queues**: the messages waiting in each queue per lane. kombu's Redis transport keeps one
  list per message priority: priority 0 (the interactive lane) in ``<queue>`` itself, and
  priority *p* > 0 in ``<queue>\\x06\\x16<p>`` (the bulk lane is priority 9).

Every broker question is bounded by ``timeout``; an unreachable broker leaves ``reachable``
False and the broker parts None, while the memories (from the stores) are still listed.
``problems`` says what the view cannot see (the broker, a shard's writer or reader, a
memory's row); ``memq status --fleet`` exits 3 when it is not empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis

from pipeline.config import Settings, listed_agents, load_settings, redact_url
from pipeline.errors import FleetError
from pipeline.fleet.broker import (
    DEFAULT_TIMEOUT_S,
    NETWORK_ERRORS,
    broker_failure,
    priority_lists,
    queue_consumers,
    redis_client,
)
from pipeline.fleet.job_log import JobLog, JobRecord
from pipeline.fleet.placement import store_is_here
from pipeline.memory import Memory
from pipeline.routing import Lane, query_queue, store_queue
from pipeline.store import reads, schema
from workers.monitor import BINDING_PREFIX, REDIS_SCHEMES
from workers.single_writer import lease_key


def memory_names(settings: Settings) -> list[str]:
    """The memories of ``settings``' config: its listed agents, else its own memory."""
    return listed_agents(settings.config_file) or [settings.agent_id]


@dataclass
class MemoryRow:
    """One memory's line of the view: its shard and store, chunk counts (``ready``: with a
    vector), its last index job, the node serving it when its store is on another host, and
    ``error``: why the row is unknown."""

    memory: str
    shard: int
    store: str | None
    indexed: bool = False
    chunks: int = 0
    ready: int = 0
    pending: int = 0
    failed: int = 0
    last_job: JobRecord | None = None
    served_by: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        job = None if self.last_job is None else self.last_job.to_dict()
        return {"memory": self.memory, "shard": self.shard, "store": self.store,
                "indexed": self.indexed, "chunks": self.chunks, "ready": self.ready,
                "pending": self.pending, "failed": self.failed,
                "lastJob": None if job is None else {k: job.get(k) for k in _LAST_JOB_KEYS},
                "servedBy": self.served_by, "error": self.error}


#: What a row shows of its memory's last job (keys of :meth:`JobRecord.to_dict`).
_LAST_JOB_KEYS = ("id", "kind", "state", "startedAt", "finishedAt", "error")


def memory_row(settings: Settings, jobs: JobLog, readers: list[str] | None = None,
               unseen: str | None = None) -> MemoryRow:
    """One memory's line of the view: shard, store and counts (read only from what exists:
    this host's store and job log ``jobs``, or, for a memory whose store is on another host,
    its shard's reader; ``error`` says why a row is unknown). A remote memory is asked only
    when its shard has live ``readers`` (None: not known, ask anyway); ``unseen`` is why the
    fleet cannot be asked at all (the broker's failure)."""
    name = settings.agent_id
    row = MemoryRow(name, settings.fleet.shard_of(name), str(settings.store.path))
    if not store_is_here(settings):
        if unseen or readers == []:
            row.error = unseen or f"no live reader of shard {row.shard}"
            return row
        return _row_from_shard(settings, row)
    db = schema.open_store(settings.store.path, want_vectors=False)
    if db is not None:
        try:
            states = reads.state_counts(db)
        finally:
            db.close()
        row.indexed, row.chunks = True, sum(states.values())
        row.ready, row.pending, row.failed = (states.get("ready", 0), states.get("pending", 0),
                                              states.get("failed", 0))
    last = jobs.recent(name, 1)
    row.last_job = last[0] if last else None
    return row


def _row_from_shard(settings: Settings, row: MemoryRow) -> MemoryRow:
    try:
        with Memory(settings=settings, in_memory=False) as memory:
            status = memory.status()
    except FleetError as exc:
        row.error = str(exc)
        return row
    row.indexed, row.store = bool(status.get("indexed")), status.get("store")
    row.chunks, row.ready = status.get("chunks", 0), status.get("vectors", 0)
    row.pending, row.failed = status.get("pending", 0), status.get("failed", 0)
    row.served_by = status.get("servedBy")
    if status.get("jobs"):
        row.last_job = JobRecord.from_dict(status["jobs"][0])
    return row


def lane_depths(client: redis.Redis) -> dict[str, dict[str, int]]:
    """Messages waiting per declared queue and lane: ``interactive`` (priority 0) and ``bulk``
    (every higher priority step; memq sends 9)."""
    names = set()
    for key in client.scan_iter(match=f"{BINDING_PREFIX}*", count=500):
        names.add(key.decode("utf-8", "replace").removeprefix(BINDING_PREFIX))
    names = {n for n in names if not n.endswith(".pidbox") and not n.startswith("celeryev")}
    out: dict[str, dict[str, int]] = {}
    for name in sorted(names):
        pipe = client.pipeline(transaction=False)
        for key in priority_lists(name):
            pipe.llen(key)
        interactive, *rest = pipe.execute()
        out[name] = {Lane.INTERACTIVE.name.lower(): interactive,
                     Lane.BULK.name.lower(): sum(rest)}
    return out


@dataclass
class ShardRow:
    """One writer shard: its ``memories``, the holder of its writer lease, the live workers
    consuming its store queue (``consumers``) and its query queue (``readers``), and whether
    its writer is alive (None: not known, the broker was not asked)."""

    shard: int
    memories: list[str] = field(default_factory=list)
    lease_holder: str | None = None
    consumers: list[str] | None = None
    writer_alive: bool | None = None
    readers: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"shard": self.shard, "memories": self.memories, "leaseHolder": self.lease_holder,
                "consumers": self.consumers, "writerAlive": self.writer_alive,
                "readers": self.readers}


@dataclass
class FleetView:
    """The whole fleet at a glance (see the module's doc); :meth:`to_dict` is
    ``memq status --fleet --json``."""

    broker: str | None
    shards: list[ShardRow]
    reachable: bool = False
    error: str | None = None
    memories: list[MemoryRow] = field(default_factory=list)
    queues: dict[str, dict[str, int]] | None = None
    problems: list[str] = field(default_factory=list)

    def totals(self) -> dict[str, int]:
        """Chunks, ready, pending and failed of every memory together."""
        return {k: sum(getattr(r, k) for r in self.memories)
                for k in ("chunks", "ready", "pending", "failed")}

    def to_dict(self) -> dict[str, Any]:
        return {"broker": self.broker, "reachable": self.reachable, "error": self.error,
                "memories": [r.to_dict() for r in self.memories],
                "shards": [s.to_dict() for s in self.shards], "queues": self.queues,
                "problems": self.problems, "totals": self.totals()}


def fleet_view(settings: Settings, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """The fleet view of ``settings``' config and broker as ``memq status --fleet --json``
    shows it (:func:`read_fleet_view`'s :meth:`FleetView.to_dict`)."""
    return read_fleet_view(settings, timeout).to_dict()


def read_fleet_view(settings: Settings, timeout: float = DEFAULT_TIMEOUT_S) -> FleetView:
    """The fleet view of ``settings``' config and broker.

    ``problems`` lists what the view cannot see: a broker that cannot be reached or on which
    no memq worker answers, a shard without a live writer or reader, a memory whose row is
    unknown (``memq status --fleet`` exits 3 when there is any)."""
    view = FleetView(redact_url(settings.broker_url) if settings.broker_url else None,
                     [ShardRow(n) for n in range(settings.fleet.shards)])
    if not settings.broker_url:
        view.error = "no broker configured: each `memq index` runs its own"
    else:
        _ask_broker(view, settings.broker_url, timeout)
    jobs = JobLog(settings.result_backend, keep_days=settings.fleet.jobs_keep_days)
    try:
        for name in memory_names(settings):
            own = settings if name == settings.agent_id else load_settings(
                config_file=settings.config_file, agent=name)
            shard = view.shards[own.fleet.shard_of(name)]
            view.memories.append(memory_row(own, jobs, shard.readers,
                                            view.error if settings.broker_url and
                                            not view.reachable else None))
    finally:
        jobs.close()
    for shard in view.shards:
        shard.memories = [r.memory for r in view.memories if r.shard == shard.shard]
    view.problems += [f"memory {r.memory}: unknown ({r.error})" for r in view.memories
                      if r.error and view.reachable]
    return view


def _ask_broker(view: FleetView, broker_url: str, timeout: float) -> None:
    """Fill ``view``'s broker parts: the live workers of each shard (any broker), the writer
    leases and the lanes (Redis), and the problems found."""
    problems = view.problems
    try:
        nodes = queue_consumers(broker_url, timeout=timeout)
    except NETWORK_ERRORS as exc:
        view.error = str(broker_failure(broker_url, exc))
        problems.append(view.error)
        return
    view.reachable = True
    if not nodes:
        problems.append(f"no memq worker answers on {redact_url(broker_url)} (nothing consumes "
                        "any queue there): is this the fleet's broker (host, port, database "
                        "number or vhost), and do its workers run?")
    holders: list[str | None] | None = None
    if broker_url.split(":", 1)[0] in REDIS_SCHEMES:
        try:
            client = redis_client(broker_url, timeout)
            try:
                holders = [(client.get(lease_key(s.shard)) or b"").decode() or None
                           for s in view.shards]
                view.queues = lane_depths(client)
            finally:
                client.close()
        except (redis.RedisError, OSError) as exc:
            view.error = f"leases and lanes unknown: {type(exc).__name__}: {exc}"
            problems.append(view.error)
    else:
        view.error = "writer leases and lanes are read from Redis; this broker is not"
    for shard in view.shards:
        n = shard.shard
        shard.consumers = sorted(node for node, queues in nodes.items()
                                 if store_queue(n) in queues)
        shard.readers = sorted(node for node, queues in nodes.items()
                               if query_queue(n) in queues)
        if holders is not None:
            shard.lease_holder = holders[n]
            shard.writer_alive = holders[n] is not None and holders[n] in shard.consumers
        else:  # no leases to read: a live consumer of the shard's store queue is its writer
            shard.writer_alive = bool(shard.consumers)
        if not shard.writer_alive:
            problems.append(f"shard {n}: no live writer")
        if not shard.readers:
            problems.append(f"shard {n}: no live reader")


def fleet_lines(view: dict[str, Any]) -> list[str]:
    """``memq status --fleet`` for a person."""
    t = view["totals"]
    unknown = sum(1 for r in view["memories"] if r["error"])
    lines = [f"broker:   {view['broker'] or 'none'}"
             + ("" if view["reachable"] else f" (unknown: {view['error']})"),
             f"memories: {len(view['memories'])} ({t['chunks']} chunks, {t['ready']} with "
             f"vectors, {t['pending']} pending, {t['failed']} failed"
             + (f"; {unknown} unknown, not counted)" if unknown else ")")]
    for shard in view["shards"]:
        if shard["consumers"] is None:
            writer = "unknown"
        elif shard["writerAlive"]:
            writer = f"{shard['leaseHolder'] or ', '.join(shard['consumers'])} (alive)"
        elif shard["leaseHolder"]:
            writer = f"lease held by {shard['leaseHolder']}, which does not answer"
        else:
            writer = "none"
        lines.append(f"shard {shard['shard']}:  writer {writer}; "
                     f"{len(shard['memories'])} memories")
        readers = shard["readers"]
        lines += ([f"shard {shard['shard']}:  reader {'unknown' if readers is None else 'none'}"]
                  if not readers else
                  [f"shard {shard['shard']}:  reader {node} (alive)" for node in readers])
    if view["queues"] is not None:
        lines.append("queues (waiting: interactive / bulk):")
        lines += [f"  {name:<16} {d['interactive']:>6} / {d['bulk']}"
                  for name, d in view["queues"].items()]
    lines.append(f"  {'memory':<20} {'shard':>5} {'chunks':>8} {'ready':>8} {'pending':>8} "
                 f"{'failed':>7}  last job")
    for r in view["memories"]:
        job = r["lastJob"]
        last = f"{job['kind']} {job['state']}" if job else ("-" if r["indexed"]
                                                            else "not indexed")
        if r.get("error"):
            last = f"unknown: {r['error']}"
        lines.append(f"  {r['memory']:<20} {r['shard']:>5} {r['chunks']:>8} {r['ready']:>8} "
                     f"{r['pending']:>8} {r['failed']:>7}  {last}")
    if view["problems"]:
        lines.append("cannot see (exit 3):")
        lines += [f"  {problem}" for problem in view["problems"]]
    return lines
