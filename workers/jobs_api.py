"""Enqueue index jobs from any host that reaches the broker (``memq index --remote``).

The job runs on the writer host (queue ``control``), which owns the store; the caller needs
neither the store nor the memory files, only the broker. The returned job id is the Celery
task id: Flower shows it, and ``memq jobs`` on the store host shows what the job did.
"""

from __future__ import annotations

from kombu.exceptions import OperationalError

from pipeline.config import Settings, redact_url
from workers.app import CONTROL_QUEUE, app


class EnqueueFailed(RuntimeError):
    """No broker is configured, or it did not take the message (nothing was queued)."""


def enqueue_index(settings: Settings, *, retry_failed: bool = False) -> str:
    """Queue one index pass of the writer host's workspace; returns the job id."""
    if not settings.broker_url:
        raise EnqueueFailed("enqueueing an index job needs the fleet's broker: set MEMQ_BROKER_URL "
                       "(or brokerUrl) and run `memq worker --role writer`")
    from workers.tasks import index_workspace

    try:
        with app.connection_for_write(settings.broker_url) as connection:
            result = index_workspace.apply_async(args=[{"retry_failed": retry_failed}],
                                                 queue=CONTROL_QUEUE, connection=connection)
    except OperationalError as exc:
        raise EnqueueFailed(f"broker {redact_url(settings.broker_url)} did not take the job: "
                            f"{exc}") from exc
    return result.id
