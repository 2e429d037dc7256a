"""``memq memories``: every memory of a config with its store and state, orphaned stores and
``--prune``; a typo'd ``--memory`` and a missing workspace exit 2 with a clear message."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_memq


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A memq.toml with its own workspace and a memoriesDir of two; keyword-only indexes."""
    env = {"HOME": str(tmp_path / "home"), "MEMQ_HOME": str(tmp_path / "data"),
           "MEMQ_CONFIG": "", "MEMQ_WORKSPACE": "", "MEMQ_AGENT_ID": "", "MEMQ_BROKER_URL": "",
           "REDIS_URL": "", "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    write(tmp_path / "own/MEMORY.md", "- own memory\n")
    for name in ("Alice", "bob"):
        write(tmp_path / f"team/{name}/MEMORY.md", f"- {name} likes granite\n")
    cfg = write(tmp_path / "memq.toml", 'workspace = "own"\nprovider = "none"\n'
                'memoriesDir = "team"\n')
    return cfg, env


def memories(cfg: Path, env: dict[str, str], *more: str) -> dict:
    done = run_memq("memories", "--config", str(cfg), "--json", *more, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_memories_lists_state_store_and_orphans_and_prunes(
        tmp_path: Path, setup: tuple[Path, dict[str, str]]) -> None:
    cfg, env = setup
    first = memories(cfg, env)
    rows = {m["name"]: m for m in first["memories"]}
    assert list(rows) == ["main", "alice", "bob"]
    assert first["default"] == "main" and rows["main"]["default"] is True
    assert {m["state"] for m in rows.values()} == {"not indexed"}
    assert rows["alice"]["workspace"] == str(tmp_path / "team/Alice")
    assert len({m["store"] for m in rows.values()}) == 3

    for name in ("ALICE", "bob"):
        done = run_memq("index", "--config", str(cfg), "--memory", name, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
    done = run_memq("search", "granite", "--config", str(cfg), "--memory", "alice", "--json",
                    "--min-score", "0", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Alice likes granite" in done.stdout and "bob" not in done.stdout

    rows = {m["name"]: m for m in memories(cfg, env)["memories"]}
    assert (rows["alice"]["state"], rows["bob"]["state"], rows["main"]["state"]) == \
        ("ok", "ok", "not indexed")
    assert rows["alice"]["size"] > 0 and rows["alice"]["lastIndexAt"] > 0
    assert rows["alice"]["owner"]["memory"] == "alice"

    # bob's folder goes away: bob disappears from the roster, its store is an orphan
    bob_store = Path(rows["bob"]["store"])
    shutil.rmtree(tmp_path / "team/bob")
    after = memories(cfg, env)
    assert [m["name"] for m in after["memories"]] == ["main", "alice"]
    assert [o["store"] for o in after["orphanedStores"]] == [str(bob_store)]
    assert after["orphanedStores"][0]["memory"] == "bob"
    human = run_memq("memories", "--config", str(cfg), env=env, timeout=120)
    assert "orphaned stores" in human.stdout and str(bob_store) in human.stdout

    pruned = memories(cfg, env, "--prune")
    assert [o["store"] for o in pruned["pruned"]] == [str(bob_store)]
    assert pruned["orphanedStores"] == []
    assert not bob_store.exists() and not Path(f"{bob_store}.jobs").exists()
    assert Path(rows["alice"]["store"]).exists()  # a live memory's store is never touched


def test_prune_keeps_stores_it_cannot_vouch_for(tmp_path: Path,
                                                setup: tuple[Path, dict[str, str]]) -> None:
    cfg, env = setup
    data = tmp_path / "data"
    data.mkdir()
    stranger = write(data / "notmemq-0123456789.sqlite", "not a database")
    pruned = memories(cfg, env, "--prune")
    assert pruned["pruned"] == [] and stranger.exists()


def test_a_listed_memory_whose_workspace_is_gone_is_orphaned(
        tmp_path: Path, setup: tuple[Path, dict[str, str]]) -> None:
    _, env = setup
    cfg = write(tmp_path / "two.toml", 'provider = "none"\n[[memories]]\nname = "gone"\n'
                'workspace = "nowhere"\n')
    rows = {m["name"]: m for m in memories(cfg, env)["memories"]}
    assert rows["gone"]["state"] == "orphaned"


def test_a_typo_exits_2_with_the_known_names(setup: tuple[Path, dict[str, str]]) -> None:
    cfg, env = setup
    for command in (["memories"], ["search", "x"], ["status"], ["index"]):
        done = run_memq(*command, "--config", str(cfg), "--memory", "alise", env=env,
                        timeout=120)
        assert done.returncode == 2, (command, done.stderr)
        assert 'unknown memory "alise"' in done.stderr
        assert "main, alice, bob" in done.stderr and 'did you mean "alice"' in done.stderr


def test_status_of_a_missing_workspace_exits_2(tmp_path: Path,
                                               setup: tuple[Path, dict[str, str]]) -> None:
    _, env = setup
    done = run_memq("status", "--workspace", str(tmp_path / "nope"), env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"workspace {tmp_path / 'nope'} does not exist" in done.stderr


@pytest.mark.integration
def test_every_host_sees_who_serves_a_store_and_prune_never_deletes_a_served_one(
        tmp_path: Path, tiny_model: Path, broker_url: str) -> None:
    """The team topology of docs/deploy.md, one memory on shard 0: a store host (writer,
    reader, embed worker; the Markdown hidden), a gateway host with the Markdown (it indexes),
    an agent host with only the config. ``memq memories`` agrees on every host (indexed,
    served by the store host's reader); ``--prune`` on the store host keeps the store while a
    claim here or a live worker serves it, refuses when the broker cannot be asked, and
    removes it only once nothing serves it."""
    from tests.hostkit import SimulatedFleet, private_database

    workspaces = tmp_path / "workspaces"
    write(workspaces / "alpha/MEMORY.md", "# alpha\n\nThe alpha team deploys on Tuesdays.\n")
    write(workspaces / "alpha/memory/2026-11-03.md", "- The granite order shipped.\n")
    config = write(tmp_path / "memq.json", json.dumps({
        "provider": "local", "local": {"modelPath": str(tiny_model)},
        "memories": [{"name": "alpha", "workspace": str(workspaces / "alpha")}]}))
    with private_database() as jobs:
        fleet = SimulatedFleet(tmp_path / "hosts", broker_url, config, jobs)
        try:
            store = fleet.host("store", hide=(workspaces,))
            gateway = fleet.host("gateway")
            agent = fleet.host("agent", hide=(workspaces,))
            fleet.start_shard(store, 0)
            fleet.wait_for_nodes(["store.0", "query.0", "control.0", "embed.local"])
            indexed = gateway.memq("index", "--agent", "alpha", "--json")
            assert indexed.returncode == 0, indexed.stderr + fleet.logs()

            def alpha_on(host: object) -> dict:
                done = host.memq("memories", "--json")  # type: ignore[attr-defined]
                assert done.returncode == 0, done.stderr + fleet.logs()
                return {m["name"]: m for m in json.loads(done.stdout)["memories"]}["alpha"]

            views = {h.name: alpha_on(h) for h in (store, gateway, agent)}
            assert {n: (v["state"], v["servedBy"], v["shard"]) for n, v in views.items()} == {
                n: ("ok", "reader-0@store", 0) for n in views}, views
            assert len({v["lastIndexAt"] for v in views.values()}) == 1
            human = agent.memq("memories")
            assert "served by reader-0@store" in human.stdout, human.stdout + human.stderr

            # Read through the shard's reader: a typo'd file is said missing (exit 1), and
            # a second pass from the gateway says what the store holds.
            missing = agent.memq("get", "--agent", "alpha", "memory/2026-11-3.md")
            assert missing.returncode == 1 and missing.stdout == "", missing.stderr
            assert "memory/2026-11-3.md does not exist" in missing.stderr
            again = gateway.memq("index", "--agent", "alpha")
            assert again.returncode == 0, again.stderr
            assert "in the store, all embedded; nothing changed" in again.stdout, again.stdout

            kept = Path(store.settings(config, "alpha").store.path)
            assert kept.is_relative_to(store.data) and kept.exists()

            def prune_on_store(**extra: str) -> tuple[int, dict | None, str]:
                done = store.memq("memories", "--prune", "--json", extra=extra or None)
                return (done.returncode, json.loads(done.stdout) if done.returncode == 0
                        else None, done.stderr)

            code, out, err = prune_on_store()  # the shard's claim is here, its workers live
            assert code == 0, err
            assert out is not None and out["pruned"] == [] and out["orphanedStores"] == []
            assert kept.exists()
            claim = store.data / "shards" / "0.json"
            claim.unlink()  # no claim left: the live writer and reader still serve it
            code, out, err = prune_on_store()
            assert code == 0 and out is not None and out["pruned"] == [], err
            assert kept.exists()
            code, out, err = prune_on_store(MEMQ_BROKER_URL="redis://127.0.0.1:9/0")
            assert code == 3 and out is None, err
            assert "refus" in err and "broker" in err and kept.exists()

            for label in ("writer-0", "reader-0"):
                store.kill(label)
            code, out, err = prune_on_store()  # nothing serves it any more: a true orphan
            assert code == 0, err
            assert out is not None and [o["store"] for o in out["pruned"]] == [str(kept)]
            assert not kept.exists()
        finally:
            fleet.stop()
