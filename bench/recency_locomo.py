"""Benchmark: LoCoMo recall under recency settings, the tuning conversation apart (issue 36).

Not a test. On stores ``memq eval`` builds (``--work-dir``, one folder per layout and
conversation; built here when missing), every question is searched with memq's defaults
(hybrid, MMR, ``maxResults`` 6) under each recency setting: decay off, OpenClaw's decay,
and superseded recency (``temporalDecay.mode: "superseded"``) per cosine threshold and band.
R@1 / R@3 / R@6 of the evidence turns and S@6 (sessions), pooled by question over the tuning
conversation (conv-26, what settings are chosen on) and, apart, over the others (reported,
never chosen on).

    PYTHONPATH=. .venv/bin/python bench/recency_locomo.py --collection locomo10.json
        --work-dir DIR [--layout notes] [--superseded 0.4,0.5] [--bands 0,0.8]
        [--floors 0.75] [--tuning conv-26] [--only tuning|held-out|both] [--json] [--quick]

``--quick``: a one-conversation file, keyword-only (no model): a smoke run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness import header, scratch
from locomo_misses import quick_collection

from memq.evaluation import locomo
from memq.evaluation.command import read_base

TUNING = "conv-26"


def settings(superseded: list[float], bands: list[float], floors: list[float]
             ) -> dict[str, dict[str, Any]]:
    """name -> memq.json keys on top of memq's defaults, one per recency setting."""
    def decay(**keys: Any) -> dict[str, Any]:
        return {"query": {"hybrid": {"temporalDecay": keys}}}

    out = {"decay off": decay(enabled=False),
           "OpenClaw decay": decay(enabled=True, halfLifeDays=30, minFactor=0, mode="decay")}
    out.update({f"minFactor {f:g}": decay(enabled=True, halfLifeDays=30, minFactor=f,
                                          mode="decay")
                for f in floors})
    out.update({f"superseded {s:g} band {b:g}": decay(enabled=True, halfLifeDays=30,
                                                      mode="superseded", similarity=s, band=b)
                for s in superseded for b in bands})
    return out


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--collection", type=Path, help="locomo10.json")
    ap.add_argument("--work-dir", type=Path, help="memq eval's work folder (stores kept)")
    ap.add_argument("--config", help="memq.json/.toml with the provider keys (default: local)")
    ap.add_argument("--layout", default="notes", choices=locomo.LAYOUTS)
    ap.add_argument("--superseded", default="0.4", help="cosine thresholds (0.4)")
    ap.add_argument("--bands", default="0", help="relevance bands (0: any newer look-alike)")
    ap.add_argument("--floors", default="", help="minFactor values to compare too")
    ap.add_argument("--tuning", default=TUNING, help="the tuning conversation (conv-26)")
    ap.add_argument("--only", default="both", choices=("tuning", "held-out", "both"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="one tiny conversation, keyword-only")
    args = ap.parse_args(argv)
    with scratch("memq-bench-recency-locomo-", keep=False) as tmp:
        base = read_base(args.config)
        if args.quick:
            args.collection, args.work_dir = quick_collection(tmp), tmp / "work"
            args.tuning, base = "quick", {"provider": "none"}
        elif not args.collection or not args.work_dir:
            ap.error("--collection and --work-dir are required (or --quick)")
        print(header("recency on LoCoMo", layout=args.layout, tuning=args.tuning,
                     quick=args.quick), flush=True)
        named = settings(floats(args.superseded), floats(args.bands), floats(args.floors))
        conversations = locomo.load(args.collection, args.layout)
        parts = {"tuning": [c for c in conversations if c.sample_id == args.tuning],
                 "held-out": [c for c in conversations if c.sample_id != args.tuning]}
        figures: dict[str, Any] = {}
        for part, convs in parts.items():
            if convs and args.only in (part, "both"):
                figures[part] = locomo.run(args.work_dir / args.layout, base, convs, list(named),
                                           log=lambda m: print(m, file=sys.stderr), named=named)
    if args.json:
        print(json.dumps(figures, indent=1))
    for part, per_setting in figures.items():
        questions = next(iter(per_setting.values()))["all"]["questions"]
        print(f"{part} ({questions} questions), layout {args.layout}: R@1 / R@3 / R@6, S@6")
        for name, groups in per_setting.items():
            a = groups["all"]
            print(f"  {name:<28} {a['R@1']:.3f} / {a['R@3']:.3f} / {a['R@6']:.3f}  "
                  f"S@6 {a['S@6']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
