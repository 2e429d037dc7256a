"""Markdown tables of ``memq eval`` figures (the same tables docs/search.md quotes)."""

from __future__ import annotations

from memq.evaluation.locomo import CATEGORIES, KS

LABELS = {"keyword": "keyword (FTS5 BM25)", "vector": "vector", "hybrid": "hybrid, weighted",
          "rrf": "hybrid, RRF", "hybrid+mmr": "hybrid, weighted + MMR",
          "hybrid+decay": "hybrid, weighted + temporal decay",
          "defaults": "memq defaults (weighted + MMR + recency)",
          "superseded": "memq defaults, superseded recency"}
BEIR_COLUMNS = ("nDCG@10", "R@10", "R@100", "MRR@10")


def beir_table(figures: dict[str, dict[str, float]]) -> str:
    lines = ["| mode | " + " | ".join(BEIR_COLUMNS) + " |", "|---" * (len(BEIR_COLUMNS) + 1)
             + "|"]
    for mode, m in figures.items():
        cells = " | ".join(f"{m[c]:.4f}" for c in BEIR_COLUMNS)
        lines.append(f"| {LABELS.get(mode, mode)} | {cells} |")
    return "\n".join(lines)


def locomo_table(figures: dict[str, dict[str, dict[str, float]]], measure: str = "R") -> str:
    """One row per category (questions counted), one column per mode and k of ``measure``
    (``R``: turn-level recall, ``S``: session-level)."""
    modes = list(figures)
    head = ["category", "questions"] + [f"{m} {measure}@{k}" for m in modes for k in KS]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    groups = [g for g in (*CATEGORIES.values(), "all") if g in figures[modes[0]]]
    for group in groups:
        cells = [f"{figures[m][group][f'{measure}@{k}']:.3f}" for m in modes for k in KS]
        count = int(figures[modes[0]][group]["questions"])
        name = f"**{group}**" if group == "all" else group
        lines.append("| " + " | ".join([name, str(count), *cells]) + " |")
    return "\n".join(lines)


def changed_facts_table(figures: dict[str, dict[str, float]]) -> str:
    """One row per recency setting: changed facts with the newer value first, with the stale
    value first, old unique answers kept, and all questions answered as they should be."""
    lines = ["| recency | new first | old first | kept | both |", "|---|---|---|---|---|"]
    for name, f in figures.items():
        lines.append(f"| {name} | {f['newFirst']:.3f} | {f['oldFirst']:.3f} | {f['kept']:.3f} "
                     f"| {f['both']:.3f} |")
    return "\n".join(lines)
