"""Benchmark: memq's retrieval quality on BEIR collections (SciFact, NFCorpus), every mode.

Not a test. One run indexes a collection through memq's own store (one Markdown file per
document, ``title + " " + text``, chunked by memq's chunker, FTS5 rows written by the producer's
``sync_files``), gives the chunks vectors from the default local model (all-MiniLM-L6-v2 through
llama.cpp), runs the split's queries through ``pipeline.query.search_store`` in each mode, and
prints nDCG@10, Recall@10, Recall@100 and MRR@10 per mode next to the published anchors.

A document's rank is the rank of its best chunk. Embedding the corpus takes minutes on a shared
2-core machine, so chunk and query vectors are cached on disk (``--cache``, keyed by chunk text
hash and model) and reused by later runs; the store itself is rebuilt each run.

    .venv/bin/python bench/eval_retrieval.py [--dataset scifact|nfcorpus] [--split test]
        [--modes keyword,vector,hybrid,rrf,hybrid+mmr] [--sweep] [--threads 2]
        [--data /work/shared/eval] [--cache ~/.cache/memq-eval]

``--sweep`` scores a grid of vector weights and RRF k/weights on the given split (use a
training split: ``--split train`` for SciFact, ``--split dev`` for NFCorpus); never tune on
``test``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.config import Settings, load_settings
from pipeline.embeddings.base import EmbeddingProvider
from pipeline.embeddings.registry import ProviderChoice, provider_key
from pipeline.producer import sync_files
from pipeline.query import search_store
from pipeline.store import writer
from pipeline.store.engine import Database, connect
from pipeline.store.schema import ensure_schema

DEFAULT_DATA = Path("/work/shared/eval")
DEFAULT_CACHE = Path.home() / ".cache" / "memq-eval"
DEPTH = 100  # documents ranked per query (R@100 needs 100)

#: Published nDCG@10 on the test split (see /work/shared/eval/README.md for sources).
PUBLISHED: dict[str, list[tuple[str, float]]] = {
    "scifact": [("BM25 (BEIR paper .. OpenSearch)", 0.665), ("BM25 Anserini flat", 0.6789),
                ("BM25 OpenSearch", 0.691), ("all-MiniLM-L6-v2 (MTEB)", 0.6451),
                ("hybrid BM25+ColBERT-MiniLM (Vespa)", 0.679)],
    "nfcorpus": [("BM25 (BEIR paper)", 0.325), ("BM25 Anserini flat", 0.3218),
                 ("BM25 OpenSearch", 0.343), ("all-MiniLM-L6-v2 (MTEB)", 0.3159),
                 ("hybrid BM25+ColBERT-MiniLM (Vespa)", 0.350)],
}

#: Config (memq.json keys) per mode; every mode ranks DEPTH documents with no score floor.
MODES: dict[str, dict[str, Any]] = {
    "keyword": {"provider": "none"},
    "vector": {"query": {"hybrid": {"enabled": False}}},
    "hybrid": {"query": {"hybrid": {"fusion": "weighted"}}},
    "rrf": {"query": {"hybrid": {"fusion": "rrf"}}},
    "hybrid+mmr": {"query": {"hybrid": {"fusion": "weighted", "mmr": {"enabled": True}}}},
}


def _file_name(doc_id: str) -> str:
    return re.sub(r"[^\w.-]", "_", doc_id) + ".md"


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 3:
            qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    return qrels


def write_workspace(corpus: list[dict[str, Any]], root: Path) -> dict[str, str]:
    """One Markdown file per document under ``root/memory/docs``; returns path -> doc id."""
    folder = root / "memory" / "docs"
    folder.mkdir(parents=True, exist_ok=True)
    by_path = {}
    for doc in corpus:
        name = _file_name(doc["_id"])
        text = (doc.get("title", "") + " " + doc.get("text", "")).strip()
        (folder / name).write_text(text + "\n", encoding="utf-8")
        by_path[f"memory/docs/{name}"] = doc["_id"]
    return by_path


class VectorCache:
    """Vectors by text hash in one ``.npz`` per model, so reruns skip the slow embedding."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.vectors: dict[str, np.ndarray] = {}
        if path.exists():
            with np.load(path) as data:
                self.vectors = {k: data[k] for k in data.files}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, **self.vectors)
        tmp.replace(self.path)


def embed_chunks(db: Database, provider: EmbeddingProvider, cache: VectorCache) -> None:
    """Give every pending chunk a vector: from the cache, else from ``provider`` (and cache it)."""
    rows = db.conn.execute("SELECT rowid, id, hash, text FROM chunks WHERE state = 'pending' "
                           "ORDER BY rowid").fetchall()
    pending = [writer.PendingChunk(*row) for row in rows]
    missing = [p for p in pending if p.hash not in cache.vectors]
    started = time.monotonic()
    for n, chunk in enumerate(missing, 1):
        cache.vectors[chunk.hash] = provider.embed_documents([chunk.text])[0]
        if n % 250 == 0 or n == len(missing):
            cache.save()
            rate = n / (time.monotonic() - started)
            print(f"  embedded {n}/{len(missing)} chunks ({rate:.1f}/s)", file=sys.stderr)
    writer.attach_cached(db, pending, {p.hash: cache.vectors[p.hash] for p in pending})


class CachedQueries:
    """An embedding provider wrapper that serves query vectors from a :class:`VectorCache`."""

    def __init__(self, provider: EmbeddingProvider, cache: VectorCache) -> None:
        self.provider, self.cache = provider, cache

    def embed_query(self, text: str) -> np.ndarray:
        key = "q:" + text
        if key not in self.cache.vectors:
            self.cache.vectors[key] = self.provider.embed_query(text)
        return self.cache.vectors[key]


def ndcg_at(ranked: list[str], rel: dict[str, int], k: int = 10) -> float:
    dcg = sum((2 ** rel.get(d, 0) - 1) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in rel.values() if g > 0), reverse=True)[:k]
    idcg = sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: list[str], rel: dict[str, int], k: int) -> float:
    relevant = {d for d, g in rel.items() if g > 0}
    return len(relevant & set(ranked[:k])) / len(relevant) if relevant else 0.0


def mrr_at(ranked: list[str], rel: dict[str, int], k: int = 10) -> float:
    for i, d in enumerate(ranked[:k]):
        if rel.get(d, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def rank_documents(db: Database, settings: Settings, query: str, provider: Any,
                   by_path: dict[str, str]) -> list[str]:
    out = search_store(db, settings, query, max_results=3 * DEPTH, min_score=0.0,
                       provider=provider)
    ranked = dict.fromkeys(by_path[r["path"]] for r in out["results"])
    return list(ranked)[:DEPTH]


def evaluate(db: Database, settings: Settings, provider: Any, queries: dict[str, str],
             qrels: dict[str, dict[str, int]], by_path: dict[str, str]) -> dict[str, float]:
    sums = {"nDCG@10": 0.0, "R@10": 0.0, "R@100": 0.0, "MRR@10": 0.0}
    ids = [q for q in qrels if q in queries]
    for qid in ids:
        ranked = rank_documents(db, settings, queries[qid], provider, by_path)
        rel = qrels[qid]
        sums["nDCG@10"] += ndcg_at(ranked, rel)
        sums["R@10"] += recall_at(ranked, rel, 10)
        sums["R@100"] += recall_at(ranked, rel, 100)
        sums["MRR@10"] += mrr_at(ranked, rel)
    return {k: v / max(1, len(ids)) for k, v in sums.items()}


def settings_for(base: dict[str, Any], mode: dict[str, Any], tmp: Path) -> Settings:
    merged = json.loads(json.dumps(base))
    _deep_update(merged, mode)
    cfg = tmp / f"memq-{abs(hash(json.dumps(merged, sort_keys=True)))}.json"
    cfg.write_text(json.dumps(merged))
    return load_settings(config_file=cfg, env={})


def _deep_update(target: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _deep_update(target[key], value)
        else:
            target[key] = value


def print_table(title: str, rows: Iterable[tuple[str, dict[str, float]]]) -> None:
    print(f"\n{title}\n")
    print("| mode | nDCG@10 | R@10 | R@100 | MRR@10 |")
    print("|---|---|---|---|---|")
    for name, m in rows:
        print(f"| {name} | {m['nDCG@10']:.4f} | {m['R@10']:.4f} | {m['R@100']:.4f} "
              f"| {m['MRR@10']:.4f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="scifact", choices=["scifact", "nfcorpus"])
    ap.add_argument("--split", default="test")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--sweep", action="store_true", help="grid of weights / RRF k on --split")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--limit", type=int, default=0, help="only the first N queries (smoke runs)")
    ap.add_argument("--vector-weight", type=float, default=None,
                    help="vectorWeight (textWeight = 1 - it) for the fused modes, e.g. a value "
                         "tuned with --sweep on a training split; default: memq's 0.7")
    ap.add_argument("--rrf-k", type=int, default=None, help="rrfK for the rrf mode (default 60)")
    args = ap.parse_args(argv)

    data = args.data / args.dataset
    corpus = load_jsonl(data / "corpus.jsonl")
    queries = {q["_id"]: q["text"] for q in load_jsonl(data / "queries.jsonl")}
    qrels = load_qrels(data / "qrels" / f"{args.split}.tsv")
    if args.limit:
        qrels = dict(list(qrels.items())[: args.limit])

    from pipeline.embeddings.local import LocalProvider

    provider = LocalProvider(None, threads=args.threads)
    cache = VectorCache(args.cache / args.dataset / f"{provider.model}.npz")
    with tempfile.TemporaryDirectory(prefix=f"memq-eval-{args.dataset}-") as tmp_name:
        tmp = Path(tmp_name)
        by_path = write_workspace(corpus, tmp / "workspace")
        base = {"workspace": str(tmp / "workspace"), "provider": "local",
                "store": {"path": str(tmp / "memq.sqlite")}, "local": {"threads": args.threads}}
        settings = settings_for(base, {}, tmp)
        db = connect(settings.store.path, want_vectors=settings.store.vector_enabled)
        ensure_schema(db)
        spec_key = provider_key(provider.name, provider.model)
        from pipeline.embeddings.registry import ProviderSpec

        spec = ProviderSpec(provider.name, provider.model, spec_key, {"model_path": None})
        started = time.monotonic()
        report = sync_files(db, settings, ProviderChoice(provider, spec, "eval"))
        chunks = db.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        print(f"{args.dataset}: {report.files} documents -> {chunks} chunks "
              f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
        if args.sweep or set(args.modes.split(",")) != {"keyword"}:
            embed_chunks(db, provider, cache)
        queried = CachedQueries(provider, cache)

        if args.sweep:
            rows = []
            grid: list[tuple[str, dict[str, Any]]] = [
                (f"weighted v={w}", {"vectorWeight": w, "textWeight": round(1 - w, 2)})
                for w in (0.3, 0.4, 0.5, 0.6, 0.7)]
            grid += [(f"rrf k={k} v={w}", {"fusion": "rrf", "rrfK": k, "vectorWeight": w,
                                           "textWeight": round(1 - w, 2)})
                     for k, w in ((60, 0.5), (60, 0.7), (20, 0.5), (100, 0.5))]
            for label, hybrid in grid:
                s = settings_for(base, {"query": {"hybrid": hybrid}}, tmp)
                rows.append((label, evaluate(db, s, queried, queries, qrels, by_path)))
                print(f"  {label}: {rows[-1][1]['nDCG@10']:.4f}", file=sys.stderr)
            print_table(f"{args.dataset} {args.split} ({len(qrels)} queries): sweep", rows)
        else:
            rows = []
            tuned: dict[str, Any] = {}
            if args.vector_weight is not None:
                tuned.update(vectorWeight=args.vector_weight,
                             textWeight=round(1 - args.vector_weight, 4))
            if args.rrf_k is not None:
                tuned.update(rrfK=args.rrf_k)
            for name in args.modes.split(","):
                mode = json.loads(json.dumps(MODES[name]))
                if name not in ("keyword", "vector"):
                    mode["query"]["hybrid"].update(tuned)
                s = settings_for(base, mode, tmp)
                use = None if name == "keyword" else queried
                t0 = time.monotonic()
                metrics = evaluate(db, s, use, queries, qrels, by_path)
                print(f"  {name}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
                rows.append((name, metrics))
            print_table(f"memq on {args.dataset} {args.split} ({len(qrels)} queries, "
                        f"{chunks} chunks, {provider.model}; fused modes: "
                        f"{json.dumps(tuned) if tuned else 'defaults'})", rows)
            print("\nPublished nDCG@10 (test split):\n")
            for label, value in PUBLISHED[args.dataset]:
                print(f"- {label}: {value:.4f}")
        cache.save()
        db.close()
    provider.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
