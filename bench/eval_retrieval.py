"""Benchmark: memq's retrieval quality on SciFact/NFCorpus next to published figures, and the
weight sweep used to tune the fused modes (on a training split only).

Not a test. The evaluation itself is ``memq eval`` (:mod:`memq.evaluation`): the collection
is written as one Markdown file per document, indexed by ``run_index`` (embedded broker + a
real Celery worker, as ``memq index``) and queried through ``search_store``. This script adds
the published anchors and ``--sweep``, which scores a grid of vector weights and RRF k on the
given split: use ``--split train`` for SciFact and ``--split dev`` for NFCorpus; never tune on
``test``.

    .venv/bin/python bench/eval_retrieval.py [--dataset scifact|nfcorpus] [--split test]
        [--modes keyword,vector,hybrid,rrf,hybrid+mmr] [--sweep] [--limit N]
        [--vector-weight W] [--rrf-k K] [--data ../shared/eval] [--quick]

``--quick`` scores a 5-query, 40-document slice of the split in a scratch folder (a smoke
run of every row; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from evalsets import add_data_arg, quick_collection
from harness import header, scratch

from memq.evaluation import beir, report
from memq.evaluation.command import evaluate, fused_keys
from memq.evaluation.workspace import EvalWorkspace, default_work_dir

#: Published nDCG@10 on the test split (see ../shared/eval/README.md for sources).
PUBLISHED: dict[str, list[tuple[str, float]]] = {
    "scifact": [("BM25 (BEIR paper .. OpenSearch)", 0.665), ("BM25 Anserini flat", 0.6789),
                ("BM25 OpenSearch", 0.691), ("all-MiniLM-L6-v2 (MTEB)", 0.6451),
                ("hybrid BM25+ColBERT-MiniLM (Vespa)", 0.679)],
    "nfcorpus": [("BM25 (BEIR paper)", 0.325), ("BM25 Anserini flat", 0.3218),
                 ("BM25 OpenSearch", 0.343), ("all-MiniLM-L6-v2 (MTEB)", 0.3159),
                 ("hybrid BM25+ColBERT-MiniLM (Vespa)", 0.350)],
}

SWEEP: list[tuple[str, str, dict[str, Any]]] = [
    *((f"weighted v={w}", "hybrid", fused_keys(w, None))
      for w in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)),
    *((f"rrf k={k} v={w}", "rrf", fused_keys(w, k))
      for k, w in ((60, 0.5), (60, 0.7), (20, 0.5), (100, 0.5))),
]


def sweep(folder: Path, split: str, limit: int, work_dir: Path | None = None) -> str:
    """nDCG@10 and the other figures of every :data:`SWEEP` row on ``split`` (``work_dir``:
    where the workspace and store go, default ``memq eval``'s cached one)."""
    data = beir.load_collection(folder, split, limit)
    work = EvalWorkspace(work_dir or default_work_dir(folder))
    files, ids = beir.memory_files(data.corpus)
    work.sync_files(files)
    indexed = work.index(warn=print)
    rows = {}
    for label, mode, keys in SWEEP:
        rows[label] = beir.score_modes(work, indexed, data, ids, [mode], keys)[mode]
        print(f"  {label}: {rows[label]['nDCG@10']:.4f}", file=sys.stderr)
    indexed.close()
    return f"{data.name} {split} ({len(data.qrels)} queries): sweep\n\n{report.beir_table(rows)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="scifact", choices=sorted(PUBLISHED))
    ap.add_argument("--split", default="test")
    ap.add_argument("--modes")
    ap.add_argument("--sweep", action="store_true", help="grid of weights / RRF k on --split")
    add_data_arg(ap)
    ap.add_argument("--limit", type=int, default=0, help="only the first N queries")
    ap.add_argument("--vector-weight", type=float, help="vectorWeight of the fused modes")
    ap.add_argument("--rrf-k", type=int, help="rrfK of the rrf mode (default 60)")
    ap.add_argument("--quick", action="store_true",
                    help="a 5-query, 40-document slice in a scratch folder: a smoke run")
    ap.add_argument("--keep", action="store_true", help="keep --quick's scratch folder")
    args = ap.parse_args(argv)
    print(header("retrieval evaluation", dataset=args.dataset, split=args.split,
                 quick=args.quick), flush=True)
    with scratch("memq-bench-eval-", args.keep) as tmp:
        folder, work_dir = args.data / args.dataset, None
        if args.quick:
            folder, work_dir = quick_collection(folder, tmp, args.split), tmp / "work"
        if args.sweep:
            print(sweep(folder, args.split, args.limit, work_dir))
            return 0
        out = evaluate(folder, split=args.split, limit=args.limit, work_dir=work_dir,
                       modes=args.modes.split(",") if args.modes else None,
                       fused=fused_keys(args.vector_weight, args.rrf_k))
    print(out["text"])
    print("\nPublished nDCG@10 (test split):\n")
    for label, value in PUBLISHED[args.dataset]:
        print(f"- {label}: {value:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
