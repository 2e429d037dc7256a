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
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import Settings
from pipeline.embeddings.registry import ProviderChoice, choose_provider
from pipeline.errors import FleetError
from pipeline.fleet import FleetDispatcher
from pipeline.ingest.producer import REQUEUE_AFTER_S, IndexReport, index_once
from pipeline.ingest.reindex import rebuild_info, rebuild_step, start_rebuild
from pipeline.ingest.watcher import Watcher
from pipeline.memory import Memory
from pipeline.qmd import QmdBackend
from pipeline.qmd.jobs import QmdJobs
from pipeline.routing import embed_queue, store_queue
from pipeline.store.engine import connect
from pipeline.store.schema import ensure_schema, set_meta, transaction
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
                 polling: bool | None = None, debounce_s: float | None = None) -> None:
        self.settings, self.choice, self.dispatcher = settings, choice, dispatcher
        self.submit = dispatcher.embed if dispatcher is not None else None
        self.reconcile_s, self.lost_after_s = reconcile_s, lost_after_s
        self.stats = WatchStats()
        self.watcher = Watcher(settings, self.on_batch, on_tick=self.on_tick,
                               debounce_s=debounce_s, polling=polling)
        self._next_reconcile = 0.0  # reconcile once at start: heals what happened while down
        self._alone = WatchGroup([self])
        self._next_rebuild_step = 0.0
        # backend "qmd": QMD follows the files too (its update jobs, on the owner's queue)
        self.qmd = (QmdJobs(QmdBackend(settings), self._send_qmd_job)
                    if settings.backend == "qmd" else None)

    def _send_qmd_job(self, reason: str) -> bool:
        if self.dispatcher is None:
            return False
        return self.dispatcher.qmd_job(self.settings.agent_id, reason,
                                       shard=self.settings.fleet.shard_of(self.settings.agent_id))

    def _pass(self, paths: set[Path] | None, requeue_after_s: float = REQUEUE_AFTER_S
              ) -> IndexReport:
        # A fresh connection per pass: a rebuild may have swapped another store file in.
        db = connect(self.settings.store.path, want_vectors=self.settings.store.want_vectors)
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
        report = self._pass(paths)
        if self.qmd is not None and (report.changed or report.deleted):
            self.qmd.ask("changed")

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
        if self.qmd is not None and (report.changed or report.deleted):
            self.qmd.ask("changed")
        self.stats.reconciles += 1
        self.stats.requeued_lost += report.chunks_requeued
        if idle:
            rebuild_step(self.settings, self.choice, self.submit,
                         requeue_after_s=self.lost_after_s)
        return report

    def run(self) -> None:
        """Watch this one memory until :meth:`stop` (a :class:`WatchGroup` of one)."""
        self._alone.run()

    def stop(self) -> None:
        self._alone.stop()

    def close(self) -> None:
        """Finish what this service runs besides the watcher (a QMD job in flight)."""
        if self.qmd is not None:
            self.qmd.close()

    def record_mode(self) -> None:
        """Note in the store how this memory's changes are followed (``memq status`` shows
        it): native events, or polling and why."""
        db = connect(self.settings.store.path, want_vectors=self.settings.store.want_vectors)
        try:
            ensure_schema(db)
            with transaction(db):
                set_meta(db, "watch", {"mode": "polling" if self.watcher.polling else "events",
                                       "reason": self.watcher.polling_reason,
                                       "since": time.time()})
        finally:
            db.close()

    def on_tick(self) -> None:
        now = time.monotonic()
        if self.dispatcher is not None:
            self.dispatcher.check()
        if self.qmd is not None:
            self.qmd.ask("due")  # looked at every 30 s at most
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



class WatchGroup:
    """The watch services of many memories, driven by one loop in one thread.

    Each memory keeps its own watcher (its own debounce, reconcile and rebuild steps); one that
    cannot set up native file events (inotify's instance or watch limit, a network file
    system) polls its folders instead, and a failing pass of one memory is logged without
    stopping the others. ``heartbeat`` is touched by the loop itself.
    """

    def __init__(self, services: list[WatchService], *, heartbeat: Path | None = None,
                 tick_s: float = 0.1) -> None:
        self.services, self.heartbeat, self.tick_s = services, heartbeat, tick_s
        self._stop = threading.Event()
        self._next_beat = 0.0

    def run(self) -> None:
        """Start every watcher, then step them all until :meth:`stop`."""
        started: list[WatchService] = []
        try:
            for service in self.services:
                service.watcher.start()
                service.record_mode()
                started.append(service)
            while not self._stop.wait(self.tick_s):
                self._beat()
                for service in self.services:
                    try:
                        service.watcher.step()
                    except FleetError:
                        raise
                    except Exception:  # one memory's failure must not stop the others
                        log.exception("watching %s failed this turn", service.settings.agent_id)
        finally:
            for service in started:
                service.watcher.observer.stop()
            for service in started:
                service.watcher.observer.join(timeout=5)
            for service in self.services:
                service.close()

    def _beat(self) -> None:
        now = time.monotonic()
        if self.heartbeat is not None and now >= self._next_beat:
            self.heartbeat.touch()
            self._next_beat = now + HEARTBEAT_S

    def stop(self) -> None:
        self._stop.set()

    @property
    def stats(self) -> dict[str, WatchStats]:
        """Each memory's watch statistics, by name."""
        return {s.settings.agent_id: s.stats for s in self.services}


def run_watch(memories: Sequence[Settings], *, polling: bool | None = None,
              debounce_s: float | None = None, reconcile_minutes: float | None = None,
              heartbeat: Path | None = None,
              on_start: Callable[[WatchGroup], None] | None = None) -> dict[str, WatchStats]:
    """Watch the workspaces of ``memories`` until interrupted, with the fleet's broker (one
    connection shared by all) or embedded fleets (one per provider and shard).

    ``polling`` None follows each memory's ``watch.polling``; ``heartbeat`` is a file touched
    every few seconds by the loop, for a container health check. A memory turned off
    (``enabled = false``) is not watched.
    """
    for off in (m for m in memories if not m.enabled):
        log.warning("not watching %s: memory is disabled (enabled = false)", off.agent_id)
    memories = [m for m in memories if m.enabled]
    with ExitStack() as stack:
        dispatchers: dict[tuple[str, ...], FleetDispatcher] = {}
        services = []
        for settings in memories:
            choice = choose_provider(settings)
            minutes = (reconcile_minutes or settings.sync.interval_minutes
                       or DEFAULT_RECONCILE_MINUTES)
            dispatcher: FleetDispatcher | None = None
            if choice.spec is not None:
                key = ((settings.broker_url,) if settings.broker_url else
                       ("embedded", choice.spec.name,
                        str(settings.fleet.shard_of(settings.agent_id))))
                if key not in dispatchers:
                    dispatchers[key] = fleet_dispatcher(settings, choice.spec.name,
                                                        durable=False)
                    stack.callback(dispatchers[key].close)
                dispatcher = dispatchers[key]
                if not dispatcher.durable:  # its jobs die with it: let the next run queue them
                    stack.callback(_forget_queued, settings)
            services.append(WatchService(settings, choice, dispatcher, reconcile_s=minutes * 60,
                                         polling=polling, debounce_s=debounce_s))
        group = WatchGroup(services, heartbeat=heartbeat)
        if on_start is not None:
            on_start(group)
        group.run()
        return group.stats


def _forget_queued(settings: Settings) -> None:
    with Memory(settings=settings, in_memory=False) as memory:
        memory.forget_queued()
