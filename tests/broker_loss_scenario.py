"""Replays, step by step, what a Celery worker's consumer does when its Redis broker vanishes
while a task message is delivered but not acknowledged (tests/test_broker_fixes.py).

Run as ``python -m tests.broker_loss_scenario SOCKET [--harden]`` against a redis-server on
that unix socket, which the caller kills when this prints ``ready``; it then prints one JSON
line: what each step raised.
"""

from __future__ import annotations

import json
import sys
import time

from kombu import Connection, Consumer, Exchange, Producer, Queue
from kombu.common import ignore_errors


def _attempt(step) -> str | None:
    """The exception a step raised, as ``Type: message``; None when it raised nothing."""
    try:
        step()
    except Exception as exc:  # the result under test
        return f"{type(exc).__name__}: {exc}"
    return None


def main(socket_path: str, harden: bool) -> None:
    if harden:
        import pipeline.fleet.broker  # noqa: F401 - applies pipeline.fleet.kombu_repairs, as every memq process

    connection = Connection(f"redis+socket://{socket_path}")
    connection.connect()
    Producer(connection).publish({"job": 1}, routing_key="work", declare=[Queue("work")])
    delivered = []
    # The task consumer: Celery's is on the connection's default channel, acks late.
    tasks_channel = connection.default_channel
    Consumer(tasks_channel, [Queue("work")], callbacks=[lambda body, m: delivered.append(m)]
             ).consume()
    # The remote-control channel: a fanout queue, consumed with (P)SUBSCRIBE.
    control_channel = connection.channel()
    Consumer(control_channel, [Queue("w.pidbox", Exchange("celery.pidbox", "fanout"),
                                     auto_delete=True)], callbacks=[]).consume()
    deadline = time.monotonic() + 10
    # Until the message is in hand and the next BRPOP is on the wire, unanswered.
    while not (delivered and tasks_channel._in_poll) and time.monotonic() < deadline:
        _attempt(lambda: connection.drain_events(timeout=0.2))
    print("ready" if delivered and tasks_channel._in_poll else "not ready", flush=True)
    sys.stdin.readline()  # the caller has killed the broker

    result = {
        # Celery's consumer, on the connection error (Consumer.on_connection_error_after_connected):
        "collect": _attempt(lambda: connection.collect(socket_timeout=1.0)),
        "close": _attempt(lambda: ignore_errors(connection, connection.close)),
        # The task that was running finishes and acknowledges its message (Request.acknowledge).
        "ack": _attempt(lambda: delivered[0].ack_log_error(_Quiet(), connection.connection_errors)),
        "channels_closed": [tasks_channel.closed, control_channel.closed],
        # Anything that still holds a closed channel and sends through it.
        "reuse": _attempt(lambda: control_channel.pool),
    }
    print(json.dumps(result), flush=True)


class _Quiet:
    """A logger that says nothing (``ack_log_error`` logs a failed ack)."""

    def critical(self, *args, **kwargs) -> None:
        pass


if __name__ == "__main__":
    main(sys.argv[1], "--harden" in sys.argv[2:])
