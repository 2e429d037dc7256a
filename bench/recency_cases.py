"""Benchmark: recency settings on dated notes in which facts change (issue 36 item 3).

Not a test. The cases of ``tests/data/changed_facts.json`` (:mod:`memq.evaluation.changed_facts`)
are laid out as one memory of dated notes, indexed once through ``run_index`` (the local
model unless ``--config`` says otherwise) and asked with memq's default ranking (hybrid, MMR,
``maxResults`` 6, ``minScore`` 0.35) under each recency setting: decay off, OpenClaw's decay
(half-life 30 days), memq's ``minFactor`` floors and superseded recency
(``mode: "superseded"``) per cosine threshold. Per setting: the share of changed facts
whose newer note is shown first, of those whose old value is shown first, of the unique old
answers still shown, and of all questions answered as a memory should (new first, or kept).

    PYTHONPATH=. .venv/bin/python bench/recency_cases.py [--work-dir DIR] [--config memq.json]
        [--floors 0.5,0.75] [--superseded 0.4] [--bands 0]
        [--limit N] [--json] [--quick]

``--quick``: the first 4 cases of each kind, keyword-only (no model): a smoke run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness import header, scratch

from memq.evaluation import changed_facts
from memq.evaluation.command import read_base


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work-dir", type=Path, help="keep the store here (default: a scratch "
                    "folder removed at the end)")
    ap.add_argument("--config", help="memq.json/.toml with the provider keys (default: local)")
    ap.add_argument("--cases", type=Path, default=changed_facts.CASES)
    ap.add_argument("--floors", default="0.5,0.75", help="minFactor values (0.5,0.75)")
    ap.add_argument("--superseded", default="0.4",
                    help="superseded recency's cosine thresholds (0.4)")
    ap.add_argument("--bands", default="0", help="superseded recency's relevance bands (0)")
    ap.add_argument("--limit", type=int, default=0, help="the first N cases of each kind")
    ap.add_argument("--json", action="store_true", help="every outcome, as JSON")
    ap.add_argument("--quick", action="store_true",
                    help="4 cases of each kind, keyword-only: a smoke run")
    args = ap.parse_args(argv)
    base = {"provider": "none"} if args.quick else read_base(args.config)
    limit = 4 if args.quick else args.limit
    print(header("recency cases", cases=args.cases.name, limit=limit, quick=args.quick),
          flush=True)
    data = changed_facts.load(args.cases)
    with scratch("memq-bench-recency-", keep=False) as tmp:
        floors = tuple(float(f) for f in args.floors.split(",") if f)
        similar = tuple(float(f) for f in args.superseded.split(",") if f)
        bands = tuple(float(f) for f in args.bands.split(",") if f)
        figures = changed_facts.run(args.work_dir or tmp / "work", base, data,
                                    changed_facts.decays(floors, similar, bands), limit=limit,
                                    log=lambda m: print(m, file=sys.stderr))
    if args.json:
        print(json.dumps(figures, indent=1))
    first = next(iter(figures.values()))
    print(f"{first['changed']} changed facts, {first['unique']} unique old answers; "
          f"shares of the questions:")
    print(f"  {'setting':<26} {'new first':>9} {'old first':>9} {'kept':>6} {'both':>6}")
    for name, f in figures.items():
        print(f"  {name:<26} {f['newFirst']:>9.3f} {f['oldFirst']:>9.3f} {f['kept']:>6.3f} "
              f"{f['both']:>6.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
