"""A search's deadline: the query embedding waited for until then at most, and a cooldown.

OpenClaw 2026.9.6 bounds ``memory_search`` at 30 s (``DEFAULT_MEMORY_SEARCH_TIMEOUT_MS``,
hard-coded) and, when it runs out, answers with the memory-file keyword matches it found
before it began to wait for the query's embedding: ``partial: true``, ``timedOut: true``,
``timeoutMs`` and a warning. After a search that failed (a timeout with nothing found), it
answers every ``memory_search`` of that agent as unavailable for 60 s
(``MEMORY_SEARCH_TOOL_COOLDOWN_MS``).

memq bounds a search at ``query.timeoutMs`` (memq's key; default OpenClaw's 30 s) the same
way: the keyword side runs in this thread, the query embedding in another, waited for until
the deadline. Past it, the answer is the keyword matches (memory files and transcripts
alike), and the provider is then skipped for :data:`COOLDOWN_S`: searches answer at once from
keywords, saying so, instead of waiting again (OpenClaw waits again after a partial answer,
and answers nothing after a failed one). An embedding that does not come back in time is
left to finish on its thread (OpenClaw's ``Promise.race`` does not abort it either); the
provider's own request timeout ends it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from pipeline.embeddings.base import EmbeddingProvider

# Vectors are only passed through here: an index pass builds a memory (and imports this
# module) without NumPy.
if TYPE_CHECKING:
    import numpy as np

T = TypeVar("T")

#: OpenClaw's ``DEFAULT_MEMORY_SEARCH_TIMEOUT_MS``: ``query.timeoutMs``'s default.
DEFAULT_TIMEOUT_MS = 30_000
#: OpenClaw's ``MEMORY_SEARCH_TOOL_COOLDOWN_MS``: how long a provider that made a search run
#: out of time is skipped.
COOLDOWN_S = 60.0


def timed_out_message(timeout_ms: int) -> str:
    """OpenClaw's words for a search past its deadline."""
    return f"memory_search timed out after {round(timeout_ms / 1000)}s"


@dataclass
class Deadline:
    """When a search that started now must answer by (``timeout_ms`` from now)."""

    timeout_ms: int
    started: float = 0.0

    def __post_init__(self) -> None:
        self.started = self.started or time.monotonic()

    def left(self) -> float:
        """Seconds left (never below 0)."""
        return max(0.0, self.started + self.timeout_ms / 1000 - time.monotonic())


def in_background(work: Callable[[], T], name: str) -> Future[T]:
    """``work()`` started on a daemon thread of its own; its outcome (value or error) in the
    future returned."""
    future: Future[T] = Future()
    future.set_running_or_notify_cancel()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to whoever waits
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def within(future: Future[T], seconds: float) -> tuple[bool, T | None]:
    """``(True, value)`` when ``future`` ends within ``seconds``, else ``(False, None)`` (it
    goes on); its error is raised here."""
    try:
        return True, future.result(timeout=max(0.0, seconds))
    except FutureTimeout:
        return False, None


def embed_within(provider: EmbeddingProvider, query: str, seconds: float) -> np.ndarray | None:
    """``provider.embed_query(query)`` if it answers within ``seconds``, else None (the call
    goes on on its own daemon thread until the provider's own timeout). Its errors are
    raised here."""
    if seconds <= 0:
        return None
    return within(in_background(lambda: provider.embed_query(query), "memq-query-embedding"),
                  seconds)[1]


class EmbeddedQuery:
    """``provider`` with the query's vector already known: what the ranking is handed after
    :func:`embed_within` (it asks for the query's vector and nothing else)."""

    def __init__(self, provider: EmbeddingProvider, vector: np.ndarray) -> None:
        self.provider = provider
        self.vector = vector
        self.name, self.model = provider.name, provider.model
        self.max_input_bytes = provider.max_input_bytes

    @property
    def dims(self) -> int:
        return int(self.vector.shape[-1])

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.provider.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.vector


class Cooldown:
    """Which provider (a key such as ``(name, model)``) is skipped, until when and why."""

    def __init__(self, seconds: float = COOLDOWN_S) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._key: object = None
        self._until = 0.0
        self.reason = ""

    def start(self, key: object, reason: str) -> None:
        """Skip ``key`` for the next :attr:`seconds`, because of ``reason``."""
        with self._lock:
            self._key, self._until, self.reason = key, time.monotonic() + self.seconds, reason

    def left(self, key: object) -> float:
        """Seconds ``key`` is still skipped for (0: not skipped)."""
        with self._lock:
            if key != self._key:
                return 0.0
            return max(0.0, self._until - time.monotonic())
