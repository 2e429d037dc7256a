"""Benchmark: search latency at 10k and 100k chunks (384 dims) against the hardware floor.

Not a test. For each size, a store is filled with synthetic chunks (a few note lines each,
keyword-searchable through FTS5) and random unit vectors (float32, sqlite-vec ``vec0``), then
one run times, over the same queries:

  memq vector-only   ``search_store`` with hybrid off (vectors held in memory, result rows)
  memq keyword-only  ``search_store`` with no provider (BM25 from the statistics held in
                     memory, result rows)
  memq keyword-only, FTS5  the same without ``held=HeldCopies()``: FTS5 ranks every match
  memq hybrid        ``search_store`` with hybrid on (in-memory scan beside in-memory BM25,
                     fusion, result rows): what the MCP server and library callers run
  memq hybrid, vec0  the same without ``held=HeldCopies()``: vec0 KNN and FTS5 instead of the
                     in-memory copies, what a one-shot ``memq search`` runs
  keyword scores     the weighted merge's keyword score of the hybrid search's keyword hits
                     alone (24 here): each hit at its length
                     (:mod:`pipeline.search.calibration`, from the held statistics, and from
                     FTS5's tables as the one-shot path reads them) beside the plain share of
                     the best it replaced (issue 36 item 2)
  vec0 KNN alone     ``pipeline.store.vectors.knn`` (the k-nearest query vec0 answers)
  numpy brute force  ``matrix @ q`` + ``argpartition`` over the same vectors already in RAM,
                     one BLAS thread (SQLite uses one core too), and the same with
                     ``np.einsum``: the floor for an exact search is the faster of the two
                     (the ratios use it)
  OpenClaw full scan ``ORDER BY vec_distance_cosine(embedding, ?) LIMIT k`` joined to the
                     chunk rows, as OpenClaw queries (no KNN ``MATCH``)

The query embedding is excluded: the provider is a stub whose ``embed_query`` returns a
prepared random unit vector. The one-off loads are timed apart: the in-memory vectors, the
BM25 row lengths and the chunk rows, with the memory the rows take (once per process, and
again after the store changes), and each query word's postings (on the word's first search;
every query also carries a word of its own, ``q<i>``, which no chunk holds; its cut and its
empty posting are made once, before the timed loop, when the keyword-score rows' ranks are
computed, so the timed searches find every word cut). Before timing, the in-memory and
SQLite paths are checked to give identical results. The methods take turns query by query
(load drift on a shared machine hits all alike). Defaults are OpenClaw's (maxResults
6, candidateMultiplier 4: 24 candidates per side). Reported: p50 and p95 in milliseconds,
and ratios to numpy; and the p50 of the CPU time each call took on its thread, with its ratio:
on a busy shared machine a call that runs longer is more often made to wait for a core, which
the wall-clock ratio counts against it and the CPU ratio does not.

    .venv/bin/python bench/query_latency.py [--sizes 10000,100000] [--queries 100]
                                            [--scan-queries 5] [--seed 7] [--keep]
                                            [--json timings.json] [--quick]
"""

from __future__ import annotations

import os

# One BLAS thread for the whole run: OpenBLAS's threads keep spinning after a product and
# would slow the rows timed after it (on 2 busy cores a threaded ``matrix @ q`` of 10,000 rows
# takes 15-25 ms). memq's own scans of up to 32,768 rows use no BLAS thread at all
# (pipeline.store.vectors.cosines), so this only keeps the numpy floor honest.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from harness import add_common_args, header, scratch
from notes import bullet

from pipeline.config import Settings, load_settings
from pipeline.search import calibration, fusion
from pipeline.search.hybrid import HeldCopies, search_store
from pipeline.search.retrievers import keyword_hits
from pipeline.store import schema
from pipeline.store.engine import Database, connect
from pipeline.store.vectors import knn, put_vectors, to_blob

DIMS = 384
BATCH = 5000
ONE_THREAD = "numpy einsum, one thread (in RAM)"
#: Searches compared with their SQLite-only twin before timing (fewer when fewer queries).
CHECKED = 10
#: The smallest store measured: more chunks than a search's candidates (numpy's top-k).
MIN_CHUNKS = 100
QUERY_WORDS = ["Postgres", "migration", "Berlin", "latency", "outage", "Alice", "licence",
               "flight", "Kafka", "dashboard", "holiday", "credentials", "disk", "invalidation",
               "rotation", "runbook", "budget", "Osaka", "vacuum", "spike"]


class FixedQueryVector:
    """Benchmark-only provider stub: ``embed_query`` hands back a prepared vector, no model."""

    max_input_bytes = 8000

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors

    @property
    def dims(self) -> int:
        return DIMS

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError("the query benchmark never embeds documents")

    def embed_query(self, text: str) -> np.ndarray:
        return self.vectors[text]


def rss_mib() -> float:
    """This process's resident memory in MiB (Linux ``/proc/self/status``)."""
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIMS), dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


def build_store(path: Path, n: int, seed: int) -> tuple[Database, np.ndarray]:
    """``n`` chunk rows of 4 note lines in 1 file per 50 chunks, with random unit vectors."""
    rng, text_rng = np.random.default_rng(seed), random.Random(seed)
    db = connect(path)
    schema.ensure_schema(db)
    with schema.transaction(db):
        schema.set_meta(db, "index", {"provider": "bench", "model": "stub", "provider_key": "k"})
    matrix = np.empty((n, DIMS), dtype=np.float32)
    now = time.time()
    for start in range(0, n, BATCH):
        rows, count = [], min(BATCH, n - start)
        for i in range(start, start + count):
            text = "\n".join("- " + bullet(text_rng) for _ in range(4))
            rows.append((i + 1, f"c{i}", f"memory/f{i // 50:05d}.md", "memory", 1 + i % 50 * 4,
                         4 + i % 50 * 4, f"h{i}", text, now))
        vectors = unit_vectors(rng, count)
        matrix[start:start + count] = vectors
        with schema.transaction(db) as conn:
            conn.executemany(
                "INSERT INTO chunks(rowid, id, path, source, start_line, end_line, hash, text, "
                "state, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'ready', ?)", rows)
            put_vectors(db, [r[0] for r in rows], vectors)
    db.conn.execute("PRAGMA optimize")
    return db, matrix


def settings_for(tmp: Path, store: Path, hybrid: bool) -> Settings:
    cfg = tmp / f"memq-{'hybrid' if hybrid else 'vector'}.json"
    cfg.write_text(json.dumps({"provider": "none", "store": {"path": str(store)},
                               "query": {"hybrid": {"enabled": hybrid}}}), encoding="utf-8")
    return load_settings(config_file=cfg, workspace=tmp, env={})


def numpy_topk(matrix: np.ndarray, query: np.ndarray, k: int, *, one_thread: bool = False
               ) -> np.ndarray:
    sims = np.einsum("ij,j->i", matrix, query) if one_thread else matrix @ query
    top = np.argpartition(-sims, k)[:k]
    return top[np.argsort(-sims[top])]


def openclaw_scan(db: Database, query: np.ndarray, k: int) -> list[tuple]:
    return db.conn.execute(
        "SELECT c.rowid, c.path, c.start_line, c.end_line, c.text, c.source, "
        "vec_distance_cosine(v.embedding, ?) AS dist FROM chunks_vec v "
        "JOIN chunks c ON c.rowid = v.rowid ORDER BY dist ASC LIMIT ?",
        (to_blob(query), k)).fetchall()


def interleaved(methods: list[tuple[str, Callable[[int], object], int]],
                cpu: dict[str, np.ndarray] | None = None) -> list[tuple[str, np.ndarray]]:
    """Time every method on query i before any on query i+1, so load drift on a shared machine
    hits all of them alike; ``(name, fn, count)`` runs ``fn(i)`` for the first ``count`` i.
    The wall-clock milliseconds per method; ``cpu``, when given, gets the calling thread's CPU
    milliseconds too (what a call costs without the waits for a core a busy machine adds)."""
    for _, fn, _ in methods:
        fn(0)  # warm-up: page cache, statement cache
    times: dict[str, list[float]] = {name: [] for name, _, _ in methods}
    spent: dict[str, list[float]] = {name: [] for name, _, _ in methods}
    for i in range(max(count for _, _, count in methods)):
        for name, fn, count in methods:
            if i < count:
                c0, t0 = time.thread_time(), time.perf_counter()
                fn(i)
                times[name].append(time.perf_counter() - t0)
                spent[name].append(time.thread_time() - c0)
    if cpu is not None:
        cpu.update((name, np.array(spent[name]) * 1000.0) for name, _, _ in methods)
    return [(name, np.array(times[name]) * 1000.0) for name, _, _ in methods]


def run_size(tmp: Path, n: int, args: argparse.Namespace, cpu: dict[str, np.ndarray]
             ) -> list[tuple[str, np.ndarray]]:
    """Every row's wall-clock milliseconds per query at ``n`` chunks (``cpu``: filled with the
    CPU milliseconds)."""
    store = tmp / f"q{n}.sqlite"
    t0 = time.perf_counter()
    db, matrix = build_store(store, n, args.seed)
    print(f"  built {n} chunks in {time.perf_counter() - t0:.1f} s "
          f"({store.stat().st_size / 1e6:.0f} MB store)", flush=True)
    rng, words = np.random.default_rng(args.seed + 1), random.Random(args.seed + 1)
    texts = [" ".join(words.sample(QUERY_WORDS, 3)) + f" q{i}" for i in range(args.queries)]
    qvecs = unit_vectors(rng, args.queries)
    stub = FixedQueryVector(dict(zip(texts, qvecs, strict=True)))
    hybrid, vector_only = settings_for(tmp, store, True), settings_for(tmp, store, False)
    k = hybrid.query.candidates()
    held = HeldCopies()
    t0 = time.perf_counter()
    held.matrices.get(db)
    print(f"  loaded the vectors into memory in {time.perf_counter() - t0:.2f} s (once per "
          "process and vectors version)", flush=True)
    t0 = time.perf_counter()
    held.text_stats.current(db)
    held.text_stats.wait()
    stats = held.text_stats.current(db)
    print(f"  loaded the BM25 row lengths in {time.perf_counter() - t0:.2f} s (once per "
          "process and text version)", flush=True)
    before, t0 = rss_mib(), time.perf_counter()
    rows = held.rows.get(db)
    if rows is None:
        raise SystemExit("the chunk rows were not held")
    print(f"  held the chunk rows in {time.perf_counter() - t0:.2f} s, RSS +"
          f"{rss_mib() - before:.1f} MiB (once per process and store change)", flush=True)
    first, fts = [], []
    for word in QUERY_WORDS:  # a word's first search loads its postings
        t0 = time.perf_counter()
        keyword_hits(db, word, k, None, stats)
        first.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        keyword_hits(db, word, k, None)
        fts.append(time.perf_counter() - t0)
    print(f"  a query word's first search (loads its postings): p50 "
          f"{np.median(first) * 1000:.1f} ms; FTS5 for the same word: "
          f"{np.median(fts) * 1000:.1f} ms", flush=True)
    for i in range(min(CHECKED, args.queries)):
        checked = search_store(db, hybrid, texts[i], provider=stub, min_score=-1.0, held=held)
        if len(checked) != hybrid.query.max_results:
            raise SystemExit(f"hybrid search returned {len(checked)} results")
        if checked != search_store(db, hybrid, texts[i], provider=stub, min_score=-1.0):
            raise SystemExit("hybrid search differs between the in-memory copies and SQLite")
    exact = set(numpy_topk(matrix, qvecs[0], k) + 1)
    if {r for r, _ in knn(db, qvecs[0], k)} != exact:
        raise SystemExit("vec0 KNN and numpy disagree on the nearest chunks")
    q = args.queries
    ranks = [keyword_hits(db, text, k, None, stats) for text in texts]
    rows = interleaved([
        ("memq vector-only",
         lambda i: search_store(db, vector_only, texts[i], provider=stub, held=held), q),
        ("memq keyword-only",
         lambda i: search_store(db, hybrid, texts[i], provider=None, held=held), q),
        ("memq keyword-only, FTS5", lambda i: search_store(db, hybrid, texts[i], provider=None),
         q),
        ("memq hybrid", lambda i: search_store(db, hybrid, texts[i], provider=stub, held=held), q),
        ("memq hybrid, vec0 (one-shot CLI path)",
         lambda i: search_store(db, hybrid, texts[i], provider=stub), q),
        ("keyword scores: at length, held",
         lambda i: calibration.keyword_scores(db, texts[i], ranks[i], stats, rule="length"), q),
        ("keyword scores: at length, FTS5",
         lambda i: calibration.keyword_scores(db, texts[i], ranks[i], rule="length"), q),
        ("keyword scores: share of best", lambda i: fusion.share_of_best(ranks[i]),
         q),
        ("vec0 KNN alone (knn)", lambda i: knn(db, qvecs[i], k), q),
        ("numpy brute force (in RAM)", lambda i: numpy_topk(matrix, qvecs[i], k), q),
        (ONE_THREAD, lambda i: numpy_topk(matrix, qvecs[i], k, one_thread=True), q),
        ("OpenClaw ORDER BY vec_distance_cosine", lambda i: openclaw_scan(db, qvecs[i], k),
         args.scan_queries),
    ], cpu)
    held.close()
    db.close()
    return rows


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer no smaller than ``low``."""
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}")
        return value
    return parse


def sizes_list(text: str) -> list[int]:
    """``--sizes``: comma-separated chunk counts, each at least :data:`MIN_CHUNKS`."""
    try:
        return [at_least(MIN_CHUNKS)(s) for s in text.split(",")]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=sizes_list, default="10000,100000",
                    help=f"chunk counts, each >= {MIN_CHUNKS} (10000,100000)")
    ap.add_argument("--queries", type=at_least(1), default=100,
                    help="queries per memq/numpy row, >= 1 (100)")
    ap.add_argument("--scan-queries", type=at_least(1), default=5,
                    help="queries for the slow OpenClaw full scan, >= 1 (5)")
    ap.add_argument("--json", type=Path, help="also write the timings (ms) to this JSON file")
    ap.add_argument("--quick", action="store_true",
                    help="2000 chunks, 20 queries, 2 full scans: a smoke run of every row")
    add_common_args(ap)
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.queries, args.scan_queries = [2000], 20, 2
    sizes = args.sizes
    print(header("query latency", dims=DIMS, queries=args.queries,
                 full_scan_queries=args.scan_queries), flush=True)
    report: dict[str, dict[str, list[float]]] = {}
    with scratch("memq-bench-q-", args.keep) as tmp:
        for n in sizes:
            print(f"\n{n} chunks", flush=True)
            cpu: dict[str, np.ndarray] = {}
            rows = run_size(tmp, n, args, cpu)
            report[str(n)] = {name: ms.tolist() for name, ms in rows}
            floor, cpu_floor = (min(float(np.percentile(times[name], 50))
                                    for name in ("numpy brute force (in RAM)", ONE_THREAD))
                                for times in (dict(rows), cpu))
            print(f"  {'search':<40}{'p50 ms':>9}{'p95 ms':>9}{'p50/numpy':>11}"
                  f"{'cpu p50':>9}{'cpu/numpy':>11}")
            for name, ms in rows:
                p50, p95 = np.percentile(ms, [50, 95])
                used = float(np.percentile(cpu[name], 50))
                print(f"  {name:<40}{p50:>9.2f}{p95:>9.2f}{p50 / floor:>10.2f}x"
                      f"{used:>9.2f}{used / cpu_floor:>10.2f}x")
            hyb = float(np.percentile(dict(rows)["memq hybrid"], 50))
            scan = float(np.percentile(dict(rows)["OpenClaw ORDER BY vec_distance_cosine"], 50))
            ok = "OK" if hyb <= 1.5 * floor and hyb < 30 else "ABOVE TARGET"
            hyb_cpu = float(np.percentile(cpu["memq hybrid"], 50))
            print(f"  hybrid p50 {hyb:.2f} ms = {hyb / floor:.2f}x the faster numpy "
                  f"(target <= 1.5x and < 30 ms: {ok}); CPU time {hyb_cpu / cpu_floor:.2f}x; "
                  f"OpenClaw full scan / memq hybrid: {scan / hyb:.1f}x")
    if args.json:
        args.json.write_text(json.dumps(report), encoding="utf-8")


if __name__ == "__main__":
    main()
