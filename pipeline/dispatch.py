"""Where a producer pass sends its work: a fleet of workers, or this very process.

A :class:`Dispatcher` takes the embedding jobs of a pass and says what it can do besides
(provider batch jobs, a rebuild's steps, how to tell that work is stuck). Two kinds exist:

- :class:`InlineDispatcher` embeds each job at once, in this process, and writes its vectors
  to the store before the pass goes on: what a library caller or the MCP server gets when no
  broker is configured. No Celery, no Redis.
- :class:`pipeline.fleet.broker.FleetDispatcher` sends the jobs to a broker, where the fleet's embed
  workers and the memory's single writer take them (``memq index`` with ``brokerUrl``, the
  watcher, the writer itself); ``workers.embedded.EmbeddedFleet`` is one with a private
  broker and worker started for one run.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol, runtime_checkable

from pipeline.batch.workflow import BatchRouting
from pipeline.config import BatchSettings, Settings
from pipeline.embeddings.providers import ProviderPool
from pipeline.embeddings.retries import MAX_RETRIES, retry_delay
from pipeline.embeddings.runner import embed_job
from pipeline.errors import (
    EmbeddingError,
    ProviderRefused,
    ProviderRetryable,
    ProviderUnavailable,
)
from pipeline.messages import EmbedJob, EmbedResult
from pipeline.store.engine import Database
from pipeline.store.results import StorePool, apply_result

log = logging.getLogger(__name__)


@runtime_checkable
class Dispatcher(Protocol):
    """What a producer pass needs from whoever does its embedding work.

    ``durable`` is True when jobs sent outlive this process (a broker the fleet shares), False
    when they die with it (an embedded broker, or none): then a pass forgets, before and after,
    which chunks were queued, so the next one queues them again.
    """

    durable: bool

    def embed(self, job: EmbedJob) -> None:
        """Take an embedding job (its vectors reach the store sooner or later)."""
        ...

    def batch_routing(self, settings: BatchSettings) -> BatchRouting | None:
        """How provider batch jobs are sent, or None when this dispatcher has no batch path."""
        ...

    def resume_batches(self, db: Database, memory: str, shard: int = 0) -> int:
        """Restart the polling of live batch jobs whose message chain died; how many."""
        ...

    def rebuild_later(self, memory: str, countdown: float = 0.0, *, shard: int = 0) -> bool:
        """Hand a rebuild's steps to the memory's writer (on its ``shard``); False when nobody
        can take them (the caller then drives the rebuild itself)."""
        ...

    def qmd_job(self, memory: str, reason: str, *, shard: int = 0) -> bool:
        """Send a QMD update job (:mod:`pipeline.qmd.jobs`) to the host that owns ``memory``
        (its ``control.<shard>`` queue); False when nobody can take it (the caller then runs
        it in this process)."""
        ...

    def check(self) -> None:
        """Called between polls while a caller waits for vectors: raise
        :class:`~pipeline.errors.FleetError` when the work cannot finish (a worker that keeps
        dying), restart what can be restarted."""
        ...

    def consumers(self, queue: str) -> int | None:
        """How many workers consume ``queue`` (None: unknown, or not a queue here)."""
        ...

    def close(self) -> None:
        """Release what the dispatcher opened (connections, an embedded broker)."""
        ...


def embed_outcome(job: EmbedJob, providers: ProviderPool, settings: Settings,
                  retries: int = MAX_RETRIES) -> EmbedResult:
    """Embed ``job`` in this process, retrying passing failures in place (with the same delays
    a worker would wait), and turn what cannot succeed into a result: a refused key or a
    provider this host cannot build leaves the chunks pending (held) with the reason; any other
    failure marks them failed. Never raises for a provider's failure."""
    for attempt in range(retries + 1):
        try:
            return embed_job(job, providers.get(job.spec, settings))
        except ProviderRetryable as exc:
            if attempt == retries:
                return job.failed(f"{exc} (after {retries} retries)")
            time.sleep(retry_delay(attempt, exc.retry_after))
        except (ProviderRefused, ProviderUnavailable) as exc:
            return job.held(str(exc))
        except EmbeddingError as exc:
            return job.failed(str(exc))
    raise AssertionError("unreachable")  # pragma: no cover


class InlineDispatcher:
    """Embeds every job in this process as it is sent, and writes its vectors at once.

    For a library caller or the MCP server with no broker: the pass returns with every vector
    written (or its chunk failed or held, with the reason). A native crash of a local model
    would take this process down; the fleet (:mod:`pipeline.fleet.broker`) isolates it in workers.
    """

    durable = False

    def __init__(self, settings: Settings, providers: ProviderPool,
                 retries: int = MAX_RETRIES) -> None:
        self.settings = settings
        self.providers = providers
        self.retries = retries
        self._stores = StorePool(want_vectors=settings.store.want_vectors)

    def embed(self, job: EmbedJob) -> None:
        result = embed_outcome(job, self.providers, self.settings, self.retries)
        db = self._stores.get(job.store)
        if db is None:
            return  # the generation was replaced meanwhile: its successor queues its own
        outcome = apply_result(db, result, cache=self.settings.cache.enabled)
        if outcome.refused:
            log.warning("result refused: %s", outcome.refused)

    def batch_routing(self, settings: BatchSettings) -> BatchRouting | None:
        return None  # a batch job outlives any one call: only a fleet runs them

    def resume_batches(self, db: Database, memory: str, shard: int = 0) -> int:
        return 0

    def rebuild_later(self, memory: str, countdown: float = 0.0, *, shard: int = 0) -> bool:
        return False

    def qmd_job(self, memory: str, reason: str, *, shard: int = 0) -> bool:
        return False

    def check(self) -> None:
        return None

    def consumers(self, queue: str) -> int | None:
        return None

    def close(self) -> None:
        """Close the store connections this dispatcher opened (the providers are the pool
        owner's)."""
        self._stores.close()
