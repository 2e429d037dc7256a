"""What every ``memq`` command shares: the command decorator, the memory options, settings,
output, and the progress bar. Nothing heavy is imported here: each command imports what it
uses when it runs."""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import click

from memq.cli.exits import ExitCode

if TYPE_CHECKING:
    from pipeline.catalog import MemoryCatalog
    from pipeline.config import Settings


#: What ``memq`` says when Ctrl-C stops it.
INTERRUPTED = "interrupted; queued work stays queued and is picked up again"


class Args(SimpleNamespace):
    """A command's options by name (``args.json``, ``args.agent``, ...) and ``command``."""


Handler = Callable[[Args], "int | None"]


@dataclass
class Run:
    """One run of ``memq``: whether the process ends right after it (the command line, not
    a test calling :func:`memq.cli.main` with arguments), and the options it parsed."""

    exiting: bool
    args: Args | None = field(default=None)


class Choice(click.Choice):
    """A choice whose refusal reads as before: ``invalid choice: 'x' (choose from ...)``."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if value not in self.choices:
            self.fail(f"invalid choice: {value!r} (choose from "
                      f"{', '.join(repr(c) for c in self.choices)})", param, ctx)
        return value


def command(name: str, help: str, *, details: str = "", answers_once: bool = False
            ) -> Callable[[Handler], click.Command]:
    """``handler`` (decorated with its options) as the click command ``name``: ``help`` in
    ``memq --help``, and with ``details`` (its arguments) in ``memq NAME --help``. It is called
    with its options as :class:`Args` and returns an :class:`ExitCode` (None: OK).
    ``answers_once``: run it under :func:`answering_once` (``search``, ``get``)."""

    def make(handler: Handler) -> click.Command:
        @functools.wraps(handler)
        def callback(**options: Any) -> int:
            args = Args(command=name, **options)
            run = click.get_current_context().find_object(Run)
            if run is not None:
                run.args = args
            once = answers_once and run is not None
            try:
                with answering_once(run.exiting) if once else contextlib.nullcontext():
                    return int(handler(args) or ExitCode.OK)
            except BrokenPipeError:  # `memq search … | head`: the reader left, nothing is wrong
                sys.stderr.close()
                return ExitCode.OK
            except KeyboardInterrupt:  # here, not in click (which would make it an Abort)
                print(f"memq: {INTERRUPTED}", file=sys.stderr)
                return ExitCode.INTERRUPTED

        return click.command(name, short_help=help,
                             help=f"{help}\n\n{details}" if details else help)(callback)

    return make


_MEMORY_OPTIONS = (
    click.option("--workspace", help="memory workspace (default: configured, else cwd)"),
    click.option("--config", help="config file (memq.toml/.json or openclaw.json)"),
    click.option("--agent", "--memory", "agent", metavar="ID",
                 help="the memory to use: an agent of openclaw.json, or a memory of "
                      "memq.toml's memories/memoriesDir; any spelling of its id "
                      "(default: the default agent; `memq memories` lists them)"),
)
json_option = click.option("--json", is_flag=True, help="machine-readable output")


def memory_options(handler: Handler) -> Handler:
    """``--workspace``, ``--config``, ``--agent``/``--memory`` and ``--json``: which memory a
    command acts on, and how it answers."""
    for option in reversed((*_MEMORY_OPTIONS, json_option)):
        handler = option(handler)
    return handler


def load_settings(**keys: Any) -> Settings:
    """:func:`pipeline.config.load_settings`, imported when a command first needs settings."""
    from pipeline.config import load_settings as load

    return load(**keys)


def settings_of(args: Args, agent: str | None = None) -> Settings:
    """The settings of the memory ``args`` name (``agent``: another name, when it has none)."""
    return load_settings(config_file=args.config, workspace=args.workspace,
                         agent=args.agent or agent)


def existing(settings: Settings, *, files_here: bool = False) -> Settings:
    """``settings``, or :class:`WorkspaceMissing` when its workspace folder does not exist, or
    :class:`MemoryDisabled` when the memory is turned off (``enabled = false``).
    ``files_here``: the command needs the files on this host even when the store is not."""
    from pipeline.errors import memory_disabled

    if not settings.enabled:
        raise memory_disabled(settings.config_file)
    return with_workspace(settings, files_here=files_here)


def with_workspace(settings: Settings, *, files_here: bool = False) -> Settings:
    """``settings``, or :class:`WorkspaceMissing` when its workspace folder does not exist
    (on the host that holds the memory's store, or ``files_here``: elsewhere its shard's host
    reads its own copy)."""
    from pipeline.errors import WorkspaceMissing
    from pipeline.fleet.placement import store_is_here

    if not settings.workspace.is_dir() and (files_here or store_is_here(settings)):
        raise WorkspaceMissing(f"workspace {settings.workspace} does not exist (check "
                               "--workspace, the config's workspace or the agent's; create the "
                               "folder first to start a new memory)")
    return settings


def memories_of_config(args: Args, catalog: MemoryCatalog | None = None, *,
                       files_here: bool = False) -> list[tuple[str, Settings | str]]:
    """Every memory of the configuration (``--all``; its ``catalog`` when read already), in
    its order: its settings, or why it cannot be used (workspace gone, turned off, bad keys)."""
    from pipeline.catalog import MemoryCatalog
    from pipeline.errors import MemqError

    catalog = catalog or MemoryCatalog(config_file=args.config, workspace=args.workspace)
    out: list[tuple[str, Settings | str]] = []
    for name in catalog.names():
        try:
            out.append((name, existing(catalog.settings(name), files_here=files_here)))
        except MemqError as exc:  # ConfigError is one
            out.append((name, str(exc)))
    return out


def emit(args: Args, data: dict[str, Any], human: str) -> None:
    """``data`` as JSON with ``--json``, else ``human``, on stdout."""
    print(json.dumps(data, indent=2, ensure_ascii=False) if args.json else human)


def warn(message: str) -> None:
    """One ``memq: …`` line on stderr."""
    print(f"memq: {message}", file=sys.stderr)


def size(n: float) -> str:
    """``n`` bytes, readable (``12.3 KB``)."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # not reached


progress_option = click.option("--progress", is_flag=True,
                               help="progress bar even when not a tty")
timeout_option = click.option("--timeout", type=float, default=1.0,
                              help="seconds to wait for the broker")


class ProgressBar:
    """Chunks embedded of total, with rate and ETA (tqdm), on stderr when it is a terminal
    (or with ``--progress``); never with ``--json``."""

    def __init__(self, args: Args) -> None:
        self.enabled = not args.json and (sys.stderr.isatty() or args.progress)
        self._bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total == 0:
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="chunk", desc="embedding", file=sys.stderr)
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        """End the bar (when one was drawn)."""
        if self._bar is not None:
            self._bar.close()


@contextlib.contextmanager
def answering_once(exiting: bool) -> Iterator[None]:
    """Run a command that answers once (``search``, ``get``) without cyclic garbage
    collection, and with ``exiting`` (the process ends right after: the ``memq`` command
    line) keep the objects that exist then out of the collections at exit too.

    Its imports (NumPy, llama-cpp-python, the pipeline) leave hundreds of thousands of
    objects that every full collection walks, for no garbage: about 40 ms of a 0.37 s
    one-shot ``memq search`` (bench/oneshot_latency.py). Reference counting still frees
    everything that is not in a cycle.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if exiting:
            gc.freeze()
        if enabled:
            gc.enable()


def broker_failure(args: Args | None, exc: Exception) -> Exception | None:
    """``exc`` as one line naming the broker when the broker failed it (cannot be reached,
    refused the login), else None."""
    import socket

    own = (ConnectionError, TimeoutError, socket.gaierror)
    if not isinstance(exc, own) and not any(m in sys.modules for m in ("kombu", "redis", "amqp")):
        return None  # neither a network error nor raised by a broker client (none was loaded)
    from pipeline.fleet.broker import NETWORK_ERRORS
    from pipeline.fleet.broker import broker_failure as naming_the_broker

    if not isinstance(exc, NETWORK_ERRORS):
        return None
    try:
        url = settings_of(args).broker_url if args is not None else None
    except Exception:  # the settings failed too: the environment's broker, if any
        url = os.environ.get("MEMQ_BROKER_URL") or os.environ.get("REDIS_URL")
    return naming_the_broker(url or "", exc) if url else exc
