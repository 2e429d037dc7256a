"""Any host, any memory: a fleet that spans hosts, simulated on one machine.

Hosts C and D hold shard 0 and shard 1 (writer + reader + embed worker each); host A has only
the configuration (the agents' side); host B is a fourth host that follows jobs. Each host has
its own HOME and data dir and decides by itself which stores it holds. Real Redis or RabbitMQ,
real worker processes, the real CLI and library.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.memory import Memory
from pipeline.messages import QueryReply, QueryRequest
from pipeline.remote import ShardReader
from tests.hostkit import (
    SimulatedFleet,
    private_database,
    private_vhost,
    queries_of,
    two_memories,
    wait_until,
)
from tests.test_fleet import FLOWER_PASSWORD, FLOWER_USER, free_port, http_get

pytestmark = pytest.mark.integration
QUERIES_PER_MEMORY = 25


@contextlib.contextmanager
def three_hosts(root: Path, tiny_model: Path, broker: str, result_backend: str | None = None
                ) -> Iterator[tuple[SimulatedFleet, dict[str, Path]]]:
    """The three-host fleet (C: shard 0, D: shard 1, A: config only) on ``broker``, its jobs
    in ``result_backend`` (default: one SQLite file every host reaches)."""
    config, workspaces = two_memories(root, tiny_model)
    shared = root / "shared"
    shared.mkdir()
    fleet = SimulatedFleet(root / "hosts", broker, config,
                           result_backend or f"db+sqlite:///{shared / 'jobs.sqlite'}")
    try:
        c, d = fleet.host("hostC"), fleet.host("hostD")
        fleet.host("hostA")
        fleet.start_shard(c, 0)
        fleet.start_shard(d, 1)
        fleet.wait_for_nodes(["store.0", "control.0", "query.0", "store.1", "control.1",
                              "query.1", "embed.local"])
        yield fleet, workspaces
    finally:
        fleet.stop()


@pytest.fixture
def hosts(tmp_path: Path, tiny_model: Path, request: pytest.FixtureRequest
          ) -> Iterator[tuple[SimulatedFleet, dict[str, Path]]]:
    """:func:`three_hosts` on the broker the test asks for (``broker_url`` by default)."""
    broker = request.getfixturevalue(getattr(request, "param", "broker_url"))
    with three_hosts(tmp_path, tiny_model, broker) as fleet:
        yield fleet


@pytest.fixture
def rabbit_url() -> Iterator[str]:
    with private_vhost() as url:
        yield url


def _index_from(host: Any, memory: str, fleet: SimulatedFleet) -> dict[str, Any]:
    done = host.memq("index", "--agent", memory, "--json")
    assert done.returncode == 0, done.stderr + fleet.logs()
    return json.loads(done.stdout)


def _answers(memory: Memory, queries: list[str]) -> list[dict[str, Any]]:
    return [memory.search(q).to_dict() for q in queries]


@pytest.mark.parametrize("hosts", ["broker_url", "rabbit_url"], indirect=True,
                         ids=["redis", "rabbitmq"])
def test_any_host_searches_reads_and_follows_any_memory(
        hosts: tuple[SimulatedFleet, dict[str, Path]], tmp_path: Path) -> None:
    fleet, workspaces = hosts
    a, c, d = fleet.hosts["hostA"], fleet.hosts["hostC"], fleet.hosts["hostD"]
    b = fleet.host("hostB")
    owner = {"alpha": c, "beta": d}

    # Host A indexes both memories: each pass is a job for its shard's host, followed to the
    # end (vectors written) from A.
    for memory in ("alpha", "beta"):
        out = _index_from(a, memory, fleet)
        assert out["mode"] == "remote" and out["waited"] is True, out
        assert out["files"] > 10 and out["chunksQueued"] > 0, out

    # 50 queries over the two memories: A's answers are the store hosts' own answers.
    for seed, memory in enumerate(("alpha", "beta")):
        queries = queries_of(workspaces[memory], QUERIES_PER_MEMORY, seed)
        with Memory(settings=owner[memory].settings(fleet.config, memory), local=True) as own, \
                Memory(settings=a.settings(fleet.config, memory), local=False) as there:
            mine, theirs = _answers(own, queries), _answers(there, queries)
        assert theirs == mine
        assert sum(len(r["results"]) for r in mine) > QUERIES_PER_MEMORY  # real hits
        assert {r["mode"] for r in mine} == {"hybrid"}
    # ... and so does A's CLI, which decides by itself that the stores are elsewhere.
    cli = a.memq("search", "--agent", "beta", "--json", "tortoise harbour")
    assert cli.returncode == 0, cli.stderr
    with Memory(settings=d.settings(fleet.config, "beta"), local=True) as own:
        assert json.loads(cli.stdout) == own.search("tortoise harbour").to_dict()
    got = a.memq("get", "--agent", "alpha", "--json", "MEMORY.md", "--from", "3", "--lines",
                 "1")
    assert got.returncode == 0, got.stderr
    window = json.loads(got.stdout)
    assert (window["status"], window["from"], window["lines"]) == ("ok", 3, 1)
    assert window["text"].split("\n")[0] == "The alpha team deploys on Tuesdays."
    status = a.memq("status", "--agent", "beta", "--json")
    assert status.returncode == 0, status.stderr
    beta = json.loads(status.stdout)
    assert beta["servedBy"] == "reader-1@hostD" and beta["pending"] == 0
    assert beta["vectors"] == beta["chunks"] > 0

    # No store, no claim, nothing indexed ever appears on A.
    assert not [p for p in a.home.rglob("*") if p.suffix.startswith(".sqlite")]
    assert not (a.data / "shards").exists()

    # A job sent from A is followed to the end from B, and listed alike everywhere.
    sent = a.memq("index", "--remote", "--agent", "beta", "--json")
    assert sent.returncode == 0, sent.stderr
    job_id = json.loads(sent.stdout)["job"]
    assert job_id.startswith("beta:")
    followed = b.memq("jobs", "--follow", job_id, "--json")
    assert followed.returncode == 0, followed.stderr + fleet.logs()
    job = json.loads(followed.stdout)
    assert (job["id"], job["state"], job["kind"]) == (job_id, "done", "remote")
    assert job["host"] == "writer-1@hostD" and job["files"] > 10
    listings = []
    for host in (a, b, d):
        listed = host.memq("jobs", "--agent", "beta", "--json")
        assert listed.returncode == 0, listed.stderr
        listings.append(json.loads(listed.stdout)["jobs"])
    assert listings[0] == listings[1] == listings[2]
    assert listings[0][0]["id"] == job_id and len(listings[0]) == 2
    assert all(j["id"].startswith("beta:") for j in listings[0])

    # Flower, on B, shows the job's result from the shared job log.
    port = free_port()
    b.spawn("flower", "flower", "--port", str(port),
            extra={"FLOWER_BASIC_AUTH": f"{FLOWER_USER}:{FLOWER_PASSWORD}"})
    flower = f"http://127.0.0.1:{port}"

    def result() -> tuple[int, str] | None:
        try:
            code, body = http_get(f"{flower}/api/task/result/{job_id}", timeout=5)
        except OSError:
            return None
        return (code, body) if code != 503 or "backend" not in body else None

    code, body = wait_until(result, "Flower's task API", logs=fleet.logs)
    assert code == 200, body
    answer = json.loads(body)
    assert answer["task-id"] == job_id and answer["state"] == "SUCCESS"
    assert answer["result"]["files"] == job["files"]
    assert answer["result"]["memory"] == "beta"


def test_a_reader_killed_mid_query_gives_unavailable_then_recovers(
        hosts: tuple[SimulatedFleet, dict[str, Path]]) -> None:
    fleet, _ = hosts
    a, c = fleet.hosts["hostA"], fleet.hosts["hostC"]
    _index_from(a, "alpha", fleet)
    settings = a.settings(fleet.config, "alpha")
    bound = settings.fleet.query_timeout_ms / 1000
    with Memory(settings=settings, local=False) as memory:
        assert memory.search("garden ledger").mode == "hybrid"
        os.killpg(c.procs["reader-0"].pid, signal.SIGSTOP)  # it holds the next query...
        answer: dict[str, Any] = {}

        def ask() -> None:
            started = time.monotonic()
            answer["results"] = memory.search("garden ledger")
            answer["seconds"] = time.monotonic() - started

        caller = threading.Thread(target=ask)
        caller.start()
        time.sleep(0.5)
        c.kill("reader-0")  # ... and dies with it
        caller.join(bound + 10)
        assert not caller.is_alive()
        results = answer["results"]
        assert results.mode == "unavailable" and results.hits == []
        assert "no reader of shard 0 answered within" in results.error
        assert "memq worker --role reader --shard 0" in results.action
        assert answer["seconds"] < bound + 2
        # The CLI says so too, with its own exit code.
        cli = a.memq("search", "--agent", "alpha", "garden")
        assert cli.returncode == 3 and "no reader of shard 0 answered" in cli.stderr
        c.spawn("reader-0", "worker", "--role", "reader", "--shard", "0", "--name",
                "reader-0@hostC")
        fleet.wait_for_nodes(["query.0"])
        assert memory.search("garden ledger").mode == "hybrid"


def test_a_reader_refuses_what_is_not_its_own(
        hosts: tuple[SimulatedFleet, dict[str, Path]], tmp_path: Path) -> None:
    """Queries crafted by hand: another shard's memory, a memory nobody lists, a path outside
    the memory, a malformed request. Each is refused; the honest one is answered."""
    fleet, workspaces = hosts
    a = fleet.hosts["hostA"]
    _index_from(a, "alpha", fleet)
    secret = tmp_path / "secret.md"
    secret.write_text("the launch code is QX-7731-ZULU\n")
    (workspaces["alpha"] / "memory" / "link.md").symlink_to(secret)
    with ShardReader(fleet.broker, 10.0) as reader:
        def ask(memory: str, op: str, args: dict[str, Any], shard: int = 0) -> QueryReply:
            return reader.ask(QueryRequest(memory, op, args, shard))

        honest = ask("alpha", "search", {"query": "garden"})
        assert honest.error is None and honest.answer["results"]
        wrong_shard = ask("beta", "search", {"query": "garden"})
        assert wrong_shard.kind == "refused" and "shard 1" in wrong_shard.error
        unknown = ask("gamma", "status", {})
        assert unknown.kind == "refused" and "not one of this fleet's" in unknown.error
        for path in ("../beta/MEMORY.md", str(workspaces["beta"] / "MEMORY.md"),
                     "/etc/passwd", "memory/link.md", str(secret)):
            outside = ask("alpha", "get", {"path": path})
            assert outside.kind == "path" and outside.answer is None, (path, outside)
        for answer in (honest, wrong_shard, unknown):
            assert "QX-7731-ZULU" not in json.dumps(answer.to_json())
        # A request no reader can read: refused, and the reader goes on serving.
        raw = reader.app.send_task("memq.query", args=[{"v": 1, "memory": "alpha",
                                                        "op": "search", "args": {}}],
                                   queue="query.0")
        assert raw.get(timeout=10)["error_kind"] == "refused"
        assert ask("alpha", "get", {"path": "MEMORY.md"}).answer["text"].startswith("# alpha")


def test_a_host_without_the_store_never_creates_one(
        hosts: tuple[SimulatedFleet, dict[str, Path]]) -> None:
    """Host A's MCP-style use (search that would sync, append) makes jobs for the shard, and A
    keeps no store; with the shard's readers down, a search is an answer, not an exception."""
    from memq.mcp_server import MemoryTools

    fleet, workspaces = hosts
    a, c = fleet.hosts["hostA"], fleet.hosts["hostC"]
    _index_from(a, "alpha", fleet)
    settings = a.settings(fleet.config, "alpha")
    note = workspaces["alpha"] / "memory" / "2026-12-05.md"
    note.write_text("- The kestrel deployment moved to Thursday.\n")
    with Memory(settings=settings, local=False) as memory:
        tools = MemoryTools(memory)
        first = tools.search({"query": "kestrel Thursday"})
        assert first["dirty"] == 1 and first["mode"] == "hybrid"
        wait_until(lambda: tools.search({"query": "kestrel Thursday"})["results"],
                   "the shard to index the changed file", logs=fleet.logs)
        appended = tools.append({"text": "The lantern budget is 40 euros.",
                                 "target": "longterm"})
        assert appended["indexed"] is True and appended["vectors"] == "queued"
        hits = tools.search({"query": "lantern budget euros"})["results"]
        assert hits and hits[0]["path"] == "MEMORY.md"
        c.kill("reader-0")
        down = tools.search({"query": "lantern"})
        assert down["mode"] == "unavailable" and down["unavailable"] is True
        assert "no reader of shard 0" in down["error"]
    assert not [p for p in a.home.rglob("*") if p.suffix.startswith(".sqlite")]
    jobs = json.loads(c.memq("jobs", "--agent", "alpha", "--json").stdout)["jobs"]
    assert {j["kind"] for j in jobs} == {"remote", "sync"}


def test_a_writer_killed_mid_job_leaves_a_final_state(
        hosts: tuple[SimulatedFleet, dict[str, Path]]) -> None:
    """The writer of shard 0 is SIGKILLed while it runs an index job: once it is back, the
    job's row is no longer "running" (the restarted writer ends it: cut off), and ``memq jobs``
    on any host says so."""
    from pipeline.fleet.job_log import JobLog
    from tests.faultkit import write_corpus

    fleet, workspaces = hosts
    a, c = fleet.hosts["hostA"], fleet.hosts["hostC"]
    write_corpus(workspaces["alpha"], files=6000, lines=4, seed=11)  # a pass of some seconds
    log = JobLog(fleet.common["MEMQ_RESULT_BACKEND"])
    with Memory(settings=a.settings(fleet.config, "alpha"), local=False) as memory:
        job_id = memory.remote.queue_index()
    deadline = time.monotonic() + 120
    while (job := log.get(job_id)) is None or not job.running:
        assert time.monotonic() < deadline and (job is None or job.state == "queued"), (
            job, fleet.logs())
        time.sleep(0.05)
    c.kill("writer-0")
    assert log.get(job_id).state == "running"  # nobody could say otherwise yet
    c.spawn("writer-0", "worker", "--role", "writer", "--shard", "0", "--name",
            "writer-0@hostC")
    wait_until(lambda: not log.get(job_id).running, "a final state", logs=fleet.logs)
    job = log.get(job_id)
    assert job.state in ("done", "failed")
    if job.state == "failed":
        assert "cut off: the writer of shard 0 stopped while it ran" in job.error
    listed = json.loads(a.memq("jobs", "--agent", "alpha", "--json").stdout)["jobs"]
    assert {j["id"]: j["state"] for j in listed}[job_id] == job.state
    log.close()


def test_a_postgresql_job_log_serves_every_host(tmp_path: Path, tiny_model: Path,
                                                broker_url: str) -> None:
    """The fleet's jobs in the machine's PostgreSQL (``db+postgresql+psycopg://``): a job sent
    from A is run by D, followed from B, listed alike on A, B and D, and its rows are in the
    database, under memq's table name."""
    with private_database() as url, three_hosts(tmp_path, tiny_model, broker_url, url) as (
            fleet, _):
        a, d = fleet.hosts["hostA"], fleet.hosts["hostD"]
        b = fleet.host("hostB")
        out = _index_from(a, "beta", fleet)
        sent = a.memq("index", "--remote", "--agent", "beta", "--json")
        job_id = json.loads(sent.stdout)["job"]
        followed = b.memq("jobs", "--follow", job_id, "--json")
        assert followed.returncode == 0, followed.stderr + fleet.logs()
        assert json.loads(followed.stdout)["state"] == "done"
        listings = [json.loads(h.memq("jobs", "--agent", "beta", "--json").stdout)["jobs"]
                    for h in (a, b, d)]
        assert listings[0] == listings[1] == listings[2]
        assert [j["id"] for j in listings[0]] == [job_id, out["job"]]
        import sqlalchemy as sa

        engine = sa.create_engine(url.removeprefix("db+"))
        with engine.connect() as connection:
            rows = connection.execute(sa.text(
                "SELECT task_id, status, queue FROM memq_jobs ORDER BY id")).all()
        engine.dispose()
        assert [tuple(r) for r in rows] == [(out["job"], "SUCCESS", "control.1"),
                                            (job_id, "SUCCESS", "control.1")]
        assert not [p for p in a.home.rglob("*") if p.suffix.startswith(".sqlite")]


def test_a_reader_on_a_host_without_the_shards_stores_refuses_to_start(
        hosts: tuple[SimulatedFleet, dict[str, Path]]) -> None:
    """Issue 33, 6: a reader of shard 0 started on A (config only) used to serve half of
    shard 0's searches from A's empty data dir (`keyword-only []`), silently. It now refuses
    to start while another host serves the shard, and says what to do; so does one whose data
    dir still claims the shard from such a run. A second reader on the shard's own host still
    starts (before anything is indexed, too), as does a new host's when nobody serves it."""
    import subprocess

    from pipeline.fleet.placement import claim_in, claimed_in

    fleet, _ = hosts
    a, c = fleet.hosts["hostA"], fleet.hosts["hostC"]

    def refused(host: Any, name: str) -> str:
        try:
            done = host.memq("worker", "--role", "reader", "--shard", "0", "--name", name,
                             timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{name} started and served shard 0 from a host without "
                                 "its stores") from None
        assert done.returncode != 0
        return done.stdout + done.stderr

    said = refused(a, "reader-0@hostA")
    assert "refusing to start reader-0@hostA" in said
    assert "reader-0@hostC" in said and "memq shard copy --shard 0" in said
    assert claimed_in(a.data / "shards") == set()  # it claimed nothing
    # A data dir that still claims shard 0 from an earlier such run: refused all the same.
    claim_in(a.data / "shards", [0], "reader-0@hostA", "reader")
    assert "refusing to start reader-0@hostA" in refused(a, "reader-0@hostA")
    assert claimed_in(a.data / "shards") == set()  # A's own searches ask shard 0 again

    # C holds shard 0 (nothing indexed yet): a second reader there starts and serves.
    c.spawn("reader-0b", "worker", "--role", "reader", "--shard", "0", "--name",
            "reader-0b@hostC")
    wait_until(lambda: "reader-0b@hostC" in _consumers(fleet, "query.0"),
               "the second reader on the shard's host", logs=fleet.logs)
    assert "refusing" not in c.log_text()


def _consumers(fleet: SimulatedFleet, queue: str) -> list[str]:
    from pipeline.fleet.broker import queue_consumers

    return [n for n, qs in queue_consumers(fleet.broker, timeout=2).items() if queue in qs]
