"""Benchmark: ``memq index`` of the first SciFact documents with the local model, memq's two
decode layouts side by side (issue 37 item 4).

Not a test. The first ``--docs`` SciFact documents are written as memory files (one Markdown
file each, as the retrieval evaluation writes them: ``memq.evaluation.beir.memory_files``), and
indexed by a fresh ``memq index`` process per run (process start, the embedded broker and
worker, the model's load and every vector written: the wall clock of the command), on a fresh
store each time, with:

(a) ``local.streams`` unset: one decode stream per thread (memq's default);
(b) ``local.streams = 1``: one text at a time on every thread (memq before 2026-12-07).

Both with ``local.threads = --threads``. The runs alternate (a b, b a, ...) for ``--pairs``
pairs; the load average is printed beside each run (the machine may be shared). The vectors
of the two layouts are compared chunk by chunk (the stores' embedding caches, by text hash):
"max 1-cos" is the largest 1 - cosine.

OpenClaw's side (OpenClaw 2026.9.6 with llama-server, the issue's baseline) is not run here:
``--openclaw-seconds`` takes its measured wall clock for the same documents, to print the
ratios against it.

    .venv/bin/python bench/index_scifact.py [--docs 800] [--threads 2] [--pairs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from evalsets import add_data_arg
from harness import header, paired_runs, parse_docs_pairs, scratch

from memq.evaluation import beir
from pipeline.store.vectors import from_blob

REPO = Path(__file__).resolve().parents[1]
LAYOUTS = {"(a) streams auto": None, "(b) streams 1": 1}


def write_workspace(root: Path, data: Path, docs: int) -> int:
    """The first ``docs`` SciFact documents as memory files under ``root``; how many."""
    collection = beir.load_collection(data / "scifact", "test")
    files, _ = beir.memory_files(collection.corpus[:docs])
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return len(files)


def index_once(tmp: Path, workspace: Path, name: str, threads: int, streams: int | None
               ) -> tuple[float, Path]:
    """One ``memq index`` process on a fresh store; (wall seconds, the store)."""
    store = tmp / f"{name}.sqlite"
    config = tmp / f"{name}.json"
    config.write_text(json.dumps({"provider": "local", "fallback": "none",
                                  "store": {"path": str(store)},
                                  "local": {"threads": threads, "streams": streams}}))
    env = {**os.environ, "MEMQ_HOME": str(tmp / f"{name}-home"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                       os.environ.get("PYTHONPATH")]))}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "memq", "index", "--config", str(config),
                           "--workspace", str(workspace)], env=env, capture_output=True,
                          text=True, check=False)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"memq index ({name}) exited {done.returncode}:\n{done.stdout[-2000:]}\n"
                 f"{done.stderr[-2000:]}")
    return seconds, store


def store_vectors(store: Path) -> tuple[int, int, dict[str, np.ndarray]]:
    """(chunks, chunks ready, text hash -> vector) of an indexed store."""
    conn = sqlite3.connect(store)
    try:
        chunks, ready = conn.execute(
            "SELECT count(*), sum(state = 'ready') FROM chunks").fetchone()
        cached = {h: from_blob(b) for h, b in conn.execute(
            "SELECT hash, embedding FROM embedding_cache")}
    finally:
        conn.close()
    return chunks, ready or 0, cached


def load() -> float:
    return os.getloadavg()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=800, help="SciFact documents (800)")
    ap.add_argument("--threads", type=int, default=2, help="local.threads (2)")
    ap.add_argument("--pairs", type=int, default=2, help="runs of each layout, alternating (2)")
    ap.add_argument("--openclaw-seconds", type=float, default=None,
                    help="OpenClaw + llama-server's measured wall clock on the same documents")
    add_data_arg(ap)
    args = parse_docs_pairs(ap)

    with scratch("memq-index-scifact-", args.keep) as tmp:
        workspace = tmp / "workspace"
        docs = write_workspace(workspace, args.data, args.docs)
        times: dict[str, list[float]] = {label: [] for label in LAYOUTS}
        loads: dict[str, list[float]] = {label: [] for label in LAYOUTS}
        stores: dict[str, Path] = {}
        counts: dict[str, tuple[int, int]] = {}
        for p in range(args.pairs):
            order = list(LAYOUTS) if p % 2 == 0 else list(reversed(LAYOUTS))
            for label in order:
                loads[label].append(load())
                seconds, store = index_once(tmp, workspace, f"{label[1]}{p}", args.threads,
                                            LAYOUTS[label])
                times[label].append(seconds)
                stores[label] = store
        vectors = {}
        for label, store in stores.items():
            chunks, ready, vectors[label] = store_vectors(store)
            counts[label] = (chunks, ready)
        a, b = (vectors[label] for label in LAYOUTS)
        shared = sorted(set(a) & set(b))
        dev = max((1.0 - float(np.dot(a[h], b[h]) / (np.linalg.norm(a[h]) * np.linalg.norm(b[h])))
                   for h in shared), default=float("nan"))

    print(header("index scifact", threads=args.threads, docs=docs, pairs=args.pairs))
    print(f"vectors compared: {len(shared)} (max 1-cos {dev:.1e})")
    print()
    ratio, pairs = paired_runs(LAYOUTS, counts, times, loads, width=20, ready="ready")
    ta, tb = (float(np.median(times[label])) for label in LAYOUTS)
    print(f"ratio (a)/(b): median {ratio:.2f}, per pair " + " ".join(f"{r:.2f}" for r in pairs))
    if args.openclaw_seconds:
        print(f"against OpenClaw's {args.openclaw_seconds:.1f} s (not this run): "
              f"(a) {ta / args.openclaw_seconds:.2f}x, (b) {tb / args.openclaw_seconds:.2f}x")


if __name__ == "__main__":
    main()
