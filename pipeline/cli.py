"""``memq``: index a memory workspace, search it, read it, and run the worker fleet."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pipeline.config import ConfigError, Settings, load_settings
from pipeline.embeddings.base import EmbeddingError

ROLES = ("writer", "embed")


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(config_file=args.config, workspace=args.workspace)


def _emit(args: argparse.Namespace, data: dict[str, Any], human: str) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False) if args.json else human)


def cmd_index(args: argparse.Namespace) -> int:
    from workers.indexing import run_index

    settings = _settings(args)
    bar = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if args.json or total == 0 or (not sys.stderr.isatty() and not args.progress):
            return
        if bar is None:
            from tqdm import tqdm

            bar = tqdm(total=total, unit="chunk", desc="embedding", file=sys.stderr)
        bar.update(done - bar.n)

    def warn(message: str) -> None:
        print(f"memq: {message}", file=sys.stderr)

    run = run_index(settings, wait=not args.no_wait, retry_failed=args.retry_failed,
                    on_progress=progress, warn=warn)
    if bar is not None:
        bar.close()
    r = run.report
    data = {"mode": run.mode, "provider": run.provider, "model": run.model, "reason": run.reason,
            "files": r.files, "changed": r.changed, "deleted": r.deleted,
            "fileErrors": r.errors, "chunksFromCache": r.chunks_cached,
            "chunksQueued": r.chunks_queued, "jobs": r.jobs, "waited": run.waited,
            "failedChunks": run.failed_chunks, "seconds": round(run.seconds, 3)}
    lines = [f"indexed {r.files} files ({r.changed} changed, {r.deleted} deleted) in "
             f"{run.seconds:.1f}s",
             f"mode: {run.mode}" + (f" ({run.provider}/{run.model})" if run.provider else "")
             + (f": {run.reason}" if run.mode == "keyword-only" else ""),
             f"chunks: {r.chunks_queued} embedded through the queue, {r.chunks_cached} from cache"]
    lines += [f"skipped {e}" for e in r.errors]
    if run.failed_chunks:
        lines.append(f"{run.failed_chunks} chunks have no vector (see `memq status`)")
    _emit(args, data, "\n".join(lines))
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from pipeline.query import memory_search

    out = memory_search(args.query, settings=_settings(args), max_results=args.max_results,
                        min_score=args.min_score, citations=args.citations)
    lines = []
    for hit in out["results"]:
        snippet = " ".join(hit["snippet"].split())
        lines.append(f"{hit['score']:.3f}  {hit['path']}:{hit['startLine']}-{hit['endLine']}\n"
                     f"       {snippet[:200]}")
    if not out["results"]:
        lines.append("no results")
    footer = f"[{out['mode']}" + (f", {out['provider']}/{out['model']}" if out["provider"] else "")
    footer += "]" + "".join(f" {k}: {out[k]}" for k in ("reason", "pending", "warning") if k in out)
    lines.append(footer)
    _emit(args, out, "\n".join(lines))
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    from pipeline.query import MemoryPathError, memory_get

    try:
        out = memory_get(args.path, args.from_line, args.lines, settings=_settings(args))
    except MemoryPathError as exc:
        print(f"memq: {exc}", file=sys.stderr)
        return 2
    _emit(args, out, out["text"])
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from pipeline.status import index_status

    s = index_status(_settings(args))
    if not s["indexed"]:
        _emit(args, s, f"workspace {s['workspace']}: {s['reason']}\nstore: {s['store']}")
        return 0
    when = (datetime.fromtimestamp(s["last_index_at"]).isoformat(timespec="seconds")
            if s["last_index_at"] else "never")
    lines = [
        f"workspace: {s['workspace']}",
        f"store:     {s['store']} (sqlite {s['sqlite_driver']}, vectors via "
        f"{s['vector_backend']})",
        f"mode:      {s['mode']}" + (f" ({s['provider']}/{s['model']}, {s['dims']} dims)"
                                      if s["provider"] else f": {s['reason']}"),
        f"files:     {s['files']} indexed, {s['files_with_errors']} skipped",
        f"chunks:    {s['chunks']} ({s['vectors']} with vectors, {s['pending']} pending, "
        f"{s['failed']} failed)",
        f"last index: {when}",
    ]
    if s["vector_backend_reason"]:
        lines.append(f"note: {s['vector_backend_reason']}")
    lines += [f"skipped {e['path']}: {e['error']}" for e in s["file_errors"]]
    lines += [f"failed chunks ({e['chunks']}): {e['error']}" for e in s["chunk_errors"]]
    _emit(args, s, "\n".join(lines))
    return 0


def worker_command(role: str, provider: str | None, concurrency: int | None,
                   loglevel: str) -> list[str]:
    """The plain ``celery worker`` command a role stands for (what ``memq worker`` runs)."""
    from workers.app import STORE_QUEUE, embed_queue
    from workers.embedded import worker_argv

    if role == "writer":
        return worker_argv([STORE_QUEUE], "writer@%h", concurrency=1, loglevel=loglevel)
    if not provider:
        raise SystemExit("memq worker --role embed needs --provider NAME (e.g. local)")
    return worker_argv([embed_queue(provider)], f"embed-{provider}@%h",
                       concurrency=concurrency or 1, loglevel=loglevel)


def cmd_worker(args: argparse.Namespace) -> int:
    argv = worker_command(args.role, args.provider, args.concurrency, args.loglevel)
    settings = _settings(args)
    if settings.broker_url:
        os.environ["MEMQ_BROKER_URL"] = settings.broker_url
    elif "MEMQ_BROKER_URL" not in os.environ and "REDIS_URL" not in os.environ:
        print("memq: no broker configured; using redis://127.0.0.1:6379/0", file=sys.stderr)
    os.execv(argv[0], argv)
    return 0  # not reached


def cmd_flower(args: argparse.Namespace) -> int:
    auth = os.environ.get("FLOWER_BASIC_AUTH")
    if not auth and not args.unauthenticated:
        print("memq: set FLOWER_BASIC_AUTH=user:password (or pass --unauthenticated on a "
              "trusted machine)", file=sys.stderr)
        return 2
    settings = _settings(args)
    if settings.broker_url:
        os.environ["MEMQ_BROKER_URL"] = settings.broker_url
    # Flower reads FLOWER_BASIC_AUTH from the environment itself: the password never appears
    # on a command line (where ps and /proc would show it).
    argv = [sys.executable, "-m", "celery", "-A", "workers", "flower", f"--port={args.port}",
            f"--address={args.address}"]
    os.execv(argv[0], argv)
    return 0  # not reached


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--workspace", help="memory workspace (default: configured, else cwd)")
    common.add_argument("--config", help="config file (memq.toml/.json or openclaw.json)")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    parser = argparse.ArgumentParser(prog="memq", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("index", parents=[common], help="index the workspace through the queues")
    p.add_argument("--no-wait", action="store_true", help="return once jobs are enqueued")
    p.add_argument("--retry-failed", action="store_true", help="queue failed chunks again")
    p.add_argument("--progress", action="store_true", help="progress bar even when not a tty")
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("search", parents=[common], help="hybrid search of the memory")
    p.add_argument("query")
    p.add_argument("--max-results", type=int)
    p.add_argument("--min-score", type=float)
    p.add_argument("--citations", choices=["auto", "on", "off"], default="auto",
                   help="add a Source: path#Ls-Le line to each snippet (default auto = on)")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("get", parents=[common], help="read lines of a memory file")
    p.add_argument("path")
    p.add_argument("--from", dest="from_line", type=int)
    p.add_argument("--lines", type=int)
    p.set_defaults(func=cmd_get)

    p = sub.add_parser("status", parents=[common], help="what is indexed, pending and why")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("worker", parents=[common], help="run a Celery worker of the fleet")
    p.add_argument("--role", choices=ROLES, required=True)
    p.add_argument("--provider", help="embedding provider of an embed worker (e.g. local)")
    p.add_argument("--concurrency", type=int)
    p.add_argument("--loglevel", default="INFO")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("flower", parents=[common], help="Flower monitoring for the fleet")
    p.add_argument("--port", type=int, default=5555)
    p.add_argument("--address", default="127.0.0.1")
    p.add_argument("--unauthenticated", action="store_true")
    p.set_defaults(func=cmd_flower)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"memq: configuration error: {exc}", file=sys.stderr)
    except EmbeddingError as exc:
        print(f"memq: embedding provider error: {exc}", file=sys.stderr)
    except BrokenPipeError:  # `memq search … | head`: the reader left, nothing is wrong
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("memq: interrupted; queued work stays queued and is picked up again",
              file=sys.stderr)
        return 130
    except Exception as exc:
        from workers.indexing import IndexingFailed

        if not isinstance(exc, IndexingFailed):
            raise
        print(f"memq: {exc}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
