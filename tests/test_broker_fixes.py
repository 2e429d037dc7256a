"""A Redis broker that vanishes while a task message is delivered but not acknowledged must not
kill the worker (pipeline/broker_fixes.py): Celery's consumer steps, replayed in a fresh
process against a real redis-server that is killed at that moment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.faultkit import PrivateRedis

pytestmark = pytest.mark.integration


def replay_broker_loss(tmp_path: Path, *, harden: bool) -> dict:
    """Run tests/broker_loss_scenario.py: message in hand, next BRPOP waiting, broker killed;
    what collect, close and the late ack raised."""
    broker = PrivateRedis(tmp_path)
    broker.start()
    argv = [sys.executable, "-m", "tests.broker_loss_scenario", str(broker.socket)]
    scenario = subprocess.Popen(argv + (["--harden"] if harden else []), cwd=REPO, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert scenario.stdout is not None and scenario.stdin is not None
        assert scenario.stdout.readline().strip() == "ready"
        broker.kill()
        scenario.stdin.write("go\n")
        scenario.stdin.flush()
        result = json.loads(scenario.stdout.readline())
        assert scenario.wait(30) == 0
        return result
    finally:
        if scenario.poll() is None:
            scenario.kill()
        broker.stop()


def test_kombu_alone_dies_of_the_lost_broker(tmp_path: Path) -> None:
    """What the repairs are for (if this fails, kombu fixed it upstream: the repairs can go)."""
    result = replay_broker_loss(tmp_path, harden=False)
    assert result["close"] == "AttributeError: 'NoneType' object has no attribute 'hostname'"


def test_repaired_transport_closes_every_channel_and_reports_connection_errors(
        tmp_path: Path) -> None:
    """Every channel is closed while the transport still knows its broker; a later use of one
    (the late ack) is a connection error, which Celery logs and survives."""
    result = replay_broker_loss(tmp_path, harden=True)
    assert result["collect"] is None  # kombu's collect swallows the close errors, as before
    assert result["close"] is None
    assert result["channels_closed"] == [True, True]
    assert result["ack"] is None  # ack_log_error handled it: a connection error
    assert result["reuse"].startswith("ConnectionError: this channel's broker connection was")
    assert "AttributeError" not in json.dumps(result)
