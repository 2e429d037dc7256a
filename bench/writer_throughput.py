"""Benchmark: vectors committed per second by the single writer, at several batch sizes.

Not a test. For each batch size B, a fresh store holds ``--chunks`` pending chunk rows (text in
FTS5 already, as the producer leaves them), and one run times, on the same vectors:

  memq writer   ``pipeline.store.results.apply_result`` on embed results of B chunks each,
                exactly as the ``store`` queue's task receives them (JSON-safe base64
                vectors): decode, refuse another model, drop stale chunks, vec0 insert, chunk
                state update, embedding cache upsert; one transaction per result;
  floor         the same vectors inserted into the same ``vec0`` table with a bare
                ``executemany``, one transaction per B vectors (what SQLite + sqlite-vec cost
                with none of the writer's checks and bookkeeping).

The results are built before timing (embedding and base64 encoding are the embed worker's job).

    .venv/bin/python bench/writer_throughput.py [--chunks 8192] [--batches 1,8,32,128]
                                                [--dims 384] [--keep]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np
from harness import add_common_args, add_quick_arg, header, scratch
from notes import bullet

from pipeline.config import Settings, load_settings
from pipeline.messages import ChunkVector, EmbedResult, ProviderSpec
from pipeline.store import schema
from pipeline.store.engine import Database, connect
from pipeline.store.results import apply_result
from pipeline.store.vectors import ensure_vector_table, to_blob

SPEC = ProviderSpec("bench", "stub", "k", {})


def pending_store(path: Path, n: int, seed: int) -> Database:
    """A store with ``n`` pending chunks of 4 note lines (FTS rows written by the trigger)."""
    rng = random.Random(seed)
    db = connect(path)
    schema.ensure_schema(db)
    now = time.time()
    with schema.transaction(db) as conn:
        schema.set_meta(db, "index", {"provider": SPEC.name, "model": SPEC.model,
                                      "provider_key": SPEC.provider_key})
        conn.executemany(
            "INSERT INTO chunks(rowid, id, path, source, start_line, end_line, hash, text, "
            "updated_at) VALUES (?, ?, ?, 'memory', 1, 4, ?, ?, ?)",
            [(i + 1, f"c{i}", f"memory/f{i // 20:04d}.md", f"h{i}",
              "\n".join("- " + bullet(rng) for _ in range(4)), now) for i in range(n)])
    return db


def run_writer(tmp: Path, settings: Settings, vectors: np.ndarray, batch: int,
               seed: int) -> float:
    store = tmp / f"writer-{batch}.sqlite"
    pending_store(store, len(vectors), seed).close()
    results = [
        EmbedResult("bench", SPEC, str(store),
                    tuple(ChunkVector(f"c{i}", f"h{i}", vectors[i])
                          for i in range(start, min(start + batch, len(vectors)))))
        for start in range(0, len(vectors), batch)
    ]
    db = connect(store)
    t0 = time.perf_counter()
    written = sum(apply_result(db, r).written for r in results)
    seconds = time.perf_counter() - t0
    db.close()
    if written != len(vectors):
        raise SystemExit(f"the writer wrote {written} of {len(vectors)} vectors")
    return seconds


def run_floor(tmp: Path, vectors: np.ndarray, batch: int, seed: int) -> float:
    db = pending_store(tmp / f"floor-{batch}.sqlite", len(vectors), seed)
    with schema.transaction(db):
        ensure_vector_table(db, vectors.shape[1])
    blobs = [(i + 1, to_blob(v)) for i, v in enumerate(vectors)]
    t0 = time.perf_counter()
    for start in range(0, len(blobs), batch):
        with schema.transaction(db) as conn:
            conn.executemany("INSERT INTO chunks_vec(rowid, embedding) VALUES (?, ?)",
                             blobs[start:start + batch])
    seconds = time.perf_counter() - t0
    db.close()
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=8192, help="vectors per batch size (8192)")
    ap.add_argument("--batches", default="1,8,32,128", help="chunks per result (1,8,32,128)")
    ap.add_argument("--dims", type=int, default=384)
    add_common_args(ap)
    add_quick_arg(ap, chunks=256, batches='1,8')
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    rng = np.random.default_rng(args.seed)
    vectors = rng.standard_normal((args.chunks, args.dims), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with scratch("memq-bench-w-", args.keep) as tmp:
        cfg = tmp / "memq.json"
        cfg.write_text(json.dumps({"provider": "none", "store": {"path": str(tmp / "x.sqlite")}}),
                       encoding="utf-8")
        settings = load_settings(config_file=cfg, workspace=tmp, env={})
        print(header("writer throughput", vectors=args.chunks, dims=args.dims))
        print()
        print(f"{'chunks per result':>17}{'memq writer vec/s':>19}{'floor vec/s':>13}"
              f"{'memq/floor time':>17}")
        # Alternate the two per batch size so load changes hit both alike.
        for batch in batches:
            floor = run_floor(tmp, vectors, batch, args.seed)
            memq = run_writer(tmp, settings, vectors, batch, args.seed)
            print(f"{batch:>17}{args.chunks / memq:>19.0f}{args.chunks / floor:>13.0f}"
                  f"{memq / floor:>16.2f}x", flush=True)


if __name__ == "__main__":
    main()
