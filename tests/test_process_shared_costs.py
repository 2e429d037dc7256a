"""What a process indexing many memories pays once, not once per memory: every job log of one
database shares one Celery backend, a closed job log's connection serves the next one, and a
message sent to the fleet is described in one short line, not repr'd whole."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa

from pipeline.fleet.broker import FleetDispatcher, describe
from pipeline.fleet.job_log import IDLE_DATABASES, JobLog
from pipeline.message_fields import ProviderSpec
from pipeline.messages import ChunkText, EmbedJob
from pipeline.routing import embed_queue
from tests.conftest import redis_client


def _count_connects(log: JobLog) -> list[int]:
    """A counter of new DBAPI connections made by ``log``'s (shared) engine."""
    backend = log.backend
    engine = backend.session_manager.get_engine(backend.url)
    seen = [0]
    sa.event.listen(engine, "connect", lambda *_: seen.__setitem__(0, seen[0] + 1))
    return seen


def test_job_logs_of_one_database_share_a_backend_and_a_connection(tmp_path: Path) -> None:
    url = f"db+sqlite:///{tmp_path / 'jobs.sqlite'}"
    first = JobLog(url)
    connects = _count_connects(first)
    first.started("a:1", memory="a", origin="test")
    first.close()
    for n in range(2, 12):  # a loop over new memories: one job log each, opened and closed
        log = JobLog(url)
        log.started(f"a:{n}", memory="a", origin="test")
        log.finished(f"a:{n}", {"memory": "a"})
        assert log.backend is first.backend
        log.close()
    assert connects[0] == 1
    assert JobLog(url, keep_days=2).backend is not first.backend  # its own cleanup setting
    assert {r.id for r in JobLog(url).recent("a", limit=50)} == {f"a:{n}" for n in range(1, 12)}


def test_only_the_most_recently_closed_databases_keep_a_connection(tmp_path: Path) -> None:
    urls = [f"db+sqlite:///{tmp_path / f'jobs-{i}.sqlite'}" for i in range(IDLE_DATABASES + 2)]
    logs = [JobLog(url) for url in urls]
    counters = [_count_connects(log) for log in logs]
    for log in logs:
        log.started("a:1", memory="a", origin="test")
        log.close()
    for log in reversed(logs):  # the oldest were closed for good, the newest kept theirs
        log.finished("a:1", {"memory": "a"})
        log.close()
    assert [c[0] for c in counters] == [2, 2] + [1] * IDLE_DATABASES


def test_a_sent_message_is_described_in_one_short_line(broker_url: str) -> None:
    chunks = tuple(ChunkText(f"c{i}", f"h{i}", "secretless text " * 200) for i in range(20))
    job = EmbedJob("agent-7", ProviderSpec("local", "tiny", "key-of-index", {}), "/s.sqlite",
                   chunks)
    assert describe(job.to_json()) == "[memory=agent-7 chunks=20]"
    with FleetDispatcher(broker_url) as fleet:
        fleet.embed(job)
    client = redis_client(broker_url)
    lists = [k for k in client.keys(f"{embed_queue('local')}*") if client.type(k) == b"list"]
    raw = [m for key in lists for m in client.lrange(key, 0, -1)]  # one list per priority
    assert len(raw) == 1
    headers = json.loads(raw[0])["headers"]
    assert headers["argsrepr"] == "[memory=agent-7 chunks=20]"
    assert headers["kwargsrepr"] == "{}"
