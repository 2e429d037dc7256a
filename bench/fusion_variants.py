"""Benchmark: how the keyword score is normalised before the weighted merge, side by side.

Not a test. The weighted merge adds wV·cosine + wT·keyword score, so what the keyword score
means decides how much BM25's order counts. This script asks each retriever once per query
(200 candidates per side, as ``memq eval`` does) on a collection already indexed by
``memq eval`` (its cached work folder), then scores several normalisations and weights from
the same hits, so the comparison costs one retrieval pass:

  saturated/best  r/(1+r) divided by the best hit's (r = −bm25): memq before 2026-12
  bm25/best       r divided by the best hit's r (the best scores 1.0): memq's weighted merge
  min-max         (r − worst)/(best − worst) over the candidates
  rrf             reciprocal rank fusion (k 60)

Tune on SciFact ``train`` and NFCorpus ``dev`` only; the test split is for the report.

    .venv/bin/python bench/fusion_variants.py --dataset scifact --split train
        [--weights 0.5,0.6,0.7,0.8] [--data ../shared/eval] [--limit N] [--quick]

``--quick`` indexes a 5-query, 40-document slice of the split in a scratch folder (a smoke run
of every row; its figures mean nothing).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from evalsets import add_data_arg, quick_collection
from harness import add_common_args, header, scratch

from memq.evaluation import beir
from memq.evaluation.metrics import beir_metrics, mean
from memq.evaluation.report import beir_table
from memq.evaluation.workspace import EvalWorkspace, default_work_dir
from pipeline.search import fusion
from pipeline.search.retrievers import cosine_for, keyword_hits, matrix_hits

CANDIDATES = 200
Hits = tuple[dict[int, float], dict[int, float], dict[int, float]]  # vector, FTS5 ranks, cosines


def saturated_best(ranks: dict[int, float]) -> dict[int, float]:
    return fusion.relative(fusion.text_scores(ranks))


def min_max(ranks: dict[int, float]) -> dict[int, float]:
    if not ranks:
        return {}
    best, worst = min(ranks.values()), max(ranks.values())
    return {r: (v - worst) / (best - worst) if best < worst else 1.0 for r, v in ranks.items()}


NORMALISERS: dict[str, Callable[[dict[int, float]], dict[int, float]]] = {
    "saturated/best": saturated_best, "bm25/best": fusion.share_of_best, "min-max": min_max}


def retrieve(indexed: beir.Indexed, matrix, text: str) -> Hits:
    qvec = indexed.provider.embed_query(text)
    vector = matrix_hits(matrix, qvec, CANDIDATES, None)
    keyword = keyword_hits(indexed.db, text, CANDIDATES, None)
    missing = cosine_for(indexed.db, [r for r in keyword if r not in vector], qvec, matrix)
    return vector, keyword, {**vector, **missing}


def documents(ranked: list[fusion.Candidate], paths: dict[int, str], ids: dict[str, str]
              ) -> list[str]:
    return list(dict.fromkeys(ids[paths[c.rowid]] for c in ranked))[:beir.DEPTH]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="scifact")
    ap.add_argument("--split", default="train")
    add_data_arg(ap)
    ap.add_argument("--weights", default="0.5,0.6,0.7,0.8", help="vector weights to score")
    ap.add_argument("--limit", type=int, default=0, help="first N judged queries only")
    ap.add_argument("--quick", action="store_true",
                    help="a 5-query, 40-document slice in a scratch folder: a smoke run")
    add_common_args(ap)
    args = ap.parse_args()
    print(header("fusion variants", dataset=args.dataset, split=args.split,
                 quick=args.quick), flush=True)
    with scratch("memq-bench-fusion-", args.keep) as tmp:
        folder, work_dir = args.data / args.dataset, None
        if args.quick:
            folder, work_dir = quick_collection(folder, tmp, args.split), tmp / "work"
        print(report(folder, args.split, args.limit, args.weights, work_dir))


def report(folder: Path, split: str, limit: int, weights: str, work_dir: Path | None) -> str:
    """The table of every normalisation and weight on ``split`` of the collection at
    ``folder`` (indexed in ``work_dir``, default ``memq eval``'s cached work folder)."""
    data = beir.load_collection(folder, split, limit)
    work = EvalWorkspace(work_dir or default_work_dir(folder))
    files, ids = beir.memory_files(data.corpus)
    work.sync_files(files)
    indexed = work.index(warn=print)
    matrix = indexed.held.matrices.get(indexed.db)
    paths = dict(indexed.db.conn.execute("SELECT rowid, path FROM chunks"))
    hits = {qid: retrieve(indexed, matrix, data.queries[qid]) for qid in data.qrels}
    rows: dict[str, dict[str, float]] = {}

    def score(label: str, fuse: Callable[[Hits], list[fusion.Candidate]]) -> None:
        rows[label] = mean([beir_metrics(documents(fuse(hits[qid]), paths, ids), rel)
                            for qid, rel in data.qrels.items()])

    score("keyword", lambda h: fusion.weighted({}, fusion.share_of_best(h[1]), (0.0, 1.0)))
    score("vector", lambda h: fusion.weighted(h[0], {}, (1.0, 0.0)))
    score("rrf k=60 v=0.7", lambda h: fusion.rrf(h[0], fusion.text_scores(h[1]), (0.7, 0.3), 60))
    for w in (float(x) for x in weights.split(",")):
        for name, normalise in NORMALISERS.items():
            score(f"{name} v={w}",
                  lambda h, n=normalise, w=w: fusion.weighted(h[2], n(h[1]), (w, 1.0 - w)))
    indexed.close()
    return (f"{data.name} {split} ({len(data.qrels)} queries, {indexed.chunks} chunks): "
            f"keyword normalisations\n\n{beir_table(rows)}")


if __name__ == "__main__":
    main()
