"""What an index pass left behind, read from the store after it: vectors written, chunks still
pending, chunks failed, and why, per provider.

An index pass hands chunks to the embedding queue; whether they got a vector is only known
from the store afterwards. A chunk the provider refused (HTTP 401/403) stays ``pending`` with
the reason until the configuration is fixed; one that failed for good is ``failed``
(``memq index --retry-failed`` tries it again). ``memq index`` prints :meth:`problem` as one
line and exits with status 4 (``NO_VECTOR`` of the CLI's exit codes) when a run that waited
leaves any such chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.store import reads
from pipeline.store.engine import Database


@dataclass(frozen=True)
class WithoutVector:
    """A group of chunks without a vector: ``state`` ``failed`` or ``pending`` (held until the
    configuration is fixed), the ``reason`` the provider gave, and the ``provider`` whose."""

    provider: str | None
    state: str
    reason: str
    chunks: int

    def to_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "state": self.state, "reason": self.reason,
                "chunks": self.chunks}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WithoutVector:
        return cls(data.get("provider"), str(data["state"]), str(data["reason"]),
                   int(data["chunks"]))


@dataclass(frozen=True)
class VectorOutcome:
    """The store's vectors after a pass: ``written`` during it (None: it did not wait, so
    nothing is known yet), chunks ``pending`` (queued or held) and ``failed``, and the
    reasons (``groups``, largest first)."""

    written: int | None = None
    pending: int = 0
    failed: int = 0
    groups: tuple[WithoutVector, ...] = ()

    @property
    def missing(self) -> int:
        """Chunks that were tried and have no vector: failed, or held with a reason."""
        return sum(g.chunks for g in self.groups)

    def to_dict(self) -> dict[str, Any]:
        """The counts as ``memq index --json`` and the job log show them."""
        return {"vectorsWritten": self.written, "pending": self.pending,
                "failedChunks": self.failed,
                "withoutVector": [g.to_dict() for g in self.groups]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VectorOutcome:
        """The inverse of :meth:`to_dict` (a pass run on another host); missing keys are 0."""
        written = data.get("vectorsWritten")
        return cls(int(written) if isinstance(written, int) else None,
                   int(data.get("pending") or 0), int(data.get("failedChunks") or 0),
                   tuple(WithoutVector.from_dict(g) for g in data.get("withoutVector") or ()))

    def problem(self) -> str | None:
        """One line for a person when chunks were left without a vector (None otherwise)."""
        if not self.missing:
            return None
        why = "; ".join(f"{g.provider or 'provider'}: {g.chunks} {g.state}, {g.reason}"
                        for g in self.groups)
        return (f"{self.missing} chunks have no vector ({why}); fix the cause and run "
                "`memq index` again (failed chunks need --retry-failed)")


def read_outcome(db: Database, provider: str | None, *, since: float, cached: int,
                 waited: bool) -> VectorOutcome:
    """The outcome of a pass that began at ``since`` (epoch seconds) on ``db``: vectors
    written since then (less the ``cached`` ones the pass took from the cache) when it
    ``waited``, and every chunk without a vector."""
    groups, pending, failed = [], 0, 0
    for state, reason, chunks in reads.without_vector(db):
        if state == "failed":
            failed += chunks
        else:
            pending += chunks
        if reason or state == "failed":  # a pending chunk without one is still queued
            groups.append(WithoutVector(provider, state, reason or "no reason recorded",
                                        chunks))
    written = max(0, reads.ready_since(db, since) - cached) if waited else None
    return VectorOutcome(written, pending, failed, tuple(groups))
