"""A kombu consumer on a Redis broker whose take of a message can be stopped at a controlled
point: the broker has answered (the reply waits, unread, in the consumer's socket), and the
consumer has not read it yet (tests/test_broker_fixes.py kills it there).

Run as ``python -m tests.pop_kill_scenario URL MODE [--harden]``; ``--harden`` applies memq's
repairs to kombu first (pipeline/fleet/kombu_repairs.py, as every memq process does). Modes:

* ``stop-before-poll``: one message is queued, then the consumer starts;
* ``stop-while-waiting``: the consumer starts on an empty queue; once it has found the queue
  empty and asked again, one message is published (from another connection);

in both the consumer prints ``replied`` when the broker's answer carrying the message is in its
socket, and then reads stdin forever instead of the answer.

* ``stop-in-sweep``: a consumer that prints ``sweeping`` once it holds the lock of kombu's sweep
  for unacknowledged messages, and then reads stdin forever (it never releases the lock);

* ``collect SECONDS``: consume (acknowledging) until a message comes or SECONDS pass, and print
  ``{"bodies": [...], "redelivered": [...]}``;
* ``order``: queue a fixed mix of messages on two queues and three priorities, consume them all
  (one at a time, acknowledged) and print ``{"bodies": [...], "unacked": N}``; ``order-no-ack``
  the same with a consumer that does not acknowledge.
* ``latency N``: a consumer of queues ``a`` and ``b`` waits, idle; N messages are published
  one at a time (another connection, a pause between them), most of them in the bulk lane
  (priority 9) of ``b``; print ``{"delays": [...]}``, the seconds from each publish to its
  delivery.
* ``slow-consumer SECONDS``: consume queue ``b`` for SECONDS, holding each message 0.1 s
  before acknowledging it, and print ``{"taken": {body: delay}}`` (delay: seconds from the
  publish time the body carries to the delivery);
* ``publish-many N``: publish N messages to queue ``b`` at once, on one connection;
* ``publish-pairs N``: publish N pairs of messages to queue ``b``, the two of a pair one right
  after the other on one connection, 0.45 s between pairs.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from queue import Empty

from kombu import Connection, Consumer, Producer, Queue

QUEUE = "work"
#: Short, so a killed consumer's message comes back within a test's patience.
VISIBILITY_S = 2
TRANSPORT_OPTIONS = {"visibility_timeout": VISIBILITY_S, "unacked_restore_interval": 1,
                     "unacked_restore_throttle": 1}


def connect(url: str) -> Connection:
    connection = Connection(url, transport_options=TRANSPORT_OPTIONS)
    connection.connect()
    return connection


def drain(connection: Connection, timeout: float) -> None:
    """Deliver what comes within ``timeout`` (nothing coming is no error here)."""
    with contextlib.suppress(TimeoutError):
        connection.drain_events(timeout=timeout)


def publish(url: str, body: str, queue: str = QUEUE, priority: int = 0) -> None:
    with connect(url) as connection:
        Producer(connection).publish(body, routing_key=queue, priority=priority,
                                     declare=[Queue(queue)], serializer="json")


def stop_at_reply(url: str, arrive_while_waiting: bool) -> None:
    """Consume until the broker's reply carrying the message is in the socket; then stop."""
    from kombu.transport import redis as kombu_redis

    read, start = kombu_redis.Channel._brpop_read, kombu_redis.Channel._brpop_start
    state = {"empty_reads": 0, "published": not arrive_while_waiting}

    def reply_waits(channel, **options):
        if state["published"]:
            print("replied", flush=True)
            sys.stdin.read()  # the caller kills this process; the reply is never read
        try:
            return read(channel, **options)
        except Empty:
            state["empty_reads"] += 1
            raise

    def asked(channel, timeout=None):
        start(channel, timeout)
        if not state["published"] and state["empty_reads"] and channel._in_poll:
            publish(url, "job-1")  # lands while the consumer's request is on the wire
            state["published"] = True

    kombu_redis.Channel._brpop_read, kombu_redis.Channel._brpop_start = reply_waits, asked
    if not arrive_while_waiting:
        publish(url, "job-1")
    with connect(url) as connection:
        Consumer(connection, [Queue(QUEUE)], callbacks=[lambda body, message: None]).consume()
        while True:
            drain(connection, 0.5)


def stop_in_sweep(url: str) -> None:
    """Consume until a sweep for unacknowledged messages holds its lock; then stop there."""
    from kombu.transport import redis as kombu_redis

    shipped = kombu_redis.Mutex

    def held_for_good(client, name, expire):
        with shipped(client, name, expire):
            print("sweeping", flush=True)
            sys.stdin.read()  # the caller kills this process; the lock is never released
        raise AssertionError("killed before this")

    kombu_redis.Mutex = held_for_good
    with connect(url) as connection:
        Consumer(connection, [Queue(QUEUE)], callbacks=[lambda body, message: None]).consume()
        while True:
            drain(connection, 0.05)  # short: polls that see nothing sweep unacked messages


def collect(url: str, seconds: float) -> None:
    """Consume until one message comes (acknowledged) or ``seconds`` pass."""
    bodies: list[str] = []
    redelivered: list[bool] = []

    def take(body, message) -> None:
        bodies.append(body)
        redelivered.append(bool(message.delivery_info.get("redelivered")))
        message.ack()

    with connect(url) as connection:
        Consumer(connection, [Queue(QUEUE)], callbacks=[take]).consume()
        deadline = time.monotonic() + seconds
        while not bodies and time.monotonic() < deadline:
            drain(connection, 0.05)  # short: polls that see nothing sweep unacked messages
    print(json.dumps({"bodies": bodies, "redelivered": redelivered}), flush=True)


#: (queue, priority) of the messages ``order`` queues, in publishing order.
ORDER_MIX = [("a", 9), ("b", 0), ("a", 0), ("b", 9), ("a", 3), ("b", 3), ("a", 0), ("b", 0),
             ("a", 9), ("b", 9), ("b", 0), ("a", 3)]


def order(url: str, no_ack: bool) -> None:
    """Queue :data:`ORDER_MIX`, consume it all one at a time; the order it came in."""
    for n, (queue, priority) in enumerate(ORDER_MIX):
        publish(url, f"{queue}{priority}-{n}", queue, priority)
    bodies: list[str] = []

    def take(body, message) -> None:
        bodies.append(body)
        if not no_ack:
            message.ack()

    with connect(url) as connection:
        consumer = Consumer(connection, [Queue("a"), Queue("b")], callbacks=[take],
                            no_ack=no_ack, prefetch_count=1)
        consumer.consume()
        deadline = time.monotonic() + 20
        while len(bodies) < len(ORDER_MIX) and time.monotonic() < deadline:
            drain(connection, 0.5)
    with connect(url) as connection:  # not the consumer's: a reply may be pending on that one
        unacked = connection.default_channel.client.hlen("unacked")
    print(json.dumps({"bodies": bodies, "unacked": unacked}), flush=True)


def latency(url: str, count: int) -> None:
    """Publish ``count`` messages to an idle consumer one at a time; each one's delay."""
    import threading

    delays: list[float] = []

    def take(body, message) -> None:
        delays.append(time.time() - float(body.split()[1]))
        message.ack()

    def publisher() -> None:
        with connect(url) as connection:  # opened once: a delay is the message's alone
            producer = Producer(connection)
            for n in range(count):
                time.sleep(0.35)  # the consumer has found its queues empty and waits
                queue, priority = ("a", 0) if n % 4 == 3 else ("b", 9)
                producer.publish(f"{queue}{priority}-{n} {time.time()!r}", routing_key=queue,
                                 priority=priority)

    with connect(url) as connection:
        Consumer(connection, [Queue("a"), Queue("b")], callbacks=[take],
                 prefetch_count=1).consume()
        thread = threading.Thread(target=publisher)
        thread.start()
        deadline = time.monotonic() + 30 + count
        while len(delays) < count and time.monotonic() < deadline:
            drain(connection, 0.5)
        thread.join()
    print(json.dumps({"delays": delays}), flush=True)


def slow_consumer(url: str, seconds: float) -> None:
    """Consume queue ``b`` one message at a time, each held 0.1 s; when each came."""
    taken: dict[str, float] = {}

    def take(body, message) -> None:
        taken[body] = time.time() - float(body.split()[1])
        time.sleep(0.1)
        message.ack()

    with connect(url) as connection:
        Consumer(connection, [Queue("b")], callbacks=[take], prefetch_count=1).consume()
        print("consuming", flush=True)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            drain(connection, 0.2)
    print(json.dumps({"taken": taken}), flush=True)


def publish_many(url: str, count: int) -> None:
    """``count`` messages to queue ``b``, one right after the other."""
    with connect(url) as connection:
        producer = Producer(connection)
        for n in range(count):
            producer.publish(f"{n} {time.time()!r}", routing_key="b")


def publish_pairs(url: str, pairs: int) -> None:
    """``pairs`` bursts of two messages to queue ``b``, each body ``<n><x|y> <publish time>``."""
    with connect(url) as connection:
        producer = Producer(connection)
        for n in range(pairs):
            for half in "xy":
                producer.publish(f"{n}{half} {time.time()!r}", routing_key="b")
            time.sleep(0.45)  # the pair taken (0.1 s each) and the consumers idle again


def main(argv: list[str]) -> None:
    url, mode, *rest = argv
    if "--harden" in rest:
        import pipeline.fleet.broker  # noqa: F401 - applies pipeline.fleet.kombu_repairs, as every memq process
    if mode in ("stop-before-poll", "stop-while-waiting"):
        stop_at_reply(url, arrive_while_waiting=mode == "stop-while-waiting")
    elif mode == "stop-in-sweep":
        stop_in_sweep(url)
    elif mode == "collect":
        collect(url, float(rest[0]))
    elif mode == "latency":
        latency(url, int(rest[0]))
    elif mode == "publish-many":
        publish_many(url, int(rest[0]))
    elif mode == "publish-pairs":
        publish_pairs(url, int(rest[0]))
    elif mode == "slow-consumer":
        slow_consumer(url, float(rest[0]))
    elif mode in ("order", "order-no-ack"):
        order(url, no_ack=mode == "order-no-ack")
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
