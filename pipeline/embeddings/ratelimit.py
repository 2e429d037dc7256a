"""A provider rate limit that holds across every embed worker of the fleet, not per process.

``remote.rateLimit.requestsPerMinute`` / ``tokensPerMinute`` are counted in one-minute windows
in Redis (the broker the workers already share), by one Lua script, so two workers can never
both take the last slot. The window comes from Redis's clock, so workers on machines with
skewed clocks still agree. Tokens are estimated as UTF-8 bytes, like OpenClaw's input limits
(an upper bound). A request larger than the whole token budget still goes, alone, at the start
of a window, so it cannot starve.

A worker that finds the window full sleeps until the next one (with a little jitter so the
fleet does not stampede) instead of failing: waiting is all it could usefully do for this
provider. Only after ``MAX_WAIT_S`` does it give up with a retryable error.
"""

from __future__ import annotations

import logging
import math
import random
import time
from typing import Any

from pipeline.errors import ProviderRetryable

__all__ = ["MAX_WAIT_S", "WINDOW_S", "FleetPause", "FleetRateLimiter"]

log = logging.getLogger(__name__)

WINDOW_S = 60.0
MAX_WAIT_S = 120.0  # then the task's retry policy: well inside its soft time limit (280 s)
KEY_PREFIX = "memq:ratelimit:"
PAUSE_PREFIX = "memq:pause:"


def _redis_error() -> type[Exception]:
    """redis-py's base error, looked up only while an exception is being matched: importing
    redis costs ~0.3 s, which a process that never talks to Redis (``memq search``) skips."""
    from redis.exceptions import RedisError

    return RedisError

# KEYS[1] prefix; ARGV: requests limit (0 = none), tokens limit (0 = none), tokens, window ms.
# Returns {granted (1/0), window number, ms to wait when refused}.
_SCRIPT = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local win_ms = tonumber(ARGV[4])
local window = math.floor(ms / win_ms)
local rk = KEYS[1] .. ':' .. window .. ':r'
local tk = KEYS[1] .. ':' .. window .. ':t'
local rpm, tpm, tokens = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local reqs = tonumber(redis.call('GET', rk) or '0')
local toks = tonumber(redis.call('GET', tk) or '0')
if (rpm > 0 and reqs + 1 > rpm) or (tpm > 0 and toks > 0 and toks + tokens > tpm) then
  return {0, window, (window + 1) * win_ms - ms}
end
redis.call('INCR', rk)
redis.call('PEXPIRE', rk, win_ms * 2)
redis.call('INCRBY', tk, tokens)
redis.call('PEXPIRE', tk, win_ms * 2)
return {1, window, 0}
"""


class FleetRateLimiter:
    """Requests/tokens per window for one provider key, shared through Redis."""

    def __init__(self, client: Any, provider_key: str, *, requests: int | None,
                 tokens: int | None, window_s: float | None = None) -> None:
        self.client = client
        self.key = KEY_PREFIX + provider_key
        self.requests = requests or 0
        self.tokens = tokens or 0
        self.window_s = window_s or WINDOW_S
        self._script = client.register_script(_SCRIPT)
        self.last_window: int | None = None

    def try_acquire(self, tokens: int) -> float:
        """Take one request of ``tokens`` from the current window: 0.0 if granted, else the
        seconds until the next window."""
        try:
            granted, window, wait_ms = self._script(
                keys=[self.key],
                args=[self.requests, self.tokens, max(0, int(tokens)), int(self.window_s * 1000)])
        except _redis_error() as exc:  # the budget cannot be checked: the job waits, it is not lost
            raise ProviderRetryable(f"fleet rate limit unavailable (Redis: {exc})") from exc
        if granted:
            self.last_window = int(window)
            return 0.0
        return max(0.001, int(wait_ms) / 1000)

    def acquire(self, tokens: int) -> None:
        """Block until the fleet's budget has room for this request (at most ``MAX_WAIT_S``)."""
        deadline = time.monotonic() + MAX_WAIT_S
        while True:
            wait = self.try_acquire(tokens)
            if wait == 0.0:
                return
            if time.monotonic() + wait > deadline:
                raise ProviderRetryable(
                    f"fleet rate limit ({self.requests or '-'} requests, {self.tokens or '-'} "
                    f"tokens per {self.window_s:g} s) still full after {MAX_WAIT_S:g} s",
                    retry_after=wait)
            time.sleep(wait + random.random() * min(1.0, self.window_s * 0.05))


# KEYS[1] the pause key; ARGV[1] ms. Lengthens the pause, never shortens it.
_PAUSE_SCRIPT = """
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
end
return 1
"""


class FleetPause:
    """A provider's "slow down" heard by one worker, obeyed by every worker of the fleet.

    A rate-limited provider answers 429 with the wait it wants (Retry-After). Backing off job by
    job (0.5 s doubling to 8 s each) leaves the provider idle once the jobs' backoffs have
    grown, and N workers that wait out the same Retry-After alone all come back at once and are
    refused again. Instead the worker that is refused records the wait in Redis (one key per
    provider key, lengthened, never shortened), every worker waits for it before its next
    request (with a little jitter, so they do not return in one burst), and the refused
    request is tried again in place. With no Redis (a RabbitMQ broker) ``client`` is None and
    the pause is this process's alone; so it is, with a warning, while Redis cannot be reached:
    a pause is advice, and losing it must not fail the job that heard it.
    """

    def __init__(self, client: Any, provider_key: str) -> None:
        self.client = client
        self.key = PAUSE_PREFIX + provider_key
        self._script = client.register_script(_PAUSE_SCRIPT) if client is not None else None
        self._local_until = 0.0

    def hold(self, seconds: float) -> None:
        """Pause the fleet's requests to this provider for ``seconds`` from now."""
        ms = max(1, int(seconds * 1000))
        self._local_until = max(self._local_until, time.monotonic() + ms / 1000)
        if self._script is not None:
            try:
                self._script(keys=[self.key], args=[ms])
            except _redis_error() as exc:
                log.warning("provider pause kept by this worker alone (Redis: %s)", exc)

    def wait(self, limit: float = math.inf) -> float:
        """Sleep out the current pause, if any, but never more than ``limit`` seconds;
        returns the seconds slept."""
        remaining = self._local_until - time.monotonic()
        if self.client is not None:
            try:
                remaining = max(remaining, int(self.client.pttl(self.key)) / 1000)
            except _redis_error() as exc:
                log.warning("fleet's provider pause unknown, this worker's own is kept "
                            "(Redis: %s)", exc)
        slept = min(remaining + random.random() * min(0.25, remaining), limit)
        if remaining <= 0 or slept <= 0:
            return 0.0
        time.sleep(slept)
        return slept
