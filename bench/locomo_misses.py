"""Benchmark: why hybrid search misses LoCoMo evidence turns at k = 6, counted by cause.

Not a test. On stores ``memq eval`` already built (``--work-dir``, one folder per layout and
conversation), every question of the chosen conversations (default: conv-26, the tuning
conversation) is searched as ``memq eval``'s ``hybrid`` mode does (weighted fusion, MMR and
decay off; other modes with ``--mode``). Its candidates are each retriever's first
``6 x candidateMultiplier`` (24) chunks; the same search is also run for 24 results with 24
candidates per side (``candidateMultiplier`` 1), so its first six are the real hits and the
rest shows where the others landed. For every evidence turn no hit covers, the cause:

  several-found   the question has several evidence turns and some are found: the six places
                  went to its other evidence, or to chunks near it
  ranked-7-24     none found; the turn's chunk is ranked 7th to 24th
  below-24        none found; a retriever returned the turn's chunk among its 24 candidates,
                  but the ranking (fusion, decay, MMR) put it after the 24th place
  outside-pool    none found; neither retriever returned it among its 24 candidates

and, across causes, what the turn shares with the question: no content word at all (a
vocabulary gap keyword search cannot cross), whether the turn's text lies in one chunk or two
(overlap), and the question's category. ``--show N`` prints N missed questions with the hits
that took the places.

    PYTHONPATH=. .venv/bin/python bench/locomo_misses.py --collection locomo10.json
        --work-dir DIR [--layout notes] [--conversations conv-26] [--mode hybrid] [--show 10]
        [--keys '{"query": {"hybrid": {...}}}'] [--records FILE] [--json] [--quick]

``--keys`` adds memq.json keys to the mode (a candidate fix measured on the same stores).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path
from typing import Any

from harness import header, scratch

from memq.evaluation import locomo
from memq.evaluation.workspace import MODES, EvalWorkspace, Indexed, deep_update, search

K = 6
_WORD = re.compile(r"[a-z0-9']+")
_STOP_WORDS = """a about after again all also am an and any are as at be been before being
both but by can could did do does doing down during each few for from had has have having he
her here hers herself him himself his how i if in into is it its itself just me more most my
myself no nor not now of off on once only or other our ours out over own same she should so
some such than that the their theirs them then there these they this those through to too
under until up very was we were what when where which while who whom why will with would you
your yours did does what's kind type"""
STOP = frozenset(_STOP_WORDS.split())


def content_words(text: str) -> set[str]:
    """Lower-case words of ``text`` minus stop words, a crude stem (plural ``s`` off)."""
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w
            for w in _WORD.findall(text.lower()) if w not in STOP}


def turn_texts(conv: locomo.Conversation) -> dict[str, str]:
    """dia_id -> the text of its line."""
    out = {}
    for turn, (path, line) in conv.lines.items():
        out[turn] = conv.files[path].split("\n")[line - 1]
    return out


def covering(hits: list[dict[str, Any]], conv: locomo.Conversation, turn: str) -> list[int]:
    """1-based places of the hits that hold ``turn`` (its line, or an entry citing it)."""
    return [i + 1 for i, h in enumerate(hits) if turn in locomo.turns_found([h], conv)]


def chunk_ranges(indexed: Indexed) -> list[tuple[str, int, int]]:
    """Every chunk of the store: (path, start line, end line)."""
    return [tuple(r) for r in indexed.db.conn.execute(
        "SELECT path, start_line, end_line FROM chunks ORDER BY path, start_line")]


def chunks_holding(ranges: list[tuple[str, int, int]], conv: locomo.Conversation,
                   turn: str) -> list[tuple[str, int, int]]:
    """The chunks that hold ``turn`` (its line, or an entry citing it)."""
    out = []
    for path, start, end in ranges:
        lines = conv.cites.get(path, {})
        if any(start <= line <= end and turn in cited for line, cited in lines.items()):
            out.append((path, start, end))
    return out


def analyse(conv: locomo.Conversation, indexed: Indexed, work: EvalWorkspace, mode: str,
            keys: dict[str, Any], show: int, shown: list[int]) -> list[dict[str, Any]]:
    """One record per question of ``conv``: its evidence, what was found at k = 6 and, for
    each missed turn, its cause and features."""
    mode_keys = deep_update(json.loads(json.dumps(MODES[mode])), keys)
    base = work.settings(mode_keys, name=f"misses-{mode}")
    multiplier = base.query.hybrid.candidate_multiplier
    pool_keys = deep_update(json.loads(json.dumps(mode_keys)),
                            {"query": {"hybrid": {"candidateMultiplier": 1}}})
    pool_settings = work.settings(pool_keys, name=f"misses-{mode}-pool")
    side_settings = {side: work.settings(deep_update(json.loads(json.dumps(MODES[side])),
                                                     {"query": {"hybrid": {
                                                         "candidateMultiplier": 1}}}),
                                         name=f"misses-{side}-pool")
                     for side in ("keyword", "vector")}
    texts = turn_texts(conv)
    names = {content_words(t.split("] ", 1)[-1].split(":", 1)[0]).pop()
             for t in texts.values() if content_words(t.split("] ", 1)[-1].split(":", 1)[0])}
    ranges = chunk_ranges(indexed)
    records = []
    for q in conv.questions:
        top = search(indexed, base, mode, q.text, K, now=conv.asked_at)
        depth = K * multiplier
        pool = search(indexed, pool_settings, mode, q.text, depth, now=conv.asked_at)
        sides = [h for side, settings in side_settings.items()
                 if mode != "keyword" or side == "keyword"
                 for h in search(indexed, settings, side, q.text, depth, now=conv.asked_at)]
        found = locomo.turns_found(top, conv)
        holders = {t: chunks_holding(ranges, conv, t) for t in q.evidence}
        missed = []
        for turn in q.evidence:
            if turn in found:
                continue
            places = covering(pool, conv, turn)
            words = content_words(q.text) & content_words(texts.get(turn, ""))
            if any(t in found for t in q.evidence):
                cause = "several-found"
            elif places:
                cause = "ranked-7-24"
            elif covering(sides, conv, turn):
                cause = "below-24"
            else:
                cause = "outside-pool"
            missed.append({"turn": turn, "cause": cause,
                           "place": places[0] if places else None,
                           "chunksHolding": len(holders[turn]),
                           "sharedWords": sorted(words), "onlyNames": words <= names,
                           "text": texts.get(turn, "")[:200]})
        record = {"question": q.text, "category": locomo.CATEGORIES.get(q.category),
                  "evidence": q.evidence, "found": sorted(found & set(q.evidence)),
                  "recall": locomo.recall(found, q.evidence)[0], "missed": missed,
                  "evidenceChunks": len({min(h) for h in holders.values() if h}),
                  "top": [(h["path"], h["startLine"], h["endLine"], round(h["score"], 3),
                           round(h.get("textScore") or 0, 3), round(h.get("vectorScore") or 0, 3))
                          for h in top]}
        records.append(record)
        if missed and len(shown) < show:
            shown.append(1)
            print(json.dumps(record, indent=1), file=sys.stderr)
    return records


def summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts of missed turns by cause, by shared words and by category; R@6."""
    causes: collections.Counter[str] = collections.Counter()
    no_words: collections.Counter[str] = collections.Counter()
    only_names: collections.Counter[str] = collections.Counter()
    category: collections.Counter[str] = collections.Counter()
    places: collections.Counter[str] = collections.Counter()
    lost = 0.0
    for r in records:
        lost += 1 - r["recall"]
        for m in r["missed"]:
            causes[m["cause"]] += 1
            category[r["category"]] += 1
            if not m["sharedWords"]:
                no_words[m["cause"]] += 1
            if m["onlyNames"]:
                only_names[m["cause"]] += 1
            if m["place"] is not None:
                places["7-12" if m["place"] <= 12 else "13-24" if m["place"] <= 24 else "25+"] += 1
    n = len(records)
    return {"questions": n, "R@6": round(1 - lost / n, 4) if n else 0.0,
            "questionsMissing": sum(1 for r in records if r["missed"]),
            "recallLost": round(lost, 2),
            "missedTurns": sum(causes.values()), "byCause": dict(causes),
            "noSharedWordByCause": dict(no_words), "onlyNamesByCause": dict(only_names),
            "byCategory": dict(category),
            "poolPlaces": dict(places)}


QUICK_SAMPLE = {
    "sample_id": "quick",
    "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bob",
        **{f"session_{n}_date_time": f"10:00 am on {n} May, 2023" for n in range(1, 5)},
        **{f"session_{n}": [{"speaker": "Ann" if t % 2 else "Bob", "dia_id": f"D{n}:{t}",
                             "text": f"Session {n} turn {t}: the {w} was {v}."}
                            for t, (w, v) in enumerate([("garden", "green"), ("kettle", "loud"),
                                                        ("boat", "blue"), ("river", "cold")],
                                                       start=1)]
           for n in range(1, 5)},
    },
    "qa": [{"question": "What colour was the boat?", "category": 4,
            "evidence": ["D1:3", "D2:3", "D3:3", "D4:3"]},
           {"question": "Was the river cold?", "category": 1, "evidence": ["D4:4"]},
           {"question": "Who baked bread?", "category": 2, "evidence": ["D2:1"]}],
}


def quick_collection(folder: Path) -> Path:
    """A one-conversation LoCoMo file for ``--quick`` (its figures mean nothing)."""
    path = folder / "quick-locomo.json"
    path.write_text(json.dumps([QUICK_SAMPLE]))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collection", type=Path)
    ap.add_argument("--work-dir", type=Path)
    ap.add_argument("--layout", default="notes", choices=locomo.LAYOUTS)
    ap.add_argument("--conversations", default="conv-26")
    ap.add_argument("--mode", default="hybrid", choices=sorted(MODES))
    ap.add_argument("--keys", default="{}", help="memq.json keys added to the mode")
    ap.add_argument("--show", type=int, default=0, help="print N missed questions")
    ap.add_argument("--records", type=Path, help="write every question's record (JSON lines)")
    ap.add_argument("--json", action="store_true", help="the summary as JSON")
    ap.add_argument("--quick", action="store_true",
                    help="a tiny generated conversation, keyword-only: a smoke run")
    args = ap.parse_args()
    with scratch("memq-bench-misses-", keep=False) as tmp:
        base = None
        if args.quick:
            args.collection, args.work_dir = quick_collection(tmp), tmp / "work"
            args.conversations, args.mode, base = "quick", "keyword", {"provider": "none"}
        elif args.collection is None or args.work_dir is None:
            ap.error("--collection and --work-dir are required (or --quick)")
        print(header("LoCoMo misses", layout=args.layout, mode=args.mode, keys=args.keys,
                     quick=args.quick), flush=True)
        found = summary(collect(args, base))
    if args.json:
        print(json.dumps(found, indent=1))
    print(f"{found['questions']} questions, R@6 {found['R@6']:.4f}; "
          f"{found['questionsMissing']} miss a turn")
    print(f"  missed turns {found['missedTurns']}")
    for cause in ("several-found", "ranked-7-24", "below-24", "outside-pool"):
        print(f"  {cause:<14} {found['byCause'].get(cause, 0)} turns, "
              f"{found['noSharedWordByCause'].get(cause, 0)} sharing no word with the question, "
              f"{found['onlyNamesByCause'].get(cause, 0)} only the speakers' names")
    for group, count in sorted(found["byCategory"].items()):
        print(f"  category {group}: {count} turns")


def collect(args: argparse.Namespace, base: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every chosen conversation's question records (:func:`analyse`)."""
    wanted = set(args.conversations.split(","))
    keys = json.loads(args.keys)
    records: list[dict[str, Any]] = []
    shown: list[int] = []
    for conv in locomo.load(args.collection, args.layout):
        if conv.sample_id not in wanted and "all" not in wanted:
            continue
        work = EvalWorkspace(args.work_dir / args.layout / conv.sample_id, base)
        work.sync_files(conv.files)
        indexed = work.index(warn=lambda _m: None)
        try:
            records += analyse(conv, indexed, work, args.mode, keys, args.show, shown)
        finally:
            indexed.close()
    if args.records:
        args.records.write_text("".join(json.dumps(r) + "\n" for r in records))
    return records


if __name__ == "__main__":
    main()
