"""The Celery application of memq's workers: the shared configuration
(:func:`pipeline.fleet.celery_settings`) and the task modules.

Queues: ``embed.<provider>`` (one per provider, any host), ``batch.<provider>`` (provider batch
jobs: upload, poll, download; any host), and per writer shard ``store.<shard>`` (exactly one
consumer, on the host that owns the shard's SQLite files) and ``control.<shard>`` (index jobs,
QMD update jobs).
Every sender names the queue (:class:`pipeline.fleet.FleetDispatcher`). Tasks are acknowledged
after they run and handed back when their worker dies, so every task is idempotent.
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_init

from pipeline.fleet import broker_url_from_env, celery_settings
from workers.orphans import guard_embedded_worker

# A pool process whose resident memory grew past this (MiB, after a task) is replaced: a cap
# for local-model workers whose native library leaks or fragments. Unset: no cap.
MAX_MEMORY_PER_CHILD_MB = int(os.environ.get("MEMQ_WORKER_MAX_MEMORY_MB") or 0) or None

app = Celery("memq", include=["workers.tasks", "workers.batch_tasks", "workers.single_writer"])
app.conf.update(
    celery_settings(broker_url_from_env()),
    worker_max_memory_per_child=(MAX_MEMORY_PER_CHILD_MB * 1024
                                 if MAX_MEMORY_PER_CHILD_MB else None),
)


@worker_init.connect
def _guard_embedded_worker(**_: object) -> None:
    guard_embedded_worker()
