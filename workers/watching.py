"""``memq watch``: the file watcher wired to the producer and the queues, plus reconcile.

Every settled batch of events becomes a targeted producer pass (only the paths that changed)
that queues its embedding work. A periodic full pass, the *reconcile*, heals what events and
queues can lose: events the watcher never saw (it was down, the kernel's queue overflowed),
queue messages that vanished (Redis restarted without persistence), and jobs whose worker
crashed. A pending chunk counts as lost when both its queues are empty and it was queued more
than ``lost_after_s`` ago: nothing can still be carrying it except a job being worked on right
now, and embedding that one twice is harmless (every write is idempotent). A rebuild under way
(a configuration change, ``memq reindex``) is driven to its swap from the same loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import Settings
from pipeline.embeddings.registry import ProviderChoice, choose_provider
from pipeline.fleet import FleetDispatcher
from pipeline.ingest.producer import REQUEUE_AFTER_S, IndexReport, index_once
from pipeline.ingest.reindex import rebuild_info, rebuild_step, start_rebuild
from pipeline.ingest.watcher import Watcher
from pipeline.memory import Memory
from pipeline.routing import embed_queue, store_queue
from pipeline.store.engine import connect
from workers.indexing import fleet_dispatcher

log = logging.getLogger(__name__)

DEFAULT_RECONCILE_MINUTES = 10
LOST_AFTER_S = 60.0
REBUILD_POLL_S = 1.0
HEARTBEAT_S = 5.0


@dataclass
class WatchStats:
    """What a watch session did, for its caller and its tests."""

    batches: int = 0
    paths: int = 0
    reconciles: int = 0
    requeued_lost: int = 0
    rebuild_steps: int = 0
    last_report: IndexReport | None = None


class WatchService:
    """The producer side of ``memq watch``; ``run`` blocks until ``stop``."""

    def __init__(self, settings: Settings, choice: ProviderChoice,
                 dispatcher: FleetDispatcher | None, *,
                 reconcile_s: float, lost_after_s: float = LOST_AFTER_S,
                 polling: bool | None = None, debounce_s: float | None = None,
                 heartbeat: Path | None = None) -> None:
        self.settings, self.choice, self.dispatcher = settings, choice, dispatcher
        self.submit = dispatcher.embed if dispatcher is not None else None
        self.reconcile_s, self.lost_after_s = reconcile_s, lost_after_s
        self.heartbeat = heartbeat
        self._next_beat = 0.0
        self.stats = WatchStats()
        self.watcher = Watcher(settings, self.on_batch, on_tick=self.on_tick,
                               debounce_s=debounce_s, polling=polling)
        self._next_reconcile = 0.0  # reconcile once at start: heals what happened while down
        self._next_rebuild_step = 0.0

    def _pass(self, paths: set[Path] | None, requeue_after_s: float = REQUEUE_AFTER_S
              ) -> IndexReport:
        # A fresh connection per pass: a rebuild may have swapped another store file in.
        db = connect(self.settings.store.path, want_vectors=self.settings.store.vector_enabled)
        try:
            report = index_once(db, self.settings, self.choice, self.submit, paths=paths,
                                requeue_after_s=requeue_after_s)
            rebuilding = rebuild_info(db) is not None
        finally:
            db.close()
        if report.rebuild_needed and not rebuilding:
            start_rebuild(self.settings, self.choice, "configuration changed")
            log.warning("configuration changed: building a new index beside the live one")
        # (A rebuild already under way is re-targeted by its next step if it is for an older
        # configuration than this one.)
        self.stats.last_report = report
        return report

    def on_batch(self, paths: set[Path]) -> None:
        self.stats.batches += 1
        self.stats.paths += len(paths)
        self._pass(paths)

    def queues_idle(self) -> bool:
        if self.choice.spec is None or self.dispatcher is None:
            return False
        return not any(self.dispatcher.queued(q)
                       for q in (embed_queue(self.choice.spec.name),
                                 store_queue(self.settings.fleet.shard_of(
                                     self.settings.agent_id))))

    def reconcile(self) -> IndexReport:
        """A full pass; pending chunks whose message was lost are queued again (in the live
        store, and in a rebuild's target)."""
        idle = self.queues_idle()
        report = self._pass(None, self.lost_after_s if idle else REQUEUE_AFTER_S)
        self.stats.reconciles += 1
        self.stats.requeued_lost += report.chunks_requeued
        if idle:
            rebuild_step(self.settings, self.choice, self.submit,
                         requeue_after_s=self.lost_after_s)
        return report

    def on_tick(self) -> None:
        now = time.monotonic()
        if self.heartbeat is not None and now >= self._next_beat:
            # Touched from the loop itself: a loop stuck in a pass goes stale, and unhealthy.
            self.heartbeat.touch()
            self._next_beat = now + HEARTBEAT_S
        if self.dispatcher is not None:
            self.dispatcher.check()
        if now >= self._next_reconcile:
            self.reconcile()
            self._next_reconcile = now + self.reconcile_s
        if now >= self._next_rebuild_step:
            self._next_rebuild_step = now + REBUILD_POLL_S
            progress = rebuild_step(self.settings, self.choice, self.submit)
            if progress is not None:
                self.stats.rebuild_steps += 1
                if progress.done:
                    log.warning("rebuilt index swapped in (%d chunks)", progress.chunks)

    def run(self) -> None:
        self.watcher.run()

    def stop(self) -> None:
        self.watcher.stop()


def run_watch(settings: Settings, *, polling: bool | None = None,
              debounce_s: float | None = None, reconcile_minutes: float | None = None,
              heartbeat: Path | None = None,
              on_start: Callable[[WatchService], None] | None = None) -> WatchStats:
    """Watch the workspace until interrupted, with the fleet's broker or an embedded one.

    ``polling`` None follows ``watch.polling``; ``heartbeat`` is a file touched every few
    seconds by the loop, for a container health check.
    """
    choice = choose_provider(settings)
    minutes = reconcile_minutes or settings.sync.interval_minutes or DEFAULT_RECONCILE_MINUTES
    with ExitStack() as stack:
        dispatcher: FleetDispatcher | None = None
        if choice.spec is not None:
            dispatcher = fleet_dispatcher(settings, choice.spec.name, durable=False)
            stack.callback(dispatcher.close)
            if not dispatcher.durable:  # its jobs die with it: let the next run queue them
                stack.callback(_forget_queued, settings)
        service = WatchService(settings, choice, dispatcher,
                               reconcile_s=minutes * 60, polling=polling, debounce_s=debounce_s,
                               heartbeat=heartbeat)
        if on_start is not None:
            on_start(service)
        service.run()
        return service.stats


def _forget_queued(settings: Settings) -> None:
    with Memory(settings=settings, in_memory=False) as memory:
        memory.forget_queued()
