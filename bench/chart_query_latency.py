"""Chart: p50 search latency by path at each size, from ``query_latency.py --json`` timings.

Not a test. Needs matplotlib (``pip install -e ".[bench]"``). Bars are p50 milliseconds on a
log scale (the OpenClaw full scan is two orders of magnitude above numpy), one group per
store size, with each bar's ratio to the numpy floor of the same run written above it.

    .venv/bin/python bench/query_latency.py --json /tmp/q.json
    .venv/bin/python bench/chart_query_latency.py /tmp/q.json docs/img/query_latency.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

FLOOR = "numpy brute force (in RAM)"


def p50_table(report: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """p50 milliseconds per store size and search path, from ``query_latency.py --json``
    timings (what the bars show)."""
    return {size: {method: float(np.percentile(ms, 50)) for method, ms in paths.items()}
            for size, paths in report.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timings", type=Path, help="the JSON written by query_latency.py --json")
    ap.add_argument("png", type=Path, help="the chart to write")
    args = ap.parse_args()
    report: dict[str, dict[str, list[float]]] = json.loads(args.timings.read_text("utf-8"))
    table = p50_table(report)
    sizes = list(table)
    methods = list(table[sizes[0]])
    for size in sizes:
        print(f"{int(size):,} chunks")
        for method in methods:
            p50 = table[size][method]
            print(f"  {method:<40}{p50:>9.2f} ms{p50 / table[size][FLOOR]:>9.2f}x")
    width = 0.8 / len(methods)
    import matplotlib  # the [bench] extra; imported here so --help works without it

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 5.5))
    for m, method in enumerate(methods):
        p50 = [table[s][method] for s in sizes]
        xs = [i + (m - (len(methods) - 1) / 2) * width for i in range(len(sizes))]
        bars = ax.bar(xs, p50, width, label=method)
        for bar, size in zip(bars, sizes, strict=True):
            ratio = bar.get_height() / table[size][FLOOR]
            ax.annotate(f"{ratio:.1f}x", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
    ax.set_yscale("log")
    ax.set_xticks(range(len(sizes)), [f"{int(s):,} chunks" for s in sizes])
    ax.set_ylabel("p50 latency, ms (log scale)")
    ax.set_title("memq search latency by path (384 dims, query embedding excluded); "
                 "labels: × numpy floor")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    args.png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.png, dpi=110)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
