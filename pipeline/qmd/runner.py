"""Running the ``qmd`` CLI: one process per call, in the memory's own QMD home, with a timeout.

As OpenClaw's ``runCliCommand`` (2026.3.24, ``dist/qmd-manager-CdVu0x02.js``): the environment
points ``XDG_CONFIG_HOME``, ``QMD_CONFIG_DIR`` and ``XDG_CACHE_HOME`` at the home and sets
``NO_COLOR=1``; the working directory is the workspace; output is capped at 200,000 characters;
a timeout kills the process. **memq:** the process runs in its own process group and a timeout
kills the whole group (the npm ``qmd`` launcher runs the CLI as a child process, which a kill
of the launcher alone would leave running); environment variables that look like credentials
are not passed on; error text names the qmd subcommand, never the query.

Every failure raises :class:`~pipeline.qmd.errors.QmdUnavailable` with its kind: ``missing``
(the executable cannot be run), ``timeout``, ``killed`` (ended by a signal), ``exit`` (a
non-zero exit code) or ``output`` (too much output).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import QmdUnavailable
from pipeline.qmd.sanitize import is_secret_variable, redact_for_errors

MAX_OUTPUT_CHARS = 200_000
_DETAIL_CHARS = 300


@dataclass(frozen=True)
class Completed:
    """What a successful qmd call printed."""

    stdout: str
    stderr: str


def qmd_env(base: Mapping[str, str], config_home: Path, cache_home: Path) -> dict[str, str]:
    """The environment qmd runs with: ``base`` without credentials, plus the home's folders."""
    env = {k: v for k, v in base.items() if not is_secret_variable(k)}
    env.update(XDG_CONFIG_HOME=str(config_home), QMD_CONFIG_DIR=str(config_home),
               XDG_CACHE_HOME=str(cache_home), NO_COLOR="1")
    return env


def summary(args: Sequence[str]) -> str:
    """``qmd <subcommand>`` for messages (``qmd search``, ``qmd collection add``): never the
    query or paths that follow."""
    words = list(args[:2]) if args and args[0] == "collection" else list(args[:1])
    return " ".join(["qmd", *words])


def _detail(stderr: str, stdout: str) -> str:
    """The first lines of what qmd said, short, with secrets masked."""
    text = " ".join((stderr.strip() or stdout.strip()).split())
    text = redact_for_errors(text)
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 3] + "..."


class QmdRunner:
    """Runs ``command`` (the qmd executable) with ``env`` in ``cwd``; thread-safe."""

    def __init__(self, command: str, env: Mapping[str, str], cwd: Path | None) -> None:
        self.command = command
        self.env = dict(env)
        self.cwd = cwd

    def argv(self, args: Sequence[str]) -> list[str]:
        """The full command line for ``args``."""
        return [self.command, *args]

    def run(self, args: Sequence[str], timeout_ms: int, *, discard_stdout: bool = False
            ) -> Completed:
        """Run ``qmd args``; return its output, or raise :class:`QmdUnavailable`."""
        what = summary(args)
        cwd = self.cwd if self.cwd is not None and self.cwd.is_dir() else None
        try:
            proc = subprocess.Popen(
                self.argv(args), env=self.env, cwd=cwd, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL if discard_stdout else subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:  # not found, not executable, bad interpreter line...
            raise QmdUnavailable(
                "missing", f"{what}: cannot run {self.command!r} ({exc.strerror or exc})"
            ) from None
        try:
            out, err = proc.communicate(timeout=timeout_ms / 1000)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise QmdUnavailable("timeout", f"{what} timed out after {timeout_ms} ms") from None
        except BaseException:
            _kill_group(proc)
            raise
        stdout = (out or b"").decode("utf-8", errors="replace")
        stderr = (err or b"").decode("utf-8", errors="replace")
        if proc.returncode < 0:
            name = signal.Signals(-proc.returncode).name
            raise QmdUnavailable("killed", f"{what} was killed by {name}")
        if proc.returncode != 0:
            raise QmdUnavailable(
                "exit", f"{what} failed (exit {proc.returncode}): {_detail(stderr, stdout)}")
        if len(stdout) > MAX_OUTPUT_CHARS or len(stderr) > MAX_OUTPUT_CHARS:
            raise QmdUnavailable(
                "output", f"{what} produced too much output (limit {MAX_OUTPUT_CHARS} chars)")
        return Completed(stdout, stderr)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the process and everything it started, and wait for it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()

