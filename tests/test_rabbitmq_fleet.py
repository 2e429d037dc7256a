"""A fleet on RabbitMQ: more than one embed worker on one host, started the plain way
(``memq worker --role embed --provider P``, no ``--name``), all serve, and keep serving
through a restart of their broker.

On RabbitMQ a Celery node's control queue (``<node>.celery.pidbox``) is exclusive to one
connection: two workers with one node name cannot both declare it, and the second dies with
``RESOURCE_LOCKED`` at start or at the next reconnect. So an embed or batch worker's default
node name is its own (``embed-P-<pid>@host``); a writer keeps ``writer@host`` (its shard lease
is held under that name across restarts).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Fleet
from tests.faultkit import RABBITMQ_SERVER, PrivateRabbit
from tests.indexcheck import wait_until

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not RABBITMQ_SERVER.exists(),
                                 reason="no rabbitmq-server on this machine")]


def _ready_nodes(log: Path) -> list[str]:
    """The node names a worker log announced as ready."""
    return [line.split("] ", 1)[1].split(" ready.")[0]
            for line in log.read_text(errors="replace").splitlines() if " ready." in line]


def test_two_default_named_embed_workers_on_one_host_both_serve(tmp_path: Path) -> None:
    broker = PrivateRabbit(tmp_path)
    broker.start()
    logs = tmp_path / "logs"
    logs.mkdir()
    fleet = Fleet(broker.url, {"OPENAI_API_KEY": "sk-unused"}, logs)
    try:
        argv = [sys.executable, "-m", "memq.cli", "worker", "--role", "embed", "--provider",
                "openai"]
        workers = [fleet.spawn(argv, f"embed-{i}") for i in range(2)]
        wait_until(lambda: [] if all(_ready_nodes(logs / f"embed-{i}.log") for i in range(2))
                   else ["not ready"], 60, f"both workers ready\n{fleet.logs()}")
        names = [_ready_nodes(logs / f"embed-{i}.log")[0] for i in range(2)]
        assert names[0] != names[1], names
        assert all(n.startswith("embed-openai-") for n in names), names
        time.sleep(2.0)  # a second worker of the same name would die within this
        assert [w.poll() for w in workers] == [None, None], fleet.logs()

        broker.restart()
        wait_until(lambda: [] if all("Connected to" in (logs / f"embed-{i}.log").read_text(
            errors="replace").rsplit("Connection to broker lost", 1)[-1] for i in range(2))
            else ["not reconnected"], 60, f"reconnect\n{fleet.logs()}")
        time.sleep(2.0)
        assert [w.poll() for w in workers] == [None, None], fleet.logs()
        assert "RESOURCE_LOCKED" not in fleet.logs(tail=None)
    finally:
        fleet.stop()
        broker.stop()
