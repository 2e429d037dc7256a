"""A writer shard killed with SIGKILL mid-index: the other shard keeps indexing, nothing is lost
once it is back (issue 18).

One fleet of real ``memq worker`` processes on a private redis-server: a writer per shard
(shards 0 and 1), 2 embed workers, the tiny random-weight GGUF from tests/fakes. Memories of
one openclaw.json, half on each shard, are asked to index (``Memory.index(wait=False)``). Once
shard 1 has written part of its vectors, its writer's whole process group is killed with
SIGKILL (no shutdown, no lease release, its message in flight unacknowledged); the chunks with
a vector per shard are printed every second while it is down, then the writer is started
again under the same name (it takes its own lease back) and everything is waited for. Finally,
per memory: the chunks expected from the files (chunked here with the same settings), the
chunk rows in the store, those with a vector, and the vector rows.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import sys
import time
from pathlib import Path

from harness import add_common_args, add_fleet_args, add_quick_arg, header, scratch
from many_memories import spawn_worker, stop_fleet, write_notes

REPO = Path(__file__).resolve().parent.parent
# How long Redis keeps the killed writer's unacknowledged message before handing it out again
# (production default: 600 s; the fleet reads MEMQ_VISIBILITY_TIMEOUT).
VISIBILITY_S = 15


def agents_per_shard(per_shard: int) -> dict[int, list[str]]:
    """``per_shard`` agent ids mapping to each of 2 shards."""
    from pipeline.routing import shard_of

    out: dict[int, list[str]] = {0: [], 1: []}
    i = 0
    while min(len(v) for v in out.values()) < per_shard:
        name = f"agent-{i:03d}"
        if len(out[shard_of(name, 2)]) < per_shard:
            out[shard_of(name, 2)].append(name)
        i += 1
    return out


def counts(path: Path) -> dict[str, int]:
    """Chunk rows, chunks marked ready, and vector rows of the store at ``path``."""
    from pipeline.store import reads, schema, vectors

    db = schema.open_store(path)
    if db is None:
        return {"rows": 0, "ready": 0, "vectors": 0}
    try:
        states = reads.state_counts(db)
        return {"rows": sum(states.values()), "ready": states.get("ready", 0),
                "vectors": vectors.count_vectors(db) if vectors.vector_table_exists(db) else 0}
    finally:
        db.close()


def ready_chunks(path: Path) -> int:
    """Chunks with a vector in the store at ``path`` (a cheap poll: plain sqlite3)."""
    if not path.exists():
        return 0
    conn = sqlite3.connect(path, timeout=30)
    try:
        return conn.execute("SELECT count(*) FROM chunks WHERE state = 'ready'").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


def expected_chunks(settings) -> int:
    """The chunks memq should make of the memory's files (chunked here, independently of the
    store)."""
    from pipeline.ingest.chunking import chunk_markdown

    return sum(len(chunk_markdown(p.read_text(), settings.chunking.tokens,
                                  settings.chunking.overlap))
               for p in sorted((settings.workspace / "memory").glob("*.md")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-shard", type=int, default=4, help="memories per shard (4)")
    ap.add_argument("--notes", type=int, default=150, help="notes per memory (150)")
    ap.add_argument("--kill-at", type=float, default=0.2,
                    help="kill shard 1's writer once this share of its chunks has vectors (0.2)")
    ap.add_argument("--down", type=float, default=10, help="seconds the writer stays dead (10)")
    add_fleet_args(ap)
    add_common_args(ap)
    add_quick_arg(ap, per_shard=1, notes=10, down=1.0, timeout=120.0)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from pipeline.config import load_settings
    from pipeline.fleet.broker import FleetDispatcher
    from pipeline.memory import Memory
    from tests.fakes.tiny_gguf import write_tiny_gguf
    from workers.embedded import EmbeddedBroker

    print(header("shard-kill", memories=2 * args.per_shard, notes=args.notes,
                 embed_workers=args.embed, writer_shards=2, model="tiny GGUF (tests/fakes)"))
    shards = agents_per_shard(args.per_shard)
    rng = random.Random(args.seed)
    with scratch("memq-kill-", args.keep) as tmp:
        model = write_tiny_gguf(tmp / "tiny.gguf")
        listed = []
        order = [a for pair in zip(shards[0], shards[1], strict=True) for a in pair]
        for agent in order:  # the shards' memories alternate in the queues
            write_notes(tmp / "ws" / agent, args.notes, rng)
            listed.append({"id": agent, "workspace": str(tmp / "ws" / agent)})
        listed[0]["default"] = True
        config = tmp / "openclaw.json"
        config.write_text(json.dumps({"agents": {
            "defaults": {"memorySearch": {"provider": "local",
                                          "local": {"modelPath": str(model)},
                                          "store": {"path": str(tmp / "stores" /
                                                                "{agentId}.sqlite")}}},
            "list": listed}}))
        broker = EmbeddedBroker()
        env = {"MEMQ_CONFIG": str(config), "MEMQ_HOME": str(tmp / "home"),
               "MEMQ_FLEET_SHARDS": "2", "MEMQ_LOCAL_THREADS": "1",
               "MEMQ_BROKER_URL": broker.url, "MEMQ_VISIBILITY_TIMEOUT": str(VISIBILITY_S),
               # one host holds every shard's stores (this process too)
               "MEMQ_LOCAL_SHARDS": "all"}
        logs = tmp / "logs"
        logs.mkdir()
        writer1 = ["--role", "writer", "--shard", "1", "--name", "w1@%h"]
        writer0 = ["--role", "writer", "--shard", "0", "--name", "w0@%h"]
        embeds = [["--role", "embed", "--provider", "local", "--name", f"e{i}@%h"]
                  for i in range(args.embed)]
        procs = [spawn_worker(writer0, env, logs / "w0.log"),
                 *(spawn_worker(e, env, logs / f"e{i}.log") for i, e in enumerate(embeds))]
        w1 = spawn_worker(writer1, env, logs / "w1.log")
        settings = {a: load_settings(config_file=config, agent=a, env=env) for a in order}
        expected = {a: expected_chunks(s) for a, s in settings.items()}
        total = {k: sum(expected[a] for a in v) for k, v in shards.items()}

        def ready() -> dict[int, int]:
            return {k: sum(ready_chunks(settings[a].store.path) for a in v)
                    for k, v in shards.items()}

        timeline: list[tuple[float, str, dict[int, int]]] = []
        try:
            time.sleep(8)  # let the workers come up
            t0 = time.perf_counter()
            with FleetDispatcher(broker.url) as dispatcher:
                for s in settings.values():
                    with Memory(settings=s, dispatcher=dispatcher) as memory:
                        memory.index(wait=False)
            deadline = time.monotonic() + args.timeout
            while (now := ready())[1] < args.kill_at * total[1]:
                if time.monotonic() > deadline:
                    raise SystemExit(f"shard 1 did not start writing; logs in {logs}")
                time.sleep(0.2)
            os.killpg(w1.pid, signal.SIGKILL)
            w1.wait()
            timeline.append((time.perf_counter() - t0, "SIGKILL shard 1's writer", now))
            killed_at = time.monotonic()
            while time.monotonic() - killed_at < args.down:
                time.sleep(1.0)
                timeline.append((time.perf_counter() - t0, "shard 1 down", ready()))
            w1 = spawn_worker(writer1, env, logs / "w1-restarted.log")
            timeline.append((time.perf_counter() - t0, "shard 1's writer restarted", ready()))
            time.sleep(1.0)
            while (now := ready()) != total:
                if time.monotonic() > deadline:
                    raise SystemExit(f"not everything was written: {now} of {total}; "
                                     f"logs in {logs}")
                timeline.append((time.perf_counter() - t0, "", now))
                time.sleep(1.0)
            timeline.append((time.perf_counter() - t0, "all chunks have vectors", now))
        finally:
            stop_fleet([*procs, w1])
            broker.close()
        final = {a: counts(s.store.path) for a, s in settings.items()}
    print(f"chunks per shard: shard 0 {total[0]}, shard 1 {total[1]}; shard 1's writer "
          f"SIGKILLed at {args.kill_at:.0%} of its chunks, down {args.down:.0f} s "
          f"(visibility timeout {VISIBILITY_S} s)")
    print(f"{'t (s)':>7}{'shard 0 ready':>15}{'shard 1 ready':>15}  event")
    for t, event, now in timeline:
        print(f"{t:7.1f}{now[0]:15d}{now[1]:15d}  {event}")
    print(f"{'memory':<12}{'shard':>6}{'expected':>10}{'rows':>8}{'ready':>8}{'vectors':>9}")
    lost = 0
    for shard, agents in shards.items():
        for a in agents:
            c = final[a]
            lost += expected[a] - min(c["rows"], c["ready"], c["vectors"])
            print(f"{a:<12}{shard:>6}{expected[a]:>10}{c['rows']:>8}{c['ready']:>8}"
                  f"{c['vectors']:>9}")
    print(f"chunks lost: {lost}")


if __name__ == "__main__":
    main()
