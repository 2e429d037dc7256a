"""Where the benchmarks find the public evaluation data sets, and small slices of them.

The data sets (SciFact, NFCorpus from BEIR; LoCoMo) live beside the repository in
``../shared/eval`` (see its README.md for their public sources); ``--data`` points elsewhere.
A sub-collection keeps a split's first judged queries, the documents they judge relevant and
then corpus documents in file order: small enough to embed in seconds (``--quick``) or minutes,
with the same relevant documents as the full collection.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

#: The data sets' folder: ``shared/eval`` beside the repository (``<repo>/../shared/eval``).
EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval"

#: The ``--quick`` slice: judged queries and documents.
QUICK_QUERIES, QUICK_DOCS = 5, 40


def add_data_arg(ap: argparse.ArgumentParser) -> None:
    """The ``--data`` flag: the folder holding one sub-folder per data set."""
    ap.add_argument("--data", type=Path, default=EVAL,
                    help="folder of the data sets (default: ../shared/eval beside the repo)")


def sub_collection(source: Path, target: Path, queries: int, docs: int, split: str = "test"
                   ) -> tuple[int, int]:
    """Write a BEIR folder at ``target``: the first ``queries`` judged queries of ``split``
    (0: all), their relevant documents, then corpus order up to ``docs``. Returns (queries,
    documents)."""
    qrels_lines = (source / "qrels" / f"{split}.tsv").read_text().splitlines()
    head, rows = qrels_lines[0], [line.split("\t") for line in qrels_lines[1:] if line.strip()]
    kept_queries = list(dict.fromkeys(qid for qid, _, _ in rows))
    if queries:
        kept_queries = kept_queries[:queries]
    wanted = set(kept_queries)
    rows = [r for r in rows if r[0] in wanted]
    relevant = {doc for _, doc, score in rows if int(score) > 0}
    corpus = [json.loads(line) for line in (source / "corpus.jsonl").read_text().splitlines()
              if line.strip()]
    chosen = [d for d in corpus if d["_id"] in relevant]
    for d in corpus:
        if len(chosen) >= max(docs, len(relevant)):
            break
        if d["_id"] not in relevant:
            chosen.append(d)
    (target / "qrels").mkdir(parents=True, exist_ok=True)
    (target / "qrels" / f"{split}.tsv").write_text(
        "\n".join([head, *("\t".join(r) for r in rows)]) + "\n")
    (target / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in chosen))
    all_queries = [json.loads(line) for line in
                   (source / "queries.jsonl").read_text().splitlines() if line.strip()]
    (target / "queries.jsonl").write_text(
        "".join(json.dumps(q) + "\n" for q in all_queries if q["_id"] in wanted))
    return len(kept_queries), len(chosen)


def quick_collection(source: Path, tmp: Path, split: str) -> Path:
    """The ``--quick`` slice of ``source`` (``QUICK_QUERIES`` queries of ``split``, about
    ``QUICK_DOCS`` documents), written under ``tmp``; its folder (named as the data set)."""
    target = tmp / "quick" / source.name
    sub_collection(source, target, QUICK_QUERIES, QUICK_DOCS, split)
    return target
