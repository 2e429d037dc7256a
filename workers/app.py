"""The Celery application: queues, routes and the reliability settings every task relies on.

Queues: ``embed.<provider>`` (one per provider, any host), ``batch.<provider>`` (provider batch
jobs: upload, poll, download; any host), ``store`` (exactly one consumer, on the
host that owns the SQLite file) and ``control`` (index jobs). Tasks are acknowledged after they
run and handed back when their worker dies, so every task is idempotent.
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_init
from kombu import Queue

DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
STORE_QUEUE = "store"
CONTROL_QUEUE = "control"
# No task may run longer than this (embedding jobs take seconds; the limit catches a hang).
# The soft limit comes first, so an embedding job can hand its chunks back to be retried.
TASK_TIME_LIMIT_S = float(os.environ.get("MEMQ_TASK_TIME_LIMIT") or 300)
TASK_SOFT_TIME_LIMIT_S = TASK_TIME_LIMIT_S - min(20.0, TASK_TIME_LIMIT_S / 10)
# How long Redis keeps a message of a dead consumer before handing it out again: the time a
# hard-killed worker's job waits to be redone. It must stay above every task's run time and
# retry countdown, or a live task would run twice (harmless, as writes are idempotent, but
# wasted work).
VISIBILITY_TIMEOUT_S = int(os.environ.get("MEMQ_VISIBILITY_TIMEOUT") or 2 * TASK_TIME_LIMIT_S)
# kombu looks for such messages only every unacked_restore_interval x unacked_restore_throttle
# seconds (10 x 10 by default): up to 100 s more. Looking every tenth of the timeout (1 to 10 s)
# bounds the wait near the timeout itself; a look is one Redis range query.
RESTORE_SWEEP_S = max(1, min(10, VISIBILITY_TIMEOUT_S // 10))
# A pool process whose resident memory grew past this (MiB, after a task) is replaced: a cap
# for local-model workers whose native library leaks or fragments. Unset: no cap.
MAX_MEMORY_PER_CHILD_MB = int(os.environ.get("MEMQ_WORKER_MAX_MEMORY_MB") or 0) or None


def embed_queue(provider: str) -> str:
    return f"embed.{provider}"


def batch_queue(provider: str) -> str:
    return f"batch.{provider}"


def broker_url_from_env() -> str:
    return os.environ.get("MEMQ_BROKER_URL") or os.environ.get("REDIS_URL") or DEFAULT_BROKER


app = Celery("memq", include=["workers.tasks", "workers.batch_tasks", "workers.single_writer"])
app.conf.update(
    broker_url=broker_url_from_env(),
    broker_connection_retry_on_startup=True,
    broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_S,
                              "unacked_restore_interval": RESTORE_SWEEP_S,
                              "unacked_restore_throttle": 1},
    worker_max_memory_per_child=(MAX_MEMORY_PER_CHILD_MB * 1024
                                 if MAX_MEMORY_PER_CHILD_MB else None),
    task_serializer="json",
    accept_content=["json"],
    result_serializer="json",
    task_ignore_result=True,
    task_time_limit=TASK_TIME_LIMIT_S,
    task_soft_time_limit=TASK_SOFT_TIME_LIMIT_S,
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    task_default_queue=CONTROL_QUEUE,
    task_queues=[Queue(STORE_QUEUE), Queue(CONTROL_QUEUE)],
    task_create_missing_queues=True,
    task_routes={"memq.write_vectors": {"queue": STORE_QUEUE},
                 "memq.batch_update": {"queue": STORE_QUEUE},
                 "memq.index_workspace": {"queue": CONTROL_QUEUE}},
    worker_prefetch_multiplier=1,
    worker_soft_shutdown_timeout=30.0,
    worker_enable_soft_shutdown_on_idle=True,
    worker_send_task_events=True,
    task_send_sent_event=True,
    worker_hijack_root_logger=False,
)


@worker_init.connect
def _guard_embedded_worker(**_: object) -> None:
    from workers.orphans import guard_embedded_worker

    guard_embedded_worker()
