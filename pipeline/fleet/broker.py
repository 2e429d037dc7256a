"""Talking to the worker fleet through its broker: sending work, and asking who is there.

Work is sent by task name (:mod:`pipeline.routing`), so this side needs none of the task code
(``workers`` registers the tasks under the same names). :class:`FleetDispatcher` is the
:class:`~pipeline.dispatch.Dispatcher` of a producer pass whose vectors come from the fleet; the
workers use it too, to pass results on. :func:`celery_settings` is the configuration every
memq Celery app shares (the workers' app and the throwaway client apps made here).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import redis
from amqp.exceptions import AccessRefused, ChannelError, NotAllowed
from amqp.exceptions import ConnectionError as AMQPConnectionError
from celery import Celery
from kombu import Connection, Queue
from kombu.exceptions import OperationalError

from pipeline.config import BatchSettings, redact_url
from pipeline.errors import BrokerUnreachable, FleetError, ShardUnreachable
from pipeline.fleet.kombu_repairs import harden_kombu_redis
from pipeline.routing import (
    APPLY_TASK,
    BATCH_POLL_TASK,
    BATCH_SUBMIT_TASK,
    BATCH_UPDATE_TASK,
    EMBED_TASK,
    INDEX_TASK,
    QMD_JOB_TASK,
    REINDEX_STEP_TASK,
    WRITE_TASK,
    Lane,
    batch_queue,
    control_queue,
    describe,
    embed_queue,
    new_job_id,
    query_queue,
    store_queue,
)
from pipeline.store import batches
from pipeline.store.engine import Database

if TYPE_CHECKING:  # a worker imports this module at start: numpy and pydantic wait for a task
    from pipeline.batch import workflow
    from pipeline.messages import (
        BatchPoll,
        BatchSubmit,
        BatchUpdate,
        EmbedJob,
        EmbedResult,
        FileChanges,
        IndexRequest,
        Route,
    )

DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
DEFAULT_TIMEOUT_S = 1.0
# No task may run longer than this (embedding jobs take seconds; the limit catches a hang).
# The soft limit comes first, so an embedding job can hand its chunks back to be retried.
TASK_TIME_LIMIT_S = float(os.environ.get("MEMQ_TASK_TIME_LIMIT") or 300)
TASK_SOFT_TIME_LIMIT_S = TASK_TIME_LIMIT_S - min(20.0, TASK_TIME_LIMIT_S / 10)
# How long Redis keeps a message of a dead consumer before handing it out again: the time a
# hard-killed worker's job waits to be redone. It must stay above every task's run time and
# retry countdown, or a live task would run twice (harmless, as writes are idempotent, but
# wasted work).
VISIBILITY_TIMEOUT_S = int(os.environ.get("MEMQ_VISIBILITY_TIMEOUT") or 2 * TASK_TIME_LIMIT_S)
# kombu looks for such messages only every unacked_restore_interval x unacked_restore_throttle
# seconds (10 x 10 by default): up to 100 s more. Looking every tenth of the timeout (1 to 10 s)
# bounds the wait near the timeout itself; a look is one Redis range query.
RESTORE_SWEEP_S = max(1, min(10, VISIBILITY_TIMEOUT_S // 10))

log = logging.getLogger(__name__)

#: A submit message may wait in its queue a while (and comes back after the visibility
#: timeout if its worker dies): its lease outlives both.
SUBMIT_LEASE_S = VISIBILITY_TIMEOUT_S + 60.0
#: A poll chain's lease lasts two poll intervals plus this; a chain silent for longer (its
#: worker was killed, Redis was flushed) is replaced by the next reconcile.
POLL_GRACE_S = float(os.environ.get("MEMQ_BATCH_POLL_GRACE", "60"))
LEASE_PREFIX = "memq:batch-lease:"
#: Where a shard's writer says that a job of a producer on another host ended (the job id
#: follows): one item, pushed when the job log says so, popped by the producer waiting for it.
JOB_ENDED_PREFIX = "memq:job-ended:"
#: How long an ended job's word waits for its producer (a producer that gave up never takes it).
JOB_ENDED_KEEP_MS = 60_000
# kombu's Redis transport keeps a queue's messages of priority p > 0 in "<queue>\x06\x16<p>".
PRIORITY_SEP = "\x06\x16"
PRIORITY_STEPS = (3, 6, 9)

# Every memq process reaches the broker through this module (the workers' app, producers,
# status): kombu's Redis transport is repaired before its first connection.
harden_kombu_redis()


def broker_url_from_env() -> str:
    """``MEMQ_BROKER_URL``, else ``REDIS_URL``, else Redis on localhost."""
    return os.environ.get("MEMQ_BROKER_URL") or os.environ.get("REDIS_URL") or DEFAULT_BROKER


def celery_settings(broker_url: str) -> dict[str, Any]:
    """The Celery configuration every memq app shares: JSON messages, acknowledged after they
    run and handed back when their worker dies (so every task is idempotent), one message at a
    time per worker process, events on, and the time limits above."""
    return {
        "broker_url": broker_url,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {"visibility_timeout": VISIBILITY_TIMEOUT_S,
                                     "unacked_restore_interval": RESTORE_SWEEP_S,
                                     "unacked_restore_throttle": 1},
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_serializer": "json",
        "task_ignore_result": True,
        "task_time_limit": TASK_TIME_LIMIT_S,
        "task_soft_time_limit": TASK_SOFT_TIME_LIMIT_S,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_default_queue": control_queue(0),
        "task_queues": [Queue(store_queue(0)), Queue(control_queue(0))],
        "task_create_missing_queues": True,
        "worker_prefetch_multiplier": 1,
        "worker_soft_shutdown_timeout": 30.0,
        "worker_enable_soft_shutdown_on_idle": True,
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "worker_hijack_root_logger": False,
    }


def client_app(broker_url: str) -> Celery:
    """A Celery app that only sends and asks (never the current app of the process)."""
    app = Celery("memq", set_as_current=False)
    app.conf.update(celery_settings(broker_url))
    return app


def redis_client(broker_url: str, timeout: float = DEFAULT_TIMEOUT_S) -> redis.Redis:
    """A redis-py client for a kombu broker URL (``redis://``, ``rediss://``,
    ``redis+socket:///path``); raises ValueError for anything else."""
    parts = urlsplit(broker_url)
    if parts.scheme == "redis+socket":
        query = parse_qs(parts.query)
        db = int((query.get("virtual_host") or query.get("db") or ["0"])[0] or 0)
        return redis.Redis(unix_socket_path=parts.path, db=db, password=parts.password,
                           socket_timeout=timeout, socket_connect_timeout=timeout)
    if parts.scheme in ("redis", "rediss"):
        return redis.Redis.from_url(broker_url, socket_timeout=timeout,
                                    socket_connect_timeout=timeout)
    raise ValueError(f"queue depths need a Redis broker, not {parts.scheme}://")


#: What a broker that cannot be reached, or that refuses this host, raises: kombu's wrapped
#: connection errors, the sockets', redis-py's, and AMQP's refused logins and vhosts.
NETWORK_ERRORS: tuple[type[Exception], ...] = (
    OperationalError, ConnectionError, TimeoutError, socket.gaierror, redis.ConnectionError,
    AMQPConnectionError, AccessRefused, NotAllowed)
#: The same, and any OS error, around a call that only talks to the broker.
BROKER_ERRORS: tuple[type[Exception], ...] = (*NETWORK_ERRORS, OSError)
#: What to check when the broker cannot be reached.
CHECK_BROKER = ("check that the broker runs and that MEMQ_BROKER_URL (brokerUrl) names it: "
                "host, port, password, database number or vhost")


def broker_failure(broker_url: str, exc: BaseException) -> BrokerUnreachable:
    """``exc`` (one of :data:`BROKER_ERRORS`) as one line naming the broker, its password
    masked: a refused login, or a broker that cannot be reached."""
    where = redact_url(broker_url) or "(none)"
    detail = str(getattr(exc, "reply_text", "") or exc).strip() or type(exc).__name__
    password = urlsplit(broker_url).password
    if password:
        detail = detail.replace(password, "***")
    if isinstance(exc, (AccessRefused, redis.AuthenticationError)) or "ACCESS_REFUSED" in detail:
        return BrokerUnreachable(f"the broker {where} refused the login ({detail})",
                                 "check the user and password of MEMQ_BROKER_URL (brokerUrl)")
    if isinstance(exc, NotAllowed):
        return BrokerUnreachable(f"the broker {where} refused this host ({detail})",
                                 "check the vhost and permissions of MEMQ_BROKER_URL "
                                 "(brokerUrl)")
    return BrokerUnreachable(f"the broker {where} cannot be reached ({detail})", CHECK_BROKER)


@contextmanager
def taking(broker_url: str, what: str) -> Iterator[None]:
    """Around sending ``what`` (``"the index job"``…): a broker that did not take it raises
    :class:`~pipeline.errors.FleetError` naming the broker (its password masked)."""
    try:
        yield
    except (OperationalError, OSError) as exc:
        raise FleetError(f"the broker {redact_url(broker_url)} did not take {what}: "
                         f"{exc}") from None


def silent_shard(broker_url: str, shard: int, waited_s: float) -> ShardUnreachable:
    """Why no reader of ``shard`` answered within ``waited_s``, as far as one broadcast (1 s)
    tells: no memq worker on the broker at all (a wrong broker, database number or vhost, or
    the whole fleet down), readers that are alive but did not answer (busy, stuck), or no
    reader of the shard among live workers."""
    queue, where = query_queue(shard), redact_url(broker_url)
    try:
        nodes: dict[str, list[str]] | None = queue_consumers(broker_url)
    except Exception:  # only a hint: the broker may be busy or gone by now
        nodes = None
    waited = f"no reader of shard {shard} answered within {waited_s:g} s"
    if nodes == {}:
        return ShardUnreachable(
            f"{waited}, and no memq worker answers on {where} at all (nothing consumes any "
            "queue there)", "check that MEMQ_BROKER_URL (brokerUrl) names the fleet's broker "
            "(host, port, database number or vhost), then that the fleet's workers run")
    readers = sorted(n for n, queues in (nodes or {}).items() if queue in queues)
    if readers:
        return ShardUnreachable(
            f"{waited} (queue '{queue}' on {where}): its readers {', '.join(readers)} are "
            "alive but did not answer in time", f"start more readers of shard {shard} on the "
            "host that holds its stores, or raise fleet.queryTimeoutMs")
    return ShardUnreachable(
        f"{waited} (queue '{queue}' on {where})" + (
            f"; none of the {len(nodes)} live workers consumes it" if nodes else ""),
        f"start `memq worker --role reader --shard {shard}` on the host that holds the "
        "shard's stores, or raise fleet.queryTimeoutMs")


def queue_consumers(broker_url: str, *, timeout: float = DEFAULT_TIMEOUT_S
                    ) -> dict[str, list[str]]:
    """Live worker nodes on ``broker_url`` and the queues each consumes.

    A throwaway app is used because Celery's broadcasts go out through the app's own producer
    pool, i.e. to the app's configured broker whatever connection is passed in.
    """
    probe = client_app(broker_url)
    try:
        # The replies are read on a connection of our own, closed here: one lent by the shared
        # pool would go back to it mid-read, and kombu's after-fork cleanup would then block
        # every pool process this worker forks later (a writer could never replace its pool
        # process; found when a memory cap recycled it).
        with probe.connection_for_write() as connection:
            replies = probe.control.inspect(timeout=timeout,
                                            connection=connection).active_queues() or {}
    finally:
        probe.close()
    return {node: sorted(q["name"] for q in queues) for node, queues in replies.items()}


def queued_messages(connection: Connection, queue: str) -> int:
    """Messages waiting in ``queue`` on the broker (0 when the queue does not exist)."""
    try:
        return connection.default_channel.queue_declare(queue=queue, passive=True).message_count
    except ChannelError:
        connection.close()  # a refused passive declare closes the channel on AMQP brokers
        return 0


def priority_lists(queue: str) -> tuple[str, ...]:
    """The Redis lists of ``queue``, in the order kombu pops them: priority 0 (the interactive
    lane) under the queue's own name, each higher priority in ``<queue>\x06\x16<p>``."""
    return (queue, *(f"{queue}{PRIORITY_SEP}{p}" for p in PRIORITY_STEPS))


def waiting_tasks(client: redis.Redis, queue: str, limit: int = 50) -> list[dict[str, str]]:
    """The next ``limit`` messages waiting in ``queue``, in the order they will be taken
    (interactive lane first, each lane oldest first): task id and name.

    Only the message headers are read (never the arguments). kombu pushes new messages on the
    left and consumes from the right, so the oldest is last in each list.
    """
    out: list[dict[str, str]] = []
    for key in priority_lists(queue):
        for raw in reversed(client.lrange(key, -(limit - len(out)), -1) if len(out) < limit
                            else []):
            try:
                headers = json.loads(raw)["headers"]
                out.append({"id": str(headers["id"]), "task": str(headers["task"])})
            except (ValueError, KeyError, TypeError):
                out.append({"id": "?", "task": "(not a Celery message)"})
    return out


_HOLD = """
local held = redis.call('GET', KEYS[1])
if held == false or held == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""


class RedisLeases:
    """:class:`pipeline.batch.workflow.Leases` in the broker's Redis (one key per job)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._hold = client.register_script(_HOLD)

    def claim(self, job_id: str, token: str, ttl: float) -> bool:
        return bool(self.client.set(LEASE_PREFIX + job_id, token, nx=True, px=int(ttl * 1000)))

    def hold(self, job_id: str, token: str, ttl: float) -> bool:
        return bool(self._hold(keys=[LEASE_PREFIX + job_id], args=[token, int(ttl * 1000)]))


class FleetDispatcher:
    """Sends work to the fleet on ``broker_url``: embedding jobs to ``embed.<provider>``,
    results and batch news to the writer's ``store``, batch jobs to ``batch.<provider>``, index
    jobs and rebuild steps to the writer.

    ``app`` is the Celery app to send with (a worker passes its own, so its connection pool is
    reused); by default a client app of its own, with one connection opened on first use and
    closed by :meth:`close` (or the ``with`` block).
    """

    durable = True

    def __init__(self, broker_url: str, *, app: Celery | None = None) -> None:
        self.broker_url = broker_url
        self._own_app = app is None
        self.app = app or client_app(broker_url)
        self._connection: Connection | None = None
        self._leases: RedisLeases | None = None
        self._signals: redis.Redis | None = None  # the job-ended words (:meth:`job_ended`)
        self._lock = threading.Lock()
        self._lanes = urlsplit(broker_url).scheme in ("redis", "rediss", "redis+socket")

    # -- sending ----------------------------------------------------------------------------

    def _send(self, task: str, message: dict[str, Any], queue: str, countdown: float = 0.0,
              route: Route | None = None, task_id: str | None = None) -> str:
        with self._lock:
            if self._own_app and self._connection is None:
                self._connection = self.app.connection_for_write(self.broker_url)
            result = self.app.send_task(task, args=[message], queue=queue,
                                        countdown=countdown or None,
                                        priority=self._priority(route),
                                        connection=self._connection, task_id=task_id,
                                        argsrepr=describe(message), kwargsrepr="{}")
        return str(result.id)

    def _priority(self, route: Route | None) -> int | None:
        """The message priority of ``route``'s lane: on Redis, kombu keeps one list per
        priority and pops priority 0 first. Other brokers get none (FIFO): RabbitMQ's
        priorities run the other way and need queues declared with ``x-max-priority``."""
        if route is None or not self._lanes:
            return None
        return int(Lane.INTERACTIVE if route.interactive else Lane.BULK)

    def embed(self, job: EmbedJob) -> None:
        """Queue an embedding job on its provider's queue, in its lane."""
        self._send(EMBED_TASK, job.to_json(), embed_queue(job.spec.name), route=job.route)

    def write(self, result: EmbedResult) -> None:
        """Send an embedding result to its memory's writer shard, in its lane."""
        self._send(WRITE_TASK, result.to_json(), store_queue(result.route.shard),
                   route=result.route)

    def index(self, request: IndexRequest, job_id: str | None = None) -> str:
        """Queue an index job for the writer host that owns the memory's store, in its lane;
        its job id (``job_id``, else a new one: :func:`pipeline.routing.new_job_id`)."""
        return self._send(INDEX_TASK, request.to_json(), control_queue(request.shard),
                          route=request.route, task_id=job_id or new_job_id(request.memory))

    def file_changes(self, message: FileChanges) -> str:
        """Send a producer's file changes to the memory's writer host, in its lane."""
        return self._send(APPLY_TASK, message.to_json(), control_queue(message.shard),
                          route=message.route)

    def rebuild_later(self, memory: str, countdown: float = 0.0, *, shard: int = 0) -> bool:
        """Queue the next step of a rebuild on the writer's queue."""
        from pipeline.messages import IndexRequest

        self._send(REINDEX_STEP_TASK, IndexRequest(memory, shard=shard).to_json(),
                   store_queue(shard), countdown)
        return True

    def qmd_job(self, memory: str, reason: str, *, shard: int = 0) -> bool:
        """Queue a QMD update job on the memory's ``control.<shard>`` queue (the host that
        owns the memory runs it, one at a time)."""
        from pipeline.messages import QmdJobRequest

        self._send(QMD_JOB_TASK, QmdJobRequest(memory, reason, shard).to_json(),
                   control_queue(shard), task_id=new_job_id(memory))
        return True

    def batch_submit(self, msg: BatchSubmit) -> None:
        """The producer's hand-off of a batch job: take its lease, then queue its submit."""
        self.leases().claim(msg.job, msg.token, SUBMIT_LEASE_S)
        self.send_submit(msg)

    def send_submit(self, msg: BatchSubmit) -> None:
        self._send(BATCH_SUBMIT_TASK, msg.to_json(), batch_queue(msg.spec.name))

    def batch_poll(self, msg: BatchPoll, countdown: float = 0.0) -> None:
        self._send(BATCH_POLL_TASK, msg.to_json(), batch_queue(msg.spec.name), countdown)

    def batch_update(self, update: BatchUpdate) -> None:
        self._send(BATCH_UPDATE_TASK, update.to_json(), store_queue(update.route.shard))

    def batch_routing(self, settings: BatchSettings) -> workflow.BatchRouting | None:
        from pipeline.batch import workflow

        return workflow.routing_for(settings, self.batch_submit)

    # -- a job's end, said by its writer to the producer waiting for it ---------------------

    def _signal_client(self) -> redis.Redis | None:
        if not self._lanes:
            return None
        with self._lock:
            if self._signals is None:
                self._signals = redis_client(self.broker_url, timeout=10.0)
            return self._signals

    def job_ended(self, job_id: str) -> None:
        """Tell a producer waiting for job ``job_id`` (:meth:`await_job_end`) that it ended
        (called once the job log says so). A hint only: nothing on a broker other than Redis,
        and a broker that does not answer is not an error (the producer looks at the job log
        at its usual pace)."""
        client = self._signal_client()
        if client is None:
            return
        try:
            with client.pipeline() as pipe:
                pipe.rpush(JOB_ENDED_PREFIX + job_id, "1")
                pipe.pexpire(JOB_ENDED_PREFIX + job_id, JOB_ENDED_KEEP_MS)
                pipe.execute()
        except redis.RedisError as exc:
            log.debug("could not say that job %s ended: %s", job_id, exc)

    def await_job_end(self, job_id: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the writer's word that job ``job_id`` ended
        (:meth:`job_ended`): True as soon as it comes, False when it did not (then look at the
        job log: a writer of an older memq says nothing). On a broker other than Redis, a
        sleep of ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        client = self._signal_client()
        if client is not None:
            try:  # within the client's socket timeout (10 s): longer waits ask again
                while True:
                    left = deadline - time.monotonic()
                    if client.blpop([JOB_ENDED_PREFIX + job_id],
                                    timeout=min(max(left, 0.01), 5.0)) is not None:
                        return True
                    if left <= 5.0:
                        return False
            except redis.RedisError as exc:
                log.debug("no word of job %s's end: %s", job_id, exc)
        time.sleep(max(0.0, deadline - time.monotonic()))  # what is left of the wait
        return False

    # -- batch jobs' leases and resumption ---------------------------------------------------

    def leases(self) -> RedisLeases:
        """The batch jobs' leases, in the broker's Redis."""
        if self._leases is None:
            self._leases = RedisLeases(redis_client(self.broker_url, timeout=10.0))
        return self._leases

    def resume_batches(self, db: Database, memory: str, shard: int = 0) -> int:
        """Restart the message chain of every live batch job that lost it (reconcile).

        Chains die with a killed worker or a flushed Redis. A flush also forgets kombu's queue
        bindings, without which a process that declared a queue before publishes into the void,
        so while batch jobs are live the fleet's queues are declared again first (a few SADDs).
        """
        from pipeline.batch import workflow
        from pipeline.messages import Route

        providers = {job["provider"] for job in batches.live_jobs(db)}
        if not providers:
            return 0
        names = [store_queue(shard), control_queue(shard),
                 *(queue(p) for p in sorted(providers) for queue in (embed_queue, batch_queue))]
        with self.app.connection_for_write(self.broker_url) as fresh:
            channel = fresh.default_channel
            for name in names:
                self.app.amqp.queues[name].bind(channel).declare()
        return workflow.reconcile(
            db, memory, os.path.realpath(db.path), self.leases(), submit=self.send_submit,
            poll=self.batch_poll, submit_ttl=SUBMIT_LEASE_S, poll_grace_s=POLL_GRACE_S,
            route=Route(shard))

    # -- asking ------------------------------------------------------------------------------

    def consumers(self, queue: str) -> int | None:
        """How many live workers consume ``queue`` (a 1 s broadcast)."""
        try:
            nodes = queue_consumers(self.broker_url)
        except Exception:  # a hint only: the broker may be busy or gone
            return None
        return sum(1 for queues in nodes.values() if queue in queues)

    def queued(self, queue: str) -> int:
        """Messages waiting in ``queue``."""
        with self.app.connection_for_write(self.broker_url) as connection:
            return queued_messages(connection, queue)

    def job_waiting(self, queue: str, job_id: str) -> bool:
        """Whether job ``job_id`` may still be waiting in ``queue``: on Redis, whether its
        message is there; on other brokers (which cannot be read without taking), whether
        anything is."""
        if self._lanes:
            client = redis_client(self.broker_url)
            try:
                return any(task["id"] == job_id for task in waiting_tasks(client, queue, 1000))
            finally:
                client.close()
        return self.queued(queue) > 0

    def check(self) -> None:
        return None

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.release()
                self._connection = None
            signals, self._signals = self._signals, None
        if signals is not None:
            signals.close()
        if self._own_app:
            self.app.close()

    def __enter__(self) -> FleetDispatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def require_broker(broker_url: str | None, what: str) -> str:
    """``broker_url``, or a :class:`FleetError` saying ``what`` needs one."""
    if not broker_url:
        raise FleetError(f"{what} needs the fleet's broker: set MEMQ_BROKER_URL (or brokerUrl) "
                         "and run `memq worker --role writer`")
    return broker_url
