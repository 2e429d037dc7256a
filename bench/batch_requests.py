"""HTTP requests of a 10,000-chunk backfill: provider batch mode vs the sync embedding path.

Both runs index the same generated workspace against the OpenAI double on loopback and count
every request it receives. The pipeline's own functions run in this process, in the order the
Celery tasks would run them (the producer pass, then each task's plain function): the number
of requests is set by the grouping and the workflow, not by the queue, so no workers are
needed. Batch mode runs with the double completing a job one state per poll.

    python bench/batch_requests.py [--chunks 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import add_common_args, add_quick_arg, header, scratch
from pipeline.batch import workflow
from pipeline.batch.api import batch_api_for
from pipeline.config import load_settings
from pipeline.embeddings.registry import choose_provider
from pipeline.embeddings.runner import embed_job
from pipeline.ingest.producer import index_once
from pipeline.messages import EmbedJob
from pipeline.store.engine import connect
from pipeline.store.results import apply_result
from tests.fakes.provider_doubles import ProviderDouble

KEY = "sk-bench-batch-requests"
LINES_PER_CHUNK = 16  # ~1.3 KB of text: one chunk step of the default 400 tokens, 80 overlap


def make_workspace(root: Path, chunks: int) -> Path:
    """``chunks`` chunks in files of 5 chunks each (2,000 files for the default run)."""
    memory = root / "ws" / "memory"
    memory.mkdir(parents=True)
    per_file = 5
    for f in range(chunks // per_file):
        lines = [f"# File {f}"] + [
            f"Line {i} of file {f}: the harbour ledger, lantern {f * 1000 + i} and the router."
            for i in range(per_file * LINES_PER_CHUNK)]
        (memory / f"{f:05d}.md").write_text("\n".join(lines) + "\n")
    return root / "ws"


def settings_for(ws: Path, store: Path, url: str, batch: bool):
    store.parent.mkdir(parents=True, exist_ok=True)
    cfg = store.parent / f"memq-{'batch' if batch else 'sync'}.json"
    cfg.write_text(json.dumps({"provider": "openai", "store": {"path": str(store)},
                               "remote": {"baseUrl": url, "batch": {"enabled": batch}}}))
    return load_settings(config_file=cfg, workspace=ws, env={"OPENAI_API_KEY": KEY})


def run_sync(settings) -> int:
    db = connect(settings.store.path)
    queued: list[EmbedJob] = []
    choice = choose_provider(settings)
    report = index_once(db, settings, choice, queued.append)
    for job in queued:
        apply_result(db, embed_job(job, choice.provider))
    db.close()
    return report.chunks_queued


def run_batch(settings, double: ProviderDouble) -> int:
    db = connect(settings.store.path)
    submits: list[workflow.BatchSubmit] = []
    routing = workflow.routing_for(settings.remote.batch, submits.append)
    choice = choose_provider(settings)
    report = index_once(db, settings, choice, lambda job: None, batch=routing)
    api = batch_api_for(choice.spec, settings)
    for msg in submits:
        step = workflow.submit_step(api, msg)
        while True:
            for update in step.updates:
                applied = workflow.apply_update(db, update)
                for job in applied.embed_jobs:  # lines the job did not embed (none here)
                    apply_result(db, embed_job(job, choice.provider))
            if step.next_poll is None:
                break
            step = workflow.poll_step(api, step.next_poll)
    api.close()
    missing = db.conn.execute("SELECT count(*) FROM chunks WHERE state != 'ready'").fetchone()[0]
    db.close()
    assert missing == 0, f"{missing} chunks without a vector"
    return report.chunks_queued


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=10_000)
    add_common_args(ap)
    add_quick_arg(ap, chunks=200)
    args = ap.parse_args()
    os.environ["OPENAI_API_KEY"] = KEY
    print(header("batch requests", chunks=args.chunks))
    rows = []
    with scratch("memq-bench-batch-", args.keep) as tmp:
        ws = make_workspace(tmp, args.chunks)
        for mode in ("sync", "batch"):
            with ProviderDouble("openai", api_key=KEY) as double:
                double.batches.polls_per_step = 1
                settings = settings_for(ws, tmp / mode / "memq.sqlite", double.url,
                                        mode == "batch")
                started = time.perf_counter()
                chunks = (run_batch(settings, double) if mode == "batch"
                          else run_sync(settings))
                rows.append((mode, chunks, len(double.requests),
                             time.perf_counter() - started))
    print(f"{'mode':<6} {'chunks':>7} {'HTTP requests':>14} {'chunks/request':>15} {'seconds':>8}")
    for mode, chunks, requests, seconds in rows:
        print(f"{mode:<6} {chunks:>7} {requests:>14} {chunks / requests:>15.1f} {seconds:>8.1f}")
    sync, batch = rows[0][2], rows[1][2]
    print(f"batch mode sends {sync / batch:.0f}x fewer requests (target: <= 10 for batch)")


if __name__ == "__main__":
    main()
