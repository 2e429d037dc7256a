"""The chunker before and after version 2 (issue 16), side by side in one run.

Version 2 caps the overlap carried from a long line (``pipeline/ingest/chunking.py``). This
script indexes the same BEIR sub-collections twice through the normal pipeline (``memq eval``'s
code: the local model, the embedded fleet), once with the chunker as it was before version 2
(read from git at ``--before``, the commit before the change) and once with today's, each into
its own store (so neither run's embedding cache serves the other), and prints per collection:
chunks, characters embedded, the longest chunk, the index wall time and nDCG@10 per mode.

A sub-collection keeps every query of the split (or the first ``--queries``), the documents
they judge relevant, and then corpus documents in file order up to ``--docs``: small enough to
embed on 2 cores in minutes, with the same relevant documents as the full collection.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from evalsets import add_data_arg, sub_collection
from harness import add_common_args, add_quick_arg, header, scratch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

BEFORE = "a6700ca~1"  # the parent of "chunking: cap the overlap carried from a long line"
MODES = ["keyword", "vector", "hybrid"]


def old_chunker(commit: str) -> types.ModuleType:
    """``pipeline/ingest/chunking.py`` as it was at ``commit``, as a module of its own."""
    try:
        source = subprocess.run(["git", "-C", str(REPO), "show",
                                 f"{commit}:pipeline/ingest/chunking.py"],
                                check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"cannot read the old chunker from git at {commit}: {exc}") from exc
    module = types.ModuleType("chunking_before")
    module.__file__ = f"{commit}:pipeline/ingest/chunking.py"
    sys.modules[module.__name__] = module  # dataclasses look their module up there
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


@contextmanager
def chunker(module: types.ModuleType | None):
    """Index with ``module``'s ``chunk_markdown`` (None: today's)."""
    from pipeline.ingest import producer

    today = producer.chunk_markdown
    if module is not None:
        producer.chunk_markdown = module.chunk_markdown
    try:
        yield
    finally:
        producer.chunk_markdown = today


def measure(collection: Path, work: Path, threads: int, modes: list[str]) -> dict[str, Any]:
    """Index ``collection`` into ``work`` with the chunker in effect; chunk figures, index
    time and nDCG@10 per mode (keyword alone: no embeddings, ``provider: none``)."""
    from memq.evaluation import beir
    from memq.evaluation.workspace import EvalWorkspace

    data = beir.load_collection(collection, "test")
    space = EvalWorkspace(work, {"provider": "none"} if modes == ["keyword"] else
                          {"provider": "local", "local": {"threads": threads}})
    files, ids = beir.memory_files(data.corpus)
    space.sync_files(files)
    started = time.monotonic()
    indexed = space.index(warn=lambda m: print(m, file=sys.stderr))
    index_s = time.monotonic() - started
    try:
        chunks, chars, longest = indexed.db.conn.execute(
            "SELECT count(*), sum(length(text)), max(length(text)) FROM chunks").fetchone()
        scores = beir.score_modes(space, indexed, data, ids, modes)
    finally:
        indexed.close()
    return {"chunks": chunks, "chars": chars, "longest": longest, "index_s": index_s,
            "ndcg": {m: scores[m]["nDCG@10"] for m in modes}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(ap)
    ap.add_argument("--before", default=BEFORE, help="git commit of the old chunker")
    ap.add_argument("--collections", default="scifact:0:1000,nfcorpus:30:1500",
                    help="name:queries:docs,... under --data (queries 0 = all)")
    add_data_arg(ap)
    add_quick_arg(ap, collections="scifact:5:40", threads=1)
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    ap.add_argument("--modes", default=",".join(MODES),
                    help="search modes to score (keyword alone indexes without embeddings)")
    args = ap.parse_args()
    modes = args.modes.split(",")
    if unknown := set(modes) - set(MODES):
        raise SystemExit(f"unknown mode(s): {', '.join(sorted(unknown))} (known: {MODES})")
    old = old_chunker(args.before)
    print(header("chunking versions", before=args.before,
                 collections=args.collections, threads=args.threads, modes=args.modes))
    with scratch("memq-chunking-", args.keep) as root:
        for spec in args.collections.split(","):
            name, queries, docs = spec.split(":")
            folder = root / name
            n_queries, n_docs = sub_collection(args.data / name, folder, int(queries), int(docs))
            print(f"\n{name} test: {n_queries} queries, {n_docs} documents")
            print(f"{'chunker':<12}{'chunks':>8}{'chars':>11}{'longest':>9}{'index s':>9}"
                  + "".join(f"{'nDCG ' + m:>15}" for m in modes))
            rows = {}
            for label, module in (("before", old), ("version 2", None)):
                with chunker(module):
                    r = rows[label] = measure(folder, root / f"{name}-{label}", args.threads,
                                              modes)
                print(f"{label:<12}{r['chunks']:>8,}{r['chars']:>11,}{r['longest']:>9,}"
                      f"{r['index_s']:>9.1f}" + "".join(f"{r['ndcg'][m]:>15.4f}" for m in modes),
                      flush=True)
            b, a = rows["before"], rows["version 2"]
            print(f"after/before: chunks {a['chunks'] / b['chunks']:.3f}, chars "
                  f"{a['chars'] / b['chars']:.3f}, index time {a['index_s'] / b['index_s']:.3f}")


if __name__ == "__main__":
    main()
