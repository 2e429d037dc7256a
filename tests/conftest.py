"""Shared fixtures: sample workspaces, settings, a tiny real GGUF model, a real Redis broker,
and real Celery worker processes."""

from __future__ import annotations

import contextlib
import copy
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path

import pytest

from pipeline.config import Settings, load_settings
from tests.secrets_scan import (  # the whole-suite secrets check: hooks for every test
    pytest_runtest_logreport,  # noqa: F401
    pytest_sessionfinish,  # noqa: F401
    record_redis,
)

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_WORKSPACE = REPO / "examples" / "workspace"

# The tests stop `memq watch` and other long-running commands with SIGINT, as Ctrl-C would. A
# suite started as a background job of a non-interactive shell (`pytest &` in a script)
# inherits SIGINT ignored, and every process it spawns would too (an ignored signal survives
# exec; Python then keeps it ignored): give this process a handler, which exec resets to the
# default in each child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Every memory of the suite is one this host holds (a one-host fleet), unless a test says
# otherwise: the tests of hosts that hold no store set fleet.localShards per host.
os.environ.setdefault("MEMQ_LOCAL_SHARDS", "all")


@pytest.fixture(autouse=True)
def _private_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's data dir (default stores, the job log, shard claims) is its own, never the
    machine's ~/.local/share/memq, which other test sessions share."""
    monkeypatch.setenv("MEMQ_HOME", str(tmp_path / "memq-data"))


class DailyLogDays:
    """The daily logs (``memory/YYYY-MM-DD.md``) a note appended inside a ``with`` block may go to.

    The day is read on entry and again on exit, so a run that crosses midnight accepts either
    day instead of failing on the clock (a note's day is the appender's ``date.today()``)."""

    def __enter__(self) -> DailyLogDays:
        self.paths = {f"memory/{date.today().isoformat()}.md"}
        return self

    def __exit__(self, *exc: object) -> None:
        self.paths.add(f"memory/{date.today().isoformat()}.md")


def write_config(path: Path, **keys: object) -> Path:
    """Write a memq.json with OpenClaw-style keys (nested dicts allowed).

    Temporal decay (on by default) is turned off unless ``query.hybrid.temporalDecay`` is
    given: it measures ages from the clock, and the sample notes are dated, so a test's
    ranking would change with the day it runs. Tests of decay turn it on and pass ``now``;
    tests of the defaults load settings without a file written here.
    """
    import json

    keys = copy.deepcopy(keys)
    query = keys.setdefault("query", {})
    if isinstance(query, dict) and isinstance(query.setdefault("hybrid", {}), dict):
        query["hybrid"].setdefault("temporalDecay", {"enabled": False})
    path.write_text(json.dumps(keys, indent=2))
    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A fresh copy of the sample workspace the repo ships."""
    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLE_WORKSPACE, ws)
    return ws


@pytest.fixture
def make_settings(tmp_path: Path) -> Callable[..., Settings]:
    """Settings for a workspace with a store in tmp_path; keyword arguments are config keys."""

    def make(ws: Path, **keys: object) -> Settings:
        keys = copy.deepcopy(keys)  # temporal decay off unless given: see write_config
        keys.setdefault("store", {"path": str(tmp_path / "store" / "memq.sqlite")})
        keys.setdefault("resultBackend", f"db+sqlite:///{tmp_path / 'store' / 'jobs.sqlite'}")
        fleet = keys.setdefault("fleet", {})
        if isinstance(fleet, dict):
            fleet.setdefault("localShards", "all")
        cfg = write_config(tmp_path / f"memq-{uuid.uuid4().hex[:6]}.json", **keys)
        return load_settings(config_file=cfg, workspace=ws, env={})

    return make


@pytest.fixture
def keyword_settings(workspace: Path, make_settings: Callable[..., Settings]) -> Settings:
    """Keyword-only settings for the sample workspace, indexed once by the real CLI."""
    settings = make_settings(workspace, provider="none")
    done = run_memq("index", "--workspace", str(workspace), "--config", str(settings.config_file),
                    timeout=120)
    assert done.returncode == 0, done.stderr
    return settings


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real GGUF (random-weight tiny BERT) that llama.cpp loads in milliseconds."""
    from tests.fakes.tiny_gguf import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("models") / "tiny-bert.gguf")


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    """A real Redis: the machine's on 127.0.0.1:6379 when reachable, else an embedded one.

    Yields a base URL without a database number; tests pick their own database.
    """
    if os.environ.get("MEMQ_TEST_EMBEDDED_REDIS") != "1" and _port_open("127.0.0.1", 6379):
        yield "redis://127.0.0.1:6379"
        return
    from workers.embedded import EmbeddedBroker

    broker = EmbeddedBroker()
    try:
        yield broker.url
    finally:
        broker.close()


def redis_client(url: str):
    """A redis-py client for a ``redis://`` or an embedded ``redis+socket://`` URL."""
    import redis

    if url.startswith("redis+socket://"):
        return redis.Redis(unix_socket_path=url.removeprefix("redis+socket://"))
    return redis.Redis.from_url(url)


#: Redis databases tests may take on the machine's shared server (0 is left to people).
SHARED_DBS = range(1, 16)
DB_LOCKS = Path(tempfile.gettempdir()) / "memq-test-redis-dbs"


@contextlib.contextmanager
def leased_db(wait_s: float = 600.0) -> Iterator[int]:
    """A Redis database number no other test process on this machine holds meanwhile.

    The machine's Redis is shared by every test session running on it (CI, people, other
    checkouts): a number picked at random collides sooner or later, and then one test's
    workers answer another's broadcasts or consume its queues. An ``flock`` per number makes
    the choice exclusive; the kernel drops it when the process dies, so nothing goes stale.
    """
    DB_LOCKS.mkdir(exist_ok=True)
    deadline = time.monotonic() + wait_s
    while True:
        for db in SHARED_DBS:
            handle = open(DB_LOCKS / f"db-{db}.lock", "a+")  # noqa: SIM115 - held while leased
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield db
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"every Redis database {SHARED_DBS.start}-{SHARED_DBS.stop - 1} "
                               f"stayed leased by other test processes for {wait_s:.0f} s")
        time.sleep(0.2)


@pytest.fixture
def broker_url(redis_server: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A private, empty Redis database for one test (scanned for the sentinel key after it)."""
    with contextlib.ExitStack() as stack:
        if redis_server.startswith("redis://"):
            url = f"{redis_server}/{stack.enter_context(leased_db())}"
        else:  # the embedded server is private to this session: database 0 is ours
            url = redis_server
        client = redis_client(url)
        client.flushdb()
        yield url
        record_redis(client, request.node.nodeid)
        client.flushdb()
        client.close()


class Fleet:
    """Real ``celery worker`` processes for a test, stopped (or killed) at the end."""

    def __init__(self, broker: str, env: dict[str, str], log_dir: Path) -> None:
        self.broker, self.env, self.log_dir = broker, env, log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, queues: list[str], name: str, *, concurrency: int = 1) -> subprocess.Popen:
        from workers.embedded import worker_argv

        argv = worker_argv(queues, f"{name}-{uuid.uuid4().hex[:6]}@%h", concurrency=concurrency,
                           loglevel="INFO", quiet_cluster=True)
        return self.spawn(argv, name)

    def spawn(self, argv: list[str], name: str, env: dict[str, str] | None = None
              ) -> subprocess.Popen:
        """Run any command with the fleet's broker and environment, logging to ``name``.log."""
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115
        proc = subprocess.Popen(argv, env={**os.environ, **self.env, **(env or {}),
                                           "MEMQ_BROKER_URL": self.broker},
                                stdout=log, stderr=log, cwd=REPO)
        log.close()
        self.procs.append(proc)
        return proc

    def logs(self, tail: int | None = 4000) -> str:
        """The workers' logs (the last ``tail`` characters of each; None for all)."""
        return "\n".join(p.read_text(errors="replace")[-(tail or 0):]
                         for p in self.log_dir.glob("*.log"))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def fleet(broker_url: str, tmp_path: Path) -> Iterator[Fleet]:
    logs = tmp_path / "worker-logs"
    logs.mkdir()
    f = Fleet(broker_url, {"MEMQ_LOCAL_THREADS": "1"}, logs)
    try:
        yield f
    finally:
        f.stop()


def run_memq(*args: str, env: dict[str, str] | None = None, timeout: float = 600
             ) -> subprocess.CompletedProcess[str]:
    """Run the real ``memq`` CLI in a subprocess."""
    return subprocess.run([sys.executable, "-m", "memq.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO,
                          env={**os.environ, **(env or {})})
