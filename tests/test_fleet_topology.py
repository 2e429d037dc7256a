"""The topology a multi-host team runs: the Markdown on the gateway, the store elsewhere, the
agent's tools on a third host; nothing there may wipe a memory.

- **store**: shard 0's writer, reader and embed worker. An empty tmpfs is mounted over each
  workspace's path for its processes: the mount point an unmounted disk leaves.
- **gateway**: the Markdown; its ``memq index`` sends what changed to the store's writer.
- **agent**: only the config (the workspaces' folder is an empty tmpfs, so the path does not
  exist there): ``memq search``, ``memq get``, ``memq index --remote`` and ``memq mcp``.

Real Redis, real worker processes, the real CLI and a real MCP session over stdio.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from pipeline.fleet.job_log import JobLog
from tests.conftest import REPO
from tests.hostkit import Host, SimulatedFleet, fleet_with_job_file, two_memories, wait_until

pytestmark = pytest.mark.integration


class Topology:
    def __init__(self, fleet: SimulatedFleet, workspaces: dict[str, Path]) -> None:
        self.fleet, self.workspaces = fleet, workspaces
        self.store, self.gateway = fleet.hosts["store"], fleet.hosts["gateway"]
        self.agent = fleet.hosts["agent"]

    def status(self, host: Host) -> dict[str, Any]:
        return _json(host.memq("status", "--agent", "alpha", "--json"))


@pytest.fixture
def topology(tmp_path: Path, tiny_model: Path, broker_url: str) -> Iterator[Topology]:
    config, workspaces = two_memories(tmp_path, tiny_model)
    fleet = fleet_with_job_file(tmp_path, broker_url, config)
    try:
        store = fleet.host("store", hide=tuple(workspaces.values()))
        fleet.host("gateway")
        fleet.host("agent", hide=(tmp_path / "workspaces",))
        fleet.start_shard(store, 0)
        fleet.wait_for_nodes(["store.0", "control.0", "query.0", "embed.local"])
        yield Topology(fleet, workspaces)
    finally:
        fleet.stop()


def _json(done: Any) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _mcp(host: Host, calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[bool, str]]:
    """Run ``memq mcp --agent alpha`` as on ``host`` and make ``calls``: (is_error, text)."""
    argv = host.argv([sys.executable, "-m", "memq.cli", "mcp", "--agent", "alpha"])
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=host.full_env(),
                                   cwd=str(REPO))
    out: list[tuple[bool, str]] = []

    async def session() -> None:
        with anyio.fail_after(120):
            async with Client(params, read_timeout_seconds=60) as client:
                for tool, args in calls:
                    result = await client.call_tool(tool, args)
                    out.append((bool(result.is_error), result.content[0].text))

    anyio.run(session)
    return out


def test_reads_from_anywhere_never_empty_a_memory_whose_files_are_elsewhere(
        topology: Topology) -> None:
    t = topology
    first = _json(t.gateway.memq("index", "--agent", "alpha", "--json"))
    assert first["mode"] == "remote" and first["changed"] > 10, first
    before = t.status(t.agent)
    assert before["chunks"] > 10 and before["pending"] == 0, before
    memory_md = (t.workspaces["alpha"] / "MEMORY.md").read_text()

    # Searches from the agent host (sync on search is on by default): answered, nothing synced
    # from the store host's empty folder.
    for _ in range(2):
        found = _json(t.agent.memq("search", "--agent", "alpha", "--json",
                                   "alpha team deploys on Tuesdays"))
        assert found["results"], found
    # The agent's MCP tools: search answers, get returns the file's text.
    answers = _mcp(t.agent, [("memory_search", {"query": "deploys on Tuesdays"}),
                             ("memory_get", {"path": "MEMORY.md"}),
                             ("memory_append", {"text": "The heron left in March."})])
    assert not answers[0][0], answers[0][1]
    assert json.loads(answers[0][1])["results"], answers[0][1]
    assert not answers[1][0], answers[1][1]
    assert json.loads(answers[1][1])["text"] == memory_md.rstrip("\n")
    # The store host holds no copy to append to: refused, nothing written there.
    assert answers[2][0] and "append the note there" in answers[2][1], answers[2]
    got = t.agent.memq("get", "--agent", "alpha", "MEMORY.md")
    assert got.returncode == 0 and got.stdout.rstrip("\n") == memory_md.rstrip("\n"), got
    # The store host reads its copy of what the gateway sent (its own folder is empty).
    got = t.store.memq("get", "--agent", "alpha", "MEMORY.md")
    assert got.returncode == 0 and got.stdout.rstrip("\n") == memory_md.rstrip("\n"), got

    # An index job from the agent host: the store host refuses to read its own folder, and
    # the sender is told.
    queued = t.agent.memq("index", "--agent", "alpha", "--remote")
    assert queued.returncode == 1 and "is not them" in queued.stderr, queued
    job = queued.stdout.split()[0]
    log = JobLog(t.fleet.common["MEMQ_RESULT_BACKEND"])
    try:
        ended = wait_until(lambda: (j := log.get(job)) is not None and not j.running and j,
                           "the index job", logs=t.fleet.logs)
        assert ended.state == "failed" and "is not them" in (ended.error or ""), ended
    finally:
        log.close()

    # On the store host itself: a pass over its folder is refused, and says how to override.
    refused = t.store.memq("index", "--agent", "alpha")
    assert refused.returncode != 0 and "--files-here" in refused.stderr, refused
    searched = _json(t.store.memq("search", "--agent", "alpha", "--json", "deploys Tuesdays"))
    assert searched["results"], searched

    time.sleep(1.0)  # anything still in flight would have landed
    after = t.status(t.agent)
    assert (after["chunks"], after["files"]) == (before["chunks"], before["files"]), after


def test_a_gateway_whose_folder_is_unmounted_sends_no_deletions(topology: Topology) -> None:
    t = topology
    _json(t.gateway.memq("index", "--agent", "alpha", "--json"))
    before = t.status(t.agent)
    unmounted = t.fleet.host("gateway-unmounted", hide=(t.workspaces["alpha"],))
    done = unmounted.memq("index", "--agent", "alpha")
    assert done.returncode != 0, done.stdout
    assert "nothing was deleted" in done.stderr and "--allow-deletions" in done.stderr, done
    watch = unmounted.memq("search", "--agent", "alpha", "--json", "deploys Tuesdays")
    assert watch.returncode == 0 and json.loads(watch.stdout)["results"], watch
    time.sleep(1.0)
    after = t.status(t.agent)
    assert (after["chunks"], after["files"]) == (before["chunks"], before["files"]), after
