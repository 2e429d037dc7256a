"""``memq``: index a memory workspace, search it, read it, and run the worker fleet.

One module per group of commands (``indexing``: index, reindex; ``reading``: search, get;
``status``: status, jobs, memories, batch; ``serving``: watch, mcp; ``fleet``: worker, shard,
flower; ``evaluating``: eval), each command's options beside its handler; ``common`` holds the
shared options and helpers, ``exits`` the exit codes. A command imports what it uses when it
runs, so ``memq --help`` imports none of the library."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import click

from memq.cli import evaluating, fleet, indexing, reading, serving, status
from memq.cli.common import INTERRUPTED, Run, broker_failure
from memq.cli.common import answering_once as _answering_once
from memq.cli.exits import CommandFailed, ExitCode, exit_for
from memq.cli.fleet import own_node_name, worker_command

__all__ = ["CommandFailed", "CommandLine", "ExitCode", "_answering_once", "build_parser", "cli",
           "main", "own_node_name", "worker_command"]


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from memq import installed_version

    click.echo(f"memq {installed_version()}")
    ctx.exit()


@click.group(name="memq",
             help="index a memory workspace, search it, read it, and run the worker fleet")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_show_version, help="show memq's version and exit")
def cli() -> None:
    """The ``memq`` group: its commands are in the modules beside this one."""


for _command in (indexing.index, reading.search, reading.get, status.status, status.memories,
                 serving.watch, indexing.reindex, status.jobs, status.batch, fleet.worker,
                 fleet.shard, fleet.flower, serving.mcp, evaluating.evaluation):
    cli.add_command(_command)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``memq`` command line (``argv``: its arguments, default this process's); its exit
    code (:class:`ExitCode`), with any error as one ``memq: …`` line on stderr."""
    run = Run(exiting=argv is None)
    try:
        return int(cli.main(args=None if argv is None else list(argv), prog_name="memq",
                            standalone_mode=False, obj=run) or ExitCode.OK)
    except click.Abort:  # Ctrl-C while the command line is read (a command's own: see command)
        print(f"memq: {INTERRUPTED}", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except click.ClickException as exc:  # a bad command line
        exc.show()
        return ExitCode.USAGE if isinstance(exc, click.UsageError) else ExitCode.FAILED
    except Exception as exc:
        mapped = exit_for(exc)
        if mapped is None:
            failure = broker_failure(run.args, exc)
            if failure is None:
                raise
            mapped = ExitCode.UNREACHABLE, str(failure)  # one line, no traceback
        code, message = mapped
        print(f"memq: {message}", file=sys.stderr)
        return code


class CommandLine:
    """Parses a ``memq`` command line without running it, as an :class:`argparse.Namespace`
    (``command`` and its options by name): what deployment checks compare their commands
    with. A bad command line prints click's message on stderr and raises ``SystemExit(2)``."""

    def parse_args(self, argv: Sequence[str]) -> argparse.Namespace:
        """``argv`` (without the program name) parsed by the command it names."""
        try:
            with click.Context(cli, info_name="memq") as ctx:
                name, command, rest = cli.resolve_command(ctx, list(argv))
                if command is None or name is None:
                    raise click.UsageError("a command is required", ctx)
                with command.make_context(name, rest, parent=ctx) as sub:
                    return argparse.Namespace(command=name, **sub.params)
        except click.ClickException as exc:
            exc.show()
            raise SystemExit(ExitCode.USAGE) from exc


def build_parser() -> CommandLine:
    """The ``memq`` command line's parser (:class:`CommandLine`)."""
    return CommandLine()

