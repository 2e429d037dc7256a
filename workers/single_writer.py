"""The writer stays single: a worker that would consume ``store`` refuses to start while
another worker already does.

Two consumers of ``store`` would race on one SQLite file (or split results between two). The
check runs in every worker process at ``worker_init`` (before it consumes anything), so it
covers ``memq worker --role writer`` and a plain ``celery -A workers worker -Q store`` alike.
It asks the live workers which queues they consume (Celery remote control, a 1 s wait); a
broker that cannot be asked is logged and does not block startup. Set ``MEMQ_WRITER_CHECK=off``
only for a broker nobody else uses (the embedded per-run fleet does).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery.signals import worker_init

from workers.app import STORE_QUEUE

log = logging.getLogger(__name__)
CHECK_ENV = "MEMQ_WRITER_CHECK"


class SecondWriter(SystemExit):
    """Raised at worker startup: propagates through Celery's signal dispatch and exits."""


@worker_init.connect
def refuse_second_writer(sender: Any = None, **_: Any) -> None:
    if os.environ.get(CHECK_ENV, "").lower() in ("off", "0", "false", "no"):
        return
    if STORE_QUEUE not in sender.app.amqp.queues.consume_from:
        return
    from workers.monitor import queue_consumers

    try:
        nodes = queue_consumers(sender.app.conf.broker_url)
    except Exception as exc:  # the broker is down: the worker itself will wait for it
        log.warning("could not check for another writer (%s: %s)", type(exc).__name__, exc)
        return
    others = sorted(node for node, queues in nodes.items() if STORE_QUEUE in queues)
    if others:
        raise SecondWriter(
            f"memq: refusing to start {sender.hostname}: {', '.join(others)} already consumes "
            f"queue '{STORE_QUEUE}'. There must be exactly one writer (the host that owns the "
            "SQLite file); stop the other one first.")
