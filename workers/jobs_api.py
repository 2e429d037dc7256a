"""Enqueue index jobs from any host that reaches the broker (``memq index --remote``).

The job runs on the writer host (queue ``control.<shard>``), which owns the store; the caller
needs neither the store nor the memory files, only the broker. The returned job id
(``<memory>:<hex>``) is the Celery task id: Flower shows it with its result, and
``memq jobs --follow ID`` follows it from any host (:meth:`memq.Memory.follow_job`).
"""

from __future__ import annotations

from kombu.exceptions import OperationalError

from pipeline.config import Settings, redact_url
from pipeline.errors import EnqueueFailed
from pipeline.fleet.broker import FleetDispatcher
from pipeline.messages import IndexRequest


def enqueue_index(settings: Settings, *, retry_failed: bool = False) -> str:
    """Queue one index pass of the memory on its shard's writer host; returns the job id."""
    if not settings.broker_url:
        raise EnqueueFailed("enqueueing an index job needs the fleet's broker: set "
                            "MEMQ_BROKER_URL (or brokerUrl) and run `memq worker --role writer`")
    try:
        with FleetDispatcher(settings.broker_url) as fleet:
            return fleet.index(IndexRequest(settings.agent_id, retry_failed,
                                            settings.fleet.shard_of(settings.agent_id)))
    except OperationalError as exc:
        raise EnqueueFailed(f"broker {redact_url(settings.broker_url)} did not take the job: "
                            f"{exc}") from exc
