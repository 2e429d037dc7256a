"""The fleet on RabbitMQ: a writer and an embed worker on the machine's real RabbitMQ run an
index job, and ``memq status`` reads the fleet (workers, queue depths) there too, where it
used to say "queue depths need a Redis broker"."""

from __future__ import annotations

import json
import os
import socket
import uuid
from pathlib import Path

import pytest

from tests.conftest import Fleet, run_memq
from tests.test_fleet import memq_argv, nodes_on, store_env, wait_for

pytestmark = pytest.mark.integration
RABBIT = "amqp://guest:guest@127.0.0.1:5672//"


def _rabbit_up() -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", 5672)) == 0


@pytest.fixture
def rabbit_fleet(tmp_path: Path) -> Fleet:
    if not _rabbit_up():
        if os.environ.get("MEMQ_REQUIRE_SERVICES") == "1":
            pytest.fail("RabbitMQ is not reachable on 127.0.0.1:5672")
        pytest.skip("RabbitMQ is not reachable on 127.0.0.1:5672")
    from kombu import Connection

    from pipeline.fleet.broker import queued_messages

    with Connection(RABBIT) as connection:  # start from empty queues
        for queue in ("store.0", "control.0", "embed.local"):
            if queued_messages(connection, queue):
                connection.default_channel.queue_purge(queue)
    logs = tmp_path / "worker-logs"
    logs.mkdir()
    fleet = Fleet(RABBIT, {"MEMQ_LOCAL_THREADS": "1"}, logs)
    yield fleet
    fleet.stop()


def test_status_reads_the_fleet_on_rabbitmq(workspace: Path, tmp_path: Path, tiny_model: Path,
                                            rabbit_fleet: Fleet) -> None:
    env = {**store_env(workspace, tmp_path, tiny_model), "MEMQ_BROKER_URL": RABBIT}
    tag = uuid.uuid4().hex[:6]
    rabbit_fleet.spawn(memq_argv("worker", "--role", "writer", "--name", f"w-{tag}@%h"),
                       "writer", env)
    rabbit_fleet.spawn(memq_argv("worker", "--role", "embed", "--provider", "local", "--name",
                                 f"e-{tag}@%h"), "embed", env)
    wait_for(lambda: nodes_on(RABBIT, "store.0") and nodes_on(RABBIT, "embed.local"),
             "the workers on RabbitMQ", rabbit_fleet)
    done = run_memq("index", "--remote", "--json", env=env)
    assert done.returncode == 0, done.stderr

    def status() -> dict:
        out = run_memq("status", "--json", env=env)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    wait_for(lambda: (s := status())["indexed"] and s["pending"] == 0 and s["vectors"] > 0,
             "the index job", rabbit_fleet, timeout=120)
    fleet = status()["fleet"]
    assert fleet["reachable"] is True and fleet["error"] is None, fleet
    assert fleet["workers"] >= 2
    assert {"store.0", "control.0", "embed.local"} <= set(fleet["queues"])
    assert fleet["queues"]["store.0"] == fleet["queues"]["embed.local"] == 0
    assert fleet["unacked"] is None  # only Redis shows messages in flight
    text = run_memq("status", env=env).stdout
    assert "need a Redis broker" not in text and f"w-{tag}@" in text


def test_a_wrong_rabbitmq_password_is_one_line(workspace: Path, tmp_path: Path,
                                               tiny_model: Path) -> None:
    """Issue 33, 8: a wrong AMQP password was a 73-line traceback (exit 1); now one line that
    names the broker (password masked), exit 3, for a search, a status and the fleet view."""
    if not _rabbit_up():
        pytest.skip("RabbitMQ is not reachable on 127.0.0.1:5672")
    wrong = "amqp://guest:n0t-the-password@127.0.0.1:5672//"
    env = {**store_env(workspace, tmp_path, tiny_model), "MEMQ_BROKER_URL": wrong,
           "MEMQ_LOCAL_SHARDS": "none"}
    for args in (("search", "billing"), ("status",), ("status", "--fleet")):
        done = run_memq(*args, env=env, timeout=120)
        out = done.stdout + done.stderr
        assert done.returncode == 3, (args, out)
        assert "Traceback" not in out and "n0t-the-password" not in out
        said = done.stderr.strip().splitlines()
        assert len(said) == 1, (args, out)
        assert "the broker amqp://guest:***@127.0.0.1:5672// refused the login" in said[0]
