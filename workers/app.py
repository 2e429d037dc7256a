"""The Celery application of memq's workers: the shared configuration
(:func:`pipeline.fleet.broker.celery_settings`) and the task modules.

Queues: ``embed.<provider>`` (one per provider, any host), ``batch.<provider>`` (provider batch
jobs: upload, poll, download; any host), and per writer shard ``store.<shard>`` (exactly one
consumer, on the host that owns the shard's SQLite files), ``control.<shard>`` (index jobs,
QMD update jobs) and ``query.<shard>`` (reads from any host, answered by the shard's readers).
Jobs are recorded in the job log (:mod:`pipeline.fleet.job_log`), which is also the app's result
backend, so Flower shows each job's outcome; that backend (and SQLAlchemy) is built when first
used (:class:`pipeline.fleet.job_log.JobLogBackend`), never by a worker whose tasks record no job.
Every sender names the queue (:class:`pipeline.fleet.broker.FleetDispatcher`). Tasks are
acknowledged after they run and handed back when their worker dies, so every task is idempotent.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery, Task
from celery.signals import worker_init
from celery.worker.request import Request

from pipeline.config import ConfigError, load_settings
from pipeline.config.paths import default_result_backend
from pipeline.fleet.broker import broker_url_from_env, celery_settings, describe
from pipeline.fleet.job_log import JobLogBackend, celery_backend_settings
from workers.orphans import guard_embedded_worker

log = logging.getLogger(__name__)

# A pool process whose resident memory grew past this (MiB, after a task) is replaced: a cap
# for local-model workers whose native library leaks or fragments. Unset: no cap.
MAX_MEMORY_PER_CHILD_MB = int(os.environ.get("MEMQ_WORKER_MAX_MEMORY_MB") or 0) or None


def job_log_settings() -> dict[str, object]:
    """The result backend of this host's workers and Flower: the job log of this host's
    settings (``resultBackend``, ``fleet.jobsKeepDays``), the default one when they cannot be
    read (the worker then reports the configuration error on its first message)."""
    try:
        settings = load_settings()
    except ConfigError as exc:
        log.warning("configuration error, the job log is the default one: %s", exc)
        return celery_backend_settings(default_result_backend(), 7)
    return celery_backend_settings(settings.result_backend, settings.fleet.jobs_keep_days)


class DescribedRequest(Request):
    """A task message as this worker's events and logs show it: its arguments described
    (:func:`pipeline.fleet.broker.describe`: the memory, the operation, how many items each list
    holds), never the arguments themselves (chunk text, a query, a note to append), whatever
    the sender put in the message's ``argsrepr``. Flower shows the task-received event's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._argsrepr = described(self._args)
        self._kwargsrepr = "{}" if not self._kwargs else f"{{{len(self._kwargs)} keyword(s)}}"
        self._request_dict.update(argsrepr=self._argsrepr, kwargsrepr=self._kwargsrepr)


def described(args: Any) -> str:
    """A task's arguments as memq shows them: a message (a dict) described, else counted."""
    if isinstance(args, list | tuple) and len(args) == 1 and isinstance(args[0], dict):
        return describe(args[0])
    return f"[{len(args) if isinstance(args, list | tuple) else '?'} argument(s)]"


class MemqTask(Task):
    """The base of memq's tasks: requests shown described (:class:`DescribedRequest`)."""

    Request = DescribedRequest


app = Celery("memq", include=["workers.tasks", "workers.batch_tasks", "workers.single_writer",
                              "workers.reading"], task_cls=MemqTask)
app.conf.update(
    **celery_settings(broker_url_from_env()),
    **job_log_settings(),
    worker_max_memory_per_child=(MAX_MEMORY_PER_CHILD_MB * 1024
                                 if MAX_MEMORY_PER_CHILD_MB else None),
)
app.backend_cls = JobLogBackend  # the job log's backend, built when first used


@worker_init.connect
def _guard_embedded_worker(**_: object) -> None:
    guard_embedded_worker()
