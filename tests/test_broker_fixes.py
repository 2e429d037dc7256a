"""kombu's Redis transport as memq repairs it (pipeline/fleet/kombu_repairs.py), against real
redis-servers of the tests' own.

A broker that vanishes while a task message is delivered but not acknowledged must not kill the
worker: Celery's consumer steps, replayed in a fresh process against a redis-server that is
killed at that moment.

A consumer killed after the broker answered its request for work, before it read the answer,
must not lose the message: a kombu consumer stopped at that point (tests/pop_kill_scenario.py)
and a real ``celery worker`` stopped with SIGSTOP while its request is on the wire, then
SIGKILLed. kombu as shipped loses the message for good; repaired, it comes back.

A consumer killed while it sweeps for messages past the visibility timeout must not hold back
every other consumer's sweep for kombu's 5-minute lock.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pipeline.fleet import kombu_repairs as broker_fixes
from tests.conftest import REPO, Fleet, redis_client
from tests.faultkit import PrivateRedis
from tests.indexcheck import wait_until
from tests.pop_kill_scenario import ORDER_MIX

pytestmark = pytest.mark.integration


def replay_broker_loss(tmp_path: Path, *, harden: bool) -> dict:
    """Run tests/broker_loss_scenario.py: message in hand, next BRPOP waiting, broker killed;
    what collect, close and the late ack raised."""
    broker = PrivateRedis(tmp_path)
    broker.start()
    argv = [sys.executable, "-m", "tests.broker_loss_scenario", str(broker.socket)]
    scenario = subprocess.Popen(argv + (["--harden"] if harden else []), cwd=REPO, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert scenario.stdout is not None and scenario.stdin is not None
        assert scenario.stdout.readline().strip() == "ready"
        broker.kill()
        scenario.stdin.write("go\n")
        scenario.stdin.flush()
        result = json.loads(scenario.stdout.readline())
        assert scenario.wait(30) == 0
        return result
    finally:
        if scenario.poll() is None:
            scenario.kill()
        broker.stop()


def test_kombu_alone_dies_of_the_lost_broker(tmp_path: Path) -> None:
    """What the repairs are for (if this fails, kombu fixed it upstream: the repairs can go)."""
    result = replay_broker_loss(tmp_path, harden=False)
    assert result["close"] == "AttributeError: 'NoneType' object has no attribute 'hostname'"


def test_repaired_transport_closes_every_channel_and_reports_connection_errors(
        tmp_path: Path) -> None:
    """Every channel is closed while the transport still knows its broker; a later use of one
    (the late ack) is a connection error, which Celery logs and survives."""
    result = replay_broker_loss(tmp_path, harden=True)
    assert result["collect"] is None  # kombu's collect swallows the close errors, as before
    assert result["close"] is None
    assert result["channels_closed"] == [True, True]
    assert result["ack"] is None  # ack_log_error handled it: a connection error
    assert result["reuse"].startswith("ConnectionError: this channel's broker connection was")
    assert "AttributeError" not in json.dumps(result)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A redis-server of the test's own (its command statistics are the test's alone)."""
    broker = PrivateRedis(tmp_path)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def scenario(url: str, *args: str, harden: bool) -> list[str]:
    return [sys.executable, "-m", "tests.pop_kill_scenario", url, *args,
            *(["--harden"] if harden else [])]


def kill_when_it_says(url: str, mode: str, word: str, *, harden: bool) -> None:
    """Run the scenario ``mode`` and SIGKILL it as soon as it prints ``word``."""
    consumer = subprocess.Popen(scenario(url, mode, harden=harden), cwd=REPO, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert consumer.stdout is not None
        assert consumer.stdout.readline().strip() == word
    finally:
        consumer.kill()
        consumer.wait()


def kill_with_the_reply_unread(broker: PrivateRedis, mode: str, *, harden: bool) -> dict:
    """A consumer takes the one message and is SIGKILLed with the broker's answer unread in
    its socket; where the message is then on the broker."""
    kill_when_it_says(broker.url, mode, "replied", harden=harden)
    client = redis_client(broker.url)
    return {"queued": client.llen("work"), "unacked": client.hlen("unacked")}


def collect(broker: PrivateRedis, seconds: float) -> dict:
    """What a repaired consumer started now receives within ``seconds``."""
    done = subprocess.run(scenario(broker.url, "collect", str(seconds), harden=True), cwd=REPO,
                          text=True, capture_output=True, timeout=seconds + 60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("mode", ["stop-before-poll", "stop-while-waiting"])
def test_kombu_alone_loses_a_message_whose_consumer_died_before_reading_it(
        private_redis: PrivateRedis, mode: str) -> None:
    """What the claiming repair is for (if this fails, kombu fixed it upstream)."""
    where = kill_with_the_reply_unread(private_redis, mode, harden=False)
    assert where == {"queued": 0, "unacked": 0}  # popped, never recorded: on the broker nowhere
    assert collect(private_redis, 2 * 2 + 2)["bodies"] == []  # past the visibility timeout


@pytest.mark.parametrize("mode", ["stop-before-poll", "stop-while-waiting"])
def test_repaired_consumer_killed_before_reading_leaves_the_message_to_be_redelivered(
        private_redis: PrivateRedis, mode: str) -> None:
    """The message was recorded in the same step that took it from its list: the next
    consumer's sweep puts it back after the visibility timeout, marked redelivered, and once
    acknowledged it is gone. ``stop-while-waiting``: the message came while the consumer was
    waiting for work (the wait takes nothing; the claim behind it does)."""
    where = kill_with_the_reply_unread(private_redis, mode, harden=True)
    assert where == {"queued": 0, "unacked": 1}
    assert collect(private_redis, 30) == {"bodies": ["job-1"], "redelivered": [True]}
    client = redis_client(private_redis.url)
    assert (client.llen("work"), client.hlen("unacked"), client.zcard("unacked_index")) == (0, 0, 0)


@pytest.mark.parametrize("harden", [False, True], ids=["kombu-as-shipped", "repaired"])
def test_a_consumer_killed_while_it_sweeps_holds_back_the_others_sweeps_one_period_at_most(
        private_redis: PrivateRedis, harden: bool) -> None:
    """A consumer is SIGKILLed while it holds the lock of the sweep that puts back messages past
    the visibility timeout (found in the repeated-kill test under load). kombu as shipped: the
    lock stands 300 s and no consumer sweeps meanwhile, so a dead consumer's message stays out.
    Repaired: the lock lasts one sweep period (1 s here) and the message comes back."""
    assert kill_with_the_reply_unread(private_redis, "stop-before-poll", harden=True) == {
        "queued": 0, "unacked": 1}
    kill_when_it_says(private_redis.url, "stop-in-sweep", "sweeping", harden=harden)
    client = redis_client(private_redis.url)
    lock_ms = client.pttl("unacked_mutex")  # -2: already expired
    if harden:
        assert lock_ms <= 1000
        assert collect(private_redis, 30) == {"bodies": ["job-1"], "redelivered": [True]}
    else:
        assert lock_ms > 290_000
        assert collect(private_redis, 2 * 2 + 2)["bodies"] == []  # past the visibility timeout
        assert client.hlen("unacked") == 1  # still there: held back, not lost


def command_calls(broker: PrivateRedis) -> dict[str, int]:
    stats = redis_client(broker.url).info("commandstats")
    return {name: stats.get(f"cmdstat_{name}", {}).get("calls", 0)
            for name in ("brpop", "eval", "blmove", "bzpopmin", "hset")}


def consume_mix(broker: PrivateRedis, mode: str, *, harden: bool) -> tuple[dict, dict]:
    """Run the ``order`` scenario on an empty broker: what came in which order, and which
    commands took it."""
    client = redis_client(broker.url)
    client.flushdb()
    client.config_resetstat()
    done = subprocess.run(scenario(broker.url, mode, harden=harden), cwd=REPO, text=True,
                          capture_output=True, timeout=90)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), command_calls(broker)


def test_claims_keep_kombus_priority_order_and_rotation_between_queues(
        private_redis: PrivateRedis) -> None:
    """Two queues, three priorities, published interleaved: the repaired consumer takes them
    in exactly the order kombu's BRPOP does (most urgent first, queues taking turns), with
    claims only."""
    shipped, shipped_calls = consume_mix(private_redis, "order", harden=False)
    repaired, repaired_calls = consume_mix(private_redis, "order", harden=True)
    assert len(shipped["bodies"]) == len(ORDER_MIX)
    assert repaired["bodies"] == shipped["bodies"]
    assert [b[:2] for b in shipped["bodies"]] == ["a0", "b0", "a0", "b0", "b0", "a3", "b3", "a3",
                                                  "b9", "a9", "b9", "a9"]
    assert shipped_calls["brpop"] >= len(ORDER_MIX) and shipped_calls["eval"] == 0
    assert repaired_calls["brpop"] == 0 and repaired_calls["eval"] >= len(ORDER_MIX)
    assert shipped["unacked"] == repaired["unacked"] == 0  # every one acknowledged
    # each message recorded in ``unacked`` once: by its claim (kombu's QoS.append, which
    # encodes the whole message again, does not write it a second time)
    assert shipped_calls["hset"] == repaired_calls["hset"] == len(ORDER_MIX), (shipped_calls,
                                                                                repaired_calls)


def test_an_idle_consumer_claims_a_bulk_message_as_soon_as_it_lands(
        private_redis: PrivateRedis) -> None:
    """An idle repaired consumer waits on its queues' doorbells, which every published message
    rings: a message in the bulk lane (priority 9) of either queue is claimed within a few
    milliseconds, not when the wait times out (``CLAIM_WAIT_S``; the wait used to watch only
    the most urgent list of one queue, and a remote producer's pass waited up to 0.2 s)."""
    client = redis_client(private_redis.url)
    client.flushdb()
    client.config_resetstat()
    done = subprocess.run(scenario(private_redis.url, "latency", "12", harden=True), cwd=REPO,
                          text=True, capture_output=True, timeout=90)
    assert done.returncode == 0, done.stderr
    delays = sorted(json.loads(done.stdout)["delays"])
    calls = command_calls(private_redis)
    assert len(delays) == 12
    assert delays[len(delays) // 2] < broker_fixes.CLAIM_WAIT_S / 4, delays
    assert calls["bzpopmin"] >= 12 and calls["brpop"] == 0 and calls["blmove"] == 0, calls
    assert client.hlen("unacked") == 0


def test_messages_that_land_while_no_consumer_waits_wake_as_many_consumers(
        private_redis: PrivateRedis) -> None:
    """Each published message rings its queue's doorbell once: two messages that land while
    every consumer is busy (in a claim's round trip, or working) wake two consumers when they
    next wait, not one (a doorbell of one member counted both rings once, and the second
    consumer's wait ran out its ``CLAIM_WAIT_S`` first). Rings whose messages were claimed
    without a wait are gone once the consumer is idle again."""
    client = redis_client(private_redis.url)
    client.flushdb()
    bell = broker_fixes.bell_key("b")
    sent = subprocess.run(scenario(private_redis.url, "publish-pairs", "1", harden=True),
                          cwd=REPO, text=True, capture_output=True, timeout=60)
    assert sent.returncode == 0, sent.stderr
    first, second = redis_client(private_redis.url), redis_client(private_redis.url)
    assert first.bzpopmin(bell, timeout=1) is not None
    assert second.bzpopmin(bell, timeout=1) is not None  # woken too, at once
    assert client.exists(bell) == 0

    sent = subprocess.run(scenario(private_redis.url, "publish-pairs", "1", harden=True),
                          cwd=REPO, text=True, capture_output=True, timeout=60)
    assert sent.returncode == 0, sent.stderr
    assert client.zcard(bell) == 2
    done = subprocess.run(scenario(private_redis.url, "slow-consumer", "1.5", harden=True),
                          cwd=REPO, text=True, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(body.split()[0] for body in json.loads(done.stdout.splitlines()[-1])[
        "taken"]) == ["0x", "0x", "0y", "0y"]  # both pairs
    assert client.exists(bell) == 0, client.zrange(bell, 0, -1)


def test_a_doorbell_no_consumer_waits_on_keeps_only_its_newest_rings(
        private_redis: PrivateRedis) -> None:
    """A queue whose consumers never wait on its doorbell (a no_ack reply queue keeps kombu's
    BRPOP) is still rung by every message: the doorbell keeps the newest rings only, so it does
    not grow a member per message for as long as the queue is used."""
    client = redis_client(private_redis.url)
    client.flushdb()
    count = broker_fixes.BELL_RINGS_KEPT * 3
    sent = subprocess.run(scenario(private_redis.url, "publish-many", str(count), harden=True),
                          cwd=REPO, text=True, capture_output=True, timeout=60)
    assert sent.returncode == 0, sent.stderr
    bell = broker_fixes.bell_key("b")
    assert client.zcard(bell) == broker_fixes.BELL_RINGS_KEPT
    assert 0 < client.pttl(bell) <= broker_fixes.BELL_EXPIRE_MS


def test_a_consumer_that_does_not_acknowledge_keeps_kombus_brpop(
        private_redis: PrivateRedis) -> None:
    """A no_ack consumer (Celery's reply queues) must not leave records that would bring its
    messages back later: its channel pops with BRPOP, records nothing."""
    result, calls = consume_mix(private_redis, "order-no-ack", harden=True)
    assert len(result["bodies"]) == len(ORDER_MIX)
    assert result["unacked"] == 0
    assert calls["brpop"] >= len(ORDER_MIX) and calls["eval"] == 0


def note_workers(broker: PrivateRedis, tmp_path: Path, *, harden: bool, **env: str
                 ) -> tuple[Fleet, Path]:
    """A fleet of tests/pop_kill_worker.py workers (none started yet) on ``broker``, and the
    notes file their task appends to; ``env`` adds to their environment."""
    notes = tmp_path / "notes.txt"
    notes.touch()
    logs = tmp_path / "worker-logs"
    logs.mkdir()
    return Fleet(broker.url, {"POP_KILL_BROKER": broker.url, "POP_KILL_NOTES": str(notes),
                              "POP_KILL_HARDEN": "1" if harden else "0", **env}, logs), notes


def start_worker(fleet: Fleet, name: str, pool: str = "solo") -> subprocess.Popen:
    """A real ``celery worker`` (solo pool: the main process consumes and runs the task;
    prefork: one pool process runs it, as memq's workers)."""
    argv = [sys.executable, "-m", "celery", "-A", "tests.pop_kill_worker", "worker", "-P",
            pool, "--concurrency", "1", "--without-gossip", "--without-mingle",
            "--without-heartbeat", "-Q", "work", "-n", f"{name}@%h", "--loglevel", "INFO"]
    worker = fleet.spawn(argv, name)
    log = fleet.log_dir / f"{name}.log"
    wait_until(lambda: [] if " ready." in log.read_text(errors="replace") else ["not ready"],
               60, f"{name} ready\n{fleet.logs()}")
    return worker


@contextmanager
def job_sender(broker: PrivateRedis) -> Iterator[Callable[..., None]]:
    """Publishes ``note`` jobs on ``work`` on one connection, so once warmed up (the first job
    makes routes, producer and channel) a publish is one LPUSH: it must land while a stopped
    worker's request for work, which ends after 0.2 s repaired, is still on the wire."""
    from celery import Celery

    sender = Celery("pop-kill-sender", broker=broker.url, set_as_current=False)
    try:
        with sender.connection_for_write() as connection:
            def send(text: str, seconds: float = 0.0) -> None:
                sender.send_task("note", [text, seconds], queue="work", connection=connection)

            yield send
    finally:
        sender.close()


def stop_with_a_request_answered(worker: subprocess.Popen, broker: PrivateRedis,
                                 send: Callable[[str], None], notes: Path, attempt: int
                                 ) -> str | None:
    """SIGSTOP the worker, publish one job: if its pending request for work took the job
    (the job left its list), return the job's text with the worker still stopped; else let
    the worker go on, wait until it ran the job (None)."""
    client = redis_client(broker.url)
    os.kill(worker.pid, signal.SIGSTOP)
    text = f"job-{attempt}"
    send(text)
    deadline = time.monotonic() + 3  # longer than any request's own timeout (kombu's is 1 s)
    while client.llen("work") and time.monotonic() < deadline:
        time.sleep(0.05)
    if client.llen("work") == 0:
        return text
    os.kill(worker.pid, signal.SIGCONT)
    wait_until(lambda: [] if text in notes.read_text() else ["not run"], 30,
               "the worker let go runs the job")
    return None


@pytest.mark.parametrize("harden", [False, True], ids=["kombu-as-shipped", "repaired"])
def test_real_worker_killed_with_a_taken_job_unread(harden: bool, private_redis: PrivateRedis,
                                                    tmp_path: Path) -> None:
    """A real ``celery worker`` stopped (SIGSTOP) while its request for work is on the wire;
    a job is published and taken by that request; the worker is SIGKILLed before it could read
    the answer, and a second worker starts. kombu as shipped: the job is on the broker nowhere
    and never runs. Repaired: it is in ``unacked`` and the second worker runs it, redelivered."""
    fleet, notes = note_workers(private_redis, tmp_path, harden=harden)
    try:
        first = start_worker(fleet, "first")
        with job_sender(private_redis) as send:
            send("warm-up")
            wait_until(lambda: [] if "warm-up" in notes.read_text() else ["not run"], 30,
                       f"the first worker runs a job\n{fleet.logs()}")
            for attempt in range(10):
                taken = stop_with_a_request_answered(first, private_redis, send, notes, attempt)
                if taken:
                    break
        assert taken, "no job was ever taken by a request on the wire"
        first.kill()
        first.wait()
        client = redis_client(private_redis.url)
        assert client.llen("work") == 0
        assert client.hlen("unacked") == (1 if harden else 0)
        start_worker(fleet, "second")
        if harden:
            wait_until(lambda: [] if taken in notes.read_text() else ["not run"], 30,
                       f"the taken job runs again\n{fleet.logs()}")
            assert f"{taken} redelivered=True" in notes.read_text().splitlines()
        else:
            time.sleep(2 * 2 + 2)  # twice the visibility timeout, and the sweep's interval
            assert taken not in notes.read_text()
            assert (client.llen("work"), client.hlen("unacked")) == (0, 0)
    finally:
        fleet.stop()


@pytest.mark.parametrize("harden", [False, True], ids=["kombu-as-shipped", "repaired"])
def test_a_job_that_outlasts_the_visibility_timeout_runs_once_and_the_next_one_runs(
        harden: bool, private_redis: PrivateRedis, tmp_path: Path) -> None:
    """A live worker runs a job for longer than the visibility timeout (a slow provider; every
    job on a loaded machine: found in the hard-kill test under load, where 32-chunk jobs took
    9-20 s against its 8 s). kombu as shipped: the sweep hands the running job back, to the
    end of its queue that is consumed first, so it runs again the moment it ends, and again,
    and the job behind it never runs. Repaired: the worker's main process keeps the messages it
    holds from the sweep while it lives, so the job runs once and the next one after it."""
    visibility, work = 3, 7.0
    fleet, notes = note_workers(private_redis, tmp_path, harden=harden,
                                POP_KILL_VISIBILITY=str(visibility))

    def lines() -> list[str]:
        return notes.read_text().splitlines()

    try:
        start_worker(fleet, "slow", pool="prefork")
        with job_sender(private_redis) as send:
            send("slow", work)
            send("next")
        if harden:
            wait_until(lambda: [] if "next redelivered=False" in lines() else ["not run"],
                       2 * work + 30, f"the next job runs\n{fleet.logs()}")
            time.sleep(visibility + 2)  # past the timeout and a sweep: nothing comes back
            assert lines() == ["slow redelivered=False", "next redelivered=False"]
        else:
            wait_until(lambda: [] if len(lines()) >= 2 else ["not twice"], 2 * work + 30,
                       f"the running job comes back\n{fleet.logs()}")
            assert lines()[:2] == ["slow redelivered=False", "slow redelivered=True"]
            assert not any(line.startswith("next") for line in lines())
    finally:
        fleet.stop()


def test_the_claiming_repair_is_applied_once_and_only_to_the_kombu_it_was_written_for() -> None:
    from kombu.transport import redis as kombu_redis

    import pipeline.fleet.broker  # noqa: F401 - applies the repairs, as every memq process

    start = kombu_redis.Channel._brpop_start
    assert getattr(start, "__wrapped__", None) is not None  # this kombu gets it
    broker_fixes.harden_kombu_redis()
    assert kombu_redis.Channel._brpop_start is start  # not wrapped twice
    assert not hasattr(start.__wrapped__, "__wrapped__")
    assert kombu_redis.QoS.unacked_mutex_expire.fget is broker_fixes.sweep_lock_expiry
    renewing = kombu_redis.MultiChannelPoller.maybe_restore_messages
    assert getattr(renewing, "__wrapped__", None) is not None
    assert not hasattr(renewing.__wrapped__, "__wrapped__")  # renewed once per sweep, not twice
    assert broker_fixes.written_for((5, 5, 0)) and broker_fixes.written_for((5, 7, 2))
    assert not broker_fixes.written_for((5, 4, 2)) and not broker_fixes.written_for((5, 8, 0))
    assert broker_fixes.redis_version("7.0.15") >= broker_fixes.CLAIMS_NEED_REDIS
    assert broker_fixes.redis_version("6.0.9") < broker_fixes.CLAIMS_NEED_REDIS
    assert broker_fixes.redis_version("7.2.0-rc1") == (7, 2, 0)
    assert broker_fixes.redis_version("") < broker_fixes.CLAIMS_NEED_REDIS
