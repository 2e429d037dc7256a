"""Benchmark: peak memory (RSS) of an embed worker with the local model, and of the writer.

Not a test. Starts an embedded Redis and two real ``celery worker`` processes (prefork, one
pool process each), as a deployment would run them: one on ``embed.local`` and one on
``store`` (the single writer). Each worker's process tree (the main process plus its pool
process) is sampled with psutil every 50 ms:

  idle   after both workers have started, before any job (Celery + memq imported, no model);
         also as PSS (``idle PSS``: a page the two processes share counted once, split
         between them; RSS counts it in each, so the tree's RSS is about twice the main
         process's imports);
  peak   the highest total seen while ``run_index`` indexes a generated workspace (``--notes``
         daily notes, the same generator as ``index_local.py``) through them, and until the
         run returns.

It also prints the GGUF model's file size, the floor for a worker that holds the model, and
the peak RSS of this process embedding the same chunks with ``LocalProvider`` in a bare loop.

    .venv/bin/python bench/memory_rss.py [--notes 40] [--threads 2] [--keep]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import threading
import time

import psutil
from harness import add_common_args, add_quick_arg, header, scratch
from index_local import make_workspace

from pipeline.config import load_settings
from pipeline.embeddings.default_model import default_model_path
from pipeline.embeddings.local import LocalProvider
from pipeline.routing import embed_queue, store_queue
from workers.embedded import EmbeddedBroker, WorkerProcess, worker_argv
from workers.indexing import run_index

SAMPLE_S = 0.05


def tree_pss(pid: int) -> int:
    """PSS of a process and its children in bytes (shared pages split between sharers)."""
    proc = psutil.Process(pid)
    total = 0
    for p in (proc, *proc.children(recursive=True)):
        with contextlib.suppress(psutil.NoSuchProcess):
            total += p.memory_full_info().pss
    return total


def tree_rss(pid: int) -> int:
    """RSS of a process and its children in bytes (0 once it is gone)."""
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += p.memory_info().rss
    return total


class PeakSampler(threading.Thread):
    """Samples the RSS of process trees in the background and keeps each one's maximum."""

    def __init__(self, pids: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.peak = dict.fromkeys(pids, 0)
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            for name, pid in self.pids.items():
                self.peak[name] = max(self.peak[name], tree_rss(pid))
            time.sleep(SAMPLE_S)

    def stop(self) -> dict[str, int]:
        self._done.set()
        self.join()
        return self.peak


def wait_for_pool(pid: int, timeout: float = 60.0) -> None:
    """Wait until the worker forked its pool process and its memory stopped growing."""
    deadline, last = time.monotonic() + timeout, -1
    while time.monotonic() < deadline:
        proc = psutil.Process(pid)
        rss = tree_rss(pid)
        if proc.children() and rss == last:
            return
        last = rss
        time.sleep(0.5)
    raise SystemExit(f"worker {pid} did not start within {timeout} s")


def bare_peak(texts: list[str], threads: int) -> int:
    provider = LocalProvider(threads=threads)
    for text in texts:
        provider.embed_documents([text])
    peak = psutil.Process().memory_info().rss
    provider.close()
    return peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes", type=int, default=40, help="daily notes to index (40)")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads (2)")
    add_common_args(ap)
    add_quick_arg(ap, notes=5)
    args = ap.parse_args()
    with scratch("memq-bench-rss-", args.keep) as tmp:
        broker = EmbeddedBroker()
        workers: dict[str, WorkerProcess] = {}
        try:
            workspace, store = tmp / "workspace", tmp / "memq.sqlite"
            make_workspace(workspace, args.notes, args.seed)
            cfg = tmp / "memq.json"
            cfg.write_text(json.dumps({"provider": "local", "brokerUrl": broker.url,
                                       "store": {"path": str(store)},
                                       "local": {"threads": args.threads}}), encoding="utf-8")
            # The workers claim their shard in this data dir, where this process's settings
            # look for the claim (else the index would be sent to a reader nobody runs).
            home = {"MEMQ_HOME": str(tmp / "home")}
            settings = load_settings(config_file=cfg, workspace=workspace, env=home)
            env = {**os.environ, **home, "MEMQ_CONFIG": str(cfg),
                   "MEMQ_WORKSPACE": str(workspace), "MEMQ_BROKER_URL": broker.url}
            model = default_model_path(settings.local.model_cache_dir)
            for role, queue in (("embed worker", embed_queue("local")), ("writer", store_queue(0))):
                workers[role] = WorkerProcess(
                    worker_argv([queue], f"rss-{role.split()[0]}-{os.getpid()}@%h",
                                quiet_cluster=True), env, tmp / f"{role.split()[0]}.log")
            pids = {role: w.pid for role, w in workers.items()}
            for pid in pids.values():
                wait_for_pool(pid)
            idle = {role: tree_rss(pid) for role, pid in pids.items()}
            idle_pss = {role: tree_pss(pid) for role, pid in pids.items()}
            sampler = PeakSampler(pids)
            sampler.start()
            t0 = time.perf_counter()
            run = run_index(settings, wait=True)
            seconds = time.perf_counter() - t0
            peak = sampler.stop()
            if run.provider != "local" or run.failed_chunks:
                raise SystemExit(f"indexing did not complete with the local model: {run}")
            conn = sqlite3.connect(store)
            texts = [r[0] for r in conn.execute("SELECT text FROM chunks ORDER BY rowid")]
            conn.close()
            bare = bare_peak(texts, args.threads)
            print(header("worker memory", notes=args.notes, chunks=len(texts),
                         index_run=f"{seconds:.1f}s"))
            print(f"model file: {model.name} {model.stat().st_size / 2**20:.1f} MiB")
            print()
            print(f"{'celery worker (main + pool process)':<40}{'idle MiB':>10}{'peak MiB':>10}"
                  f"{'idle PSS':>10}")
            for role in pids:
                print(f"{role:<40}{idle[role] / 2**20:>10.1f}{peak[role] / 2**20:>10.1f}"
                      f"{idle_pss[role] / 2**20:>10.1f}")
            print(f"{'bare LocalProvider loop (this process)':<40}{'':>10}{bare / 2**20:>10.1f}")
        finally:
            for w in workers.values():
                w.stop(kill=True)
            broker.close()


if __name__ == "__main__":
    main()
