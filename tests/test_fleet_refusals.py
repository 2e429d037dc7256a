"""A multi-host team's fleet as docs/deploy.md sets it up (hosts of their own HOME and data
dir, a Redis broker, the jobs in PostgreSQL, Flower watching): what a sender learns when the
writer refuses its job (the configurations differ), and what memory text the workers' logs,
the job log and Flower never hold. Real Redis, PostgreSQL, workers, Flower and CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.fleet.job_log import JobLog
from pipeline.memory import Memory
from tests.hostkit import SimulatedFleet, private_database, two_memories, wait_until
from tests.test_fleet import FLOWER_PASSWORD, FLOWER_USER, free_port, http_get

pytestmark = pytest.mark.integration

#: Memory text that must travel only to the asker: in a note, a query and an appended note.
PRIVATE = "zephyrquokka"


@pytest.fixture
def team(tmp_path: Path, tiny_model: Path, broker_url: str
         ) -> Iterator[tuple[SimulatedFleet, dict[str, Path], str]]:
    """Host C holds shard 0 (writer, reader, embed worker); host A sends; host B runs Flower.
    The jobs are in a PostgreSQL database of the test; yields the fleet, the workspaces and
    Flower's URL."""
    config, workspaces = two_memories(tmp_path, tiny_model)
    (workspaces["alpha"] / "memory" / "vault.md").write_text(
        f"# Vault\n\nThe {PRIVATE} phrase opens the garden vault.\n")
    with private_database() as url:
        fleet = SimulatedFleet(tmp_path / "hosts", broker_url, config, url)
        try:
            c, b = fleet.host("hostC"), fleet.host("hostB")
            fleet.host("hostA")
            port = free_port()
            b.spawn("flower", "flower", "--port", str(port),
                    extra={"FLOWER_BASIC_AUTH": f"{FLOWER_USER}:{FLOWER_PASSWORD}"})
            flower = f"http://127.0.0.1:{port}"

            def flower_up() -> bool:
                try:
                    return http_get(f"{flower}/healthcheck", auth=False, timeout=2)[0] == 200
                except OSError:
                    return False

            wait_until(flower_up, "Flower", logs=fleet.logs)
            fleet.start_shard(c, 0)
            fleet.wait_for_nodes(["store.0", "control.0", "query.0", "embed.local"])
            yield fleet, workspaces, flower
        finally:
            fleet.stop()


def _flower_task(flower: str, task_id: str) -> dict[str, Any] | None:
    code, body = http_get(f"{flower}/api/task/info/{task_id}")
    return json.loads(body) if code == 200 else None


def test_a_job_the_writer_refuses_fails_where_the_sender_looks(
        team: tuple[SimulatedFleet, dict[str, Path], str], tmp_path: Path) -> None:
    """Host A's configuration has a memory ``gamma`` (shard 0) that host C's does not (the
    configurations are out of step): ``memq index --remote`` says the writer refused it and
    exits non-zero; the job's row is failed with the reason, ``memq jobs --follow`` says so,
    and Flower shows the task failed, as its result API does."""
    fleet, _, flower = team
    a = fleet.hosts["hostA"]
    newer = json.loads(fleet.config.read_text())
    gamma = tmp_path / "workspaces" / "gamma"
    (gamma / "memory").mkdir(parents=True)
    (gamma / "MEMORY.md").write_text("# gamma\n")
    newer["memories"].append({"name": "gamma", "workspace": str(gamma), "fleet": {"shard": 0}})
    skewed = tmp_path / "memq-newer.json"
    skewed.write_text(json.dumps(newer))
    on_a = {"MEMQ_CONFIG": str(skewed)}

    sent = a.memq("index", "--remote", "--agent", "gamma", "--json", extra=on_a, timeout=120)
    assert sent.returncode == 1, sent.stdout + sent.stderr + fleet.logs()
    out = json.loads(sent.stdout)
    job_id = out["job"]
    assert job_id.startswith("gamma:") and out["state"] == "failed"
    assert "refused" in sent.stderr and "not one of this fleet's" in sent.stderr

    job = JobLog(fleet.common["MEMQ_RESULT_BACKEND"]).get(job_id)
    assert job is not None and (job.state, job.celery_state) == ("failed", "FAILURE")
    assert "not one of this fleet's" in job.error and job.host == "writer-0@hostC"

    followed = a.memq("jobs", "--follow", job_id, "--agent", "gamma", "--json", extra=on_a,
                      timeout=120)
    assert followed.returncode == 1, followed.stderr
    assert json.loads(followed.stdout)["state"] == "failed"
    assert "not one of this fleet's" in json.loads(followed.stdout)["error"]

    task = wait_until(lambda: (t := _flower_task(flower, job_id)) and t.get("state") not in (
        "PENDING", "RECEIVED", "STARTED") and t, "Flower to see the job end", logs=fleet.logs)
    assert task["state"] == "FAILURE", task
    code, body = http_get(f"{flower}/api/task/result/{job_id}")
    assert code == 200 and json.loads(body)["state"] == "FAILURE", body

    # A memory the writer knows is still run (and the refusal left the writer serving).
    fine = a.memq("index", "--remote", "--agent", "alpha", "--json", extra=on_a, timeout=120)
    assert fine.returncode == 0, fine.stderr + fleet.logs()


def test_memory_text_travels_only_to_the_asker(
        team: tuple[SimulatedFleet, dict[str, Path], str]) -> None:
    """Host A indexes, searches, reads and appends to ``alpha`` through the shard (its reader
    answers over ``rpc://``): A gets the text; the workers' INFO logs, the job log's rows and
    Flower's tasks (their arguments and results) hold counts and ids, never the text."""
    fleet, _, flower = team
    a, c = fleet.hosts["hostA"], fleet.hosts["hostC"]
    indexed = a.memq("index", "--agent", "alpha", "--json")
    assert indexed.returncode == 0, indexed.stderr + fleet.logs()
    with Memory(settings=a.settings(fleet.config, "alpha"), local=False) as memory:
        found = memory.search(f"{PRIVATE} garden vault", max_results=3).to_dict()
        assert PRIVATE in json.dumps(found)  # the asker gets the text
        assert PRIVATE in memory.get("memory/vault.md").text
        memory.append(f"The {PRIVATE} vault moved to the shed.", "longterm")
    wait_until(lambda: not json.loads(c.memq("status", "--agent", "alpha", "--json").stdout
                                      )["pending"], "the appended note's vectors",
               logs=fleet.logs)

    def tasks() -> dict[str, Any]:
        code, body = http_get(f"{flower}/api/tasks", {"limit": "1000"})
        assert code == 200, body
        return json.loads(body)

    def seen() -> dict[str, Any] | None:
        listed = tasks()
        names = {t.get("name") for t in listed.values()}
        done = {t.get("name") for t in listed.values() if t.get("state") == "SUCCESS"}
        wanted = {"memq.query", "memq.embed_chunks", "memq.write_vectors",
                  "memq.apply_changes"}
        return listed if wanted <= names and wanted <= done else None

    listed = wait_until(seen, "Flower to see every kind of task", logs=fleet.logs)
    queries = [t for t in listed.values() if t.get("name") == "memq.query"]
    assert len(queries) >= 3 and all(t["result"] for t in queries), queries[:2]
    assert PRIVATE not in json.dumps(listed), [
        t for t in listed.values() if PRIVATE in json.dumps(t)][:2]
    logs = c.log_text()
    assert "succeeded in" in logs and "memq.query" in logs  # INFO lines are there...
    for path in c.logs.glob("*.log"):
        assert PRIVATE not in path.read_text(errors="replace"), path  # ... without the text
    import sqlalchemy as sa

    engine = sa.create_engine(fleet.common["MEMQ_RESULT_BACKEND"].removeprefix("db+"))
    with engine.connect() as connection:
        rows = connection.execute(sa.text("SELECT task_id, name, args, kwargs, result "
                                          "FROM memq_jobs")).all()
    engine.dispose()
    assert rows and not [r for r in rows if PRIVATE.encode() in repr(tuple(r)).encode()], rows
