"""Repairs to kombu's Redis transport. The first two are for a broker that vanishes while a
message is delivered but not yet acknowledged (memq acknowledges after the task ran, so one
usually is).

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

A third repair closes a window in which kombu loses a message outright. Its consumer takes a
message with ``BRPOP`` and records it in its ``unacked`` hash (which the visibility-timeout
sweep restores from) only after reading the reply: a consumer killed while the reply sits
unread in its socket (``SIGKILL`` under load, OOM) leaves the message nowhere on the broker.
Redis has no blocking move from several lists (kombu keeps one list per queue and priority, and
rotates between queues), so the repaired channel never pops with ``BRPOP``:

* it *claims*: a Lua script pops from the first non-empty list in ``BRPOP``'s own key order
  (priorities, then the queues in kombu's rotation) and records the message in ``unacked`` under
  its delivery tag, in one atomic step. A consumer that dies at any point leaves the message in
  its list or in ``unacked``, from which kombu's sweep restores it after the visibility timeout
  (another consumer's, or the restarted one's);
* when a claim found nothing it *waits* before the next: ``BZPOPMIN`` on the *doorbells* of its
  queues takes nothing from a list, and the next claim is sent behind it in the same write, so
  it runs the moment the wait ends. Every message published by a repaired channel rings its
  queue's doorbell in the same round trip (a sorted set, ``_memq.bell:<queue>``, a member per
  message, the newest :data:`BELL_RINGS_KEPT` kept, expiring :data:`BELL_EXPIRE_MS` after its
  last ring): an idle consumer claims a message of any priority on any of its queues as soon
  as it lands. A message no doorbell announced (published by an unrepaired kombu) is claimed
  when the wait times out, after at most :data:`CLAIM_WAIT_S`. Each ring wakes one idle
  consumer, so a burst of N messages wakes up to N of them at once; a claim that finds its
  queues empty silences their doorbells in the same step (what rang them was taken), so no
  consumer is woken for a message already gone.
  (The wait used to be ``BLMOVE`` on the most urgent list of one queue: a bulk-lane message
  then waited up to :data:`CLAIM_WAIT_S` for an idle consumer, a third of a small pass.)

A claimed message is recorded once: kombu's ``QoS.append``, which would encode the whole message
again and write it to ``unacked`` a second time (tens of milliseconds for a remote producer's
2 MB pass), keeps only its in-memory bookkeeping for a message its claim recorded.

Consumers that do not acknowledge (``no_ack``: Celery's reply queues) and set-ups the script does
not cover (Redis older than 6.2, ack emulation off, a global key prefix) keep kombu's ``BRPOP``.
Fanout queues (remote control, events) go through pub/sub and are not affected.

A fourth repair keeps a dead consumer's messages from waiting minutes longer than the visibility
timeout. Every consumer sweeps ``unacked`` for messages past the timeout under a lock that
expires after ``unacked_mutex_expire`` (300 s); a consumer killed while it holds the lock (found
in the repeated-kill test under load) stops every sweep of every consumer for those 5 minutes.
The repaired lock expires after one sweep period (``unacked_restore_interval`` x
``unacked_restore_throttle``) at most. Sweeps that overlap (a sweep longer than its period) are
harmless: each message is restored in a transaction that watches the ``unacked`` hash, so only
one of them puts it back.

A fifth repair keeps the sweep to dead consumers' messages. kombu records when a message was
taken and the sweep puts back every message taken longer ago than the visibility timeout,
whether its consumer is dead or still running it; it puts it back at the end of its list that
is consumed first. A job that runs longer than the timeout (a slow provider; every job on a
loaded machine, found in the hard-kill test under load with its 8 s timeout) is handed out again
while it runs, runs again the moment it ends, is handed out again, and the jobs queued behind
it never run. A repaired consumer renews the record of every message it holds (delivered and
not yet acknowledged) each time its event loop looks for messages to restore, once per sweep
period, before the sweep: a live consumer's messages never look older than one period, and a
dead consumer's age from its last renewal. The renewal only touches records still there
(``ZADD XX``): a message acknowledged, or already put back by another consumer's sweep, is not
brought back. A worker whose main thread runs the task (Celery's ``solo`` pool) cannot renew
while it runs; memq's workers use the prefork pool, whose main process stays free.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from queue import Empty
from time import monotonic, time
from typing import Any

import kombu
import redis
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual as kombu_virtual
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import dumps, loads

_MARK = "_memq_broker_fixes"
_CLAIMS = "_memq_claims"
#: The kombu releases the claiming and sweep-lock repairs were written against: their
#: ``Channel._brpop_start``/``_brpop_read`` contract (send one command, later read its reply and
#: deliver) and ``QoS.restore_visible``'s lock.
WRITTEN_FOR_KOMBU = ((5, 5), (5, 7))
#: The oldest Redis the claims were written and tested against (BZPOPMIN came with 5.0).
CLAIMS_NEED_REDIS = (6, 2)
#: How long an idle consumer waits on one list before it claims from all of them again: the
#: longest a message on another of its lists waits for an idle consumer.
CLAIM_WAIT_S = 0.2
#: What a queue's doorbell is called (the queue's name follows).
BELL_PREFIX = "_memq.bell:"
#: How long a doorbell no consumer answered stays rung after its last ring.
BELL_EXPIRE_MS = 60_000
#: The newest rings a doorbell keeps (how many idle consumers one burst can wake at once): a
#: queue whose consumers never wait on it (``no_ack`` reply queues keep kombu's ``BRPOP``)
#: is rung by every message and would otherwise grow a member per message for good.
BELL_RINGS_KEPT = 64

logger = logging.getLogger(__name__)

# KEYS: the queue lists in BRPOP's order, then the unacked hash and its index, then the queues'
# doorbells. ARGV[1]: the time (the consumer's clock, as kombu's own records); ARGV[2]: how many
# lists. Returns {list, message, the delivery tag it was recorded under (false: not recorded)}
# or nil; nil also silences the doorbells (their lists are empty: what rang them was taken), so
# an idle consumer is not woken for a message already gone. The message is recorded as kombu's
# QoS.append records it: [payload, exchange, routing_key], the payload text kept verbatim
# (decoding and encoding it again in Lua would turn empty lists into objects).
_CLAIM = """
local lists = tonumber(ARGV[2])
local unacked, index = KEYS[lists + 1], KEYS[lists + 2]
local function json(value)
  if value == nil then return 'null' end
  return cjson.encode(value)
end
for i = 1, lists do
  local item = redis.call('RPOP', KEYS[i])
  if item then
    local ok, message = pcall(cjson.decode, item)
    local props = ok and type(message) == 'table' and message.properties
    local info = type(props) == 'table' and props.delivery_info
    local tag = false
    if type(info) == 'table' and type(props.delivery_tag) == 'string' then
      tag = props.delivery_tag
      redis.call('HSET', unacked, tag,
                 '[' .. item .. ',' .. json(info.exchange) .. ',' .. json(info.routing_key) .. ']')
      redis.call('ZADD', index, ARGV[1], tag)
    end
    return {KEYS[i], item, tag}
  end
end
for i = lists + 3, #KEYS do
  redis.call('DEL', KEYS[i])
end
return false
"""


def harden_kombu_redis() -> None:
    """Apply the repairs to kombu's Redis transport classes (once per process; later calls
    do nothing). Every memq process that talks to a Redis broker calls this through
    :mod:`pipeline.fleet.broker`. The claiming repair is applied only to the kombu releases it was
    written for (:data:`CLAIMS_FOR_KOMBU`); on another one a warning says so."""
    transport_cls, channel_cls = kombu_redis.Transport, kombu_redis.Channel
    if getattr(transport_cls, _MARK, False):
        return
    transport_cls.close_connection = _close_every_channel
    channel_cls._connparams = _refuse_when_detached(channel_cls._connparams)
    if written_for(kombu.VERSION):
        channel_cls._brpop_start = _claiming_start(channel_cls._brpop_start)
        channel_cls._brpop_read = _claiming_read(channel_cls._brpop_read)
        channel_cls.basic_consume = _noting_no_ack(channel_cls.basic_consume)
        channel_cls._put = _ringing_put(channel_cls._put)
        kombu_redis.QoS.append = _trusting_claims(kombu_redis.QoS.append)
        kombu_redis.QoS.unacked_mutex_expire = property(sweep_lock_expiry)
        poller_cls = kombu_redis.MultiChannelPoller
        poller_cls.maybe_restore_messages = _renewing_first(poller_cls.maybe_restore_messages)
    else:
        logger.warning("kombu %s: memq's claiming and sweep-lock repairs (written for kombu %s "
                       "to %s) are not applied: a consumer killed between a pop and its record "
                       "can lose the message", kombu.__version__,
                       *(".".join(map(str, v)) for v in WRITTEN_FOR_KOMBU))
    setattr(transport_cls, _MARK, True)


def written_for(version: tuple[int, ...]) -> bool:
    """Whether the claiming and sweep-lock repairs were written for kombu ``version``
    (major, minor, ...)."""
    first, last = WRITTEN_FOR_KOMBU
    return first <= tuple(version[:2]) <= last


def sweep_lock_expiry(qos: kombu_redis.QoS) -> float:
    """Seconds the lock of a sweep for unacknowledged messages lasts: kombu's
    ``unacked_mutex_expire``, but no longer than one sweep period, so a consumer killed while it
    sweeps holds back the others' sweeps for one period, not 5 minutes."""
    channel = qos.channel
    period = max(channel.unacked_restore_interval, 1) * max(channel.unacked_restore_throttle, 1)
    return min(channel.unacked_mutex_expire, period)


def renew_held_messages(channel: kombu_redis.Channel) -> None:
    """Mark every message ``channel`` holds (delivered, not acknowledged) as taken now, so
    the sweep for a dead consumer's messages leaves them alone. Only records still there are
    renewed: an acknowledged or restored message stays gone."""
    qos = channel._qos  # (None until the channel consumed: nothing held)
    held = [tag for tag in qos._delivered if tag not in qos._dirty] if qos is not None else []
    if held:
        with channel.conn_or_acquire() as client:
            client.zadd(channel.unacked_index_key, dict.fromkeys(held, time()), xx=True)


def _renewing_first(shipped: Callable[..., Any]) -> Callable[..., Any]:
    def maybe_restore_messages(self: kombu_redis.MultiChannelPoller) -> Any:
        """kombu's periodic sweep for messages past the visibility timeout, after every channel
        of this consumer renewed the messages it holds (:func:`renew_held_messages`)."""
        for channel in list(self._channels):
            try:
                renew_held_messages(channel)
            except channel.connection_errors:  # as kombu's sweep: the poll loop reconnects
                logger.debug("could not renew the messages a channel holds", exc_info=True)
        return shipped(self)

    maybe_restore_messages.__wrapped__ = shipped  # type: ignore[attr-defined]
    return maybe_restore_messages


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


class Claims:
    """How one kombu Redis channel takes its messages: claimed (popped and recorded in one
    step) or, where claiming does not apply, with kombu's ``BRPOP``. Owned by the channel."""

    def __init__(self, channel: kombu_redis.Channel) -> None:
        self.channel = channel
        self.plain = False  # a consumer on this channel does not acknowledge (no_ack)
        self.refusal: str | None = None  # why claiming does not apply here; "" when it does
        self.idle = False  # the last claim found nothing: wait before the next one
        self.pending: str | None = None  # what the reply on the wire answers: claim / wait
        #: the delivery tag of the message being delivered, which its claim recorded in
        #: ``unacked`` already (kombu's ``QoS.append`` need not write it again)
        self.recorded: str | None = None

    def apply(self) -> bool:
        """Whether this channel's next take is a claim."""
        if self.plain:
            return False
        if self.refusal is None:
            self.refusal = self._refusal()
            if self.refusal:
                logger.warning("kombu's BRPOP is kept on this broker (%s): a consumer killed "
                               "between a pop and its record can lose the message", self.refusal)
        return not self.refusal

    def _refusal(self) -> str:
        channel = self.channel
        if not isinstance(channel.qos, kombu_redis.QoS):
            return "ack emulation is off"
        if channel.global_keyprefix:
            return "a global key prefix is set"
        try:
            version = str(channel.client.info("server").get("redis_version", ""))
        except channel.ResponseError:  # INFO renamed away (some managed Redis services)
            version = ""
        if redis_version(version) < CLAIMS_NEED_REDIS:
            return f"Redis {version or '(unknown)'} is older than 6.2"
        return ""

    def send(self, timeout: float | None) -> None:
        """Send a claim (after a wait, when the last claim found nothing) for the active
        queues, the keys in ``BRPOP``'s order: priorities first, then the queues in rotation."""
        channel = self.channel
        queues = channel._queue_cycle.consume(len(channel.active_queues))
        if not queues:
            return
        keys = [channel._q_for_pri(queue, pri) for pri in channel.priority_steps
                for queue in queues]
        bells = sorted({bell_key(q) for q in queues})
        commands: list[list[Any]] = [["EVAL", _CLAIM, len(keys) + 2 + len(bells), *keys,
                                      channel.unacked_key, channel.unacked_index_key, *bells,
                                      repr(time()), len(keys)]]
        if self.idle:
            wait_s = min(CLAIM_WAIT_S, timeout or CLAIM_WAIT_S)
            commands.insert(0, ["BZPOPMIN", *bells, wait_s])
        connection = channel.client.connection
        channel._in_poll = connection
        channel._brpop_sent_at = monotonic()
        self.pending = "wait" if self.idle else "claim"
        connection.send_packed_command(connection.pack_commands(commands))

    def read(self, **options: Any) -> bool:
        """Read the reply of :meth:`send` and deliver the claimed message; raises ``Empty``
        when there was none (as kombu's ``_brpop_read``)."""
        channel = self.channel
        client = channel.client
        connection = client.connection
        pending, self.pending = self.pending, None
        wait_error: Exception | None = None
        try:
            try:
                if pending == "wait":
                    try:
                        client.parse_response(connection, "BZPOPMIN", **options)
                    except channel.ResponseError as exc:  # the claim's reply still follows
                        wait_error = exc
                claimed = client.parse_response(connection, "EVAL", **options)
            except channel.connection_errors:
                connection.disconnect()  # the next poll reconnects, as after a BRPOP
                raise
            self.idle = not claimed
            if not claimed:
                if wait_error is not None:
                    raise wait_error
                raise Empty()
            queue_key, item, tag = (*claimed, None)[:3]
            queue = bytes_to_str(queue_key).rsplit(channel.sep, 1)[0]
            channel._queue_cycle.rotate(queue)
            payload = loads(bytes_to_str(item))
            self.recorded = bytes_to_str(tag) if tag else None  # as the script recorded it
            try:
                channel.connection._deliver(payload, queue)
            finally:
                self.recorded = None
            return True
        finally:
            channel._in_poll = None
            flush = getattr(channel, "_flush_brpop_reauth", None)  # kombu >= 5.7
            if flush is not None:
                flush()


def _trusting_claims(shipped: Callable[..., Any]) -> Callable[..., Any]:
    def append(self: kombu_redis.QoS, message: Any, delivery_tag: str) -> None:
        """kombu's ``QoS.append``, without writing again what the claim recorded in the same
        step that took the message (kombu's append encodes the whole message once more and
        sends it back to Redis: tens of milliseconds for a producer's 2 MB pass)."""
        claims = self.channel.__dict__.get(_CLAIMS)
        if claims is not None and claims.recorded is not None \
                and claims.recorded == delivery_tag:
            return kombu_virtual.QoS.append(self, message, delivery_tag)  # the in-memory state
        return shipped(self, message, delivery_tag)

    append.__wrapped__ = shipped  # type: ignore[attr-defined]
    return append


def redis_version(text: str) -> tuple[int, ...]:
    """``"7.0.15"`` -> ``(7, 0, 15)``, ``"7.2.0-rc1"`` -> ``(7, 2, 0)``; ``()`` for what does not
    start with a version."""
    found = re.match(r"\d+(?:\.\d+)*", text)
    return tuple(int(part) for part in found.group().split(".")) if found else ()


def _claims(channel: kombu_redis.Channel) -> Claims:
    claims = channel.__dict__.get(_CLAIMS)
    if claims is None:
        claims = channel.__dict__[_CLAIMS] = Claims(channel)
    return claims


def bell_key(queue: str) -> str:
    """The doorbell of ``queue``: rung by every message published to it, waited on by its idle
    consumers (:meth:`Claims.send`)."""
    return f"{BELL_PREFIX}{queue}"


def _ring_of(message: Any) -> str:
    """The doorbell ring of one message: its delivery tag (a ring per message, so a burst of
    N messages wakes up to N idle consumers), or a fresh token for one without a tag."""
    props = message.get("properties") if isinstance(message, dict) else None
    tag = props.get("delivery_tag") if isinstance(props, dict) else None
    return tag if isinstance(tag, str) else uuid.uuid4().hex


def _ringing_put(shipped: Callable[..., Any]) -> Callable[..., Any]:
    def _put(self: kombu_redis.Channel, queue: str, message: Any, **kwargs: Any) -> None:
        """kombu's ``Channel._put``, and the queue's doorbell rung in the same round trip
        (not with a global key prefix, where consumers keep kombu's ``BRPOP``)."""
        if self.global_keyprefix:
            return shipped(self, queue, message, **kwargs)
        bell, ring = bell_key(queue), {_ring_of(message): time()}
        batch = kwargs.get("_publish_batch")
        if batch is not None:  # kombu >= 5.7's batched publish: more commands in it
            shipped(self, queue, message, **kwargs)
            batch.add("zadd", bell, ring)
            batch.add("zremrangebyrank", bell, 0, -BELL_RINGS_KEPT - 1)
            batch.add("pexpire", bell, BELL_EXPIRE_MS)
            return None
        key = self._q_for_pri(queue, self._get_message_priority(message, reverse=False))
        with self.conn_or_acquire() as client, client.pipeline() as pipe:
            pipe.lpush(key, dumps(message))
            if self._expires and queue in self._expires:
                for pri in self.priority_steps:
                    pipe.pexpire(self._q_for_pri(queue, pri), self._expires[queue])
            pipe.zadd(bell, ring)
            pipe.zremrangebyrank(bell, 0, -BELL_RINGS_KEPT - 1)
            pipe.pexpire(bell, BELL_EXPIRE_MS)
            pipe.execute()
        return None

    _put.__wrapped__ = shipped  # type: ignore[attr-defined]
    return _put


def _claiming_start(shipped: Callable[..., Any]) -> Callable[..., Any]:
    def _brpop_start(self: kombu_redis.Channel, timeout: float | None = None) -> None:
        claims = _claims(self)
        if not claims.apply():
            claims.pending = None
            return shipped(self, timeout)
        return claims.send(self.brpop_timeout if timeout is None else timeout)

    _brpop_start.__wrapped__ = shipped  # type: ignore[attr-defined]
    return _brpop_start


def _claiming_read(shipped: Callable[..., Any]) -> Callable[..., Any]:
    def _brpop_read(self: kombu_redis.Channel, **options: Any) -> bool:
        claims = self.__dict__.get(_CLAIMS)
        if claims is None or claims.pending is None:
            return shipped(self, **options)
        return claims.read(**options)

    _brpop_read.__wrapped__ = shipped  # type: ignore[attr-defined]
    return _brpop_read


def _noting_no_ack(shipped: Callable[..., Any]) -> Callable[..., Any]:
    def basic_consume(self: kombu_redis.Channel, queue: str, *args: Any, **kwargs: Any) -> Any:
        no_ack = kwargs["no_ack"] if "no_ack" in kwargs else bool(args and args[0])
        if no_ack:  # nothing to record: such a consumer accepts losing a message
            _claims(self).plain = True
        return shipped(self, queue, *args, **kwargs)

    basic_consume.__wrapped__ = shipped  # type: ignore[attr-defined]
    return basic_consume
