"""What a worker process keeps between tasks, in one object: the settings of each memory it
serves, the embedding providers it built, the stores it writes, and its clients of the broker.

Celery's tasks are module-level functions, so they reach it through :data:`runtime`, the one
instance per process (as they reach the app through ``workers.app.app``). Its parts are built on
first use in the process that uses them, and thrown away in a freshly forked pool process
(a connection or a native model must never be shared across a fork).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from typing import Any

import redis
from celery import Task
from celery.signals import worker_process_init

from pipeline.config import Settings, load_settings, read_roster
from pipeline.config.roster import Stamp, stamp_of, stamps_changed
from pipeline.embeddings.base import EmbeddingProvider
from pipeline.embeddings.providers import ProviderPool
from pipeline.errors import MessageRefused
from pipeline.fleet import FleetDispatcher, redis_client
from pipeline.ingest.reindex import is_generation_of
from pipeline.memory import Memory
from pipeline.messages import ProviderSpec
from pipeline.routing import shard_of_queue
from pipeline.store.engine import Database
from pipeline.store.results import StorePool
from workers.app import app

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
        self._providers = ProviderPool()
        self._stores: StorePool | None = None
        self._fleet: FleetDispatcher | None = None
        self._redis: redis.Redis | None = None
        self._redis_known = False

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

    def default_memory(self) -> str:
        """The memory this worker's own configuration names (``agentId``, ``main`` by default)."""
        with self._lock:
            self._follow_config()
            return self._own_settings().agent_id

    def provider(self, spec: ProviderSpec, settings: Settings) -> EmbeddingProvider:
        """The provider ``spec`` names, built once per process with this host's settings."""
        return self._providers.get(spec, settings)

    def store(self, path: str, settings: Settings) -> Database | None:
        """The open store at ``path`` (None when that generation is gone)."""
        with self._lock:
            if self._stores is None:
                self._stores = StorePool(want_vectors=settings.store.want_vectors)
        return self._stores.get(path)

    def served(self, memory: str, shard: int | None) -> Settings:
        """The settings of ``memory`` for a writer task that came in on ``shard``'s queue;
        :class:`MessageRefused` when the memory belongs to another shard."""
        settings = self.settings_for(memory)
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
        """A :class:`~pipeline.Memory` for an index job of ``name``, sending its work to the
        fleet (the caller closes it)."""
        return Memory(settings=self.settings_for(name), dispatcher=self.fleet(), in_memory=False)

    def close(self) -> None:
        """Free native models and connections (at process exit; llama.cpp's finalizer fails
        after interpreter teardown)."""
        self._providers.close()
        if self._stores is not None:
            self._stores.close()

    def after_fork(self) -> None:
        """Forget what the parent process built: a forked child builds its own."""
        with self._lock:
            self._reset()


runtime = WorkerRuntime()


def arrival_shard(task: Task) -> int | None:
    """The writer shard whose queue the running task's message came from (None when it did
    not come through a ``store.<shard>``/``control.<shard>`` queue, e.g. run in place)."""
    delivery = task.request.delivery_info or {}
    return shard_of_queue(str(delivery.get("routing_key") or ""))


@worker_process_init.connect
def _fresh_runtime_in_pool_process(**_: Any) -> None:
    runtime.after_fork()
atexit.register(runtime.close)
