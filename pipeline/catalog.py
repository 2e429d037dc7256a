"""Every memory of a configuration, and the stores left behind by memories that are gone.

    catalog = MemoryCatalog(config_file="openclaw.json")
    catalog.names()               # ["main", "work", ...]
    catalog.settings("Work")      # the settings of "work" (any spelling of its id)
    catalog.describe()            # name, workspace, store, size, state, last index of each
    catalog.prune()               # delete the orphaned stores memq made

A configuration names its memories in an openclaw.json (``agents.list``/``agents.entries``) or
in memq's own file (``memories``, ``memoriesDir``); its own memory (the default) is always one.
A name it does not list raises :class:`~pipeline.errors.UnknownMemory`.

A memory's **state**: ``ok`` (indexed), ``not indexed`` (no store yet, or never finished a
pass), ``orphaned`` (its workspace folder is gone and nothing serves its store), ``foreign``
(its store file records another memory as its owner, and is refused) or ``unreachable`` (its
store is on another host and no reader of its shard answered).

With a fleet (a broker configured) every host gives the same answer: the fleet is asked. A
memory whose store is on another host (:func:`~pipeline.fleet.placement.store_is_here`) is described
by its shard's reader (``status``), and every memory names the node that serves it
(``servedBy``: the reader that answered, else a live reader or writer of its shard). A store
whose shard is claimed in this data dir (``<data dir>/shards/<n>.json``) or served by a live
writer or reader is never orphaned: on a store host the Markdown is elsewhere, so a missing
workspace says nothing there.

An **orphaned store** is a store under memq's data dir
(:func:`~pipeline.config.paths.data_dir`) whose recorded owner's workspace is gone and whose
shard nothing serves (no claim here, no live writer or reader);
:meth:`MemoryCatalog.prune` deletes exactly those (never a store without an owner record, nor
one outside the data dir, which memq did not name itself). When the broker cannot be reached
it refuses (:class:`~pipeline.errors.ShardUnreachable`) rather than guess.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.config import Settings, load_settings, read_roster, redact_url
from pipeline.config.paths import data_dir
from pipeline.errors import FleetError, ShardUnreachable
from pipeline.fleet.placement import claimed_in, claims_dir, claims_of, store_is_here
from pipeline.routing import QUERY_PREFIX, STORE_PREFIX, shard_of, shard_of_queue
from pipeline.store.owner import owner_of, peek

STATE_OK = "ok"
STATE_NOT_INDEXED = "not indexed"
STATE_ORPHANED = "orphaned"
STATE_FOREIGN = "foreign"
STATE_UNREACHABLE = "unreachable"
#: How long the live workers of the fleet are asked for (a broadcast waits this long).
FLEET_TIMEOUT_S = 1.0
#: The files of one store besides itself (SQLite's, and memq's job log).
_SIDE_SUFFIXES = ("-wal", "-shm", ".jobs", ".jobs-wal", ".jobs-shm")


@dataclass(frozen=True)
class MemoryInfo:
    """One memory as ``memq memories`` shows it."""

    name: str
    default: bool
    workspace: Path
    store: Path
    size: int | None  # None: the store is on another host
    state: str
    last_index_at: float | None
    owner: dict[str, str] | None = None
    served_by: str | None = None  # the node serving its store (a fleet's reader or writer)
    shard: int | None = None  # its shard, with a fleet

    @property
    def here(self) -> bool:
        """Whether this host holds the store (``size`` is known only then)."""
        return self.size is not None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "default": self.default, "workspace": str(self.workspace),
                "store": str(self.store), "size": self.size, "state": self.state,
                "lastIndexAt": self.last_index_at, "owner": self.owner,
                "servedBy": self.served_by, "shard": self.shard}


@dataclass(frozen=True)
class ShardServers:
    """The live workers that serve one shard's stores: its readers and its writers."""

    readers: tuple[str, ...] = ()
    writers: tuple[str, ...] = ()

    @property
    def node(self) -> str | None:
        """The node to name as serving the shard: a reader, else a writer (None: nobody)."""
        return (self.readers or self.writers or (None,))[0]


def live_servers(broker_url: str, timeout: float = FLEET_TIMEOUT_S) -> dict[int, ShardServers]:
    """The live writers and readers of every shard on ``broker_url`` (the queues each worker
    consumes); :class:`~pipeline.errors.ShardUnreachable` when the broker cannot be reached."""
    from pipeline.fleet.broker import queue_consumers  # Celery loads only with a fleet

    try:
        consumers = queue_consumers(broker_url, timeout=timeout)
    except Exception as exc:  # kombu's OperationalError, a socket error, a refused login
        raise ShardUnreachable(f"the broker {redact_url(broker_url)} cannot be reached: "
                               f"{exc}") from None
    readers: dict[int, list[str]] = {}
    writers: dict[int, list[str]] = {}
    for node, queues in sorted(consumers.items()):
        for queue in queues:
            shard = shard_of_queue(queue)
            role = {QUERY_PREFIX: readers, STORE_PREFIX: writers}.get(queue.partition(".")[0])
            if shard is not None and role is not None:
                role.setdefault(shard, []).append(node)
    return {shard: ShardServers(tuple(readers.get(shard, ())), tuple(writers.get(shard, ())))
            for shard in {*readers, *writers}}


@dataclass(frozen=True)
class OrphanStore:
    """A store under memq's data dir whose owner's workspace is gone."""

    store: Path
    memory: str
    workspace: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"store": str(self.store), "memory": self.memory, "workspace": self.workspace,
                "size": self.size}


class MemoryCatalog:
    """The memories of one configuration (``config_file``, else the one memq finds; the
    ``workspace`` argument applies to the file's own memory, as on every command)."""

    def __init__(self, config_file: str | os.PathLike[str] | None = None,
                 workspace: str | os.PathLike[str] | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.env = dict(os.environ if env is None else env)
        self.own = load_settings(config_file=config_file, workspace=workspace, env=self.env)
        self.config_file = self.own.config_file
        self._workspace = workspace
        self.roster = read_roster(self.config_file, self.env) if self.config_file else None
        self._fleets: dict[str, dict[int, ShardServers] | ShardUnreachable] = {}

    def fleet(self, broker_url: str) -> dict[int, ShardServers]:
        """The live servers of each shard of the fleet on ``broker_url`` (asked once per
        catalog); :class:`~pipeline.errors.ShardUnreachable` when its broker cannot be
        reached."""
        if broker_url not in self._fleets:
            try:
                self._fleets[broker_url] = live_servers(broker_url)
            except ShardUnreachable as exc:
                self._fleets[broker_url] = exc
        found = self._fleets[broker_url]
        if isinstance(found, ShardUnreachable):
            raise found
        return found

    @property
    def fleet_errors(self) -> list[str]:
        """Why a fleet this catalog asked could not be asked (its broker is unreachable)."""
        return [str(v) for v in self._fleets.values() if isinstance(v, ShardUnreachable)]

    def _servers(self, s: Settings) -> ShardServers | None:
        """Who serves memory ``s``'s shard (None: no fleet, or its broker is unreachable)."""
        if not s.broker_url:
            return None
        try:
            return self.fleet(s.broker_url).get(s.fleet.shard_of(s.agent_id), ShardServers())
        except ShardUnreachable:
            return None

    @property
    def default(self) -> str:
        """The memory used without ``--agent``/``--memory``."""
        return self.own.agent_id

    def names(self) -> list[str]:
        """Every memory's canonical name, the default first."""
        listed = self.roster.names if self.roster is not None else []
        return list(dict.fromkeys([self.default, *listed]))

    def changed(self) -> bool:
        """Whether the configuration's memories may have changed since this catalog read
        them: its file, or its ``memoriesDir`` folder (a sub-folder added or removed), is
        another version now (a ``stat`` each; read a new catalog to see how)."""
        return self.roster is not None and self.roster.changed()

    def settings(self, name: str | None = None) -> Settings:
        """The settings of memory ``name`` (any spelling of it; None: the default);
        :class:`~pipeline.errors.UnknownMemory` for a name the configuration does not list."""
        if name is None or name == self.default:
            return self.own
        if self.roster is not None:
            self.roster.require(name)
        return load_settings(config_file=self.config_file, env=self.env, agent=name)

    def describe(self, names: list[str] | None = None) -> list[MemoryInfo]:
        """Each memory (of ``names``, default all) with its workspace, store, size, state and
        last index time."""
        return [self.info(name) for name in (self.names() if names is None else names)]

    def info(self, name: str) -> MemoryInfo:
        """Memory ``name``'s workspace, store, size, state, last index time and (with a
        fleet) its shard and the node that serves it (see the module's doc)."""
        s = self.settings(name)
        shard = s.fleet.shard_of(s.agent_id) if s.broker_url else None
        servers = self._servers(s)
        status = _reader_status(s) if servers is not None and servers.readers else None
        served_by = (status or {}).get("servedBy") or (servers.node if servers else None)
        if s.broker_url and not store_is_here(s):
            last = (status or {}).get("lastIndexAt")
            state = (STATE_UNREACHABLE if status is None else
                     STATE_OK if status.get("indexed") and last else STATE_NOT_INDEXED)
            return MemoryInfo(s.agent_id, name == self.default, s.workspace, s.store.path,
                              None, state, last if isinstance(last, int | float) else None,
                              None, served_by, shard)
        facts = peek(s.store.path) if s.store.path.exists() else None
        if not s.workspace.is_dir() and not self._served(s, servers):
            state = STATE_ORPHANED
        elif facts is not None and facts.owner is not None \
                and facts.owner != owner_of(s.agent_id, s.workspace):
            state = STATE_FOREIGN
        elif facts is None or facts.last_index_at is None:
            state = STATE_NOT_INDEXED
        else:
            state = STATE_OK
        return MemoryInfo(s.agent_id, name == self.default, s.workspace, s.store.path,
                          store_size(s.store.path), state,
                          facts.last_index_at if facts else None, facts.owner if facts else None,
                          served_by, shard)

    @staticmethod
    def _served(s: Settings, servers: ShardServers | None) -> bool:
        """Whether memory ``s``'s store is served: its shard claimed in its data dir, or a
        live writer or reader of it."""
        claimed = s.fleet.shard_of(s.agent_id) in claimed_in(claims_of(s))
        return claimed or (servers is not None and servers.node is not None)

    def orphans(self) -> list[OrphanStore]:
        """The stores under memq's data dir whose recorded owner's workspace is gone and whose
        shard nothing serves (no claim in this data dir, no live writer or reader of it);
        :class:`~pipeline.errors.ShardUnreachable` when that depends on a fleet whose broker
        cannot be reached."""
        root = data_dir(self.env)
        if not root.is_dir():
            return []
        claimed = claimed_in(claims_dir(self.env))
        found = []
        for path in sorted(root.iterdir()):
            if not path.name.endswith(".sqlite") or not path.exists():
                continue
            facts = peek(path)
            if facts.owner is None or Path(facts.owner["workspace"]).is_dir():
                continue
            shard = self._shard_of(facts.owner["memory"])
            if shard in claimed:
                continue
            if self.own.broker_url:  # ShardUnreachable: never guess that nobody serves it
                served = self.fleet(self.own.broker_url).get(shard, ShardServers())
                if served.node is not None:
                    continue
            found.append(OrphanStore(path, facts.owner["memory"], facts.owner["workspace"],
                                     store_size(path)))
        return found

    def _shard_of(self, memory: str) -> int:
        """The shard of ``memory``: as the configuration places it when it still lists it,
        else by the hash of its name among the fleet's shards."""
        if memory in self.names():
            return self.settings(memory).fleet.shard_of(memory)
        return shard_of(memory, self.own.fleet.shards)

    def prune(self) -> list[OrphanStore]:
        """Delete every orphaned store (:meth:`orphans`) with its side files; what was removed.
        Nothing is removed when the fleet cannot be asked (:class:`ShardUnreachable`)."""
        removed = self.orphans()
        for orphan in removed:
            remove_store(orphan.store)
        return removed


def _reader_status(s: Settings) -> dict[str, Any] | None:
    """The status memory ``s``'s shard reader gives (with ``servedBy``), None when no reader
    answers for it (it timed out, refused the memory, or failed)."""
    from pipeline.remote import RemoteMemory  # Celery loads only with a fleet

    remote = RemoteMemory(s)
    try:
        return remote.status()
    except FleetError:
        return None
    finally:
        remote.close()


def store_size(path: Path) -> int:
    """Bytes of the store at ``path``: the file it points to (a generation, after a rebuild)
    and its WAL and job log; 0 when there is none."""
    total = 0
    real = Path(os.path.realpath(path))
    for candidate in {real, *(Path(f"{p}{s}") for p in (path, real) for s in _SIDE_SUFFIXES)}:
        try:
            total += candidate.stat().st_size
        except OSError:
            continue
    return total


def remove_store(path: Path) -> None:
    """Delete the store at ``path``: the name, the generation it points to, and their WAL,
    shared-memory and job-log files."""
    real = Path(os.path.realpath(path))
    for base in dict.fromkeys((path, real)):
        for suffix in ("", *_SIDE_SUFFIXES):
            Path(f"{base}{suffix}").unlink(missing_ok=True)
