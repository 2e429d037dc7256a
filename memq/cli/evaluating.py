"""``memq eval``: retrieval quality on a benchmark collection (memq/evaluation/)."""

from __future__ import annotations

import click

from memq.cli.common import Args, command, emit, json_option
from memq.cli.exits import CommandFailed, ExitCode


@command("eval", "retrieval quality on a BEIR collection or LoCoMo, every mode side by side "
                 "(indexes through the normal pipeline)")
@click.option("--collection", required=True,
              help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/), LoCoMo .json, or the "
                   "changed-facts cases (tests/data/changed_facts.json)")
@click.option("--split", help="qrels split of a BEIR folder (default test)")
@click.option("--limit", type=int, default=0,
              help="only the first N queries (LoCoMo: N questions per conversation)")
@click.option("--modes", help="comma-separated subset of keyword,vector,hybrid,rrf,hybrid+mmr,"
              "hybrid+decay,defaults,superseded")
@click.option("--vector-weight", type=float,
              help="vectorWeight of the fused modes (textWeight = 1 - it); default 0.7")
@click.option("--rrf-k", type=int, help="rrfK of the rrf mode (default 60)")
@click.option("--layout", type=click.Choice(["notes", "memory", "both"]),
              help="LoCoMo: sessions as dated notes only (notes), with the observation facts "
                   "as MEMORY.md entries too (memory), or both side by side (default both)")
@click.option("--work-dir", help="where the generated workspace and its store are kept "
                                 "(default: memq's cache, one per collection)")
@click.option("--config", help="memq.json/.toml with the provider keys to evaluate "
                               "(default: the local model)")
@json_option
def evaluation(args: Args) -> int:
    """``memq eval --collection PATH``: every retrieval mode's scores on the collection."""
    from pathlib import Path

    from memq.evaluation.command import evaluate, fused_keys, read_base

    try:
        out = evaluate(Path(args.collection), split=args.split, limit=args.limit,
                       modes=args.modes.split(",") if args.modes else None,
                       work_dir=Path(args.work_dir) if args.work_dir else None,
                       base=read_base(args.config),
                       fused=fused_keys(args.vector_weight, args.rrf_k),
                       layouts=(None if args.layout is None else ("notes", "memory")
                                if args.layout == "both" else (args.layout,)))
    except (OSError, ValueError, RuntimeError) as exc:  # RuntimeError: indexing failed
        raise CommandFailed(f"eval: {exc}") from exc
    text = out.pop("text")
    emit(args, out, text)
    return ExitCode.OK
