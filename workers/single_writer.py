"""Each writer shard stays single: a worker that would consume ``store.<shard>`` refuses to
start while another worker already does.

Two consumers of one shard's queue would race on its SQLite files (or split results between
two). The check runs in every worker process at ``worker_init`` (before it consumes anything),
so it covers ``memq worker --role writer`` and a plain ``celery -A workers worker -Q store.0``
alike, for every shard the worker would consume (a writer may own several):

1. it asks the live workers which queues they consume (Celery remote control, a 1 s wait),
   and refuses if one consumes that shard's ``store.<shard>``;
2. it takes the shard's lease in Redis (:class:`ShardLease`: a redis-py ``Lock`` whose token is
   the node name, renewed by a thread while the worker lives and released at shutdown, both
   atomic in Lua), so two writers started in the same second cannot both pass. A lease held by
   a node that does not answer (a writer killed without a shutdown) is waited out, at most
   ``LEASE_TTL_S``; one held by a live node means refusal.

A broker that cannot be asked is logged and does not block startup. Set
``MEMQ_WRITER_CHECK=off`` only for a broker nobody else uses (the embedded per-run fleet does).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import Any

import redis
from celery.signals import worker_init, worker_shutdown
from redis.exceptions import LockError

from pipeline.fleet.broker import queue_consumers, redis_client
from pipeline.routing import STORE_PREFIX, shard_of_queue, store_queue

log = logging.getLogger(__name__)
CHECK_ENV = "MEMQ_WRITER_CHECK"
LEASE_PREFIX = "memq.writer-lease."
LEASE_TTL_S = 30
RENEW_EVERY_S = 10.0


def lease_key(shard: int) -> str:
    """The Redis key of shard ``shard``'s writer lease."""
    return f"{LEASE_PREFIX}{shard}"


class SecondWriter(SystemExit):
    """Raised at worker startup: propagates through Celery's signal dispatch and exits."""


class ShardLease:
    """The lease on one shard's writer role, held under the node's name.

    Taking it is ``SET NX PX``; renewing and releasing check the holder and act in one Lua
    script (redis-py's ``Lock``), so a writer can never extend or delete a lease another
    writer has taken since.
    """

    def __init__(self, client: redis.Redis, shard: int, node: str,
                 ttl: float = LEASE_TTL_S) -> None:
        self.shard, self.node, self.client = shard, node, client
        self._lock = client.lock(lease_key(shard), timeout=ttl, thread_local=False)

    def take(self) -> bool:
        """Take the lease if it is free, or if this very node holds it (a restart)."""
        if self._lock.acquire(blocking=False, token=self.node):
            return True
        if self.holder() == self.node:
            self._lock.local.token = self.node.encode()
            return self.renew()
        return False

    def renew(self) -> bool:
        """Extend the lease to a full TTL; False when this node no longer holds it."""
        try:
            return bool(self._lock.reacquire())
        except LockError:
            return False

    def release(self) -> None:
        """Give the lease up (a no-op when another node holds it by now)."""
        with contextlib.suppress(LockError):
            self._lock.release()

    def holder(self) -> str:
        """The node holding the lease ("" when free)."""
        return (self.client.get(lease_key(self.shard)) or b"").decode()


class _Held:
    """The leases this worker process holds, renewed by one thread until shutdown."""

    def __init__(self) -> None:
        self.leases: list[ShardLease] = []
        self.stop = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._renew, daemon=True, name="memq-writer-lease").start()

    def _renew(self) -> None:
        while not self.stop.wait(RENEW_EVERY_S):
            for lease in self.leases:
                try:
                    if not lease.renew():
                        log.error("the writer lease of shard %d was lost (held by %r): another "
                                  "writer may start", lease.shard, lease.holder())
                except redis.RedisError as exc:  # broker hiccup: try again next round
                    log.warning("could not renew the writer lease of shard %d: %s",
                                lease.shard, exc)

    def release(self) -> None:
        self.stop.set()
        for lease in self.leases:
            try:
                lease.release()
            except redis.RedisError as exc:
                log.warning("could not release the writer lease of shard %d: %s",
                            lease.shard, exc)
        self.leases.clear()


_held = _Held()


def _refuse(node: str, why: str) -> SecondWriter:
    return SecondWriter(
        f"memq: refusing to start {node}: {why}. There must be exactly one writer per shard "
        "(the host that owns its SQLite files); stop the other one first.")


def consumed_shards(queues: list[str]) -> list[int]:
    """The writer shards among ``queues`` (the ``store.<shard>`` ones)."""
    return sorted({shard for q in queues if q.startswith(STORE_PREFIX + ".")
                   if (shard := shard_of_queue(q)) is not None})


def _live_consumers(broker_url: str, queue: str) -> list[str]:
    nodes = queue_consumers(broker_url)
    return sorted(node for node, queues in nodes.items() if queue in queues)


@worker_init.connect
def refuse_second_writer(sender: Any = None, **_: Any) -> None:
    if os.environ.get(CHECK_ENV, "").lower() in ("off", "0", "false", "no"):
        return
    shards = consumed_shards(list(sender.app.amqp.queues.consume_from))
    if not shards:
        return
    broker_url, node = sender.app.conf.broker_url, sender.hostname
    try:
        nodes = queue_consumers(broker_url)
    except Exception as exc:  # the broker is down: the worker itself will wait for it
        log.warning("could not check for another writer (%s: %s)", type(exc).__name__, exc)
        return
    for shard in shards:
        others = sorted(n for n, queues in nodes.items() if store_queue(shard) in queues)
        if others:
            raise _refuse(node, f"{', '.join(others)} already consumes queue "
                                f"'{store_queue(shard)}'")
    try:
        client = redis_client(broker_url)
    except ValueError:  # not a Redis broker: the live check above is all there is
        return
    try:
        for shard in shards:
            _held.leases.append(_take(ShardLease(client, shard, node), broker_url))
    except SecondWriter:
        _held.release()
        raise
    _held.start()


def _take(lease: ShardLease, broker_url: str) -> ShardLease:
    deadline = time.monotonic() + LEASE_TTL_S + 5
    waited = False
    queue = store_queue(lease.shard)
    while not lease.take():
        holder = lease.holder()
        if holder and holder in _live_consumers(broker_url, queue):
            raise _refuse(lease.node, f"{holder} already consumes queue '{queue}'")
        if time.monotonic() > deadline:
            raise _refuse(lease.node, f"{holder} holds the writer lease of shard {lease.shard} "
                                      "and keeps renewing it")
        if not waited:
            log.warning("writer lease of shard %d held by %s, which does not answer (yet): "
                        "waiting up to %d s for it to come up or for its lease to expire",
                        lease.shard, holder, LEASE_TTL_S)
            waited = True
        time.sleep(1.0)
    return lease


@worker_shutdown.connect
def release_leases(**_: Any) -> None:
    _held.release()
