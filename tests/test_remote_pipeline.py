"""Remote providers through the real pipeline: a real Redis broker, real ``celery worker``
processes and the OpenAI double on loopback. A storm of 429s and 5xx converges with every
chunk embedded exactly once; a rejected key leaves the chunks pending with a clear reason; and
the API key never reaches a log line, a message on Redis, a database row or an error text."""

from __future__ import annotations

import itertools
import random
import threading
from pathlib import Path

import numpy as np
import pytest

from pipeline.status import index_status
from pipeline.store.engine import connect
from tests.conftest import redis_client
from tests.fakes.provider_doubles import Fault, ProviderDouble
from tests.secrets_scan import SENTINEL
from workers.indexing import run_index

pytestmark = pytest.mark.integration

WORDS = ["garden", "tomato", "invoice", "Berlin", "flight", "coordinator", "battery", "kettle",
         "violin", "harbour", "ledger", "meeting", "recipe", "tortoise", "antenna", "migration",
         "backup", "router", "sketch", "lantern"]


def add_notes(workspace: Path, files: int = 60) -> None:
    rng = random.Random(7)
    for i in range(files):
        lines = [f"# Note {i}"] + [" ".join(rng.choices(WORDS, k=12)) + "." for _ in range(30)]
        name = f"2025-{i // 28 + 1:02d}-{i % 28 + 1:02d}.md"
        (workspace / "memory" / name).write_text("\n".join(lines) + "\n")


class RedisTap:
    """Records every command Redis receives (MONITOR), to scan what the pipeline sends it."""

    def __init__(self, url: str) -> None:
        self.client = redis_client(url)
        self.seen: list[str] = []
        self._monitor = self.client.monitor().__enter__()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self._monitor.listen():
                self.seen.append(str(event.get("command", "")))
        except Exception:  # the connection closes at the end of the test
            pass

    def close(self) -> str:
        self._monitor.connection.disconnect()
        self._thread.join(5)
        self.client.close()
        return "\n".join(self.seen)


def database_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


def index_through_openai_double(double: ProviderDouble, workspace: Path, make_settings,
                                broker_url: str, fleet, monkeypatch, **remote: object):
    """Index via real workers (key SENTINEL in their environment) while tapping Redis.

    Returns (settings, run, status, worker logs, Redis traffic)."""
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    settings = make_settings(workspace, provider="openai", brokerUrl=broker_url,
                             remote={"baseUrl": double.url, **remote})
    tap = RedisTap(broker_url)
    fleet.start(["store.0"], "writer")
    fleet.start(["embed.openai"], "embed", concurrency=2)
    run = run_index(settings, wait=True)
    sent_to_redis = tap.close()
    return settings, run, index_status(settings), fleet.logs(None), sent_to_redis


def assert_no_sentinel(settings, status, logs: str, sent_to_redis: str) -> None:
    assert "memq.embed_chunks" in sent_to_redis and "chunks" in sent_to_redis  # tap works
    for where, blob in (("worker logs", logs), ("redis traffic", sent_to_redis),
                        ("status", str(status))):
        assert SENTINEL not in blob, where
    assert SENTINEL.encode() not in database_bytes(settings.store.path)


def test_fault_storm_converges_with_every_chunk_embedded_once(
        workspace: Path, make_settings, broker_url, fleet, monkeypatch) -> None:
    add_notes(workspace)
    faults = (Fault("429"), Fault("429", retry_after=0.3), Fault("500"), Fault("503"))
    with ProviderDouble("openai", api_key=SENTINEL, fault_rate=0.3, seed=11,
                        random_faults=faults) as double:
        settings, run, status, logs, sent_to_redis = index_through_openai_double(
            double, workspace, make_settings, broker_url, fleet, monkeypatch,
            rateLimit={"requestsPerMinute": 10000})
        assert run.waited and run.report.jobs >= 10, logs[-3000:]
        assert status["failed"] == 0 and status["pending"] == 0, status["chunkErrors"]
        assert status["vectors"] == status["chunks"] == run.report.chunks_queued > 40
        stats = double.stats()
        assert stats["texts_embedded"] == status["chunks"]  # every chunk embedded exactly once
        failures = {k: v for k, v in stats["statuses"].items() if k != "200"}
        assert set(failures) == {"429", "500", "503"}, stats
        assert sum(failures.values()) >= 0.15 * stats["requests"], stats
        assert "retrying" in logs
        # Every request the double saw went through the fleet-wide limiter's Redis counters.
        client = redis_client(broker_url)
        counted = sum(int(client.get(k)) for k in client.scan_iter("memq:ratelimit:*:r"))
        assert counted == stats["requests"], (counted, stats)
        print(f"storm: {stats}, {run.report.jobs} jobs, {run.seconds:.1f} s")

        db = connect(settings.store.path)
        try:
            rowid, text = db.conn.execute(
                "SELECT rowid, text FROM chunks ORDER BY rowid LIMIT 1").fetchone()
            from pipeline.store.vectors import get_vectors

            stored = get_vectors(db, [rowid])[rowid]
        finally:
            db.close()
        want = double.vector(text)
        np.testing.assert_allclose(stored, want / np.linalg.norm(want), atol=1e-5)
        assert_no_sentinel(settings, status, logs, sent_to_redis)


def test_rejected_key_leaves_chunks_pending_with_a_clear_error_without_leaking_it(
        workspace: Path, make_settings, broker_url, fleet, monkeypatch) -> None:
    # The workers' SENTINEL key is wrong here, and the double echoes it in its 401 body.
    with ProviderDouble("openai", api_key="sk-the-right-key") as double:
        settings, run, status, logs, sent_to_redis = index_through_openai_double(
            double, workspace, make_settings, broker_url, fleet, monkeypatch)
        # Held, not failed: the next pass after the key is fixed embeds them (no --retry-failed).
        assert run.failed_chunks == status["failed"] == 0
        assert status["pending"] == status["chunks"] > 0 and status["vectors"] == 0
        [error] = status["chunkErrors"]
        assert error["state"] == "pending"
        assert "HTTP 401" in error["error"] and "check the API key" in error["error"]
        assert "Incorrect API key provided: ***" in error["error"]
        assert len(double.embed_requests()) == run.report.jobs  # 401 is never retried
        assert {r.status for r in double.embed_requests()} == {401}
        assert_no_sentinel(settings, status, logs, sent_to_redis)
        assert "embedding refused" in logs  # the refusal is logged, scrubbed


def test_context_length_error_is_split_through_real_workers(
        workspace: Path, make_settings, broker_url, fleet) -> None:
    """A small-context Ollama model: the one over-long chunk fails, its job-mates are embedded."""
    long_text = "A very long line about the lantern and the harbour. " * 20  # ~1 KB, one chunk
    (workspace / "memory" / "2026-09-01.md").write_text(f"# Long\n\n{long_text}\n")
    with ProviderDouble("ollama", api_key=None, max_input_bytes=700) as double:
        settings = make_settings(workspace, provider="ollama", brokerUrl=broker_url,
                                 remote={"baseUrl": double.url})
        fleet.start(["store.0"], "writer")
        fleet.start(["embed.ollama"], "embed")
        run = run_index(settings, wait=True)

        status = index_status(settings)
        assert run.report.jobs == 1 and status["chunks"] >= 6
        assert status["failed"] == 1 and status["vectors"] == status["chunks"] - 1
        [error] = status["chunkErrors"]
        assert "input too long" in error["error"] and "context length" in error["error"]
        batches = [r.body["input"] for r in double.embed_requests()]
        assert len(batches[0]) == status["chunks"]  # first the whole job, then halves...
        assert [b for b in batches if len(b) == 1 and b[0].startswith("# Long")]  # ...to it


def test_retries_follow_the_backoff_and_retry_after(workspace: Path, make_settings,
                                                   broker_url, fleet, monkeypatch) -> None:
    """One job meets 429 (Retry-After 1.5 s), 500 and 503, then succeeds: four requests. The
    429 is waited out in place for its Retry-After without spending a retry (the fleet pause);
    the 500 and 503 then follow the doubling backoff from its start (0.5 s, then 1 s)."""
    script = [Fault("429", retry_after=1.5), Fault("500"), Fault("503")]
    with ProviderDouble("openai", api_key=SENTINEL, script=script) as double:
        _, run, status, logs, _ = index_through_openai_double(
            double, workspace, make_settings, broker_url, fleet, monkeypatch)
        seen = double.embed_requests()
        assert run.report.jobs == 1 and status["vectors"] == status["chunks"] > 0, logs[-2000:]
        assert [r.status for r in seen] == [429, 500, 503, 200]
        gaps = [b.at - a.at for a, b in itertools.pairwise(seen)]
        assert gaps[0] >= 1.5 and gaps[1] >= 0.5 and gaps[2] >= 1.0, gaps


def test_exhausted_quota_is_not_retried(workspace: Path, make_settings, broker_url, fleet,
                                        monkeypatch) -> None:
    with ProviderDouble("openai", api_key=SENTINEL, script=[Fault("quota")]) as double:
        _, run, status, _, _ = index_through_openai_double(
            double, workspace, make_settings, broker_url, fleet, monkeypatch)
        assert len(double.embed_requests()) == run.report.jobs == 1
        assert status["failed"] == status["chunks"] and status["pending"] == 0
        assert "quota exhausted: not retried" in status["chunkErrors"][0]["error"]


def test_retries_run_out_and_the_chunks_fail_with_the_reason(
        workspace: Path, make_settings, broker_url, fleet, monkeypatch) -> None:
    fleet.env["MEMQ_EMBED_MAX_RETRIES"] = "3"
    with ProviderDouble("openai", api_key=SENTINEL, script=[Fault("500")] * 10) as double:
        _, run, status, _, _ = index_through_openai_double(
            double, workspace, make_settings, broker_url, fleet, monkeypatch)
        assert [r.status for r in double.embed_requests()] == [500] * 4  # 1 try + 3 retries
        assert status["failed"] == status["chunks"] == run.failed_chunks > 0
        error = status["chunkErrors"][0]["error"]
        assert "HTTP 500" in error and "(after 3 retries)" in error
