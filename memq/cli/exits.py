"""``memq``'s exit codes, and which library error ends a command with which of them.

Every command ends with one of :class:`ExitCode`: it returns it (after printing its output),
or raises :class:`CommandFailed` (a refusal of its own, one line on stderr), or lets a library
error (:class:`pipeline.errors.MemqError`) through, which :func:`exit_for` maps here and
nowhere else.
"""

from __future__ import annotations

from enum import IntEnum

from pipeline.errors import MemqError


class ExitCode(IntEnum):
    """The exit status of ``memq``: scripts and supervisors test for these numbers."""

    def __new__(cls, value: int, doc: str) -> ExitCode:
        member = int.__new__(cls, value)
        member._value_ = value
        member.__doc__ = doc
        return member

    OK = 0, "The command did what was asked."
    FAILED = 1, ("A configuration, store or embedding-provider error, a job that failed,"
                 " a memory file that does not exist (`get`), a memory of `--all` or "
                 "`shard copy` that could not be done.")
    USAGE = 2, ("Refused before doing anything: a bad command line, an unknown memory, a "
                "workspace that does not exist, a memory turned off, a path outside the "
                "memory files, an unknown job, a job the broker did not take.")
    UNREACHABLE = 3, ("The memory's shard or the broker did not answer (its reader or the "
                      "broker is down), or `status --fleet` could not see all of the fleet.")
    NO_VECTOR = 4, ("`index` finished (it waited) but chunks are left without a vector "
                    "(pending or failed; the message says why).")
    INTERRUPTED = 130, "Interrupted (Ctrl-C); queued work stays queued and is picked up again."


class CommandFailed(MemqError):
    """A command refuses or fails with ``code``; ``message`` is its one line on stderr."""

    def __init__(self, message: str, code: ExitCode = ExitCode.USAGE) -> None:
        super().__init__(message)
        self.code = code


def exit_for(exc: BaseException) -> tuple[ExitCode, str] | None:
    """The exit code of a library error and its line on stderr (after ``memq: ``); None for
    an exception that is not memq's (a bug, or a broker's network error: see
    :func:`memq.cli.common.broker_failure`)."""
    from pipeline.errors import (
        ConfigError,
        EmbeddingError,
        MemoryDisabled,
        MemqError,
        ShardUnreachable,
        StoreError,
        UnknownJob,
        UnknownMemory,
        WorkspaceMissing,
    )

    if isinstance(exc, CommandFailed):
        return exc.code, str(exc)
    # Most specific first: UnknownMemory is a ConfigError.
    table: tuple[tuple[type[MemqError], ExitCode, str], ...] = (
        (UnknownMemory, ExitCode.USAGE, ""),
        (ConfigError, ExitCode.FAILED, "configuration error: "),
        (EmbeddingError, ExitCode.FAILED, "embedding provider error: "),
        (StoreError, ExitCode.FAILED, "store error: "),
        (WorkspaceMissing, ExitCode.USAGE, ""),
        (MemoryDisabled, ExitCode.USAGE, ""),
        (ShardUnreachable, ExitCode.UNREACHABLE, ""),
        (UnknownJob, ExitCode.USAGE, ""),
        (MemqError, ExitCode.FAILED, ""),
    )
    for kind, code, prefix in table:
        if isinstance(exc, kind):
            return code, f"{prefix}{exc}"
    return None
