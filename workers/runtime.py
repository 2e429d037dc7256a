"""What a worker process keeps between tasks, in one object: the settings of each memory it
serves, the embedding providers it built, the stores it writes, and its clients of the broker.

Celery's tasks are module-level functions, so they reach it through :data:`runtime`, the one
instance per process (as they reach the app through ``workers.app.app``). Its parts are built on
first use in the process that uses them, and thrown away in a freshly forked pool process
(a connection or a native model must never be shared across a fork). What builds them (the
providers, the stores, :class:`~memq.Memory`: NumPy, pydantic, the search) is imported then
too: every worker imports this module at start, and an idle worker and its pool process keep
none of it.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis
from celery import Task
from celery.signals import worker_process_init

from pipeline.config import Settings, load_settings, read_roster
from pipeline.config.roster import Stamp, stamp_of, stamps_changed
from pipeline.errors import MessageRefused
from pipeline.fleet.broker import FleetDispatcher, redis_client
from pipeline.fleet.job_log import JobLog, store_key
from pipeline.routing import shard_of_queue
from pipeline.store.engine import Database
from workers.app import app

if TYPE_CHECKING:  # imported where they are built (see above)
    from pipeline.embeddings.base import EmbeddingProvider
    from pipeline.embeddings.providers import ProviderPool
    from pipeline.memory import Memory
    from pipeline.messages import ProviderSpec
    from pipeline.store.results import StorePool
    from workers.reader import Reader

log = logging.getLogger(__name__)


class WorkerRuntime:
    """One worker process's state (thread-safe; built lazily, reset after a fork)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._settings: dict[str, Settings] = {}
        self._own: Settings | None = None
        self._roster: list[str] | None = None
        self._stamps: tuple[Stamp, ...] = ()
        self._providers: ProviderPool | None = None
        self._stores: StorePool | None = None
        self._fleet: FleetDispatcher | None = None
        self._redis: redis.Redis | None = None
        self._redis_known = False
        self._warm: WarmMemories | None = None
        self._reader: Reader | None = None
        self._jobs: dict[tuple[str, str | None], JobLog] = {}

    def settings_for(self, memory: str) -> Settings:
        """The settings of ``memory``, from this worker's own environment and config file.

        When that config lists its memories (an openclaw.json's ``agents.list``, memq's
        ``memories`` or ``memoriesDir``), a memory it does not list is refused
        (:class:`MessageRefused`): a message cannot make a worker invent one. Settings are kept
        between messages and read again when the config file they came from changes (its
        mtime, size or inode) or its ``memoriesDir`` folder does (a sub-folder added or
        removed), so a memory added to the config is served without restarting the worker.
        """
        with self._lock:
            self._follow_config()
            if memory not in self._settings:
                own = self._own_settings()
                roster = self._listed(own)
                if roster and memory not in roster:
                    raise MessageRefused(f"memory {memory!r} is not one of this fleet's "
                                         f"({len(roster)} listed in {own.config_file})")
                self._settings[memory] = (own if own.agent_id == memory
                                          else load_settings(agent=memory))
            return self._settings[memory]

    def _follow_config(self) -> None:
        """Forget every memory's settings when the config file they came from, or its
        ``memoriesDir`` folder, changed (a ``stat`` each: cheap enough for every message)."""
        if self._own is not None and stamps_changed(self._stamps):
            self._settings.clear()
            self._own, self._roster, self._stamps = None, None, ()

    def _own_settings(self) -> Settings:
        if self._own is None:
            self._own = load_settings()
            if self._own.config_file is not None:
                self._stamps = (stamp_of(self._own.config_file),)
        return self._own

    def _listed(self, own: Settings) -> list[str]:
        if self._roster is None:
            if own.config_file is None:
                self._roster = []
            else:
                read = read_roster(own.config_file, os.environ)
                # The file's stamp from when ``own`` was read wins: a change in between is
                # then seen by the next message.
                self._stamps = tuple({s[0]: s for s in (*read.stamps, *self._stamps)}.values())
                self._roster = read.served
        return self._roster

    def memories(self) -> list[str]:
        """The memories this worker's configuration lists (its own memory when it lists
        none)."""
        with self._lock:
            self._follow_config()
            own = self._own_settings()
            return list(self._listed(own)) or [own.agent_id]

    def default_memory(self) -> str:
        """The memory this worker's own configuration names (``agentId``, ``main`` by default)."""
        with self._lock:
            self._follow_config()
            return self._own_settings().agent_id

    def provider(self, spec: ProviderSpec, settings: Settings) -> EmbeddingProvider:
        """The provider ``spec`` names, built once per process with this host's settings."""
        with self._lock:
            if self._providers is None:
                from pipeline.embeddings.providers import ProviderPool

                self._providers = ProviderPool()
        return self._providers.get(spec, settings)

    def store(self, path: str, settings: Settings) -> Database | None:
        """The open store at ``path`` (None when that generation is gone)."""
        with self._lock:
            if self._stores is None:
                from pipeline.store.results import StorePool

                self._stores = StorePool(want_vectors=settings.store.want_vectors)
        return self._stores.get(path)

    def readable(self, memory: str, shard: int | None) -> Settings:
        """The settings of ``memory`` for a read that came in on ``shard``'s query queue: as
        :meth:`served` (a reader never makes up settings for a name its configuration does
        not give)."""
        return self.served(memory, shard)

    def warm(self, memory: str, settings: Settings) -> WarmMemory:
        """A reader's warm :class:`~memq.Memory` of ``memory`` (``with`` it while using
        it): kept open between reads, the least recently used closed first."""
        from pipeline.memory import Memory

        with self._lock:
            if self._warm is None:
                self._warm = WarmMemories(lambda s: Memory(settings=s, dispatcher=self.fleet(),
                                                           local=True, jobs=self.jobs(s)))
        return self._warm.use(memory, settings)

    def reader(self) -> Reader:
        """This process's :class:`~workers.reader.Reader` (built on first use: a worker
        that serves no read has none)."""
        from workers.reader import Reader

        with self._lock:
            if self._reader is None:
                self._reader = Reader()
            return self._reader

    def close_reader(self) -> None:
        """Stop this process's reader's threads (the worker stops); a later read builds
        another."""
        with self._lock:
            reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()

    def jobs(self, settings: Settings, *, scoped: bool = True) -> JobLog:
        """The job log of this host (``settings.result_backend``), kept open: of the jobs of
        the memory's store (``scoped``), else of every job."""
        store = store_key(settings.store.path) if scoped else None
        key = (settings.result_backend, store)
        with self._lock:
            log = self._jobs.get(key)
            if log is None:
                log = self._jobs[key] = JobLog(settings.result_backend,
                                               keep_days=settings.fleet.jobs_keep_days,
                                               store=store)
            return log

    def job_log(self) -> JobLog:
        """The job log of this worker's app (its result backend), of every store: where a job
        refused before its memory's settings were known is recorded."""
        url = str(app.conf.result_backend)
        with self._lock:
            log = self._jobs.get((url, None))
            if log is None:
                keep = app.conf.result_expires
                log = self._jobs[(url, None)] = JobLog(
                    url, keep_days=max(1, keep.days) if keep is not None else 7)
            return log

    def served(self, memory: str, shard: int | None) -> Settings:
        """The settings of ``memory`` for a writer task that came in on ``shard``'s queue;
        :class:`MessageRefused` when the memory belongs to another shard, or is not one this
        worker's configuration gives (:meth:`settings_for`; with a one-memory configuration,
        any but that memory: a message never makes a worker invent one)."""
        settings = self.settings_for(memory)
        with self._lock:
            own = self._own_settings()
            listed = self._listed(own)
        if not listed and memory != own.agent_id:
            raise MessageRefused(f"memory {memory!r} is not this host's memory "
                                 f"({own.agent_id!r})")
        own = settings.fleet.shard_of(memory)
        if shard is not None and own != shard:
            raise MessageRefused(f"memory {memory!r} belongs to writer shard {own}, "
                                 f"not {shard}")
        return settings

    def writable_store(self, memory: str, store: str, shard: int | None) -> Database | None:
        """The store a message for ``memory`` may write: refused (:class:`MessageRefused`)
        unless this worker serves ``memory``, the memory belongs to the ``shard`` the message
        came in on, and ``store`` is that memory's own store file (or one of its generations).
        A message that names another memory's file, or arrives on the wrong shard, writes
        nothing."""
        settings = self.served(memory, shard)
        # With one memory there is no other memory's file to protect (and a writer started
        # without the producer's store path still writes where the producer indexed).
        from pipeline.ingest.reindex import is_generation_of

        if self._roster and not is_generation_of(settings.store.path, store):
            raise MessageRefused(f"{store} is not a store of memory {memory!r}")
        return self.store(store, settings)

    def fleet(self) -> FleetDispatcher:
        """Sends this worker's follow-up work (results, retries, polls) through its app."""
        with self._lock:
            if self._fleet is None:
                self._fleet = FleetDispatcher(str(app.conf.broker_url), app=app)
            return self._fleet

    def redis(self) -> redis.Redis | None:
        """The broker's Redis, where the fleet-wide rate limits are counted and a provider's
        pause is shared; None (with a warning, once) on another broker."""
        with self._lock:
            if not self._redis_known:
                url = str(app.conf.broker_url or "")
                try:
                    self._redis = redis_client(url, timeout=10.0)
                except ValueError:
                    log.warning("rate limits need a Redis broker; %s is not one: not enforced",
                                url.split(":", 1)[0])
                self._redis_known = True
            return self._redis

    def memory(self, name: str) -> Memory:
        """A :class:`~memq.Memory` for an index job of ``name`` on this host (which holds
        its store), sending its work to the fleet and recording it in this host's job log
        (the caller closes it)."""
        from pipeline.memory import Memory

        settings = self.settings_for(name)
        return Memory(settings=settings, dispatcher=self.fleet(), in_memory=False, local=True,
                      jobs=self.jobs(settings))

    def close(self) -> None:
        """Free native models and connections (at process exit; llama.cpp's finalizer fails
        after interpreter teardown)."""
        if self._providers is not None:
            self._providers.close()
        if self._stores is not None:
            self._stores.close()
        if self._warm is not None:
            self._warm.close()
        self.close_reader()
        for log in self._jobs.values():
            log.close()

    def after_fork(self) -> None:
        """Forget what the parent process built: a forked child builds its own."""
        with self._lock:
            self._reset()


class WarmMemory:
    """One use of a warm memory (:meth:`WarmMemories.use`): ``with`` gives the
    :class:`~memq.Memory`; it is not closed while in use."""

    def __init__(self, pool: WarmMemories, name: str, settings: Settings) -> None:
        self.pool, self.name, self.settings = pool, name, settings
        self._entry: list[Any] | None = None

    def __enter__(self) -> Memory:
        self._entry = self.pool._acquire(self.name, self.settings)
        return self._entry[0]

    def __exit__(self, *exc: object) -> None:
        if self._entry is not None:
            self.pool._release(self._entry)


class WarmMemories:
    """A reader's open :class:`~memq.Memory` objects by name (their models, in-memory
    copies and connections stay warm between reads), at most ``max_open``: the least recently
    used idle one is closed first; one whose settings changed (the config was edited) is
    replaced; one still in use by another thread is closed when its last user is done."""

    def __init__(self, build: Callable[[Settings], Memory], max_open: int | None = None
                 ) -> None:
        """``max_open``: :data:`pipeline.store.results.MAX_OPEN_STORES` when not given."""
        from pipeline.store.results import MAX_OPEN_STORES

        self.build = build
        self.max_open = max(1, MAX_OPEN_STORES if max_open is None else max_open)
        self._open: OrderedDict[str, list[Any]] = OrderedDict()  # name -> [memory, users, gone]
        self._lock = threading.Lock()

    def use(self, name: str, settings: Settings) -> WarmMemory:
        return WarmMemory(self, name, settings)

    def _acquire(self, name: str, settings: Settings) -> list[Any]:
        with self._lock:
            entry = self._open.get(name)
            if entry is not None and entry[0].settings is not settings:
                self._retire(self._open.pop(name))
                entry = None
            if entry is None:
                entry = self._open[name] = [self.build(settings), 0, False]
            entry[1] += 1
            self._open.move_to_end(name)
            idle = [n for n, e in self._open.items() if e[1] == 0]
            while len(self._open) > self.max_open and idle:
                self._retire(self._open.pop(idle.pop(0)))
            return entry

    def _release(self, entry: list[Any]) -> None:
        with self._lock:
            entry[1] -= 1
            if entry[2] and entry[1] == 0:
                entry[0].close()

    @staticmethod
    def _retire(entry: list[Any]) -> None:
        """Close a memory now, or when its last user is done (the caller holds the lock)."""
        entry[2] = True
        if entry[1] == 0:
            entry[0].close()

    def __len__(self) -> int:
        return len(self._open)

    def close(self) -> None:
        with self._lock:
            entries, self._open = list(self._open.values()), OrderedDict()
            for entry in entries:
                self._retire(entry)


runtime = WorkerRuntime()


def arrival_shard(task: Task) -> int | None:
    """The writer shard whose queue the running task's message came from (None when it did
    not come through a ``store.<shard>``/``control.<shard>`` queue, e.g. run in place)."""
    delivery = task.request.delivery_info or {}
    return shard_of_queue(str(delivery.get("routing_key") or ""))


def in_child_process(fn: Callable[..., object], *args: object, timeout: float = 120.0
                     ) -> bool:
    """Run ``fn(*args)`` in a forked child process and wait for it; True when it returned.

    What it imports and builds dies with the child instead of staying in this worker: a
    writer's look at its job log when it starts (:func:`workers.reading.end_cut_off_jobs`)
    loads SQLAlchemy and a database engine that an idle writer then never needs (and its pool
    process, forked after, would pay for again). Call it before the worker connects to
    anything it uses afterwards (Celery's ``worker_init``): the child touches none of this
    process's connections and leaves by ``os._exit`` (no atexit, no worker shutdown). A child
    still running after ``timeout`` seconds is killed."""
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            fn(*args)
            code = 0
        except BaseException:
            log.exception("%s failed", getattr(fn, "__name__", fn))
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):  # a closed stream: nothing to flush
                    stream.flush()
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            if code != 0:
                log.warning("%s failed in its child process (exit %d)",
                            getattr(fn, "__name__", fn), code)
            return code == 0
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            log.warning("%s took more than %.0f s: stopped", getattr(fn, "__name__", fn),
                        timeout)
            return False
        time.sleep(0.01)


@worker_process_init.connect
def _fresh_runtime_in_pool_process(**_: Any) -> None:
    runtime.after_fork()
atexit.register(runtime.close)
