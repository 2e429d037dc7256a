"""Settings carry their own data dir (``Settings.data_dir``, from the environment they were
loaded with): a shard copy's snapshots, a worker's shard claims and ``memq shard forget`` use
it, never the process's ``MEMQ_HOME`` (two hosts simulated in one process, library callers
with their own environment). No broker needed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import memq.cli
from pipeline.config import Settings, load_settings
from pipeline.fleet.placement import claim_in, claimed_in, claims_of
from pipeline.fleet.shard_copy import ABANDONED_AFTER_S, export_step, exports_of
from pipeline.memory import Memory
from pipeline.routing import QUERY_PREFIX, STORE_PREFIX
from tests.conftest import write_config
from workers.reading import claim_served


@pytest.fixture
def hosts(tmp_path: Path, workspace: Path,
          monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, Settings]]:
    """The process's data dir, and settings of two hosts loaded with their own ``MEMQ_HOME``."""
    process = tmp_path / "process"
    monkeypatch.setenv("MEMQ_HOME", str(process))
    config = write_config(tmp_path / "memq.json", provider="none",
                          fleet={"localShards": "all"})
    settings = {name: load_settings(config_file=config, workspace=workspace,
                                    env={"HOME": str(tmp_path / "home"),
                                         "MEMQ_HOME": str(tmp_path / name)})
                for name in ("a", "b")}
    assert settings["a"].data_dir == tmp_path / "a" != process
    return process, settings


def test_a_shard_copy_snapshot_lands_in_the_settings_data_dir(
        hosts: tuple[Path, dict[str, Settings]]) -> None:
    process, settings = hosts
    own = settings["a"]
    with Memory(settings=own) as memory:
        memory.sync()
    old = time.time() - ABANDONED_AFTER_S - 60
    abandoned = {}
    for folder in (exports_of(own), process / "exports"):
        folder.mkdir(parents=True)
        abandoned[folder] = folder / f"main-{'0' * 32}.sqlite"
        abandoned[folder].touch()
        os.utime(abandoned[folder], (old, old))

    described = export_step(own, {})
    snapshot = exports_of(own) / f"main-{described['token']}.sqlite"
    assert exports_of(own) == own.data_dir / "exports"
    assert snapshot.stat().st_size == described["bytes"] > 0 and described["chunks"] > 0
    assert not abandoned[exports_of(own)].exists()  # the settings' folder is swept
    assert abandoned[process / "exports"].exists()  # the process's is not this reader's
    assert [p.name for p in (process / "exports").iterdir()] == [f"main-{'0' * 32}.sqlite"]
    part = export_step(own, {"token": described["token"], "offset": 0, "size": 16})
    assert part["offset"] == 0 and part["data"]
    assert export_step(own, {"token": described["token"], "close": True}) == {"closed": True}
    assert not snapshot.exists()


def test_a_worker_claims_in_its_settings_data_dir(
        hosts: tuple[Path, dict[str, Settings]]) -> None:
    process, settings = hosts
    own = settings["a"]
    written = claim_served(own.data_dir, [f"{STORE_PREFIX}.2", f"{QUERY_PREFIX}.1", "embed"],
                           "writer-1@a")
    assert sorted(p.name for p in written) == ["1.json", "2.json"]
    assert claimed_in(claims_of(own)) == {1, 2}
    assert json.loads((claims_of(own) / "2.json").read_text())["role"] == "writer"
    assert json.loads((claims_of(own) / "1.json").read_text())["role"] == "reader"
    assert claimed_in(claims_of(settings["b"])) == set()
    assert not (process / "shards").exists()


def test_shard_forget_removes_the_claim_of_the_settings_data_dir(
        hosts: tuple[Path, dict[str, Settings]], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``memq shard forget`` run with settings of another environment (``load_settings`` given
    host a's): a's claim goes, the process's claim of the same shard stays."""
    process, settings = hosts
    own = settings["a"]
    claim_in(claims_of(own), [1], "writer-1@a", "writer")
    claim_in(process / "shards", [1], "writer-1@process", "writer")
    monkeypatch.setattr(memq.cli.common, "load_settings", lambda **_: own)
    assert memq.cli.main(["shard", "forget", "--shard", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["forgotten"] is True
    assert claimed_in(claims_of(own)) == set()
    assert claimed_in(process / "shards") == {1}
    assert memq.cli.main(["shard", "forget", "--shard", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["forgotten"] is False


def test_a_starting_worker_claims_in_its_own_settings_data_dir(
        tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The worker_init hook (a one-host process: its settings come from its environment):
    a reader's shard is claimed in the data dir of the worker's own settings."""
    import workers.reading as reading
    from workers.orphans import BROKER_DIR_ENV
    from workers.runtime import WorkerRuntime

    monkeypatch.delenv(BROKER_DIR_ENV, raising=False)
    monkeypatch.setenv("MEMQ_HOME", str(tmp_path / "host"))
    monkeypatch.setenv("MEMQ_WORKSPACE", str(workspace))
    monkeypatch.setenv("MEMQ_CONFIG", str(write_config(tmp_path / "memq.json", provider="none")))
    monkeypatch.setattr(reading, "runtime", WorkerRuntime())  # never the process's own
    sender = SimpleNamespace(hostname="reader-1@host", app=SimpleNamespace(amqp=SimpleNamespace(
        queues=SimpleNamespace(consume_from={f"{QUERY_PREFIX}.2": None}))))
    reading.claim_and_recover(sender)
    assert claimed_in(tmp_path / "host" / "shards") == {2}
    assert "no settings" not in caplog.text  # read from its settings, not the fallback
