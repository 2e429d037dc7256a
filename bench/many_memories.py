"""Many memories through one fleet vs the same notes as one memory (issue 18).

N memories x M notes each (one openclaw.json ``agents.list``) are indexed by one fleet of real
``memq worker`` processes (2 embed workers, 2 writer shards) through ``Memory.index(wait=False)``
per memory (``--via remote``: one ``memq index --remote --all``, whose jobs the shard writers
run), until every store has no pending chunk; then the same N*M notes as ONE memory
through the same fleet shape. Prints both wall times and their ratio (goal <= 1.3x). Uses the
tiny random-weight GGUF from tests/fakes (the real model would make the run minutes long on 2
cores; the ratio is what matters).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from harness import add_common_args, add_fleet_args, add_quick_arg, header, scratch
from notes import bullet

from pipeline.config import Settings
from pipeline.fleet.job_log import JobLog

REPO = Path(__file__).resolve().parent.parent


def write_notes(ws: Path, notes: int, rng: random.Random) -> None:
    """``notes`` daily notes of a few bullets under ``ws``/memory."""
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    for i in range(notes):
        (ws / "memory" / f"note-{i:04d}.md").write_text(
            "\n".join(f"- {bullet(rng)}" for _ in range(4)) + "\n")


class PendingWatch:
    """Polls stores for chunks not yet ready, cheaply enough not to slow the fleet it watches:
    one connection per store kept open, and each round stops at the first store still
    pending (stores finish roughly in the order they were asked to index)."""

    def __init__(self, memories: list[Settings]) -> None:
        self.waiting = list(memories)
        self.jobs = JobLog(memories[0].result_backend)
        self.conns: dict[Path, sqlite3.Connection] = {}

    def pending(self, memory: Settings) -> int | None:
        """Chunks of ``memory``'s store not yet ready; None until an index pass of it has
        finished (the job log, Celery's result backend, says so: a pass queued with
        ``--remote`` runs on a writer after the caller returned, and its chunk rows appear
        while it runs)."""
        path = memory.store.path
        if path not in self.conns:
            if not path.exists() or not any(
                    job.state == "done" for job in self.jobs.recent(memory.agent_id, limit=5)):
                return None
            self.conns[path] = sqlite3.connect(path, timeout=30)
        try:
            return self.conns[path].execute(
                "SELECT count(*) FROM chunks WHERE state != 'ready'").fetchone()[0]
        except sqlite3.OperationalError:
            return None

    def poll(self) -> int:
        """One round; how many stores are still waiting."""
        while self.waiting and self.pending(self.waiting[0]) == 0:
            self.conns.pop(self.waiting.pop(0).store.path).close()
        return len(self.waiting)

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.jobs.close()


def spawn_worker(role_args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """A ``memq worker`` in its own process group (so a SIGKILL reaches its pool too)."""
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "memq.cli", "worker", *role_args],
                                env={**os.environ, **env}, stdout=out, stderr=out, cwd=REPO,
                                start_new_session=True)


def start_fleet(env: dict[str, str], logs: Path, embed: int) -> list[subprocess.Popen]:
    """Writers for shards 0 and 1 and ``embed`` embed workers, as ``memq worker`` processes."""
    argvs = [["--role", "writer", "--shard", "0", "--name", "w0@%h"],
             ["--role", "writer", "--shard", "1", "--name", "w1@%h"]]
    argvs += [["--role", "embed", "--provider", "local", "--name", f"e{i}@%h"]
              for i in range(embed)]
    return [spawn_worker(a, env, logs / f"worker-{i}.log") for i, a in enumerate(argvs)]


def stop_fleet(procs: list[subprocess.Popen]) -> None:
    """A warm shutdown for each (all at once), their process groups killed after 20 s."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def run_case(tmp: Path, broker: str, model: Path, agents: list[tuple[str, int]], seed: int,
             embed: int, timeout: float, via: str = "library") -> tuple[float, float]:
    """Index ``agents`` ((id, notes) pairs) through a fresh fleet; the wall seconds from the
    first index request until the last one returned (the caller's own part), and until every
    store has no pending chunk. ``via`` "library": ``Memory.index(wait=False)`` per memory in
    this process; "remote": one fresh ``memq index --remote --all`` process (a job per memory,
    each run by its shard's writer)."""
    from pipeline.config import load_settings
    from pipeline.fleet.broker import FleetDispatcher
    from pipeline.memory import Memory

    rng = random.Random(seed)
    listed = []
    for agent, notes in agents:
        ws = tmp / "ws" / agent
        write_notes(ws, notes, rng)
        listed.append({"id": agent, "workspace": str(ws)})
    listed[0]["default"] = True
    config = tmp / "openclaw.json"
    config.write_text(json.dumps({"agents": {
        "defaults": {"memorySearch": {"provider": "local", "local": {"modelPath": str(model)},
                                      "store": {"path": str(tmp / "stores" /
                                                            "{agentId}.sqlite")}}},
        "list": listed}}))
    env = {"MEMQ_CONFIG": str(config), "MEMQ_HOME": str(tmp / "home"),
           "MEMQ_FLEET_SHARDS": "2", "MEMQ_LOCAL_THREADS": "1", "MEMQ_BROKER_URL": broker,
           # one host holds every shard's stores (this process too)
           "MEMQ_LOCAL_SHARDS": "all"}
    logs = tmp / "logs"
    logs.mkdir(exist_ok=True)
    procs = start_fleet(env, logs, embed)
    try:
        settings = [load_settings(config_file=config, agent=a, env=env) for a, _ in agents]
        time.sleep(8)  # let the workers come up before the clock starts
        t0 = time.perf_counter()
        if via == "remote":
            subprocess.run([sys.executable, "-m", "memq.cli", "index", "--remote", "--all"],
                           env={**os.environ, **env}, check=True, stdout=subprocess.DEVNULL,
                           cwd=REPO)
        else:
            with FleetDispatcher(broker) as dispatcher:
                for s in settings:
                    with Memory(settings=s, dispatcher=dispatcher) as memory:
                        memory.index(wait=False)
        sent = time.perf_counter() - t0
        watch = PendingWatch(settings)
        deadline = time.monotonic() + timeout
        try:
            while (left := watch.poll()):
                if time.monotonic() > deadline:
                    raise SystemExit(f"timed out: {left} stores still pending; logs in {logs}")
                time.sleep(0.2)
        finally:
            watch.close()
        return sent, time.perf_counter() - t0
    finally:
        stop_fleet(procs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memories", type=int, default=200, help="memories (200)")
    ap.add_argument("--notes", type=int, default=20, help="notes per memory (20)")
    add_fleet_args(ap)
    ap.add_argument("--via", choices=["library", "remote"], default="library",
                    help="how the memories are asked to index: Memory.index per memory in "
                         "this process (library), or one `memq index --remote --all` (remote)")
    add_common_args(ap)
    add_quick_arg(ap, memories=4, notes=3, timeout=120.0)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from tests.fakes.tiny_gguf import write_tiny_gguf
    from workers.embedded import EmbeddedBroker

    print(header("many-memories", memories=args.memories, notes=args.notes,
                 embed_workers=args.embed, writer_shards=2, model="tiny GGUF (tests/fakes)",
                 via=args.via))
    with scratch("memq-many-", args.keep) as tmp:
        model = write_tiny_gguf(tmp / "tiny.gguf")
        broker = EmbeddedBroker()
        try:
            (many_sent, many) = run_case(tmp / "many", broker.url, model,
                            [(f"agent-{i:03d}", args.notes) for i in range(args.memories)],
                            args.seed, args.embed, args.timeout, args.via)
            broker.close()
            broker = EmbeddedBroker()
            (one_sent, one) = run_case(tmp / "one", broker.url, model,
                           [("solo", args.memories * args.notes)], args.seed, args.embed,
                           args.timeout, args.via)
        finally:
            broker.close()
    total = args.memories * args.notes
    print(f"{'case':<28}{'requests sent':>14}{'all vectors':>13}")
    for name, sent, done in ((f"{args.memories} memories x {args.notes} notes", many_sent, many),
                             (f"1 memory x {total} notes", one_sent, one)):
        print(f"{name:<28}{sent:12.1f} s{done:11.1f} s")
    print(f"ratio many/one: {many / one:.2f}x  (issue 18 goal <= 1.3x)")


if __name__ == "__main__":
    main()
