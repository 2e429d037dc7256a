"""The one interface to the providers' batch-file embedding APIs (OpenAI, Gemini, Voyage).

A batch job is slow (minutes to hours) but cheap, so the workflow never waits on one: it calls
:meth:`BatchApi.submit` once, :meth:`BatchApi.poll` from a short task that re-enqueues itself,
and :meth:`BatchApi.results` once the job has stopped. Every value that crosses a task
boundary (:class:`RemoteBatch`, :class:`BatchRequest` ids) is plain JSON and holds no secret:
the worker that polls rebuilds the client from the provider spec with its own API key.

Each API's own state words are normalised to :class:`BatchState`; the raw word is kept for
display. Output lines come back in any order and are mapped by ``custom_id`` (Gemini: ``key``);
a failed line costs only that chunk, never the job (OpenClaw fails the whole group).
"""

from __future__ import annotations

import importlib
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from pipeline.errors import BatchUnsupported, ProviderRetryable

if TYPE_CHECKING:
    from pipeline.config import Settings
    from pipeline.messages import ProviderSpec

__all__ = [
    "BATCH_PROVIDERS",
    "NOT_RUN",
    "TERMINAL_STATES",
    "BatchApi",
    "BatchOutput",
    "BatchRequest",
    "BatchState",
    "BatchUnsupported",
    "RemoteBatch",
    "batch_api_for",
]

BATCH_PROVIDERS = ("openai", "gemini", "voyage")
#: The reason given for a submitted request that has no line in the output nor the error file
#: (the job expired, was cancelled or failed before reaching it).
NOT_RUN = "not run"

_CLIENTS: dict[str, tuple[str, str]] = {
    "openai": ("pipeline.batch.openai", "OpenAIBatchApi"),
    "voyage": ("pipeline.batch.voyage", "VoyageBatchApi"),
    "gemini": ("pipeline.batch.gemini", "GeminiBatchApi"),
}


@dataclass(frozen=True)
class BatchRequest:
    """One text to embed. ``custom_id`` maps the output line back (the chunk's stable id)."""

    custom_id: str
    text: str


class BatchState(StrEnum):
    """A job's state, normalised from each API's own words (kept in ``RemoteBatch.raw_state``)."""

    SUBMITTED = "submitted"    # validating / PENDING / queued
    RUNNING = "running"        # in_progress / finalizing / RUNNING / cancelling
    COMPLETED = "completed"    # completed / SUCCEEDED
    FAILED = "failed"          # failed (validation) / FAILED
    EXPIRED = "expired"        # expired / EXPIRED (may carry partial output)
    CANCELLED = "cancelled"    # cancelled / CANCELLED
    UNKNOWN = "unknown"        # anything else: bounded by the workflow's timeout (OpenClaw #7319)


#: States after which a job never changes again: results() may be read (perhaps partial).
TERMINAL_STATES = frozenset({BatchState.COMPLETED, BatchState.FAILED, BatchState.EXPIRED,
                             BatchState.CANCELLED})


@dataclass(frozen=True)
class RemoteBatch:
    """What memq knows of one remote job; JSON-safe (task messages, the store), no secrets."""

    provider: str
    remote_id: str
    state: BatchState
    raw_state: str
    input_file: str | None = None
    output_file: str | None = None
    error_file: str | None = None
    message: str | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def require_stopped(self) -> None:
        """Results exist only once a job stopped: a retryable error until then."""
        if not self.terminal:
            raise ProviderRetryable(f"{self.provider}: batch {self.remote_id} is still "
                                 f"{self.raw_state}; results come once it stops")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["state"] = self.state.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RemoteBatch:
        """The record ``to_dict`` wrote; a state this memq does not know (a newer one's) is
        :attr:`BatchState.UNKNOWN`, which the workflow bounds by the job's timeout."""
        state = data["state"]
        return cls(provider=data["provider"], remote_id=data["remote_id"],
                   state=BatchState(state) if state in set(BatchState) else BatchState.UNKNOWN,
                   raw_state=data["raw_state"],
                   input_file=data.get("input_file"), output_file=data.get("output_file"),
                   error_file=data.get("error_file"), message=data.get("message"))


@dataclass
class BatchOutput:
    """A job's results: vectors (float32, L2-normalised like the sync path) and per-id errors.

    Every expected id is in exactly one of the two maps; ``errors`` holds the failed lines and
    the requests never run (:data:`NOT_RUN`), which the workflow sends back to the sync path.
    """

    vectors: dict[str, np.ndarray] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


class BatchApi(Protocol):
    """One provider's batch API. Methods raise :class:`EmbeddingError`, whose subclass says what
    the workflow should do (:class:`ProviderRetryable`, :class:`ProviderRefused`,
    :class:`BatchUnavailable`; see :mod:`pipeline.errors`)."""

    provider: str
    #: Most requests one job may hold.
    max_requests: int
    #: Largest input file, in bytes of JSONL.
    max_bytes: int

    def line_size(self, request: BatchRequest) -> int:
        """The bytes ``request`` takes in the input file: group requests so their sum stays
        within ``max_bytes`` (50,000 chunks of 8 KB would be twice OpenAI's 200 MB)."""
        ...

    def submit(self, requests: Sequence[BatchRequest], *, display_name: str) -> RemoteBatch:
        """Build the JSONL, upload it, create the job. If the create call fails, the uploaded
        file is deleted (best effort) and the error raised."""
        ...

    def poll(self, batch: RemoteBatch) -> RemoteBatch:
        """The job's current state (one GET)."""
        ...

    def results(self, batch: RemoteBatch, expected_ids: Collection[str]) -> BatchOutput:
        """Download the output and error files of a stopped job (completed, or expired,
        cancelled or failed with partial output) and account for every expected id."""
        ...

    def cancel(self, batch: RemoteBatch) -> RemoteBatch:
        """Ask the API to cancel; answers the job's state after the request."""
        ...

    def close(self) -> None:
        ...


def batch_api_for(spec: ProviderSpec, settings: Settings) -> BatchApi:
    """The batch client for the provider a spec names, built with this host's own key.

    The provider is rebuilt exactly as the sync path does (same key resolution, same provider
    key check), so a batch job's vectors are interchangeable with sync ones.
    """
    if spec.name not in BATCH_PROVIDERS:
        raise BatchUnsupported(f"{spec.name}: no batch API (batch mode is for "
                               f"{', '.join(BATCH_PROVIDERS)})")
    if spec.name not in _CLIENTS:
        raise BatchUnsupported(f"{spec.name}: batch client not available in this build")
    from pipeline.embeddings.registry import build_from_spec

    provider = build_from_spec(spec, settings)
    module, cls = _CLIENTS[spec.name]
    return getattr(importlib.import_module(module), cls)(provider)
