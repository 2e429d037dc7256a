"""``memq worker``, ``memq shard`` and ``memq flower``: the worker fleet's processes and where
its shards' stores live."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from memq.cli.common import Args, Choice, command, emit, memory_options, settings_of, size, warn
from memq.cli.exits import CommandFailed, ExitCode

ROLES = ("writer", "reader", "embed", "batch")


def worker_command(role: str, provider: str | None, concurrency: int | None,
                   loglevel: str, name: str | None = None, shards: Sequence[int] = (0,)
                   ) -> list[str]:
    """The plain ``celery worker`` command a role stands for (what ``memq worker`` runs); a
    writer consumes the queues of ``shards``."""
    from pipeline.routing import batch_queue, control_queue, embed_queue, query_queue, store_queue
    from workers.embedded import worker_argv

    if role == "writer":
        # A shard's owner also runs its index jobs (they write chunk rows to the same files).
        queues = [q for shard in shards for q in (store_queue(shard), control_queue(shard))]
        return worker_argv(queues, name or "writer@%h", concurrency=1, loglevel=loglevel)
    if role == "reader":
        # Threads: reads wait on SQLite, NumPy and the model (the GIL is released) and share
        # the warm memories; any number of readers may serve a shard.
        return worker_argv([query_queue(shard) for shard in shards],
                           name or own_node_name("reader"), concurrency=concurrency or 8,
                           loglevel=loglevel, pool="threads")
    if not provider:
        raise CommandFailed(f"memq worker --role {role} needs --provider NAME (e.g. local)",
                            ExitCode.FAILED)
    if role == "batch":
        from pipeline.batch.api import BATCH_PROVIDERS

        if provider not in BATCH_PROVIDERS:
            raise CommandFailed(f"{provider} has no batch API (only "
                                f"{', '.join(BATCH_PROVIDERS)})", ExitCode.FAILED)
        # Batch tasks are short HTTP calls (a poll never sleeps): a few at once is plenty.
        return worker_argv([batch_queue(provider)], name or own_node_name(f"batch-{provider}"),
                           concurrency=concurrency or 2, loglevel=loglevel)
    return worker_argv([embed_queue(provider)], name or own_node_name(f"embed-{provider}"),
                       concurrency=concurrency or 1, loglevel=loglevel)


def own_node_name(prefix: str) -> str:
    """A node name no other process on this host has: ``<prefix>-<pid>@<host>``.

    Embed and batch workers scale by starting more of them; on RabbitMQ two nodes of one name
    cannot both hold the node's control queue (the second dies with RESOURCE_LOCKED), and on
    Redis Flower and ``memq status`` would count them as one.
    """
    return f"{prefix}-{os.getpid()}@%h"


@command("worker", "run a Celery worker of the fleet")
@memory_options
@click.option("--role", type=Choice(ROLES), required=True)
@click.option("--provider", help="embedding provider of an embed worker (local, openai, "
              "gemini, voyage, mistral, ollama) or a batch worker (openai, gemini, voyage)")
@click.option("--concurrency", type=int)
@click.option("--loglevel", default="INFO")
@click.option("--name", help="Celery node name (default writer@%h, reader-PID@%h, "
                             "embed-PROVIDER-PID@%h, batch-PROVIDER-PID@%h)")
@click.option("--shard", type=int, multiple=True, metavar="N",
              help="a shard this writer owns, or whose reads this reader answers (repeat "
                   "for several; default: all fleet.shards)")
def worker(args: Args) -> int:
    """``memq worker --role R``: this process becomes the role's ``celery worker``."""
    settings = settings_of(args)
    shards = list(args.shard) or list(range(settings.fleet.shards))
    if args.shard and args.role not in ("writer", "reader"):
        raise CommandFailed("--shard is for writers and readers (embed and batch workers serve "
                            "every shard)")
    if bad := [s for s in shards if not 0 <= s < settings.fleet.shards]:
        raise CommandFailed(f"shard {bad[0]} does not exist: fleet.shards is "
                            f"{settings.fleet.shards} (shards 0 to {settings.fleet.shards - 1})")
    argv = worker_command(args.role, args.provider, args.concurrency, args.loglevel, args.name,
                          shards)
    # The worker reads the same memory and config as this command: the flags travel as the
    # environment variables the worker's own settings read.
    for flag, variable in (("workspace", "MEMQ_WORKSPACE"), ("config", "MEMQ_CONFIG")):
        if getattr(args, flag, None):
            os.environ[variable] = str(Path(getattr(args, flag)).resolve())
    os.environ["MEMQ_FLEET_SHARDS"] = str(settings.fleet.shards)
    os.environ["MEMQ_RESULT_BACKEND"] = settings.result_backend
    if settings.broker_url:
        os.environ["MEMQ_BROKER_URL"] = settings.broker_url
    elif "MEMQ_BROKER_URL" not in os.environ and "REDIS_URL" not in os.environ:
        warn("no broker configured; using redis://127.0.0.1:6379/0")
    os.execv(argv[0], argv)
    return ExitCode.OK  # not reached


@command("shard", "move a shard's stores to this host (copy), or release them (forget)",
         details="ACTION: copy: pull the shard's stores from the readers that serve them now; "
                 "forget: this host no longer holds the shard.")
@memory_options
@click.argument("action", type=Choice(["copy", "forget"]))
@click.option("--shard", type=int, required=True, metavar="N")
@click.option("--from-shards", type=int, metavar="M",
              help="the shard count before a growth (the memories now in shard N are "
                   "copied from their shard among M)")
@click.option("--replace", is_flag=True, help="overwrite a store already here")
@click.option("--timeout", type=float, default=120.0,
              help="seconds to wait for each answer of the old host's reader (120)")
def shard(args: Args) -> int:
    """``memq shard copy|forget --shard N``: move a shard's stores to this host through the
    broker, or say this host holds them no more."""
    from pipeline.fleet.placement import claims_of, unclaim_in

    if args.action == "forget":  # the claims of the settings' data dir (not the process's)
        dropped = unclaim_in(claims_of(settings_of(args)), [args.shard])
        emit(args, {"shard": args.shard, "forgotten": bool(dropped)},
              f"this host no longer claims shard {args.shard}" if dropped else
              f"this host did not claim shard {args.shard}")
        return ExitCode.OK
    return _shard_copy(args)


def _shard_copy(args: Args) -> int:
    """``memq shard copy``: the shard's stores pulled from the readers that serve them."""
    from pipeline.catalog import MemoryCatalog
    from pipeline.errors import MemqError
    from pipeline.fleet.broker import require_broker
    from pipeline.fleet.shard_copy import pull_store
    from pipeline.remote import ShardReader
    from pipeline.routing import shard_of

    catalog = MemoryCatalog(config_file=args.config, workspace=args.workspace)
    names = [catalog.settings(args.agent).agent_id] if args.agent else catalog.names()
    results, readers = [], {}
    try:
        for name in names:
            settings = catalog.settings(name)
            if settings.fleet.shard_of(name) != args.shard:
                continue
            # The shard that serves the memory now: the same shard (a move to another host),
            # or, growing from --from-shards, its shard among those (a pin never moves).
            source = (shard_of(name, args.from_shards)
                      if args.from_shards and settings.fleet.shard is None else args.shard)
            row: dict[str, Any] = {"memory": name, "fromShard": source,
                                   "store": str(settings.store.path)}
            if settings.store.path.exists() and not args.replace:
                results.append({**row, "error": "a store is here already (--replace to "
                                                "overwrite it)"})
                continue
            url = require_broker(settings.broker_url, "memq shard copy")
            reader = readers.get(url) or readers.setdefault(url, ShardReader(url, args.timeout))
            try:
                results.append({**row, **pull_store(reader, name, source,
                                                    settings.store.path)})
            except MemqError as exc:
                results.append({**row, "error": str(exc)})
    finally:
        for reader in readers.values():
            reader.close()
    lines = [f"{r['memory']}: " + (f"failed: {r['error']}" if "error" in r else
                                   f"copied {size(r['bytes'])} ({r['chunks']} chunks, "
                                   f"{r['vectors']} vectors) from shard {r['fromShard']} in "
                                   f"{r['seconds']:.1f}s" if r["bytes"] else "nothing indexed")
             for r in results] or [f"no memory of the configuration is in shard {args.shard}"]
    failed = sum("error" in r for r in results)
    emit(args, {"shard": args.shard, "memories": results}, "\n".join(lines))
    return ExitCode.FAILED if failed else ExitCode.OK


@command("flower", "Flower monitoring for the fleet")
@memory_options
@click.option("--port", type=int, default=5555)
@click.option("--address", default="127.0.0.1")
@click.option("--unauthenticated", is_flag=True)
def flower(args: Args) -> int:
    """``memq flower``: this process becomes Flower, on the fleet's broker."""
    auth = os.environ.get("FLOWER_BASIC_AUTH")
    if not auth and not args.unauthenticated:
        raise CommandFailed("set FLOWER_BASIC_AUTH=user:password (or pass --unauthenticated "
                            "on a trusted machine)")
    settings = settings_of(args)
    if settings.broker_url:
        os.environ["MEMQ_BROKER_URL"] = settings.broker_url
    os.environ["MEMQ_RESULT_BACKEND"] = settings.result_backend  # each job's outcome
    # Flower reads FLOWER_BASIC_AUTH from the environment itself: the password never appears
    # on a command line (where ps and /proc would show it).
    argv = [sys.executable, "-m", "celery", "-A", "workers", "flower", f"--port={args.port}",
            f"--address={args.address}"]
    os.execv(argv[0], argv)
    return ExitCode.OK  # not reached


