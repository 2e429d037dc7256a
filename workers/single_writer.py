"""The writer stays single: a worker that would consume ``store`` refuses to start while
another worker already does.

Two consumers of ``store`` would race on one SQLite file (or split results between two). The
check runs in every worker process at ``worker_init`` (before it consumes anything), so it
covers ``memq worker --role writer`` and a plain ``celery -A workers worker -Q store`` alike:

1. it asks the live workers which queues they consume (Celery remote control, a 1 s wait),
   and refuses if one consumes ``store``;
2. it takes a lease in Redis (``SET NX`` with a TTL, renewed by a thread while the worker
   lives, released at shutdown), so two writers started in the same second cannot both pass.
   A lease held by a node that does not answer (a writer killed without a shutdown) is waited
   out, at most ``LEASE_TTL_S``; one held by a live node means refusal.

A broker that cannot be asked is logged and does not block startup. Set
``MEMQ_WRITER_CHECK=off`` only for a broker nobody else uses (the embedded per-run fleet does).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from celery.signals import worker_init, worker_shutdown

from pipeline.fleet import queue_consumers, redis_client
from pipeline.routing import STORE_QUEUE

log = logging.getLogger(__name__)
CHECK_ENV = "MEMQ_WRITER_CHECK"
LEASE_KEY = "memq.writer-lease"
LEASE_TTL_S = 30
RENEW_EVERY_S = 10.0

_lease: dict[str, Any] = {}


class SecondWriter(SystemExit):
    """Raised at worker startup: propagates through Celery's signal dispatch and exits."""


def _refuse(node: str, why: str) -> SecondWriter:
    return SecondWriter(
        f"memq: refusing to start {node}: {why}. There must be exactly one writer (the host "
        "that owns the SQLite file); stop the other one first.")


def _live_store_consumers(broker_url: str) -> list[str]:
    nodes = queue_consumers(broker_url)
    return sorted(node for node, queues in nodes.items() if STORE_QUEUE in queues)


@worker_init.connect
def refuse_second_writer(sender: Any = None, **_: Any) -> None:
    if os.environ.get(CHECK_ENV, "").lower() in ("off", "0", "false", "no"):
        return
    if STORE_QUEUE not in sender.app.amqp.queues.consume_from:
        return
    broker_url, node = sender.app.conf.broker_url, sender.hostname
    try:
        others = _live_store_consumers(broker_url)
    except Exception as exc:  # the broker is down: the worker itself will wait for it
        log.warning("could not check for another writer (%s: %s)", type(exc).__name__, exc)
        return
    if others:
        raise _refuse(node, f"{', '.join(others)} already consumes queue '{STORE_QUEUE}'")
    _take_lease(broker_url, node)


def _take_lease(broker_url: str, node: str) -> None:
    try:
        client = redis_client(broker_url)
    except ValueError:  # not a Redis broker: the live check above is all there is
        return
    deadline = time.monotonic() + LEASE_TTL_S + 5
    waited = False
    while not client.set(LEASE_KEY, node, nx=True, ex=LEASE_TTL_S):
        holder = (client.get(LEASE_KEY) or b"").decode()
        if holder == node:  # this node restarted: its own lease
            client.set(LEASE_KEY, node, ex=LEASE_TTL_S)
            break
        if holder and holder in _live_store_consumers(broker_url):
            raise _refuse(node, f"{holder} already consumes queue '{STORE_QUEUE}'")
        if time.monotonic() > deadline:
            raise _refuse(node, f"{holder} holds the writer lease and keeps renewing it")
        if not waited:
            log.warning("writer lease held by %s, which does not answer (yet): waiting up "
                        "to %d s for it to come up or for its lease to expire", holder,
                        LEASE_TTL_S)
            waited = True
        time.sleep(1.0)
    stop = threading.Event()
    thread = threading.Thread(target=_renew, args=(client, node, stop), daemon=True,
                              name="memq-writer-lease")
    thread.start()
    _lease.update(client=client, node=node, stop=stop)


def _renew(client: Any, node: str, stop: threading.Event) -> None:
    while not stop.wait(RENEW_EVERY_S):
        try:
            if (client.get(LEASE_KEY) or b"").decode() == node:
                client.expire(LEASE_KEY, LEASE_TTL_S)
            else:
                log.error("the writer lease was lost (held by %r): another writer may start",
                          client.get(LEASE_KEY))
        except Exception as exc:  # broker hiccup: try again next round
            log.warning("could not renew the writer lease: %s", exc)


@worker_shutdown.connect
def release_lease(**_: Any) -> None:
    if not _lease:
        return
    _lease["stop"].set()
    client, node = _lease["client"], _lease["node"]
    try:
        if (client.get(LEASE_KEY) or b"").decode() == node:
            client.delete(LEASE_KEY)
    except Exception as exc:
        log.warning("could not release the writer lease: %s", exc)
