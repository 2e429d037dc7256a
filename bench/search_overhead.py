"""Benchmark: what ``memory_search`` costs around the search itself, on a many-file workspace.

Not a test. A keyword-only workspace of ``--files`` notes (``keyword_index.make_workspace``)
is indexed once, then one run times, taking turns query by query:

  memory_search, sync on    the library call with ``sync.onSearch``: opens the store, checks
                            every memory file's mtime and size against the index, searches
  memory_search, sync off   the same without the check (what the MCP server calls)
  find_stale                the MCP server's dirty check before each search (the same walk)
  search_store              the search alone on an open store
  floor: scandir + stat     walking the folder and stat-ing every file: what any check that
                            trusts mtime and size must do at least

    .venv/bin/python bench/search_overhead.py [--files 2000] [--queries 40] [--seed 7] [--keep]
"""

from __future__ import annotations

import argparse
import random

import numpy as np
from harness import add_common_args, add_quick_arg, header, scratch
from keyword_index import floor_stat, make_settings, make_workspace
from query_latency import QUERY_WORDS, interleaved

from pipeline.embeddings.registry import ProviderChoice
from pipeline.ingest.producer import sync_files
from pipeline.ingest.refresh import find_stale
from pipeline.query import memory_search
from pipeline.search.hybrid import search_store
from pipeline.store import schema
from pipeline.store.engine import connect


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=2000, help="memory files (2000)")
    ap.add_argument("--queries", type=int, default=40, help="queries per row (40)")
    add_common_args(ap)
    add_quick_arg(ap, files=100, queries=5)
    args = ap.parse_args()
    print(header("search overhead", files=args.files, queries=args.queries), flush=True)
    with scratch("memq-bench-so-", args.keep) as tmp:
        workspace = tmp / "workspace"
        make_workspace(workspace, args.files, args.seed)
        settings = make_settings(tmp, workspace, tmp / "memq.sqlite")
        db = connect(settings.store.path)
        schema.ensure_schema(db)
        sync_files(db, settings, ProviderChoice(None, None, "benchmark: keyword-only"))
        words = random.Random(args.seed)
        texts = [" ".join(words.sample(QUERY_WORDS, 3)) for _ in range(args.queries)]
        q = args.queries
        rows = interleaved([
            ("memory_search, sync on", lambda i: memory_search(texts[i], settings=settings), q),
            ("memory_search, sync off",
             lambda i: memory_search(texts[i], settings=settings, sync=False), q),
            ("find_stale (MCP dirty check)", lambda i: find_stale(settings), q),
            ("search_store (the search alone)",
             lambda i: search_store(db, settings, texts[i]), q),
            ("floor: scandir + stat every file", lambda i: floor_stat(workspace), q),
        ])
        db.close()
    p50 = {name: float(np.percentile(ms, 50)) for name, ms in rows}
    search, walk = p50["search_store (the search alone)"], p50["floor: scandir + stat every file"]
    print(f"\n  {'call':<36}{'p50 ms':>9}{'p95 ms':>9}{'/search':>9}{'/walk':>8}")
    for name, ms in rows:
        print(f"  {name:<36}{p50[name]:>9.2f}{np.percentile(ms, 95):>9.2f}"
              f"{p50[name] / search:>8.2f}x{p50[name] / walk:>7.2f}x")


if __name__ == "__main__":
    main()
