"""One fleet, many memories: writer shards, their leases, the lanes, and isolation.

Real Redis, real ``memq worker`` processes: two agents of one openclaw.json are indexed by one
fleet into their own stores; a memory maps to the same shard in every process; one writer per
shard (a second is refused, a lease cannot be renewed or released by a writer that lost it);
crafted messages (another memory's store, the wrong shard, an unknown memory, path tricks)
write nothing, and malformed ones (missing keys, wrong types, broken vectors, another version)
are dropped with a log line while the workers go on serving; interactive work overtakes bulk
work on a real broker.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pipeline import routing
from pipeline.config import load_settings
from pipeline.fleet.broker import FleetDispatcher
from pipeline.memory import Memory
from pipeline.messages import EmbedResult, ProviderSpec, Route
from pipeline.routing import shard_of, store_queue
from tests.conftest import REPO, Fleet, redis_client
from tests.test_fleet import memq_argv, nodes_on, wait_for
from workers.single_writer import ShardLease, lease_key

pytestmark = pytest.mark.integration


# -- shard mapping ---------------------------------------------------------------------------

def test_shard_mapping_is_stable_across_processes_and_growth_moves_only_to_the_new_shard(
) -> None:
    names = [f"agent-{i}" for i in range(400)]
    here = [shard_of(n, 3) for n in names]
    code = ("import json,sys; from pipeline.routing import shard_of; "
            "print(json.dumps([shard_of(n, 3) for n in json.load(sys.stdin)]))")
    there = subprocess.run([sys.executable, "-c", code], input=json.dumps(names), text=True,
                           capture_output=True, check=True, cwd=REPO,
                           env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert json.loads(there.stdout) == here
    assert set(here) == {0, 1, 2}
    grown = [shard_of(n, 4) for n in names]
    moved = [(a, b) for a, b in zip(here, grown, strict=True) if a != b]
    assert moved and all(b == 3 for _, b in moved)  # only to the new shard
    assert len(moved) < len(names) / 2


def test_pinned_shard_wins_and_must_exist(tmp_path: Path) -> None:
    from pipeline.config import ConfigError

    ws = tmp_path / "ws"
    ws.mkdir()
    cfg = tmp_path / "memq.json"
    cfg.write_text(json.dumps({"fleet": {"shards": 4, "shard": 2}}))
    settings = load_settings(config_file=cfg, workspace=ws, env={})
    assert settings.fleet.shard_of("anything") == settings.fleet.shard_of("else") == 2
    cfg.write_text(json.dumps({"fleet": {"shards": 2, "shard": 2}}))
    with pytest.raises(ConfigError, match=r"fleet.shard.*below fleet.shards \(2\)"):
        load_settings(config_file=cfg, workspace=ws, env={})
    assert load_settings(workspace=ws, env={"MEMQ_FLEET_SHARDS": "3"}).fleet.shards == 3


# -- the lease -------------------------------------------------------------------------------

def _expire_now(client: Any, key: str) -> None:
    client.pexpire(key, 1)
    deadline = time.monotonic() + 5
    while client.exists(key) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not client.exists(key)


def test_a_lost_lease_can_be_neither_renewed_nor_released(broker_url: str) -> None:
    client = redis_client(broker_url)
    first = ShardLease(client, 1, "writer-a@h")
    second = ShardLease(client, 1, "writer-b@h")
    assert first.take() and first.holder() == "writer-a@h"
    assert not second.take()
    assert first.renew()
    _expire_now(client, lease_key(1))  # writer-a stalled past its TTL
    assert second.take() and second.holder() == "writer-b@h"
    assert not first.renew()  # it must not extend writer-b's lease...
    first.release()  # ...nor delete it
    assert second.holder() == "writer-b@h"
    assert 0 < client.pttl(lease_key(1)) <= 30_000
    # the same node restarting takes its own lease over; others still cannot
    restarted = ShardLease(client, 1, "writer-b@h")
    assert restarted.take() and not ShardLease(client, 1, "writer-c@h").take()
    restarted.release()
    assert client.get(lease_key(1)) is None
    assert ShardLease(client, 0, "writer-c@h").take()  # shards have their own leases
    client.close()


# -- writers per shard -----------------------------------------------------------------------

def two_agents(tmp_path: Path, tiny_model: Path, **beta_overrides: Any) -> Path:
    """An openclaw.json with agents alpha (default) and beta, each with its own workspace,
    store (``{agentId}`` in store.path) and chunking."""
    workspaces = {}
    for agent, notes in (("alpha", ["The billing service runs on PostgreSQL 16.",
                                    "Alpha's deploys happen on Tuesdays."]),
                         ("beta", ["Beta keeps its secrets in a vault named kestrel.",
                                   "Beta's favourite colour is teal."])):
        ws = tmp_path / f"ws-{agent}"
        (ws / "memory").mkdir(parents=True)
        (ws / "MEMORY.md").write_text(f"# {agent}\n\n" + "\n\n".join(notes) + "\n")
        (ws / "memory" / "2026-12-01.md").write_text(f"- {agent} note of the day\n")
        workspaces[agent] = ws
    config = {
        "agents": {
            "defaults": {"memorySearch": {
                "provider": "local", "local": {"modelPath": str(tiny_model)},
                "store": {"path": str(tmp_path / "stores" / "{agentId}.sqlite")}}},
            "list": [
                {"id": "alpha", "default": True, "workspace": str(workspaces["alpha"])},
                {"id": "beta", "workspace": str(workspaces["beta"]),
                 "memorySearch": {"chunking": {"tokens": 64, "overlap": 8},
                                  **beta_overrides}},
            ],
        },
    }
    path = tmp_path / "openclaw.json"
    path.write_text(json.dumps(config))
    return path


def fleet_env(config: Path, tmp_path: Path, shards: int = 2) -> dict[str, str]:
    """One host that holds every shard's stores (its writers, producers and searches)."""
    return {"MEMQ_CONFIG": str(config), "MEMQ_HOME": str(tmp_path / "home"),
            "MEMQ_FLEET_SHARDS": str(shards), "MEMQ_LOCAL_THREADS": "1",
            "MEMQ_LOCAL_SHARDS": "all"}


#: Payloads no task can read, each a different way (the first is issue 28's KeyError).
MALFORMED: list[Any] = [
    {"v": 1},
    {"v": 2, "kind": "result", "memory": "alpha"},
    ["not", "an", "object"],
    {"v": 1, "kind": "result", "memory": "alpha", "store": "/x.sqlite", "failed": [],
     "spec": {"name": "local", "model": "m", "provider_key": "k"},
     "vectors": [["c", "h", "bm90IGZsb2F0cw"]]},
    {"v": 1, "kind": "index", "memory": "../beta", "route": {"shard": 0}},
    {"v": 1, "kind": "qmd-job", "memory": "beta", "reason": "because"},
    {"v": 1, "kind": "batch_update", "memory": "beta", "event": "state", "remote": None},
    {"v": 1, "kind": "embed", "memory": "alpha", "store": "/x.sqlite", "attempt": float("nan"),
     "spec": {"name": "local", "model": "m", "provider_key": "k"}, "chunks": [{"id": 1}]},
]


def send_malformed(dispatcher: FleetDispatcher, tasks: list[tuple[str, str]]) -> int:
    """Every malformed payload to every (task, queue); how many messages that is."""
    for task, queue in tasks:
        for payload in MALFORMED:
            dispatcher.app.send_task(task, args=[payload], queue=queue)
    return len(tasks) * len(MALFORMED)


def store_counts(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT state, count(*) FROM chunks GROUP BY state").fetchall())
    finally:
        conn.close()


def test_one_fleet_indexes_two_agents_into_their_own_stores(
        tmp_path: Path, tiny_model: Path, broker_url: str, fleet: Fleet) -> None:
    config = two_agents(tmp_path, tiny_model)
    env = fleet_env(config, tmp_path)
    fleet.spawn(memq_argv("worker", "--role", "writer", "--name", "writer@%h"), "writer", env)
    fleet.spawn(memq_argv("worker", "--role", "embed", "--provider", "local"), "embed", env)
    wait_for(lambda: nodes_on(broker_url, "store.1") and nodes_on(broker_url, "embed.local"),
             "the writer of both shards and the embed worker", fleet)
    with FleetDispatcher(broker_url) as dispatcher:  # dropped, and the workers keep serving
        dropped = send_malformed(dispatcher, [(routing.EMBED_TASK,
                                               routing.embed_queue("local"))])
    settings = {a: load_settings(config_file=config, agent=a, env={**env,
                                                                   "MEMQ_BROKER_URL": broker_url})
                for a in ("alpha", "beta")}
    assert settings["alpha"].store.path != settings["beta"].store.path
    for agent in ("alpha", "beta"):
        done = subprocess.run(memq_argv("index", "--remote", "--json"),
                              env={**os.environ, **env, "MEMQ_AGENT_ID": agent,
                                   "MEMQ_BROKER_URL": broker_url},
                              capture_output=True, text=True, timeout=120, cwd=REPO)
        assert done.returncode == 0, done.stderr
        shard = settings[agent].fleet.shard_of(agent)
        assert json.loads(done.stdout)["queue"] == f"control.{shard}"

    def indexed(agent: str) -> bool:
        path = settings[agent].store.path
        return path.exists() and store_counts(path) .get("ready", 0) > 0 and \
            "pending" not in store_counts(path)

    wait_for(lambda: indexed("alpha") and indexed("beta"), "both memories indexed", fleet)
    logs = fleet.logs(None)
    assert logs.count("dropped a message") == dropped
    assert "raised unexpected" not in logs
    with Memory(settings=settings["beta"]) as beta, Memory(settings=settings["alpha"]) as alpha:
        assert "kestrel" in beta.search("vault kestrel secrets").hits[0].snippet
        assert all("kestrel" not in h.snippet for h in alpha.search("vault kestrel").hits)
        assert beta.settings.chunking.tokens == 64 != alpha.settings.chunking.tokens


def test_a_second_writer_for_a_shard_is_refused_another_shard_is_not(
        tmp_path: Path, tiny_model: Path, broker_url: str, fleet: Fleet) -> None:
    env = fleet_env(two_agents(tmp_path, tiny_model), tmp_path)
    fleet.spawn(memq_argv("worker", "--role", "writer", "--shard", "0", "--name", "w0@%h"),
                "w0", env)
    wait_for(lambda: nodes_on(broker_url, "store.0"), "the writer of shard 0", fleet)
    second = subprocess.run(memq_argv("worker", "--role", "writer", "--shard", "1", "--shard",
                                      "0", "--name", "w01@%h"),
                            env={**os.environ, **env, "MEMQ_BROKER_URL": broker_url},
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert second.returncode != 0
    assert "refusing to start w01@" in second.stderr
    assert "already consumes queue 'store.0'" in second.stderr
    client = redis_client(broker_url)
    assert client.get(lease_key(1)) is None  # the refused writer left no lease behind
    fleet.spawn(memq_argv("worker", "--role", "writer", "--shard", "1", "--name", "w1@%h"),
                "w1", env)
    wait_for(lambda: nodes_on(broker_url, "store.1"), "the writer of shard 1", fleet)
    assert [n.split("@")[0] for n in nodes_on(broker_url, "store.0")] == ["w0"]
    assert [n.split("@")[0] for n in nodes_on(broker_url, "store.1")] == ["w1"]
    assert client.get(lease_key(0)).decode().startswith("w0@")
    assert client.get(lease_key(1)).decode().startswith("w1@")
    client.close()
    bad = subprocess.run(memq_argv("worker", "--role", "writer", "--shard", "5"),
                         env={**os.environ, **env, "MEMQ_BROKER_URL": broker_url},
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert bad.returncode == 2 and "shard 5 does not exist: fleet.shards is 2" in bad.stderr


# -- isolation -------------------------------------------------------------------------------

def test_crafted_messages_write_nothing_into_another_memory(
        tmp_path: Path, tiny_model: Path, broker_url: str, fleet: Fleet) -> None:
    """With only the writer running, both memories' chunks wait for vectors; messages that
    name another memory's store, arrive on the wrong shard, name an unknown memory or play
    path tricks are dropped, so are malformed ones sent to every task the writer runs, and
    only the honest one marks a chunk."""
    config = two_agents(tmp_path, tiny_model)
    env = fleet_env(config, tmp_path)
    full_env = {**env, "MEMQ_BROKER_URL": broker_url}
    fleet.spawn(memq_argv("worker", "--role", "writer", "--name", "writer@%h"), "writer", env)
    wait_for(lambda: nodes_on(broker_url, "store.1"), "the writer", fleet)
    settings = {a: load_settings(config_file=config, agent=a, env=full_env)
                for a in ("alpha", "beta")}
    with FleetDispatcher(broker_url) as dispatcher:
        for agent in ("alpha", "beta"):
            with Memory(settings=settings[agent], dispatcher=dispatcher) as memory:
                memory.index(wait=False)
    beta_store = str(settings["beta"].store.path.resolve())
    alpha_store = str(settings["alpha"].store.path.resolve())
    conn = sqlite3.connect(beta_store)
    beta_chunk = conn.execute("SELECT id FROM chunks LIMIT 1").fetchone()[0]
    conn.close()
    spec = ProviderSpec("local", "tiny", "k")
    own = {a: settings[a].fleet.shard_of(a) for a in ("alpha", "beta")}

    def failing(memory: str, store: str, shard: int, why: str) -> EmbedResult:
        return EmbedResult(memory, spec, store, failed=((beta_chunk, why),), route=Route(shard))

    attacks = [
        failing("alpha", beta_store, own["alpha"], "alpha names beta's store"),
        failing("beta", beta_store, 1 - own["beta"], "beta on the wrong shard"),
        failing("ghost", beta_store, shard_of("ghost", 2), "an unknown memory"),
        failing("alpha", str(Path(alpha_store).parent / ".." / "stores" / "beta.sqlite"),
                own["alpha"], "a path trick"),
        failing("alpha", f"{alpha_store}.gen-1/../beta.sqlite", own["alpha"], "a path trick"),
    ]
    with FleetDispatcher(broker_url) as dispatcher:
        for attack in attacks:
            dispatcher.write(attack)
        dropped = len(attacks) + send_malformed(dispatcher, [
            (task, queue) for shard in (0, 1)
            for task, queue in ((routing.WRITE_TASK, store_queue(shard)),
                                (routing.REINDEX_STEP_TASK, store_queue(shard)),
                                (routing.BATCH_UPDATE_TASK, store_queue(shard)),
                                (routing.INDEX_TASK, routing.control_queue(shard)),
                                (routing.QMD_JOB_TASK, routing.control_queue(shard)))])
        wait_for(lambda: fleet.logs(None).count("dropped a message") >= dropped,
                 "the writer to drop every crafted and malformed message", fleet)
        assert store_counts(Path(beta_store)).get("failed", 0) == 0
        dispatcher.write(failing("beta", beta_store, own["beta"], "the honest one"))
        wait_for(lambda: store_counts(Path(beta_store)).get("failed", 0) == 1,
                 "the honest message to be written", fleet)
    logs = fleet.logs(None)
    assert logs.count("dropped a message") == dropped
    assert "raised unexpected" not in logs
    assert "index request message must be of kind 'index', not None" in logs
    assert "embedding result.vectors[0][2] must be a base64 float32 vector" in logs
    assert f"{beta_store} is not a store of memory 'alpha'" in logs
    assert f"memory 'beta' belongs to writer shard {own['beta']}" in logs
    assert store_counts(Path(alpha_store)).get("failed", 0) == 0


# -- lanes -----------------------------------------------------------------------------------

def test_interactive_jobs_overtake_bulk_jobs_on_a_real_broker(
        tmp_path: Path, tiny_model: Path, broker_url: str) -> None:
    from kombu import Connection

    spec = ProviderSpec("local", "tiny", "k")
    SHARD = 7  # a shard no worker of any test consumes
    with FleetDispatcher(broker_url) as dispatcher:
        for i in range(20):
            dispatcher.write(EmbedResult(f"bulk-{i}", spec, "s", route=Route(SHARD)))
        dispatcher.write(EmbedResult("edit", spec, "s", route=Route(SHARD, interactive=True)))
        dispatcher.write(EmbedResult("bulk-late", spec, "s", route=Route(SHARD)))
    order = []
    with Connection(broker_url) as conn:
        channel = conn.default_channel
        while (message := channel.basic_get(store_queue(SHARD), no_ack=True)) is not None:
            order.append(message.decode()[0][0]["memory"])
    assert order[0] == "edit"
    assert order[1:] == [f"bulk-{i}" for i in range(20)] + ["bulk-late"]


def test_a_one_line_edit_is_embedded_before_a_backfill_of_another_memory(
        tmp_path: Path, tiny_model: Path, broker_url: str, fleet: Fleet) -> None:
    """Memory alpha queues a backfill (bulk), then memory beta saves a note (interactive);
    when the workers start, beta's vectors are written before most of alpha's."""
    config = two_agents(tmp_path, tiny_model)
    alpha_ws = tmp_path / "ws-alpha" / "memory"
    for day in range(60):  # about 6 chunks a file, 32 chunks a job: over 10 jobs
        (alpha_ws / f"2026-10-{day % 28 + 1:02d}-{day}.md").write_text("\n\n".join(
            f"Backfill line {day}-{i} about topic {i * day}, " + "with more words " * 8
            for i in range(60)))
    env = fleet_env(config, tmp_path, shards=1)
    full_env = {**env, "MEMQ_BROKER_URL": broker_url}
    settings = {a: load_settings(config_file=config, agent=a, env=full_env)
                for a in ("alpha", "beta")}
    with FleetDispatcher(broker_url) as dispatcher:
        with Memory(settings=settings["beta"], dispatcher=dispatcher) as beta:
            beta.index(wait=False)  # beta's first pass (bulk), written before the race
        fleet.spawn(memq_argv("worker", "--role", "writer"), "writer", env)
        fleet.spawn(memq_argv("worker", "--role", "embed", "--provider", "local"), "embed", env)
        wait_for(lambda: "pending" not in store_counts(settings["beta"].store.path),
                 "beta's first pass", fleet)
        fleet.stop()
        with Memory(settings=settings["alpha"], dispatcher=dispatcher) as alpha:
            run = alpha.index(wait=False)
        assert run.report.jobs >= 10
        note = tmp_path / "ws-beta" / "memory" / "2026-12-02.md"
        note.write_text("- beta switched the cache to Valkey\n")
        from pipeline.embeddings.registry import choose_provider
        from pipeline.ingest.producer import index_once
        from pipeline.store.engine import connect

        db = connect(settings["beta"].store.path)
        try:
            index_once(db, settings["beta"], choose_provider(settings["beta"]), dispatcher.embed,
                       paths=[note])
        finally:
            db.close()
    fleet.spawn(memq_argv("worker", "--role", "writer"), "writer-2", env)
    fleet.spawn(memq_argv("worker", "--role", "embed", "--provider", "local"), "embed-2", env)
    wait_for(lambda: "pending" not in store_counts(settings["alpha"].store.path),
             "alpha's backfill", fleet, timeout=180)

    def written_at(path: Path, where: str = "") -> list[float]:
        conn = sqlite3.connect(path)
        try:
            return sorted(r[0] for r in conn.execute(
                f"SELECT updated_at FROM chunks WHERE state = 'ready' {where}"))
        finally:
            conn.close()

    edit = written_at(settings["beta"].store.path, "AND path = 'memory/2026-12-02.md'")
    backfill = written_at(settings["alpha"].store.path)
    assert edit and len(backfill) > 40
    assert max(edit) < backfill[len(backfill) // 4], (edit, backfill[:5])


def test_every_command_takes_the_agent(tmp_path: Path, tiny_model: Path) -> None:
    """``--agent`` (alias ``--memory``) picks one memory of the config; the other's text is
    never seen."""
    from tests.conftest import run_memq

    config = two_agents(tmp_path, tiny_model)
    env = {"MEMQ_HOME": str(tmp_path / "home"), "MEMQ_LOCAL_THREADS": "1"}
    for agent in ("alpha", "beta"):
        done = run_memq("index", "--config", str(config), "--agent", agent, env=env)
        assert done.returncode == 0, done.stderr
    beta = run_memq("search", "--config", str(config), "--memory", "beta", "--json",
                    "vault kestrel", env=env)
    alpha = run_memq("search", "--config", str(config), "--agent", "alpha", "--json",
                     "vault kestrel", env=env)
    assert "kestrel" in beta.stdout
    assert alpha.returncode == 0 and "kestrel" not in alpha.stdout
    status = json.loads(run_memq("status", "--config", str(config), "--agent", "beta",
                                 "--json", env=env).stdout)
    assert status["memory"] == "beta" and status["workspace"].endswith("ws-beta")
    assert run_memq("--version").stdout.startswith("memq ")


def test_a_missing_workspace_is_a_clear_error_and_creates_nothing(tmp_path: Path) -> None:
    from tests.conftest import run_memq

    home = tmp_path / "home"
    env = {"MEMQ_HOME": str(home), "MEMQ_CONFIG": "none"}
    for argv in (["index"], ["search", "anything"], ["get", "MEMORY.md"], ["reindex"]):
        done = run_memq(*argv, "--workspace", str(tmp_path / "no" / "such"), env=env)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert f"workspace {tmp_path / 'no' / 'such'} does not exist" in done.stderr
    assert not (tmp_path / "no").exists()
    assert not list(tmp_path.rglob("*.sqlite"))  # the data dir is MEMQ_HOME, inside tmp_path
