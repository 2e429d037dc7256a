"""Asking a shard's readers over the broker: :class:`ShardReader`.

A :class:`ShardReader` sends a :class:`~pipeline.messages.QueryRequest` to the memory's
``query.<shard>`` queue (the interactive lane, expiring with the wait) and waits for the
:class:`~pipeline.messages.QueryReply` on Celery's ``rpc://`` result backend: one reply queue
per client thread, the answer pushed to it the moment the reader has it (a database result
backend would be polled; docs/deploy.md compares both). Past ``fleet.queryTimeoutMs`` the
caller gets :class:`~pipeline.errors.ShardUnreachable`, never a hang.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from celery.exceptions import TimeoutError as CeleryTimeout

from pipeline.errors import (
    AppendError,
    FleetError,
    MemoryDisabled,
    MemoryPathError,
    MessageRefused,
    ShardUnreachable,
    WorkspaceMissing,
)
from pipeline.fleet.broker import BROKER_ERRORS, broker_failure, client_app, describe, silent_shard
from pipeline.messages import QueryReply, QueryRequest
from pipeline.routing import QUERY_TASK, Lane, query_queue

#: The error a reply's kind stands for, raised again on the asking side.
_RAISED: dict[str, type[Exception]] = {
    "path": MemoryPathError, "append": AppendError, "disabled": MemoryDisabled,
    "workspace": WorkspaceMissing,
}


@dataclass(frozen=True)
class Sent:
    """A request :meth:`ShardReader.send` sent: its reply is awaited by
    :meth:`ShardReader.wait` until ``deadline`` (``time.monotonic()``)."""

    request: QueryRequest
    result: Any  # Celery's AsyncResult
    deadline: float


class ShardReader:
    """Asks the readers of the fleet on ``broker_url``; waits ``timeout_s`` at most for each
    answer. Thread-safe (Celery keeps one result consumer per thread); ``close()`` releases
    the connections."""

    def __init__(self, broker_url: str, timeout_s: float) -> None:
        self.broker_url = broker_url
        self.timeout_s = timeout_s
        self.app = client_app(broker_url)
        self.app.conf.update(result_backend="rpc://", result_persistent=False)
        self._lanes = urlsplit(broker_url).scheme in ("redis", "rediss", "redis+socket")
        self._lock = threading.Lock()

    def send(self, request: QueryRequest) -> Sent:
        """Send ``request`` to its shard without waiting: :meth:`wait` for the reply, on the
        same thread (its reply queue is this thread's), so the caller works meanwhile."""
        message = request.to_json()
        try:
            result = self.app.send_task(
                QUERY_TASK, args=[message], queue=query_queue(request.shard),
                expires=self.timeout_s,
                priority=int(Lane.INTERACTIVE) if self._lanes else None,
                argsrepr=describe(message), kwargsrepr="{}")  # no query text in events
        except BROKER_ERRORS as exc:
            raise broker_failure(self.broker_url, exc) from None
        return Sent(request, result, time.monotonic() + self.timeout_s)

    def wait(self, sent: Sent) -> QueryReply:
        """The reply to a request :meth:`send` sent (``fleet.queryTimeoutMs`` from the send
        at most)."""
        request = sent.request
        try:
            raw = sent.result.get(timeout=max(0.001, sent.deadline - time.monotonic()),
                                  propagate=False, interval=0.05)  # never 0: no limit
        except CeleryTimeout:  # why: no worker on this broker at all, or no reader of it
            raise silent_shard(self.broker_url, request.shard, self.timeout_s) from None
        except BROKER_ERRORS as exc:
            raise broker_failure(self.broker_url, exc) from None
        if not isinstance(raw, dict):
            raise ShardUnreachable(f"the reader of shard {request.shard} failed: {raw!r}"[:500])
        try:
            return QueryReply.from_json(raw)
        except MessageRefused as exc:
            raise ShardUnreachable(f"the reader of shard {request.shard} answered in a form "
                                   f"this memq cannot read: {exc}") from None

    def ask(self, request: QueryRequest) -> QueryReply:
        """Send ``request`` to its shard and wait for the reply."""
        return self.wait(self.send(request))

    def answer(self, request: QueryRequest) -> Any:
        """The answer to ``request`` (:func:`unwrap`)."""
        return unwrap(self.ask(request), request)

    def close(self) -> None:
        """Close the connections of this reader (its app's pool and this thread's consumer)."""
        with self._lock:
            backend = self.app._backend
            consumer = getattr(backend, "result_consumer", None)
            if consumer is not None and getattr(consumer, "_connection", None) is not None:
                try:
                    consumer.stop()
                    consumer._connection.close()
                except Exception:  # closing is best effort: the process may be exiting
                    pass
            self.app.close()

    def __enter__(self) -> ShardReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def unwrap(reply: QueryReply, request: QueryRequest) -> Any:
    """The answer a reply holds; a refusal raised as the same error a local call would raise
    (a path outside the memory, a refused note, a memory turned off), anything else as a
    :class:`~pipeline.errors.FleetError` naming the reader."""
    if reply.error is None:
        return reply.answer
    raised = _RAISED.get(reply.kind or "")
    if raised is not None:
        raise raised(reply.error)
    where = f" ({reply.node})" if reply.node else ""
    if reply.kind == "refused":
        raise FleetError(f"the reader of shard {request.shard}{where} refused to answer for "
                         f"memory {request.memory!r}: {reply.error}")
    raise FleetError(f"the reader of shard {request.shard}{where} failed: {reply.error}")
