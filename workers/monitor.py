"""What the fleet is doing, read from the broker: queue depths, in-flight tasks, live workers.

Everything here is bounded in time: a broker that does not answer within ``timeout`` is
reported as unreachable (``workers`` and ``queues`` become None, shown as "unknown"), never
waited for. Redis is read directly (LLEN on the queue lists, HLEN on kombu's ``unacked``
hash), so no result backend is needed; workers are counted with Celery's remote control.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import redis
from kombu import Connection
from kombu.exceptions import OperationalError

from pipeline.config import Settings, redact_url
from pipeline.fleet.broker import (
    DEFAULT_TIMEOUT_S,
    FleetDispatcher,
    priority_lists,
    queue_consumers,
    queued_messages,
    redis_client,
    waiting_tasks,
)
from pipeline.memory import Memory
from pipeline.routing import control_queue, embed_queue, store_queue
from pipeline.store import schema

BINDING_PREFIX = "_kombu.binding."
UNACKED_KEY = "unacked"
REDIS_SCHEMES = ("redis", "rediss", "redis+socket")


def queue_depths(client: redis.Redis, shards: int = 1) -> dict[str, int]:
    """Messages waiting in each known queue (the writer queues of ``shards`` shards plus every
    declared one)."""
    names = {q for shard in range(shards) for q in (store_queue(shard), control_queue(shard))}
    for key in client.scan_iter(match=f"{BINDING_PREFIX}*", count=500):
        names.add(key.decode("utf-8", "replace").removeprefix(BINDING_PREFIX))
    names = {n for n in names if not n.endswith(".pidbox") and not n.startswith("celeryev")}
    depths: dict[str, int] = {}
    for name in sorted(names):
        pipe = client.pipeline(transaction=False)
        for key in priority_lists(name):
            pipe.llen(key)
        depths[name] = sum(pipe.execute())
    return depths


def broker_status(broker_url: str, timeout: float = DEFAULT_TIMEOUT_S, shards: int = 1
                  ) -> dict[str, Any]:
    """Queue depths, in-flight count and workers of a fleet of ``shards`` writer shards;
    ``reachable`` False (and None counts) when the broker does not answer in time."""
    out: dict[str, Any] = {"url": redact_url(broker_url), "reachable": False, "error": None,
                           "queues": None, "unacked": None, "workers": None, "nodes": None,
                           "waitingJobs": None}
    if urlsplit(broker_url).scheme not in REDIS_SCHEMES:
        return _amqp_status(out, broker_url, timeout, shards)
    try:
        client = redis_client(broker_url, timeout)
        try:
            client.ping()
            out["queues"] = queue_depths(client, shards)
            out["unacked"] = client.hlen(UNACKED_KEY)
            out["waitingJobs"] = [job for shard in range(shards)
                                   for job in waiting_tasks(client, control_queue(shard))]
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    out["reachable"] = True
    try:
        nodes = queue_consumers(broker_url, timeout=timeout)
    except OperationalError as exc:  # the broker went away between the two questions
        out["error"] = f"workers unknown: {exc}"
        return out
    out["nodes"] = nodes
    out["workers"] = len(nodes)
    return out


def _amqp_status(out: dict[str, Any], broker_url: str, timeout: float, shards: int
                 ) -> dict[str, Any]:
    """:func:`broker_status` on a broker other than Redis (RabbitMQ): the workers from Celery's
    remote control, and the depth of the writer queues and of every queue a live worker
    consumes from a passive ``queue_declare`` (an AMQP broker cannot list its queues). What
    only Redis shows (messages in flight, the waiting index jobs) stays unknown."""
    try:
        nodes = queue_consumers(broker_url, timeout=timeout)
        names = {q for shard in range(shards) for q in (store_queue(shard), control_queue(shard))}
        names.update(q for queues in nodes.values() for q in queues
                     if not q.endswith(".pidbox") and not q.startswith("celeryev"))
        with Connection(broker_url, connect_timeout=timeout) as connection:
            out["queues"] = {name: queued_messages(connection, name) for name in sorted(names)}
    except (OperationalError, OSError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    out.update(reachable=True, nodes=nodes, workers=len(nodes))
    return out


def resume_batches(settings: Settings) -> int | None:
    """Restart polling of live batch jobs whose message chain died (a Redis flush, a killed
    worker): ``memq status`` is one of the places that notices. None: no store, or the broker
    did not answer."""
    db = schema.open_store(settings.store.path, want_vectors=settings.store.want_vectors)
    if db is None or not settings.broker_url:
        return None
    try:
        with FleetDispatcher(settings.broker_url) as fleet:
            return fleet.resume_batches(db, settings.agent_id,
                                        settings.fleet.shard_of(settings.agent_id))
    except (redis.RedisError, OSError, OperationalError):
        return None
    finally:
        db.close()


def fleet_status(settings: Settings, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """``memq status --json``: the index (from the store) plus the fleet (from the broker).

    Without a configured broker (each ``memq index`` starts its own), ``fleet`` says so. A
    memory whose store is on another host is described by its shard's reader
    (:class:`~pipeline.errors.ShardUnreachable` when none answers).
    """
    with Memory(settings=settings, in_memory=False) as memory:
        status = memory.status()  # this host's store, or the shard's reader
    if settings.broker_url:
        status["fleet"] = broker_status(settings.broker_url, timeout, settings.fleet.shards)
        status["fleet"]["shard"] = settings.fleet.shard_of(settings.agent_id)
    else:
        status["fleet"] = {"url": None, "reachable": False, "queues": None, "unacked": None,
                           "workers": None, "nodes": None, "waitingJobs": None,
                           "error": "no broker configured: each `memq index` runs its own"}
    provider = status.get("provider")
    queues = status["fleet"]["queues"] or {}
    status["pendingByProvider"] = (
        {provider: {"chunks": status["pending"], "queuedJobs": queues.get(embed_queue(provider))}}
        if provider else {})
    return status
