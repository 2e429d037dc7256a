"""Several "hosts" on one machine, for the tests of a fleet that spans hosts.

Each :class:`Host` has its own ``HOME`` and data dir (``MEMQ_HOME``: its stores, its shard
claims, its default job log); every host shares the fleet's broker and configuration file,
as real hosts would. A host decides for itself which memories' stores it holds
(``fleet.localShards`` auto, from the claims its own workers write). Processes of a host may
run with folders hidden from them (``hide``): ``unshare -m`` with an empty tmpfs mounted over
each, as on a host that does not have them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import Settings, load_settings
from pipeline.fleet.broker import queue_consumers
from tests.conftest import REPO
from tests.faultkit import kill_tree, write_corpus

RABBIT_ADMIN = ("rabbitmqctl", "-q")


class Host:
    """One simulated host: ``name``, its folders, its environment, its processes."""

    def __init__(self, name: str, root: Path, common: dict[str, str],
                 hide: tuple[Path, ...] = ()) -> None:
        self.name = name
        self.home = root / name
        self.data = self.home / "data"
        self.data.mkdir(parents=True)
        self.hide = hide
        self.logs = self.home / "logs"
        self.logs.mkdir()
        # fleet.localShards empty: "auto", decided by this host's own claims
        self.env = {**common, "HOME": str(self.home), "MEMQ_HOME": str(self.data),
                    "MEMQ_LOCAL_SHARDS": "", "XDG_DATA_HOME": "", "XDG_CONFIG_HOME": ""}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def full_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**os.environ, **self.env, **(extra or {})}

    def argv(self, argv: list[str]) -> list[str]:
        """``argv`` run as on this host: with its hidden folders hidden."""
        if not self.hide:
            return argv
        mounts = " && ".join(f"mount -t tmpfs none {p}" for p in self.hide)
        return ["unshare", "-m", "--propagation", "private", "sh", "-c",
                f'{mounts} && exec "$@"', "sh", *argv]

    def spawn(self, label: str, *args: str, extra: dict[str, str] | None = None
              ) -> subprocess.Popen[bytes]:
        """Start ``memq ARGS`` on this host (logged to ``logs/<label>.log``)."""
        log = open(self.logs / f"{label}.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(self.argv([sys.executable, "-m", "memq.cli", *args]),
                                env=self.full_env(extra), stdout=log, stderr=log, cwd=REPO,
                                start_new_session=True)
        log.close()
        self.procs[label] = proc
        return proc

    def memq(self, *args: str, timeout: float = 180, extra: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
        """Run ``memq ARGS`` on this host and wait for it."""
        return subprocess.run(self.argv([sys.executable, "-m", "memq.cli", *args]),
                              env=self.full_env(extra), capture_output=True, text=True,
                              timeout=timeout, cwd=REPO)

    def settings(self, config: Path, agent: str) -> Settings:
        """``agent``'s settings as this host reads them."""
        return load_settings(config_file=config, agent=agent, env=self.full_env())

    def kill(self, label: str) -> None:
        proc = self.procs.pop(label)
        kill_tree(proc.pid)
        proc.wait()

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 15)
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                kill_tree(proc.pid)
                proc.wait()
        self.procs.clear()

    def log_text(self) -> str:
        return "\n".join(f"--- {self.name}/{p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(self.logs.glob("*.log")))


class SimulatedFleet:
    """A broker, a shared config of memories, and the hosts of a test."""

    def __init__(self, root: Path, broker: str, config: Path, result_backend: str) -> None:
        self.root, self.broker, self.config = root, broker, config
        self.common = {"MEMQ_BROKER_URL": broker, "MEMQ_CONFIG": str(config),
                       "MEMQ_RESULT_BACKEND": result_backend, "MEMQ_LOCAL_THREADS": "1",
                       "MEMQ_WRITER_CHECK": "on"}
        self.hosts: dict[str, Host] = {}

    def host(self, name: str, hide: tuple[Path, ...] = ()) -> Host:
        host = self.hosts[name] = Host(name, self.root, self.common, hide)
        return host

    def start_shard(self, host: Host, shard: int) -> None:
        """A shard host's roles: the shard's writer and reader, and an embed worker."""
        tag = host.name
        host.spawn(f"writer-{shard}", "worker", "--role", "writer", "--shard", str(shard),
                   "--name", f"writer-{shard}@{tag}")
        host.spawn(f"reader-{shard}", "worker", "--role", "reader", "--shard", str(shard),
                   "--name", f"reader-{shard}@{tag}", "--concurrency", "4")
        host.spawn("embed", "worker", "--role", "embed", "--provider", "local", "--name",
                   f"embed@{tag}")

    def wait_for_nodes(self, queues: list[str], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                served = {q for qs in queue_consumers(self.broker, timeout=2).values()
                          for q in qs}
            except Exception:  # the broker or the workers are still starting
                served = set()
            if set(queues) <= served:
                return
            time.sleep(0.5)
        raise AssertionError(f"workers on {queues} did not come up:\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(h.log_text() for h in self.hosts.values())

    def stop(self) -> None:
        for host in self.hosts.values():
            host.stop()


def fleet_with_job_file(root: Path, broker: str, config: Path) -> SimulatedFleet:
    """A simulated fleet under ``root`` whose hosts share one SQLite job log (as one
    PostgreSQL database would be shared)."""
    shared = root / "shared"
    shared.mkdir()
    return SimulatedFleet(root / "hosts", broker, config, f"db+sqlite:///{shared / 'jobs.sqlite'}")


def two_memories(root: Path, tiny_model: Path, files: int = 12) -> tuple[Path, dict[str, Path]]:
    """A memq.json of two memories, ``alpha`` on shard 0 and ``beta`` on shard 1, each with a
    workspace of generated notes (no store path: each host keeps its stores in its data dir);
    alpha's session transcripts are indexed too (session memory on; OpenClaw's folder of the
    host, under its HOME)."""
    workspaces = {}
    for seed, name in enumerate(("alpha", "beta")):
        ws = root / "workspaces" / name
        (ws / "memory").mkdir(parents=True)
        write_corpus(ws, files=files, lines=12, seed=seed + 3)
        (ws / "MEMORY.md").write_text(f"# {name}\n\nThe {name} team deploys on Tuesdays.\n")
        workspaces[name] = ws
    config = root / "memq.json"
    config.write_text(json.dumps({
        "provider": "local", "local": {"modelPath": str(tiny_model)},
        "fleet": {"shards": 2},
        "memories": [{"name": "alpha", "workspace": str(workspaces["alpha"]),
                      "fleet": {"shard": 0}, "experimental": {"sessionMemory": True},
                      "sources": ["memory", "sessions"]},
                     {"name": "beta", "workspace": str(workspaces["beta"]),
                      "fleet": {"shard": 1}}],
    }, indent=2))
    return config, workspaces


def queries_of(workspace: Path, count: int, seed: int) -> list[str]:
    """``count`` queries made of words of the workspace's notes (some exact phrases, some
    loose words, one that matches nothing)."""
    import random

    rng = random.Random(seed)
    words = [w.strip(".,;:#-") for p in sorted(workspace.rglob("*.md"))
             for w in p.read_text().split() if len(w.strip(".,;:#-")) > 3]
    out = [" ".join(rng.sample(words, rng.randint(1, 4))) for _ in range(count - 1)]
    return [*out, "zzzz-nothing-matches-this"]


@contextlib.contextmanager
def private_vhost(base: str = "amqp://guest:guest@127.0.0.1:5672") -> Iterator[str]:
    """A RabbitMQ vhost of one test on the machine's RabbitMQ (deleted after it)."""
    if shutil.which(RABBIT_ADMIN[0]) is None:
        pytest.fail("rabbitmqctl is not installed: the RabbitMQ tests need the machine's "
                    "RabbitMQ (Debian package rabbitmq-server)")
    vhost = f"memq-{uuid.uuid4().hex[:8]}"
    subprocess.run([*RABBIT_ADMIN, "add_vhost", vhost], check=True, timeout=60,
                   capture_output=True)
    subprocess.run([*RABBIT_ADMIN, "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"],
                   check=True, timeout=60, capture_output=True)
    try:
        yield f"{base}/{vhost}"
    finally:
        subprocess.run([*RABBIT_ADMIN, "delete_vhost", vhost], timeout=60,
                       capture_output=True)


def wait_until(check: Callable[[], Any], what: str, timeout: float = 120,
               logs: Callable[[], str] = lambda: "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}\n{logs()}")


@contextlib.contextmanager
def private_database(host: str = "127.0.0.1", user: str = "postgres") -> Iterator[str]:
    """A PostgreSQL database of one test on the machine's server (dropped after it), as a
    result backend URL."""
    import sqlalchemy as sa

    name = f"memq_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(f"postgresql+psycopg://{user}@{host}/postgres",
                             isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError as exc:
        admin.dispose()
        pytest.fail(f"PostgreSQL is not reachable on {host}:5432: {exc}")
    try:
        yield f"db+postgresql+psycopg://{user}@{host}/{name}"
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
