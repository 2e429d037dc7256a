"""``memq eval``: index a collection through the normal pipeline and score every mode.

A folder is read as a BEIR collection (nDCG@10, Recall@10/100, MRR@10 per mode); a ``.json``
file as LoCoMo (recall@k of the evidence turns per question category), or, when it holds the
changed-facts cases (an object with ``changed`` and ``unique`` lists, such as
``tests/data/changed_facts.json``), as those (:mod:`memq.evaluation.changed_facts`: each recency
setting's share of newer values shown first and old unique answers kept).
"""

from __future__ import annotations

import json
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from memq.evaluation import beir, changed_facts, locomo, report
from memq.evaluation.workspace import MODES, EvalWorkspace, default_work_dir

BEIR_MODES = list(MODES)
LOCOMO_MODES = ["keyword", "vector", "hybrid", "rrf", "hybrid+mmr", "hybrid+decay", "defaults",
                "superseded"]


def read_base(config: str | None) -> dict[str, Any]:
    """memq.json/memq.toml keys every mode starts from (default: the local model)."""
    if not config:
        return {"provider": "local"}
    path = Path(config)
    text = path.read_text(encoding="utf-8")
    keys = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    if not isinstance(keys, dict):
        raise ValueError(f"{path}: expected an object of memq config keys")
    for key in ("workspace", "store"):
        keys.pop(key, None)  # the evaluation's own folder decides both
    return keys


def fused_keys(vector_weight: float | None, rrf_k: int | None) -> dict[str, Any]:
    keys: dict[str, Any] = {}
    if vector_weight is not None:
        if not 0 <= vector_weight <= 1:
            raise ValueError("--vector-weight must be between 0 and 1")
        keys.update(vectorWeight=vector_weight, textWeight=round(1 - vector_weight, 6))
    if rrf_k is not None:
        keys["rrfK"] = rrf_k
    return keys


def evaluate(collection: Path, *, split: str | None = None, limit: int = 0,
             modes: list[str] | None = None, work_dir: Path | None = None,
             base: dict[str, Any] | None = None, fused: dict[str, Any] | None = None,
             layouts: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Run the evaluation; returns the figures and a Markdown rendering (``text``). LoCoMo
    runs once per layout (default :data:`memq.evaluation.locomo.LAYOUTS`), each in its own
    folder; a BEIR folder is scored on ``split`` (default ``test``). An option the kind of
    collection has no use for is refused (ValueError), never silently ignored."""
    if not collection.exists():
        raise ValueError(f"{collection} does not exist")
    kind = ("changed-facts" if collection.is_file() and _is_changed_facts(collection)
            else "locomo" if collection.is_file() else "beir")
    refuse_unused(kind, split=split, modes=modes, fused=fused, layouts=layouts)
    work_dir = work_dir or default_work_dir(collection)
    started = time.monotonic()
    log = _stderr
    if kind == "changed-facts":
        figures = changed_facts.run(work_dir, base, changed_facts.load(collection), limit=limit,
                                    log=log)
        first = next(iter(figures.values()))
        title = (f"Changed facts {collection.name}: {first['changed']} changed facts, "
                 f"{first['unique']} old unique answers, memq's default ranking per recency "
                 f"setting")
        out = {"kind": "changed-facts", "figures": figures,
               "table": report.changed_facts_table(figures)}
    elif kind == "locomo":
        modes = modes or LOCOMO_MODES
        figures: Any = {}
        tables = []
        for layout in layouts or locomo.LAYOUTS:
            conversations = locomo.load(collection, layout)
            figures[layout] = locomo.run(work_dir / layout, base, conversations, modes, limit,
                                         log=log, fused=fused)
            tables.append(f"Layout `{layout}`: turn-level R@k\n\n"
                          f"{report.locomo_table(figures[layout])}\n\n"
                          f"Layout `{layout}`: session-level S@k\n\n"
                          f"{report.locomo_table(figures[layout], 'S')}")
        title = (f"LoCoMo {collection.name}: recall@k of evidence turns and sessions "
                 f"(k in chunks; {len(conversations)} conversations)")
        out = {"kind": "locomo", "figures": figures, "table": "\n\n".join(tables)}
    else:
        modes = modes or BEIR_MODES
        split = split or "test"
        data = beir.load_collection(collection, split, limit)
        work = EvalWorkspace(work_dir, base)
        indexed, figures = beir.run(work, data, modes, fused, log=log)
        indexed.close()
        tuned = json.dumps(fused) if fused else "defaults"
        title = (f"{data.name} {split}: {len(data.qrels)} queries, {indexed.chunks} chunks, "
                 f"model {indexed.model}; fused modes: {tuned}")
        out = {"kind": "beir", "split": split, "queries": len(data.qrels),
               "chunks": indexed.chunks, "model": indexed.model, "figures": figures,
               "table": report.beir_table(figures)}
    out.update(collection=str(collection), workDir=str(work_dir), fused=fused or {},
               seconds=round(time.monotonic() - started, 1))
    out["text"] = f"{title}\n\n{out['table']}"
    return out


def refuse_unused(kind: str, *, split: str | None, modes: list[str] | None,
                  fused: dict[str, Any] | None, layouts: tuple[str, ...] | None) -> None:
    """Raise ValueError naming the options a ``kind`` of collection (``beir``, ``locomo``,
    ``changed-facts``) has no use for: a split is BEIR's, a layout LoCoMo's, and the
    changed-facts cases score memq's default ranking per recency setting (no modes, no fused
    keys)."""
    unused = []
    if split is not None and kind != "beir":
        unused.append("--split (a BEIR folder's qrels split)")
    if layouts is not None and kind != "locomo":
        unused.append("--layout (LoCoMo's)")
    if kind == "changed-facts":
        if modes:
            unused.append("--modes (the changed-facts cases score memq's default ranking "
                          "per recency setting)")
        if fused:
            unused.append("--vector-weight/--rrf-k (the changed-facts cases score memq's "
                          "default ranking)")
    if unused:
        raise ValueError(f"not used with a {kind} collection: {'; '.join(unused)}")


def _is_changed_facts(path: Path) -> bool:
    """Whether a ``.json`` collection holds changed-facts cases rather than LoCoMo (a list)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # LoCoMo's loader says what is wrong with it
    return isinstance(data, dict) and "changed" in data and "unique" in data


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)
