"""``memq watch`` and ``memq mcp``: the long-running processes of one host (indexing files as
they change; the MCP server agents call)."""

from __future__ import annotations

import contextlib
import os
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from memq.cli.common import (
    Args,
    command,
    existing,
    memories_of_config,
    memory_options,
    settings_of,
    warn,
)
from memq.cli.exits import CommandFailed, ExitCode

if TYPE_CHECKING:
    from workers.watching import Reading


@command("watch", "index memory files as they change")
@memory_options
@click.option("--polling/--no-polling", default=None,
              help="poll the files (file systems without change events) or never poll; "
                   "default: watch.polling (auto)")
@click.option("--heartbeat", type=click.Path(path_type=Path), metavar="FILE",
              help="touch FILE every few seconds while the loop runs (health checks)")
@click.option("--debounce-ms", type=int, help="quiet time before a batch is indexed")
@click.option("--interval-minutes", type=float,
              help="full reconcile period (default: sync.intervalMinutes, else 10)")
@click.option("--all", "all", is_flag=True,
              help="every memory of the configuration (agents, memories, memoriesDir) "
                   "in this one process")
def watch(args: Args) -> int:
    """``memq watch``: index the memory's files (``--all``: every memory's) as they change."""
    import logging

    from workers.watching import LiveRoster, run_watch

    logging.basicConfig(level=logging.WARNING, format="memq watch: %(message)s")
    if args.all and args.agent:
        raise CommandFailed("--all watches every memory of the configuration; drop "
                            "--agent/--memory")
    roster: LiveRoster | None = None
    if args.all:
        roster = LiveRoster(lambda: _watch_reading(args))
        for name, why in roster.current.unwatchable.items():
            warn(f"not watching {name}: {why}")
        watched = roster.current.watchable
        if not watched:
            raise CommandFailed("no memory of the configuration can be watched")
        warn(f"watching {len(watched)} memories: "
             f"{', '.join(s.agent_id for s in watched)} (Ctrl-C to stop; memories added to "
             "or removed from the configuration are followed)")
    else:
        watched = [existing(settings_of(args), files_here=True)]
        warn(f"watching {watched[0].workspace} (Ctrl-C to stop)")
    debounce = args.debounce_ms / 1000 if args.debounce_ms is not None else None
    run_watch(watched, polling=args.polling, debounce_s=debounce,
              reconcile_minutes=args.interval_minutes, heartbeat=args.heartbeat, roster=roster,
              on_pass=_print_pass)
    return ExitCode.OK


def _print_pass(memory: str, report: Any) -> None:
    """``memq watch``'s line for a pass that changed something (counts only, on stdout)."""
    files = "file" if report.changed == 1 else "files"
    print(f"{datetime.now().isoformat(sep=' ', timespec='seconds')} {memory}: "
          f"{report.changed} {files} changed, {report.deleted} deleted, "
          f"{report.chunks_queued} chunks queued", flush=True)


def _watch_reading(args: Args) -> Reading:
    """``memq watch --all``: every memory of the configuration, each with its settings or why
    it cannot be watched; read again when the config file or its ``memoriesDir`` changes, or
    when the missing workspace of one of them appears."""
    from pipeline.catalog import MemoryCatalog
    from pipeline.errors import MemqError
    from workers.watching import Reading

    catalog = MemoryCatalog(config_file=args.config, workspace=args.workspace)
    memories = memories_of_config(args, catalog, files_here=True)
    absent = []
    for name, settings in memories:
        if isinstance(settings, str):
            with contextlib.suppress(MemqError):
                wanted = catalog.settings(name)
                if wanted.enabled and not wanted.workspace.is_dir():
                    absent.append(wanted.workspace)
    return Reading(tuple(memories),
                   lambda: catalog.changed() or any(path.is_dir() for path in absent))


@command("mcp", "serve memory_search/memory_get/memory_append over MCP")
@memory_options
@click.option("--http", metavar="HOST:PORT",
              help="streamable HTTP at /mcp instead of stdio (loopback unless a token is set)")
@click.option("--token", help="bearer token for --http (prefer env MEMQ_MCP_TOKEN)")
def mcp(args: Args) -> int:
    """``memq mcp``: the MCP server, on stdio or HTTP."""
    from memq import mcp_server

    settings = settings_of(args)
    if args.http is None:
        mcp_server.run_stdio(settings)
        return ExitCode.OK
    token = args.token or os.environ.get("MEMQ_MCP_TOKEN") or None
    try:
        host, port = mcp_server.parse_bind(args.http)
        mcp_server.run_http(settings, host, port, token)
    except ValueError as exc:  # a bad HOST:PORT, or --http beyond loopback without a token
        raise CommandFailed(str(exc)) from exc
    return ExitCode.OK


