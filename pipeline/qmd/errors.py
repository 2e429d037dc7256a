"""The errors of the QMD backend: one for every reason to fall back, one for bad paths."""

from __future__ import annotations

from typing import Any

from pipeline.errors import MemoryPathError, MemqError

#: Why QMD could not answer: the executable cannot run, it exited non-zero, was killed by a
#: signal, timed out, printed too much, printed no JSON array, has no collections yet, or has
#: no vectors for a ``vsearch``. A remembered outage keeps the kind of the failure that began it.
KINDS = ("missing", "exit", "killed", "timeout", "output", "json", "collections", "no-vectors")


class QmdUnavailable(MemqError, RuntimeError):
    """QMD cannot answer now; the caller answers from memq's own index instead.

    ``kind`` is one of :data:`KINDS`; ``reason`` is a one-line explanation that names the qmd
    subcommand but never the query, the environment or a secret; ``since`` (epoch seconds) is
    when QMD was first seen down in the current outage, and ``retry_at`` when it will be tried
    again (both None when unknown).
    """

    def __init__(self, kind: str, reason: str, *, since: float | None = None,
                 retry_at: float | None = None) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        self.since = since
        self.retry_at = retry_at

    def as_dict(self) -> dict[str, Any]:
        """The fallback note an answer carries: ``{"from": "qmd", "kind", "reason", …}``."""
        out: dict[str, Any] = {"from": "qmd", "kind": self.kind, "reason": self.reason}
        if self.since is not None:
            out["since"] = self.since
        if self.retry_at is not None:
            out["retryAt"] = self.retry_at
        return out


class QmdPathError(MemoryPathError):
    """``get`` was asked for a path that is not a file of a QMD collection (or escapes one)."""
