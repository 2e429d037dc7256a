"""Fairness: a note saved in memory B while memory A backfills 10,000 chunks (issue 18).

One fleet of real ``memq worker`` processes (2 embed workers, 2 writer shards, the tiny
random-weight GGUF from tests/fakes, a private redis-server) serves two memories of one
openclaw.json. Each save writes a new note in B and runs the watcher's producer pass over that
one file (``index_once(paths=[note])``: the interactive lane); its latency is from the file
write until the note's chunk has its vector in B's store (state ``ready``: what a vector search
reads). 20 saves with the fleet idle, then 20 saves right after A's full index (the bulk lane)
has queued its whole backfill. Prints p50/p95 of both and the ratio busy/idle (goal <= 2x),
and how many busy saves finished while A still had chunks pending.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sqlite3
import statistics
import sys
import time
from pathlib import Path

from harness import add_common_args, add_fleet_args, add_quick_arg, header, scratch
from many_memories import start_fleet, stop_fleet
from notes import bullet

REPO = Path(__file__).resolve().parent.parent
LINES_PER_FILE = 40
# Memory A's chunking: small chunks (~256 characters), so that 10,000 of them embed in minutes
# with the tiny model on 2 cores; what matters is the backlog of bulk jobs ahead of B's note.
A_CHUNKING = {"tokens": 64, "overlap": 8}


def p95(values: list[float]) -> float:
    """The nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


class Store:
    """Read-only counts of one store, on a connection kept open (cheap to poll)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn: sqlite3.Connection | None = None

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        if self.conn is None:
            if not self.path.exists():
                return []
            self.conn = sqlite3.connect(self.path, timeout=30)
        try:
            return self.conn.execute(sql, args).fetchall()
        except sqlite3.OperationalError:
            return []

    def not_ready(self) -> int | None:
        rows = self._query("SELECT count(*) FROM chunks WHERE state != 'ready'")
        return rows[0][0] if rows else None

    def ready(self, rel: str) -> bool:
        rows = self._query("SELECT count(*), sum(state = 'ready') FROM chunks WHERE path = ?",
                           (rel,))
        return bool(rows and rows[0][0] and rows[0][0] == rows[0][1])

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def write_backfill(ws: Path, chunks: int, rng: random.Random) -> int:
    """Notes under ``ws``/memory making at least ``chunks`` chunks with :data:`A_CHUNKING`;
    how many files."""
    from pipeline.ingest.chunking import chunk_markdown

    (ws / "memory").mkdir(parents=True, exist_ok=True)
    files = made = 0
    while made < chunks:
        text = "\n".join(f"- {bullet(rng)}" for _ in range(LINES_PER_FILE)) + "\n"
        (ws / "memory" / f"backfill-{files:05d}.md").write_text(text)
        made += len(chunk_markdown(text, A_CHUNKING["tokens"], A_CHUNKING["overlap"]))
        files += 1
    return files


def save_and_wait(settings, choice, dispatcher, store: Store, i: int, tag: str,
                  rng: random.Random, timeout: float) -> float:
    """Save one note in memory B as the watcher would, and time it until its vector is
    stored."""
    from pipeline.ingest.producer import index_once
    from pipeline.store.engine import connect

    rel = f"memory/save-{tag}-{i:02d}.md"
    note = settings.workspace / rel
    t0 = time.perf_counter()
    note.write_text(f"- {bullet(rng)} (save {tag} {i})\n")
    db = connect(settings.store.path)
    try:
        index_once(db, settings, choice, dispatcher.embed, paths=[note])
    finally:
        db.close()
    deadline = time.monotonic() + timeout
    while not store.ready(rel):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {rel}")
        time.sleep(0.01)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=10_000, help="memory A's backfill (10000)")
    ap.add_argument("--saves", type=int, default=20, help="saves in memory B per phase (20)")
    add_fleet_args(ap)
    add_common_args(ap)
    add_quick_arg(ap, chunks=200, saves=3, timeout=120.0)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from pipeline.config import load_settings
    from pipeline.embeddings.registry import choose_provider
    from pipeline.fleet.broker import FleetDispatcher
    from pipeline.memory import Memory
    from tests.fakes.tiny_gguf import write_tiny_gguf
    from workers.embedded import EmbeddedBroker

    print(header("fairness", backfill_chunks=args.chunks, saves=args.saves,
                 embed_workers=args.embed, writer_shards=2, model="tiny GGUF (tests/fakes)"))
    rng = random.Random(args.seed)
    with scratch("memq-fair-", args.keep) as tmp:
        model = write_tiny_gguf(tmp / "tiny.gguf")
        sys.path.insert(0, str(REPO))
        files = write_backfill(tmp / "ws" / "alpha", args.chunks, rng)
        (tmp / "ws" / "beta" / "memory").mkdir(parents=True)
        (tmp / "ws" / "beta" / "MEMORY.md").write_text(f"- {bullet(rng)}\n")
        config = tmp / "openclaw.json"
        config.write_text(json.dumps({"agents": {
            "defaults": {"memorySearch": {"provider": "local",
                                          "local": {"modelPath": str(model)},
                                          "store": {"path": str(tmp / "stores" /
                                                                "{agentId}.sqlite")}}},
            "list": [{"id": "alpha", "default": True, "workspace": str(tmp / "ws" / "alpha"),
                      "memorySearch": {"chunking": A_CHUNKING}},
                     {"id": "beta", "workspace": str(tmp / "ws" / "beta")}]}}))
        broker = EmbeddedBroker()
        env = {"MEMQ_CONFIG": str(config), "MEMQ_HOME": str(tmp / "home"),
               "MEMQ_FLEET_SHARDS": "2", "MEMQ_LOCAL_THREADS": "1",
               "MEMQ_BROKER_URL": broker.url,
               # one host holds every shard's stores (this process too)
               "MEMQ_LOCAL_SHARDS": "all"}
        (tmp / "logs").mkdir()
        procs = start_fleet(env, tmp / "logs", args.embed)
        a = load_settings(config_file=config, agent="alpha", env=env)
        b = load_settings(config_file=config, agent="beta", env=env)
        store_a, store_b = Store(a.store.path), Store(b.store.path)
        try:
            with FleetDispatcher(broker.url) as dispatcher:
                with Memory(settings=b, dispatcher=dispatcher) as beta:
                    beta.index(wait=False)  # B's first pass; its end says the fleet is up
                deadline = time.monotonic() + args.timeout
                while store_b.not_ready() != 0:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"the fleet did not come up; logs in {tmp / 'logs'}")
                    time.sleep(0.1)
                choice = choose_provider(b)
                idle = [save_and_wait(b, choice, dispatcher, store_b, i, "idle", rng,
                                      args.timeout) for i in range(args.saves)]
                t0 = time.perf_counter()
                with Memory(settings=a, dispatcher=dispatcher) as alpha:
                    run = alpha.index(wait=False)  # the backfill, bulk lane
                queued_s = time.perf_counter() - t0
                busy, during = [], 0
                for i in range(args.saves):
                    busy.append(save_and_wait(b, choice, dispatcher, store_b, i, "busy", rng,
                                              args.timeout))
                    during += (store_a.not_ready() or 0) > 0
                left_after = store_a.not_ready()
                while store_a.not_ready() != 0:
                    if time.monotonic() > deadline + args.timeout:
                        raise SystemExit(f"A's backfill did not finish; logs in {tmp / 'logs'}")
                    time.sleep(0.2)
                backfill_s = time.perf_counter() - t0
        finally:
            store_a.close()
            store_b.close()
            stop_fleet(procs)
            broker.close()
    print(f"memory A backfill: {files} files, {run.report.chunks_queued} chunks in "
          f"{run.report.jobs} jobs (bulk lane), queued in {queued_s:.1f} s, all vectors after "
          f"{backfill_s:.1f} s; {left_after} chunks still pending after the last save")
    print(f"memory B saves (interactive lane), {args.saves} per phase, file write -> vector "
          "stored:")
    print(f"{'phase':<30}{'p50 s':>8}{'p95 s':>8}{'max s':>8}")
    for name, values in (("fleet idle", idle), ("during A's backfill", busy)):
        print(f"{name:<30}{statistics.median(values):8.2f}{p95(values):8.2f}"
              f"{max(values):8.2f}")
    print(f"saves that finished while A's backfill was still pending: {during}/{args.saves}")
    print(f"ratio p95 busy/idle: {p95(busy) / p95(idle):.2f}x  (issue 18 goal <= 2x)")


if __name__ == "__main__":
    main()
