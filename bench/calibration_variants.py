"""Benchmark: keyword-score calibrations of the weighted merge, side by side (issue 36 item 2).

Not a test. Each variant replaces the keyword score the weighted merge adds (today
:func:`pipeline.search.fusion.share_of_best`, ``r / r_best``) and the collection is searched
again through ``memq eval``'s own path (``search_store``: entry weights, MMR, decay as the mode
says) on stores ``memq eval`` already indexed (``--work-dir``), so only the query side runs:

  best         r / r_best (today): the best keyword hit scores 1.0
  sat          r / (1 + r): OpenClaw's absolute transform
  ub<c>        min(1, r / (c * U)), U the query's maximum attainable BM25 (every query term
               at full saturation: sum of idf * (k1 + 1)), independent of the other hits
  anchor<c>    min(1, r / min(r_best, c * U)): share of the best, but a best above c * U (a
               short entry that saturates every term) does not lower the others
  second       min(1, r / r_2nd): share of the second best
  perkind      r / r_best, the best taken among entries (MEMORY.md, USER.md) and among the
               other chunks apart
  entries      memq's choice (share_of_best with the entry rows): entries r / r_best, the
               other chunks r / (the best among them)

Tune on SciFact ``train``, NFCorpus ``dev`` and one LoCoMo conversation only.

    PYTHONPATH=. .venv/bin/python bench/calibration_variants.py --collection DIR_OR_JSON
        --work-dir DIR [--split train] [--variants best,ub0.5] [--modes hybrid,defaults]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

from memq.evaluation import beir, locomo
from memq.evaluation.workspace import MODES, EvalWorkspace, search
from pipeline.search import fusion, hybrid
from pipeline.search.fts import match_terms

K1 = 1.2  # FTS5's bm25() constant
_seen: dict[str, object] = {}
_production = fusion.share_of_best


def attainable_bm25(db, query: str) -> float:  # type: ignore[no-untyped-def]
    """Σ idf·(k1+1) over the query's phrases that some row holds (FTS5 counting the rows):
    the highest BM25 any row could reach, whatever the other rows are."""
    conn = db.conn
    rows = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    total = 0.0
    for phrase in match_terms(query):
        hits = conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?",
                            (phrase,)).fetchone()[0]
        if hits:
            idf = math.log((rows - hits + 0.5) / (hits + 0.5))
            total += (idf if idf > 0.0 else 1e-6) * (K1 + 1.0)
    return total
_original_keyword_hits = hybrid.keyword_hits


def _keyword_hits(db, query, *args, **kwargs):  # type: ignore[no-untyped-def]
    _seen["db"], _seen["query"] = db, query
    return _original_keyword_hits(db, query, *args, **kwargs)


def _upper() -> float:
    return attainable_bm25(_seen["db"], str(_seen["query"]))  # type: ignore[arg-type]


def _magnitudes(ranks: dict[int, float]) -> dict[int, float]:
    return {r: -v for r, v in ranks.items()}


def best(ranks: dict[int, float]) -> dict[int, float]:
    return fusion.relative(_magnitudes(ranks))


def sat(ranks: dict[int, float]) -> dict[int, float]:
    return fusion.text_scores(ranks)


def ub(c: float) -> Callable[[dict[int, float]], dict[int, float]]:
    def score(ranks: dict[int, float]) -> dict[int, float]:
        u = _upper() * c
        if u <= 0:
            return best(ranks)
        return {r: min(1.0, m / u) for r, m in _magnitudes(ranks).items()}
    return score


def anchor(c: float) -> Callable[[dict[int, float]], dict[int, float]]:
    def score(ranks: dict[int, float]) -> dict[int, float]:
        mags = _magnitudes(ranks)
        top = max(mags.values(), default=0.0)
        u = _upper() * c
        ref = min(top, u) if u > 0 else top
        return {r: min(1.0, m / ref) for r, m in mags.items()} if ref > 0 else mags
    return score


def second(ranks: dict[int, float]) -> dict[int, float]:
    mags = _magnitudes(ranks)
    ordered = sorted(mags.values(), reverse=True)
    ref = ordered[1] if len(ordered) > 1 else (ordered[0] if ordered else 0.0)
    return {r: min(1.0, m / ref) for r, m in mags.items()} if ref > 0 else mags


ENTRY_FILES = ("MEMORY.md", "USER.md")


def perkind(ranks: dict[int, float]) -> dict[int, float]:
    """Share of the best within entries (MEMORY.md, USER.md) and within the rest apart."""
    db = _seen["db"]
    mags = _magnitudes(ranks)
    if not mags:
        return mags
    marks = ",".join("?" * len(mags))
    paths = dict(db.conn.execute(  # type: ignore[attr-defined]
        f"SELECT rowid, path FROM chunks WHERE rowid IN ({marks})", list(mags)))
    kind = {r: Path(paths.get(r, "")).name in ENTRY_FILES for r in mags}
    tops = {k: max((m for r, m in mags.items() if kind[r] == k), default=0.0)
            for k in (True, False)}
    return {r: m / tops[kind[r]] if tops[kind[r]] > 0 else m for r, m in mags.items()}


def variant(name: str) -> Callable[[dict[int, float]], dict[int, float]]:
    if name.startswith("ub"):
        return ub(float(name[2:]))
    if name.startswith("anchor"):
        return anchor(float(name[6:]))
    if name == "entries":  # memq's share_of_best: entries apart from the other chunks
        return _production
    return {"best": best, "sat": sat, "second": second, "perkind": perkind}[name]


def drops(collection: Path, work_dir: Path, min_score: float = 0.35) -> dict[str, float]:
    """Calibration across chunk sizes on LoCoMo: every (question, evidence note chunk) that
    clears ``min_score`` in the ``notes`` layout, and how many of them no longer do once the
    observation facts are MEMORY.md entries beside the same notes (``memory`` layout)."""
    kept = lost = 0
    shift: list[float] = []
    stores = {}
    for layout in ("notes", "memory"):
        convs = locomo.load(collection, layout)
        stores[layout] = []
        for conv in convs:
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
            "lostShare": round(lost / kept, 4) if kept else 0.0,
            "meanScoreShift": round(sum(shift) / len(shift), 4) if shift else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collection", required=True, type=Path)
    ap.add_argument("--work-dir", required=True, type=Path)
    ap.add_argument("--split", default="test")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--variants", default="best,sat,ub0.35,ub0.5,anchor0.35,anchor0.5,second")
    ap.add_argument("--modes", default="hybrid,defaults")
    ap.add_argument("--layouts", default="notes,memory")
    ap.add_argument("--drops", action="store_true",
                    help="LoCoMo: answering notes pushed under minScore by the entries")
    args = ap.parse_args()
    hybrid.keyword_hits = _keyword_hits  # type: ignore[assignment]
    modes = args.modes.split(",")
    variants = args.variants.split(",")
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


def use(name: str) -> None:
    """Make ``name`` the weighted merge's keyword score."""
    chosen = variant(name)
    fusion.share_of_best = (  # type: ignore[assignment]
        chosen if chosen is _production
        else lambda ranks, entries=frozenset(), f=chosen: f(ranks))


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


if __name__ == "__main__":
    main()
