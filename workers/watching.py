"""``memq watch``: the file watcher wired to the producer and the queues, plus reconcile.

Every settled batch of events becomes a targeted producer pass (only the paths that changed)
that queues its embedding work. A periodic full pass, the *reconcile*, heals what events and
queues can lose: events the watcher never saw (it was down, the kernel's queue overflowed),
queue messages that vanished (Redis restarted without persistence), and jobs whose worker
crashed. A pending chunk counts as lost when both its queues are empty and it was queued more
than ``lost_after_s`` ago: nothing can still be carrying it except a job being worked on right
now, and embedding that one twice is harmless (every write is idempotent). A rebuild under way
(a configuration change, ``memq reindex``) is driven to its swap from the same loop.

``memq watch --all`` follows the configuration too (:class:`LiveRoster`): every few seconds a
``stat`` of the config file and its ``memoriesDir`` folder says whether its memories may have
changed; then it reads them again, starts watching the new ones and stops watching the ones
that are gone, leaving the others running.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import Settings
from pipeline.embeddings.registry import ProviderChoice, choose_provider
from pipeline.errors import DeletionRefused, FilesElsewhere, FleetError
from pipeline.fleet.broker import FleetDispatcher
from pipeline.fleet.placement import store_is_here
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
#: How often a running ``watch --all`` looks whether its configuration's memories changed.
ROSTER_CHECK_S = 2.0


#: Called after every pass of ``memq watch`` that changed something: the memory and its
#: report (counts only; never memory text).
PassHook = Callable[[str, IndexReport], None]


def changed_something(report: IndexReport) -> bool:
    """Whether a pass changed the index: files changed or deleted, or chunks queued."""
    return bool(report.changed or report.deleted or report.chunks_queued)


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
                 on_pass: PassHook | None = None) -> None:
        self.settings, self.choice, self.dispatcher = settings, choice, dispatcher
        self.on_pass = on_pass
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
        return self._passed(report)

    def _passed(self, report: IndexReport) -> IndexReport:
        """Record a pass's ``report``, and tell ``on_pass`` when it changed something."""
        self.stats.last_report = report
        if self.on_pass is not None and changed_something(report):
            self.on_pass(self.settings.agent_id, report)
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



class ProducerService(WatchService):
    """``memq watch`` of a memory whose store is on another host, on the host that holds its
    files: each batch of changes, and each reconcile, is a producer pass here that sends what
    changed to the shard's writer (:meth:`pipeline.remote.RemoteMemory.produce`). This host
    needs no model and creates no store; the shard's host embeds, rebuilds and requeues."""

    def __init__(self, settings: Settings, *, reconcile_s: float,
                 polling: bool | None = None, debounce_s: float | None = None,
                 on_pass: PassHook | None = None) -> None:
        from pipeline.remote import RemoteMemory  # Celery loads only when used

        self.remote = RemoteMemory(settings)
        super().__init__(settings, ProviderChoice(None, None, "the store is on another host"),
                         None, reconcile_s=reconcile_s, polling=polling,
                         debounce_s=debounce_s, on_pass=on_pass)
        self.qmd = None  # the shard's host runs QMD's jobs

    def _pass(self, paths: set[Path] | None, requeue_after_s: float = REQUEUE_AFTER_S
              ) -> IndexReport:
        _, report = self.remote.produce(paths=sorted(paths) if paths is not None else None,
                                        interactive=paths is not None, origin="watch")
        return self._passed(report)

    def queues_idle(self) -> bool:
        return False  # the shard's writer requeues what was lost, as its passes run

    def on_tick(self) -> None:
        now = time.monotonic()
        if now >= self._next_reconcile:
            self.reconcile()
            self._next_reconcile = now + self.reconcile_s

    def reconcile(self) -> IndexReport:
        report = self._pass(None)
        self.stats.reconciles += 1
        return report

    def record_mode(self) -> None:
        return None  # the store is not here

    def close(self) -> None:
        self.remote.close()


@dataclass(frozen=True)
class Reading:
    """One reading of the memories a configuration names, as ``memq watch --all`` follows
    them: each by name with its settings, or the reason it cannot be watched (workspace gone,
    turned off); and ``changed``, which says (with a few ``stat`` calls) whether reading again
    could give another answer (the config file or its ``memoriesDir`` folder changed, a
    missing workspace appeared)."""

    memories: tuple[tuple[str, Settings | str], ...]
    changed: Callable[[], bool]

    @property
    def watchable(self) -> list[Settings]:
        """The settings of every memory that can be watched, in order."""
        return [s for _, s in self.memories if not isinstance(s, str)]

    @property
    def unwatchable(self) -> dict[str, str]:
        """Why each memory that cannot be watched cannot, by name."""
        return {name: s for name, s in self.memories if isinstance(s, str)}


class LiveRoster:
    """The memories a :class:`WatchGroup` follows: read once now, and again when the last
    reading says it changed (looked at every ``check_s`` at most)."""

    def __init__(self, read: Callable[[], Reading], check_s: float = ROSTER_CHECK_S) -> None:
        self._read, self.check_s = read, check_s
        self.current = read()
        self._next = time.monotonic() + check_s
        #: The reason last given for each memory that cannot be watched (named once each).
        self.named = dict(self.current.unwatchable)
        self._failed: str | None = None

    def poll(self) -> Reading | None:
        """A new reading when one is due and the configuration changed, else None. A
        configuration that cannot be read (a syntax error, half-saved) is logged once and
        the memories are watched on as they were; it is read again at the next check."""
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + self.check_s
        if not self.current.changed():
            return None
        try:
            reading = self._read()
        except Exception as exc:  # keep watching what is watched; say so once
            if str(exc) != self._failed:
                log.warning("cannot read the configuration again, watching on as before: %s",
                            exc)
                self._failed = str(exc)
            return None
        self._failed = None
        self.current = reading
        return reading

    def check_now(self) -> None:
        """Make the next :meth:`poll` look at the configuration whatever the time."""
        self._next = 0.0

    def newly_unwatchable(self) -> dict[str, str]:
        """The memories of the current reading that cannot be watched and were not named yet
        for that reason (each such reason is remembered: the next call leaves it out)."""
        fresh = {n: why for n, why in self.current.unwatchable.items()
                 if self.named.get(n) != why}
        self.named = dict(self.current.unwatchable)
        return fresh


class WatchGroup:
    """The watch services of many memories, driven by one loop in one thread.

    Each memory keeps its own watcher (its own debounce, reconcile and rebuild steps); one that
    cannot set up native file events (inotify's instance or watch limit, a network file
    system) polls its folders instead, and a failing pass of one memory is logged without
    stopping the others. ``heartbeat`` is touched by the loop itself.

    With a ``roster`` (and ``build``, which makes the service of a memory), the group follows
    the configuration: a memory that appears in it is watched (``build`` is called for it), one
    that leaves it (or can no longer be watched) is stopped and dropped; the others run on
    untouched.
    """

    def __init__(self, services: list[WatchService], *, heartbeat: Path | None = None,
                 tick_s: float = 0.1, roster: LiveRoster | None = None,
                 build: Callable[[Settings], WatchService] | None = None) -> None:
        self.services, self.heartbeat, self.tick_s = services, heartbeat, tick_s
        self.roster, self.build = roster, build
        self._stop = threading.Event()
        self._next_beat = 0.0
        self._started: list[WatchService] = []

    def run(self) -> None:
        """Start every watcher, then step them all until :meth:`stop`."""
        try:
            for service in self.services:
                self._start(service)
            while not self._stop.wait(self.tick_s):
                self._beat()
                self._follow()
                for service in self.services:
                    try:
                        service.watcher.step()
                    except (DeletionRefused, FilesElsewhere) as refused:  # nothing written
                        log.error("watching %s: %s", service.settings.agent_id, refused)
                    except FleetError:
                        raise
                    except Exception:  # one memory's failure must not stop the others
                        self._failed(service)
        finally:
            for service in self._started:
                service.watcher.observer.stop()
            for service in self._started:
                service.watcher.observer.join(timeout=5)
            for service in self.services:
                service.close()

    def _failed(self, service: WatchService) -> None:
        """Log a failed turn of ``service``: briefly when its workspace is gone (removed with
        its memory, most likely: the roster is then looked at right away)."""
        workspace = service.settings.workspace
        if workspace.is_dir():
            log.exception("watching %s failed this turn", service.settings.agent_id)
            return
        log.warning("watching %s failed this turn: its workspace %s is gone",
                    service.settings.agent_id, workspace)
        if self.roster is not None:
            self.roster.check_now()

    def _start(self, service: WatchService) -> None:
        service.watcher.start()
        self._started.append(service)
        service.record_mode()

    def _follow(self) -> None:
        """Start and stop services as the configuration's memories changed (when it did)."""
        if self.roster is None or self.build is None:
            return
        reading = self.roster.poll()
        if reading is None:
            return
        wanted = dict(reading.memories)
        dropped = set()
        for service in list(self.services):
            name = service.settings.agent_id
            if name not in wanted or isinstance(wanted[name], str):
                self._drop(service, str(wanted.get(name, "no longer in the configuration")))
                dropped.add(name)
        for name, why in self.roster.newly_unwatchable().items():
            if name not in dropped:
                log.warning("not watching %s: %s", name, why)
        running = {s.settings.agent_id for s in self.services}
        for settings in reading.watchable:
            if settings.agent_id not in running:
                self._add(settings)

    def _add(self, settings: Settings) -> None:
        assert self.build is not None
        service: WatchService | None = None
        try:
            service = self.build(settings)
            self.services.append(service)
            self._start(service)
        except FleetError:
            raise
        except Exception as exc:  # one memory that cannot be watched must not stop the rest
            if service is not None:
                self._drop(service, None)
            log.warning("not watching %s: %s", settings.agent_id, exc)
            return
        log.warning("now watching %s (%s)", settings.agent_id, settings.workspace)

    def _drop(self, service: WatchService, why: str | None) -> None:
        """Stop watching ``service``'s memory and forget it (``why`` is logged)."""
        self.services.remove(service)
        if service in self._started:
            self._started.remove(service)
            with contextlib.suppress(Exception):
                service.watcher.observer.stop()
                service.watcher.observer.join(timeout=5)
        try:
            service.close()
        finally:
            if why is not None:
                log.warning("stopped watching %s: %s", service.settings.agent_id, why)

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
              on_start: Callable[[WatchGroup], None] | None = None,
              roster: LiveRoster | None = None,
              on_pass: PassHook | None = None) -> dict[str, WatchStats]:
    """Watch the workspaces of ``memories`` until interrupted, with the fleet's broker (one
    connection shared by all) or embedded fleets (one per provider and shard).

    ``polling`` None follows each memory's ``watch.polling``; ``heartbeat`` is a file touched
    every few seconds by the loop, for a container health check. A memory turned off
    (``enabled = false``) is not watched. With a ``roster`` (``memq watch --all``), memories
    added to the configuration later are watched too and removed ones are stopped.
    ``on_pass`` hears of every pass that changed something (:data:`PassHook`).
    """
    for off in (m for m in memories if not m.enabled):
        log.warning("not watching %s: memory is disabled (enabled = false)", off.agent_id)
    memories = [m for m in memories if m.enabled]
    with ExitStack() as stack:
        dispatchers: dict[tuple[str, ...], FleetDispatcher] = {}

        def build(settings: Settings) -> WatchService:
            minutes = (reconcile_minutes or settings.sync.interval_minutes
                       or DEFAULT_RECONCILE_MINUTES)
            if not store_is_here(settings):
                return ProducerService(settings, reconcile_s=minutes * 60, polling=polling,
                                       debounce_s=debounce_s, on_pass=on_pass)
            choice = choose_provider(settings)
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
            return WatchService(settings, choice, dispatcher, reconcile_s=minutes * 60,
                                polling=polling, debounce_s=debounce_s, on_pass=on_pass)

        group = WatchGroup([build(settings) for settings in memories], heartbeat=heartbeat,
                           roster=roster, build=build)
        if on_start is not None:
            on_start(group)
        group.run()
        return group.stats


def _forget_queued(settings: Settings) -> None:
    with Memory(settings=settings, in_memory=False) as memory:
        memory.forget_queued()
