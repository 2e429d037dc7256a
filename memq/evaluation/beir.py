"""BEIR-format collections: one Markdown memory file per document, documents ranked by chunk.

A collection folder holds ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl``
(``_id``, ``text``) and ``qrels/<split>.tsv`` (``query-id corpus-id score`` with a header).
Each document becomes ``memory/docs/<id>.md`` holding ``title + " " + text`` (BEIR's, MTEB's and
Pyserini's document text). A document's rank is the rank of its best chunk.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memq.evaluation.metrics import beir_metrics, mean
from memq.evaluation.workspace import EvalWorkspace, Indexed, mode_settings, search
from pipeline.errors import RequestRefused

DEPTH = 100  # documents ranked per query (R@100 needs 100)
CHUNKS_PER_QUERY = 3 * DEPTH  # documents span several chunks; ask for enough to fill DEPTH


class CollectionError(RequestRefused):
    """The folder is not a readable BEIR collection."""


@dataclass
class Collection:
    name: str
    corpus: list[dict[str, Any]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise CollectionError(f"{path}:{n}: not JSON: {exc}") from exc
    return rows


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    """``query id -> {document id: grade}``; the header line and blank lines are skipped."""
    qrels: dict[str, dict[str, int]] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        parts = line.split()
        if n == 0 and parts and not parts[-1].lstrip("-").isdigit():
            continue  # header
        if len(parts) >= 3:
            qrels.setdefault(parts[0], {})[parts[1]] = int(parts[-1])
    return qrels


def load_collection(folder: Path, split: str, limit: int = 0) -> Collection:
    """Read a BEIR folder; ``limit`` keeps only the split's first N judged queries."""
    needed = [folder / "corpus.jsonl", folder / "queries.jsonl", folder / "qrels" / f"{split}.tsv"]
    for path in needed:
        if not path.is_file():
            raise CollectionError(f"{path} is missing (expected a BEIR folder with corpus.jsonl, "
                                  f"queries.jsonl and qrels/{split}.tsv)")
    corpus = _jsonl(needed[0])
    queries = {str(q["_id"]): q["text"] for q in _jsonl(needed[1])}
    qrels = {q: rel for q, rel in load_qrels(needed[2]).items() if q in queries}
    if limit > 0:
        qrels = dict(list(qrels.items())[:limit])
    return Collection(folder.name, corpus, queries, qrels)


def file_name(doc_id: str) -> str:
    """A safe, injective-enough file name for a document id."""
    return re.sub(r"[^\w.-]", "_", doc_id) + ".md"


def memory_files(corpus: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, str]]:
    """(relative path -> Markdown text, relative path -> document id)."""
    files, ids = {}, {}
    for doc in corpus:
        rel = f"memory/docs/{file_name(str(doc['_id']))}"
        text = (doc.get("title", "") + " " + doc.get("text", "")).strip()
        files[rel], ids[rel] = text + "\n", str(doc["_id"])
    return files, ids


def rank_documents(hits: list[dict[str, Any]], ids: dict[str, str]) -> list[str]:
    """Document ids best first, each at the rank of its best chunk."""
    return list(dict.fromkeys(ids[h["path"]] for h in hits if h["path"] in ids))[:DEPTH]


def run(work: EvalWorkspace, collection: Collection, modes: list[str],
        fused: dict[str, Any] | None = None, log: Callable[[str], None] = print
        ) -> tuple[Indexed, dict[str, dict[str, float]]]:
    """Index the collection, then score every mode; returns the store and mode -> figures."""
    files, ids = memory_files(collection.corpus)
    work.sync_files(files)
    indexed = work.index(warn=log)
    log(f"{collection.name}: {len(files)} documents -> {indexed.chunks} chunks")
    return indexed, score_modes(work, indexed, collection, ids, modes, fused)


def score_modes(work: EvalWorkspace, indexed: Indexed, collection: Collection,
                ids: dict[str, str], modes: list[str], fused: dict[str, Any] | None = None
                ) -> dict[str, dict[str, float]]:
    figures = {}
    for name, settings in mode_settings(work, modes, fused).items():
        rows = []
        for qid, rel in collection.qrels.items():
            hits = search(indexed, settings, name, collection.queries[qid], CHUNKS_PER_QUERY)
            rows.append(beir_metrics(rank_documents(hits, ids), rel))
        figures[name] = mean(rows)
    return figures
