"""Benchmark: keyword-score calibrations of the weighted merge, side by side (issue 36 item 2).

Not a test. Each variant replaces the keyword score the weighted merge adds
(:func:`pipeline.search.calibration.keyword_scores`) and the collection is searched again
through ``memq eval``'s own path (``search_store``: entry weights, MMR, decay as the mode says)
on stores ``memq eval`` already indexed (``--work-dir``), so only the query side runs:

  best       r / r_best: the best keyword hit scores 1.0 (memq before issue 36 item 2)
  pair       r_i / max_j bm25_j(max(|D_j|, |D_i|)): each hit against the best any hit
             would have at its length or longer (memq's ``keywordScore: "length"``,
             off by default)
  sat        r / (1 + r): OpenClaw's absolute transform
  second     min(1, r / r_2nd): share of the second best

The study of 2026-12-07 (b46ec25) also had ``floor<c>``, ``clamp`` and ``entries``; they
read per-row term counts the held statistics no longer keep, and lost to ``pair``.

Tune on SciFact ``train``, NFCorpus ``dev`` and one LoCoMo conversation only.

    PYTHONPATH=. .venv/bin/python bench/calibration_variants.py --collection DIR_OR_JSON
        --work-dir DIR [--split train] [--variants best,pair] [--modes hybrid,defaults]
        [--drops]

``--quick``: a small generated memory (a MEMORY.md of one-line entries beside paragraph
notes, keyword-only provider), each variant's keyword score of the answering note.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from memq.evaluation import beir, locomo
from memq.evaluation.workspace import MODES, EvalWorkspace, search
from pipeline.search import calibration, fusion
from pipeline.store.engine import Database
from pipeline.store.postings import TextStats

Scorer = Callable[[Database, str, dict[int, float]], dict[int, float]]
_production = calibration.keyword_scores


def best(db: Database, query: str, ranks: dict[int, float]) -> dict[int, float]:
    return fusion.share_of_best(ranks)


def sat(db: Database, query: str, ranks: dict[int, float]) -> dict[int, float]:
    return fusion.text_scores(ranks)


def second(db: Database, query: str, ranks: dict[int, float]) -> dict[int, float]:
    mags = {r: -v for r, v in ranks.items()}
    ordered = sorted(mags.values(), reverse=True)
    ref = ordered[1] if len(ordered) > 1 else (ordered[0] if ordered else 0.0)
    return {r: min(1.0, m / ref) for r, m in mags.items()} if ref > 0 else mags


def pair(db: Database, query: str, ranks: dict[int, float]) -> dict[int, float]:
    return _production(db, query, ranks, rule="length")


def variant(name: str) -> Scorer:
    return {"best": best, "sat": sat, "second": second, "pair": pair}[name]


def use(name: str) -> None:
    """Make ``name`` the weighted merge's keyword score, whatever ``query.hybrid.keywordScore``
    says."""
    chosen = variant(name)

    def score(db: Database, query: str, ranks: dict[int, float],
              stats: TextStats | None = None, *, rule: str) -> dict[int, float]:
        if chosen is pair:  # with the held statistics the search passes
            return _production(db, query, ranks, stats, rule="length")
        return chosen(db, query, ranks)

    calibration.keyword_scores = score  # type: ignore[assignment]


def drops(collection: Path, work_dir: Path, min_score: float = 0.35) -> dict[str, float]:
    """Calibration across chunk sizes on LoCoMo: every (question, evidence note chunk) that
    clears ``min_score`` in the ``notes`` layout, and how many of them no longer do once the
    observation facts are MEMORY.md entries beside the same notes (``memory`` layout)."""
    kept = lost = 0
    shift: list[float] = []
    stores: dict[str, list] = {}
    for layout in ("notes", "memory"):
        stores[layout] = []
        for conv in locomo.load(collection, layout):
            work = EvalWorkspace(work_dir / layout / conv.sample_id)
            work.sync_files(conv.files)
            stores[layout].append((conv, work, work.index(warn=lambda _m: None)))
    for (conv, work, notes), (_, mwork, memory) in zip(stores["notes"], stores["memory"],
                                                          strict=True):
        settings = work.settings(MODES["hybrid"], name="hybrid")
        msettings = mwork.settings(MODES["hybrid"], name="hybrid")
        for q in conv.questions:
            before = {(h["path"], h["startLine"]): h for h in
                      search(notes, settings, "hybrid", q.text, 24, now=conv.asked_at)}
            after = {(h["path"], h["startLine"]): h["score"] for h in
                     search(memory, msettings, "hybrid", q.text, 200, now=conv.asked_at)}
            for key, hit in before.items():
                if hit["score"] < min_score or not (
                        locomo.turns_found([hit], conv) & set(q.evidence)):
                    continue
                kept += 1
                now_score = after.get(key, 0.0)
                shift.append(now_score - hit["score"])
                lost += now_score < min_score
    for rows in stores.values():
        for _, _, indexed in rows:
            indexed.close()
    return {"answeringAboveMinScore": kept, "lostBesideEntries": lost,
            "meanScoreShift": round(sum(shift) / len(shift), 4) if shift else 0.0}


def per_conversation(collection: Path, work_dir: Path, variants: list[str], modes: list[str],
                     layouts: list[str], limit: int) -> None:
    """LoCoMo, one JSON line per (layout, conversation, variant): the figures over all its
    questions (weigh by ``questions`` to pool conversations), printed as each finishes."""
    for layout in layouts:
        for conv in locomo.load(collection, layout):
            for name in variants:
                use(name)
                figs = locomo.run(work_dir / layout, None, [conv], modes, limit,
                                  log=lambda _m: None)
                print(json.dumps({"layout": layout, "conversation": conv.sample_id,
                                  "variant": name, "figures": {
                                      m: {k: round(v, 4) for k, v in figs[m]["all"].items()}
                                      for m in modes}}), flush=True)


NOTE = ("The platform team reviewed where the Kubernetes cluster should live. After comparing "
        "prices, support and latency for the customers in Europe, they moved the cluster to "
        "Hetzner in Falkenstein, and the old provider's account is being closed this month.")


def quick(variants: list[str]) -> None:
    """A memory of one-line entries, ten daily notes and the note that answers; the answering
    note's keyword score (keyword-only store: no model) under each variant, with the entry
    that names its words and without."""
    from pipeline.search.retrievers import keyword_hits
    with tempfile.TemporaryDirectory() as tmp:
        for with_entry in (False, True):
            work = EvalWorkspace(Path(tmp) / str(with_entry), {"provider": "none"})
            facts = [f"- Fact {n}: the team prefers tool {n} for task {n}." for n in range(20)]
            if with_entry:
                facts.append("- Kubernetes cluster now runs on Hetzner.")
            files = {"MEMORY.md": "\n".join(facts) + "\n",
                     "memory/2026-11-30.md": "# 2026-11-30\n\n" + NOTE + "\n"}
            for day in range(1, 11):
                files[f"memory/2026-12-{day:02d}.md"] = (
                    f"# 2026-12-{day:02d}\n\n" + " ".join(
                        f"Worked on item {day}-{n} with the team and wrote it down."
                        for n in range(12)) + "\n")
            work.sync_files(files)
            indexed = work.index(warn=lambda _m: None)
            query = "where does the kubernetes cluster run"
            ranks = keyword_hits(indexed.db, query, 24, None)
            note = indexed.db.conn.execute(
                "SELECT rowid FROM chunks WHERE path = 'memory/2026-11-30.md'").fetchone()[0]
            label = "with the entry" if with_entry else "without entries"
            for name in variants:
                score = variant(name)(indexed.db, query, ranks).get(note, 0.0)
                print(f"  {name:<10} {label:<16} answering note {score:.3f}")
            indexed.close()


def header() -> str:
    repo = Path(__file__).resolve().parent.parent
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "0000000"
    dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"],
                           capture_output=True, text=True).stdout.strip()
    load = os.getloadavg()[0]
    stamp = dt.datetime.now().isoformat(timespec="seconds")
    return (f"memq calibration variants benchmark  {stamp}  commit={commit}"
            f"{'+changes' if dirty else ''}  nproc={os.cpu_count()}  load(1 min)={load:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collection", type=Path)
    ap.add_argument("--work-dir", type=Path)
    ap.add_argument("--split", default="test")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--variants", default="best,pair,sat,second")
    ap.add_argument("--modes", default="hybrid,defaults")
    ap.add_argument("--layouts", default="notes,memory")
    ap.add_argument("--drops", action="store_true",
                    help="LoCoMo: answering notes pushed under minScore by the entries")
    ap.add_argument("--quick", action="store_true", help="a small generated memory, no model")
    args = ap.parse_args()
    print(header(), flush=True)
    variants = args.variants.split(",")
    if args.quick:
        quick(variants)
        return
    if args.collection is None or args.work_dir is None:
        ap.error("--collection and --work-dir are required (or --quick)")
    modes = args.modes.split(",")
    if args.collection.suffix == ".json" and not args.drops:
        per_conversation(args.collection, args.work_dir, variants, modes,
                         args.layouts.split(","), args.limit)
        return
    for name in variants:
        use(name)
        started = time.monotonic()
        if args.drops:
            res = drops(args.collection, args.work_dir)
        else:
            data = beir.load_collection(args.collection, args.split, args.limit)
            work = EvalWorkspace(args.work_dir)
            indexed, figs = beir.run(work, data, modes, log=lambda _m: None)
            indexed.close()
            res = {m: {k: round(v, 4) for k, v in f.items()} for m, f in figs.items()}
        print(json.dumps({"variant": name, "seconds": round(time.monotonic() - started),
                          "figures": res}), flush=True)


if __name__ == "__main__":
    main()
