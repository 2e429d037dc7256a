"""``memq status --fleet``: the whole fleet at a glance, from the config, the stores and the
broker.

- **memories**: every memory of the config (an openclaw.json's ``agents.list``, else the one
  memory of the settings), with its shard, store, and chunk counts read from the store (nothing
  is created for a memory never indexed) and its last index job from the job log; a memory
  whose store is on another host is described by its shard's reader;
- **shards**: for each writer shard, the holder of its writer lease in Redis
  (``memq.writer-lease.<n>``), the live workers consuming ``store.<n>`` (Celery's remote
  control), whether the lease holder is one of them, and its memories;
- **queues**: the messages waiting in each queue per lane. kombu's Redis transport keeps one
  list per message priority: priority 0 (the interactive lane) in ``<queue>`` itself, and
  priority *p* > 0 in ``<queue>\\x06\\x16<p>`` (the bulk lane is priority 9).

Every broker question is bounded by ``timeout``; an unreachable broker leaves ``reachable``
False and the broker parts None, while the memories (from the stores) are still listed.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.exceptions import OperationalError

from pipeline.config import Settings, listed_agents, load_settings, redact_url
from pipeline.errors import FleetError
from pipeline.fleet import DEFAULT_TIMEOUT_S, priority_lists, queue_consumers, redis_client
from pipeline.jobs import JobLog
from pipeline.memory import Memory
from pipeline.placement import store_is_here
from pipeline.routing import Lane, store_queue
from pipeline.store import reads, schema
from workers.monitor import BINDING_PREFIX, REDIS_SCHEMES
from workers.single_writer import lease_key


def memory_names(settings: Settings) -> list[str]:
    """The memories of ``settings``' config: its listed agents, else its own memory."""
    return listed_agents(settings.config_file) or [settings.agent_id]


def memory_row(settings: Settings, jobs: JobLog) -> dict[str, Any]:
    """One memory's line of the view: shard, store and counts (read only from what exists:
    this host's store and job log ``jobs``, or, for a memory whose store is on another host,
    its shard's reader; ``error`` says why a row is unknown)."""
    name = settings.agent_id
    row: dict[str, Any] = {"memory": name, "shard": settings.fleet.shard_of(name),
                           "store": str(settings.store.path), "indexed": False, "chunks": 0,
                           "ready": 0, "pending": 0, "failed": 0, "last_job": None,
                           "served_by": None, "error": None}
    if not store_is_here(settings):
        return _row_from_shard(settings, row)
    db = schema.open_store(settings.store.path, want_vectors=False)
    if db is not None:
        try:
            states = reads.state_counts(db)
        finally:
            db.close()
        row.update(indexed=True, chunks=sum(states.values()), ready=states.get("ready", 0),
                   pending=states.get("pending", 0), failed=states.get("failed", 0))
    last = jobs.recent(name, 1)
    if last:
        row["last_job"] = _last_job(last[0].to_dict())
    return row


def _row_from_shard(settings: Settings, row: dict[str, Any]) -> dict[str, Any]:
    try:
        with Memory(settings=settings, in_memory=False) as memory:
            status = memory.status()
    except FleetError as exc:
        row["error"] = str(exc)
        return row
    row.update(indexed=bool(status.get("indexed")), store=status.get("store"),
               chunks=status.get("chunks", 0), ready=status.get("vectors", 0),
               pending=status.get("pending", 0), failed=status.get("failed", 0),
               served_by=status.get("servedBy"))
    if status.get("jobs"):
        row["last_job"] = _last_job(status["jobs"][0])
    return row


def _last_job(job: dict[str, Any]) -> dict[str, Any]:
    return {k: job.get(k) for k in ("id", "kind", "state", "started_at", "finished_at",
                                    "error")}


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


def fleet_view(settings: Settings, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """The fleet view of ``settings``' config and broker (``memq status --fleet --json``)."""
    rows = []
    jobs = JobLog(settings.result_backend, keep_days=settings.fleet.jobs_keep_days)
    try:
        for name in memory_names(settings):
            own = settings if name == settings.agent_id else load_settings(
                config_file=settings.config_file, agent=name)
            rows.append(memory_row(own, jobs))
    finally:
        jobs.close()
    shards = settings.fleet.shards
    view: dict[str, Any] = {
        "broker": redact_url(settings.broker_url) if settings.broker_url else None,
        "reachable": False, "error": None, "memories": rows,
        "shards": [{"shard": n, "memories": [r["memory"] for r in rows if r["shard"] == n],
                    "lease_holder": None, "consumers": None, "writer_alive": None}
                   for n in range(shards)],
        "queues": None,
        "totals": {k: sum(r[k] for r in rows) for k in ("chunks", "ready", "pending", "failed")},
    }
    if not settings.broker_url:
        view["error"] = "no broker configured: each `memq index` runs its own"
        return view
    if settings.broker_url.split(":", 1)[0] not in REDIS_SCHEMES:
        view["error"] = "the fleet view reads leases and lanes from Redis; this broker is not"
        return view
    try:
        client = redis_client(settings.broker_url, timeout)
        try:
            holders = [(client.get(lease_key(n)) or b"").decode() or None for n in range(shards)]
            view["queues"] = lane_depths(client)
        finally:
            client.close()
    except (redis.RedisError, OSError) as exc:
        view["error"] = f"{type(exc).__name__}: {exc}"
        return view
    view["reachable"] = True
    try:
        nodes = queue_consumers(settings.broker_url, timeout=timeout)
    except OperationalError as exc:
        view["error"] = f"workers unknown: {exc}"
        nodes = None
    for shard, holder in zip(view["shards"], holders, strict=True):
        shard["lease_holder"] = holder
        if nodes is not None:
            shard["consumers"] = sorted(n for n, queues in nodes.items()
                                        if store_queue(shard["shard"]) in queues)
            shard["writer_alive"] = holder is not None and holder in shard["consumers"]
    return view


def fleet_lines(view: dict[str, Any]) -> list[str]:
    """``memq status --fleet`` for a person."""
    t = view["totals"]
    lines = [f"broker:   {view['broker'] or 'none'}"
             + ("" if view["reachable"] else f" (unknown: {view['error']})"),
             f"memories: {len(view['memories'])} ({t['chunks']} chunks, {t['ready']} with "
             f"vectors, {t['pending']} pending, {t['failed']} failed)"]
    for shard in view["shards"]:
        if shard["consumers"] is None:
            writer = "unknown"
        elif shard["writer_alive"]:
            writer = f"{shard['lease_holder']} (alive)"
        elif shard["lease_holder"]:
            writer = f"lease held by {shard['lease_holder']}, which does not answer"
        else:
            writer = "none"
        lines.append(f"shard {shard['shard']}:  writer {writer}; "
                     f"{len(shard['memories'])} memories")
    if view["queues"] is not None:
        lines.append("queues (waiting: interactive / bulk):")
        lines += [f"  {name:<16} {d['interactive']:>6} / {d['bulk']}"
                  for name, d in view["queues"].items()]
    lines.append(f"  {'memory':<20} {'shard':>5} {'chunks':>8} {'ready':>8} {'pending':>8} "
                 f"{'failed':>7}  last job")
    for r in view["memories"]:
        job = r["last_job"]
        last = f"{job['kind']} {job['state']}" if job else ("-" if r["indexed"]
                                                            else "not indexed")
        if r.get("error"):
            last = f"unknown: {r['error']}"
        lines.append(f"  {r['memory']:<20} {r['shard']:>5} {r['chunks']:>8} {r['ready']:>8} "
                     f"{r['pending']:>8} {r['failed']:>7}  {last}")
    return lines
