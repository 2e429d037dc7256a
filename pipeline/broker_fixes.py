"""Two repairs to kombu's Redis transport, for a broker that vanishes while a message is
delivered but not yet acknowledged (memq acknowledges after the task ran, so one usually is).

What goes wrong without them (kombu 5.5-5.7, Celery 5.5-5.7), found by a probe in a worker
that died during a broker restart (``tests/test_broker_fixes.py`` replays it step by step):

1. Celery's consumer calls ``Connection.collect()``. kombu's ``Transport.close_connection``
   closes the channels one by one and stops at the first close that fails, and on a dead
   broker they fail: the task channel still waits for its BRPOP reply, the remote-control
   channel sends PUNSUBSCRIBE into a closed socket. ``collect()`` swallows the error and
   detaches the transport from its connection (``transport.client = None``); the channels it
   did not close stay half open, each with its unacknowledged messages.
2. Celery then closes the connection again, or a task that was running finishes and acks its
   message: the channel rebuilds its connection pool from ``transport.client.hostname``, and
   the worker dies of ``AttributeError: 'NoneType' object has no attribute 'hostname'`` —
   not a connection error, so nothing on the way treats it as one.

The repairs: closing a connection closes every channel (the first failure is raised after
all are closed, as before), and a channel whose connection was closed answers with a Redis
``ConnectionError`` — which Celery and kombu already handle (reconnect, log a failed ack;
the message comes back after the visibility timeout, and every memq task is idempotent).
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import redis as kombu_redis

_MARK = "_memq_broker_fixes"


def harden_kombu_redis() -> None:
    """Apply both repairs to kombu's Redis transport classes (once per process; later calls
    do nothing). Every memq process that talks to a Redis broker calls this through
    :mod:`pipeline.fleet`."""
    transport_cls, channel_cls = kombu_redis.Transport, kombu_redis.Channel
    if getattr(transport_cls, _MARK, False):
        return
    transport_cls.close_connection = _close_every_channel
    channel_cls._connparams = _refuse_when_detached(channel_cls._connparams)
    setattr(transport_cls, _MARK, True)


def _close_every_channel(self: kombu_redis.Transport, connection: Any) -> None:
    """``Transport.close_connection`` that does not stop at the first channel whose close
    fails. A close that failed before it marked the channel closed (it only consumed the
    pending BRPOP reply) is tried once more, so the channel gives back its messages and
    sockets while the transport still knows its broker."""
    self.cycle.close()
    first_error: BaseException | None = None
    for channels in self._avail_channels, self.channels:
        while channels:
            channel = channels.pop()
            for _attempt in range(2):
                try:
                    channel.close()
                    break
                except Exception as exc:  # re-raised below, after the other channels
                    first_error = first_error or exc
                    if channel.closed:
                        break
    if first_error is not None:
        raise first_error


def _refuse_when_detached(connparams: Any) -> Any:
    def _connparams(self: kombu_redis.Channel, asynchronous: bool = False) -> dict:
        transport = self.connection
        if transport is None or transport.client is None:
            raise redis.exceptions.ConnectionError(
                "this channel's broker connection was closed (the broker went away)")
        return connparams(self, asynchronous=asynchronous)

    _connparams.__doc__ = connparams.__doc__
    return _connparams
