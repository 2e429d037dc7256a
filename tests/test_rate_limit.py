"""The fleet-wide rate limit: several processes share one budget per window through a real
Redis, a request bigger than the token budget still goes alone, and embed jobs are wired to it
when their spec carries ``remote.rateLimit``."""

from __future__ import annotations

import multiprocessing
import socket
import threading
import time
from collections import Counter

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from pipeline.embeddings import runner
from pipeline.embeddings.openai import OpenAIProvider
from pipeline.embeddings.ratelimit import FleetPause, FleetRateLimiter
from pipeline.errors import EmbeddingError, ProviderRetryable, ProviderThrottled
from pipeline.messages import ChunkText, EmbedJob, ProviderSpec
from tests.conftest import redis_client as client_for
from tests.fakes.provider_doubles import Fault, ProviderDouble
from tests.secrets_scan import SENTINEL


def hammer(url: str, seconds: float, out) -> None:
    limiter = FleetRateLimiter(client_for(url), "shared", requests=4, tokens=None,
                               window_s=0.4)
    granted: list[int] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if limiter.try_acquire(10) == 0.0:
            granted.append(limiter.last_window)
        else:
            time.sleep(0.005)
    out.put(granted)  # one message: a child blocked on a full queue pipe never exits


def test_processes_share_one_budget(broker_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")  # forking a threaded pytest can deadlock
    out = ctx.Queue()
    procs = [ctx.Process(target=hammer, args=(broker_url, 2.0, out), daemon=True)
             for _ in range(3)]
    for p in procs:
        p.start()
    try:
        results = [out.get(timeout=60) for _ in procs]  # drain before joining
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    grants: Counter[int] = Counter(window for granted in results for window in granted)
    assert grants and max(grants.values()) <= 4, grants  # never more than 4 in a window...
    assert sum(1 for n in grants.values() if n == 4) >= 3, grants  # ...though all 3 pushed


def test_token_budget_and_oversize_request(broker_url: str) -> None:
    limiter = FleetRateLimiter(client_for(broker_url), "tokens", requests=None, tokens=25,
                               window_s=5)
    assert limiter.try_acquire(10) == 0.0 and limiter.try_acquire(10) == 0.0
    wait = limiter.try_acquire(10)  # 30 > 25
    assert 0 < wait <= 5
    big = FleetRateLimiter(client_for(broker_url), "big", requests=None, tokens=25,
                           window_s=5)
    assert big.try_acquire(1000) == 0.0  # alone at the start of a window: it goes
    assert big.try_acquire(1) > 0


def test_acquire_waits_for_the_next_window(broker_url: str) -> None:
    limiter = FleetRateLimiter(client_for(broker_url), "wait", requests=1, tokens=None,
                               window_s=0.5)
    limiter.acquire(1)
    first = limiter.last_window
    limiter.acquire(1)
    assert limiter.last_window == first + 1


def test_embed_jobs_count_their_requests_in_redis(broker_url: str, tmp_path) -> None:
    client = client_for(broker_url)
    with ProviderDouble("openai", api_key=SENTINEL) as double:
        provider = OpenAIProvider(base_url=double.url, api_key=SENTINEL)
        spec = ProviderSpec("openai", provider.model, provider.provider_key,
                            {"role": "primary", "rate_limit": {"requests": 100, "tokens": None}})
        for i in range(3):
            job = EmbedJob("main", spec, str(tmp_path / "s"),
                           (ChunkText(f"c{i}", f"h{i}", f"text {i}"),))
            assert len(runner.embed_job(job, provider, client).vectors) == 1
        counted = sum(int(client.get(k)) for k in client.scan_iter(
            f"memq:ratelimit:{spec.provider_key}:*:r"))
        assert counted == len(double.embed_requests()) == 3


def test_settings_put_the_limit_in_the_spec(make_settings, workspace) -> None:
    from pipeline.embeddings.registry import choose_provider

    settings = make_settings(workspace, provider="openai", remote={
        "apiKey": SENTINEL, "rateLimit": {"requestsPerMinute": 500, "tokensPerMinute": 100000}})
    spec = choose_provider(settings, env={}).spec
    assert spec.options["rate_limit"] == {"requests": 500, "tokens": 100000}
    plain = choose_provider(make_settings(workspace, provider="openai",
                                          remote={"apiKey": SENTINEL}), env={}).spec
    assert "rate_limit" not in plain.options
    with pytest.raises(Exception, match="requestsPerMinute"):
        make_settings(workspace, remote={"rateLimit": {"requestsPerMinute": 0}})


# -- a provider's own rate limit: the fleet pauses ---------------------------------------------


def test_a_pause_is_seen_by_every_client_and_never_shortened(broker_url: str) -> None:
    first = FleetPause(client_for(broker_url), "paused")
    other = FleetPause(client_for(broker_url), "paused")  # another worker process
    assert other.wait() == 0.0
    first.hold(0.4)
    first.hold(0.1)  # a shorter wait heard later does not cut the longer one
    started = time.monotonic()
    slept = other.wait()
    assert time.monotonic() - started >= 0.3 and 0.3 <= slept <= 0.7  # 0.4 s + jitter
    assert other.wait() == 0.0


def test_throttled_requests_wait_in_place_and_all_succeed(broker_url: str) -> None:
    """Three "workers" against a double serving 4 requests a second: every text is embedded,
    the 429s cost no job a retry, and the double never served more than its rate."""
    with ProviderDouble("openai", api_key=SENTINEL, rate_limit_rps=4) as double:
        provider = OpenAIProvider(base_url=double.url, api_key=SENTINEL)
        done: list[int] = []

        def worker(n: int) -> None:
            pause = FleetPause(client_for(broker_url), provider.provider_key)
            for i in range(4):
                vectors = runner.embed_paced(provider, [f"text {n} {i}"], pause)
                done.append(len(vectors))

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        seen = double.embed_requests()
        served = sorted(r.at for r in seen if r.status == 200)
    assert done == [1] * 12 and len(served) == 12
    assert len(seen) > 12  # the double did refuse some
    assert all(served[i + 4] - served[i] >= 0.95 for i in range(len(served) - 4))


def test_only_a_rate_limit_waits_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    with ProviderDouble("openai", api_key=SENTINEL, script=[Fault("500")]) as double:
        provider = OpenAIProvider(base_url=double.url, api_key=SENTINEL)
        with pytest.raises(EmbeddingError) as info:  # the task's backoff handles a 500
            runner.embed_paced(provider, ["x"], FleetPause(None, "local-only"))
        assert isinstance(info.value, ProviderRetryable)
        assert not isinstance(info.value, ProviderThrottled)
    monkeypatch.setattr(runner, "THROTTLE_BUDGET_S", 0.3)
    with ProviderDouble("openai", api_key=SENTINEL,
                        script=[Fault("429", retry_after=0.2)] * 10) as double:
        provider = OpenAIProvider(base_url=double.url, api_key=SENTINEL)
        with pytest.raises(EmbeddingError) as info:  # past the budget: back to the task
            runner.embed_paced(provider, ["x"], FleetPause(None, "local-only"))
        assert isinstance(info.value, ProviderThrottled) and 2 <= len(double.embed_requests()) <= 4


def test_waiting_in_place_is_bounded_by_wall_clock_not_by_time_asleep(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Slow refusals with tiny waits: the budget counts the requests' time too, so a worker
    hands the job back to the task's retry policy long before its soft time limit."""
    monkeypatch.setattr(runner, "THROTTLE_BUDGET_S", 0.6)
    slow_refusals = [Fault("429", retry_after=0.001, seconds=0.25)] * 40
    with ProviderDouble("openai", api_key=SENTINEL, script=slow_refusals) as double:
        provider = OpenAIProvider(base_url=double.url, api_key=SENTINEL)
        started = time.monotonic()
        with pytest.raises(EmbeddingError) as info:
            runner.embed_paced(provider, ["x"], FleetPause(None, "local-only"))
        took = time.monotonic() - started
        assert isinstance(info.value, ProviderThrottled) and 2 <= len(double.embed_requests()) <= 4
    assert took < 0.6 + 2 * 0.25 + 0.5


def unreachable_redis() -> redis.Redis:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return redis.Redis(host="127.0.0.1", port=port, retry=Retry(NoBackoff(), 0))


def test_a_pause_survives_redis_going_away(caplog: pytest.LogCaptureFixture) -> None:
    pause = FleetPause(unreachable_redis(), "gone")
    with caplog.at_level("WARNING"):
        pause.hold(0.3)
        started = time.monotonic()
        slept = pause.wait()
    assert time.monotonic() - started >= 0.25 and slept >= 0.25  # this worker still obeys it
    assert "this worker alone" in caplog.text and "own is kept" in caplog.text
    with ProviderDouble("openai", api_key=SENTINEL,
                        script=[Fault("429", retry_after=0.05)]) as double:
        provider = OpenAIProvider(base_url=double.url, api_key=SENTINEL)
        vectors = runner.embed_paced(provider, ["x"], pause)  # the job is not failed for it
        assert len(vectors) == 1 and len(double.embed_requests()) == 2


def test_an_unreachable_rate_limit_is_a_retryable_error() -> None:
    limiter = FleetRateLimiter(unreachable_redis(), "gone", requests=10, tokens=None)
    with pytest.raises(EmbeddingError) as info:
        limiter.acquire(5)
    assert isinstance(info.value, ProviderRetryable)
    assert "fleet rate limit unavailable" in str(info.value)
