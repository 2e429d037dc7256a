"""Broker restarts while the fleet embeds: how many workers die, and does the index converge?
(issue 16; pipeline/fleet/kombu_repairs.py).

A private redis-server on a unix socket that keeps nothing (as the production broker), one
writer and ``--embed`` embed workers (``--concurrency 2`` each) as real ``memq worker``
processes, embedding through the OpenAI double of tests/fakes (a real HTTP server on loopback,
``--latency`` seconds per request, so jobs are in flight when the broker goes), one memory of
``--notes`` notes. Two fleets, one after the other on the same data: memq's workers as shipped,
and the same workers with kombu's Redis transport as kombu ships it (the repairs undone inside
each worker process after memq applied them). Each runs ``--restarts`` rounds: 20 notes get a
new line and the memory is asked to index (what the broker lost before is queued again, as
``memq watch``'s reconcile does), the fleet embeds for a random 0.3-2 s, the broker is killed
and started again after a random pause of 0-1 s. A worker that died is counted and started
again, so every round sees a full fleet. At the end: reconcile until nothing is pending.
Printed per fleet: worker deaths, log lines naming AttributeError, jobs split as crash suspects
("split into" in the logs: only a dead pool process should cause one), chunks pending and
failed at the end, seconds from the first round to the end.

``--broker rabbitmq`` runs the same rounds against a private RabbitMQ node (SIGKILLed and
started again; it keeps what it had written to disk), with memq's workers only: the repairs
are to kombu's Redis transport, which a RabbitMQ fleet does not use.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from harness import add_common_args, add_fleet_args, add_quick_arg, header, scratch
from many_memories import spawn_worker, stop_fleet, write_notes

REPO = Path(__file__).resolve().parent.parent
VISIBILITY_S = 15
API_KEY = "sk-bench-double"
# Undoes pipeline/fleet/kombu_repairs.py in a worker process: kombu's classes as kombu ships them.
UNREPAIRED_WORKER = """
import sys
import kombu.transport.redis as kombu_redis
shipped = (kombu_redis.Transport.close_connection, kombu_redis.Channel._connparams)
import workers.app  # applies memq's repairs
kombu_redis.Transport.close_connection, kombu_redis.Channel._connparams = shipped
from memq.cli import worker_command
from celery.__main__ import main
sys.argv = ["celery", *worker_command(*sys.argv[1:5])[3:]]
main()
"""


def worker_argvs(embed: int, repaired: bool) -> list[list[str]]:
    """Each process of the fleet: ``memq worker`` flags, or the unrepaired launcher's argv."""
    roles = [("writer", "", "1")] + [("embed", "openai", "2")] * embed
    if repaired:
        return [["--role", role, *(["--provider", p, "--concurrency", c] if p else [])]
                for role, p, c in roles]
    return [["-c", UNREPAIRED_WORKER, role, p or "", c, "INFO"] for role, p, c in roles]


def spawn(argv: list[str], env: dict[str, str], log: Path, repaired: bool) -> subprocess.Popen:
    if repaired:
        return spawn_worker([*argv, "--loglevel", "INFO"], env, log)
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, *argv], env={**os.environ, **env}, stdout=out,
                                stderr=out, cwd=REPO, start_new_session=True)


def run_fleet(tmp: Path, args: argparse.Namespace, repaired: bool) -> dict:
    """``args.restarts`` broker restarts under one fleet; its figures."""
    from pipeline.config import load_settings
    from pipeline.embeddings.registry import choose_provider
    from pipeline.fleet.broker import FleetDispatcher
    from pipeline.memory import Memory
    from pipeline.status import index_status
    from tests.fakes.provider_doubles import ProviderDouble
    from tests.faultkit import PrivateRabbit, PrivateRedis
    from workers.watching import WatchService

    rng = random.Random(args.seed)
    tmp.mkdir()
    write_notes(tmp / "ws", args.notes, random.Random(args.seed))
    notes = sorted((tmp / "ws" / "memory").glob("*.md"))
    double = ProviderDouble("openai", api_key=API_KEY, dims=64, latency=args.latency)
    double.__enter__()
    config = tmp / "openclaw.json"
    config.write_text(json.dumps({"agents": {"defaults": {"memorySearch": {
        "provider": "openai", "model": "tiny-embed", "remote": {"baseUrl": double.url},
        "chunking": {"tokens": 32, "overlap": 0},
        "store": {"path": str(tmp / "store.sqlite")}}},
        "list": [{"id": "main", "default": True, "workspace": str(tmp / "ws")}]}}))
    broker = PrivateRedis(tmp) if args.broker == "redis" else PrivateRabbit(tmp)
    broker.start()
    env = {"MEMQ_CONFIG": str(config), "MEMQ_HOME": str(tmp / "home"), "MEMQ_FLEET_SHARDS": "1",
           "MEMQ_BROKER_URL": broker.url, "OPENAI_API_KEY": API_KEY,
           "MEMQ_VISIBILITY_TIMEOUT": str(VISIBILITY_S)}
    os.environ["OPENAI_API_KEY"] = API_KEY
    settings = load_settings(config_file=config, env=env)
    logs = tmp / "logs"
    logs.mkdir()
    argvs = worker_argvs(args.embed, repaired)
    procs = [spawn(a, env, logs / f"worker-{i}.log", repaired) for i, a in enumerate(argvs)]
    deaths = 0

    def requeue() -> None:
        with FleetDispatcher(broker.url) as dispatcher:
            WatchService(settings, choose_provider(settings), dispatcher, reconcile_s=3600,
                         lost_after_s=0.0).reconcile()

    try:
        time.sleep(8)  # the workers come up
        t0 = time.perf_counter()
        for round_ in range(args.restarts):
            for note in rng.sample(notes, 20):
                with note.open("a") as f:
                    f.write(f"- round {round_}: {rng.random():.6f}\n")
            requeue()
            with FleetDispatcher(broker.url) as dispatcher, \
                    Memory(settings=settings, dispatcher=dispatcher) as memory:
                memory.index(wait=False)
            time.sleep(rng.uniform(0.3, 2.0))
            broker.kill()
            time.sleep(rng.choice([0.0, 0.05, 0.3, 1.0]))
            broker.start()
            time.sleep(2.0)  # the workers notice, reconnect (or die)
            for i, p in enumerate(procs):
                if p.poll() is not None:
                    deaths += 1
                    procs[i] = spawn(argvs[i], env, logs / f"worker-{i}.log", repaired)
        requeue()
        deadline = time.monotonic() + args.timeout
        while (pending := index_status(settings)["pending"]) and time.monotonic() < deadline:
            time.sleep(1.0)
            requeue()
        text = "".join(p.read_text(errors="replace") for p in logs.glob("*.log"))
        return {"deaths": deaths, "attribute_errors": text.count("AttributeError"),
                "split": text.count("split into"), "pending": pending,
                "failed": index_status(settings)["failed"], "seconds": time.perf_counter() - t0}
    finally:
        stop_fleet(procs)
        broker.stop()
        double.__exit__(None, None, None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--restarts", type=int, default=30, help="broker restarts per fleet (30)")
    ap.add_argument("--notes", type=int, default=200, help="notes in the memory (200)")
    ap.add_argument("--latency", type=float, default=0.3,
                    help="seconds the provider double takes per request (0.3)")
    ap.add_argument("--broker", choices=("redis", "rabbitmq"), default="redis",
                    help="the broker that is killed: redis (default) or rabbitmq")
    add_fleet_args(ap)
    add_common_args(ap)
    add_quick_arg(ap, restarts=2, notes=20)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))

    print(header("broker-restarts", broker=args.broker, restarts=args.restarts,
                 notes=args.notes, embed_workers=f"{args.embed} x concurrency 2",
                 latency_s=args.latency))
    fleets = [("memq (kombu repaired)", True), ("kombu as shipped", False)]
    if args.broker == "rabbitmq":
        fleets = [("memq", True)]
    rows = []
    with scratch("memq-restarts-", args.keep) as tmp:
        for name, repaired in fleets:
            rows.append((name, run_fleet(tmp / name.split()[0], args, repaired)))
    print(f"{'workers':<24}{'restarts':>9}{'deaths':>8}{'AttributeError lines':>22}"
          f"{'jobs split':>12}{'pending at end':>16}{'failed at end':>15}{'seconds':>9}")
    for name, r in rows:
        print(f"{name:<24}{args.restarts:>9}{r['deaths']:>8}{r['attribute_errors']:>22}"
              f"{r['split']:>12}{r['pending']:>16}{r['failed']:>15}{r['seconds']:>9.0f}")


if __name__ == "__main__":
    main()
