"""docs/deploy.md's three-host walkthrough, run as it stands.

The config and the commands are read out of the doc (the block after its ``three-hosts``
anchor); only the placeholders a reader fills in are replaced: the broker and job-database
URLs (the machine's Redis, a private PostgreSQL database), the config file's path, the agents'
folders and the model file. Each host is a process tree with its own HOME and data dir:
the store host sees an empty mount point at each workspace's path, the agent host no
workspace folder at all. Then a note saved on the gateway must become searchable from the
agent host through the watcher the walkthrough started.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.hostkit import Host, SimulatedFleet, private_database, wait_until

pytestmark = pytest.mark.integration

DOC = REPO / "docs" / "deploy.md"
ANCHOR = '<a id="three-hosts"></a>'
DOC_AGENTS = "/srv/agents/"
DOC_MODEL = "/srv/models/all-MiniLM-L6-v2.gguf"
DOC_CONFIG = "/etc/memq/openclaw.json"


def walkthrough() -> tuple[str, list[tuple[str, str]]]:
    """The doc's config file and its commands as (host, command line)."""
    part = DOC.read_text()
    part = part[part.index(ANCHOR):]
    config = re.search(r"```json\n(.*?)```", part, re.S)
    script = re.search(r"```sh\n(.*?)```", part, re.S)
    assert config and script, "the walkthrough's config and commands are missing"
    steps, host = [], None
    for line in script.group(1).splitlines():
        if line.startswith("#"):
            host = line[1:].split(":", 1)[0].strip()
        elif line.strip():
            assert host is not None, f"{line!r} runs on no host"
            steps.append((host, line.strip()))
    return config.group(1), steps


def _queues(args: list[str]) -> list[str]:
    """The queues a ``memq worker`` command line consumes."""
    role = args[args.index("--role") + 1]
    if role == "embed":
        return [f"embed.{args[args.index('--provider') + 1]}"]
    shard = args[args.index("--shard") + 1]
    return {"writer": [f"store.{shard}", f"control.{shard}"], "reader": [f"query.{shard}"]}[role]


@pytest.fixture
def database() -> Iterator[str]:
    with private_database() as url:
        yield url


def test_the_three_host_walkthrough_runs_as_written(tmp_path: Path, tiny_model: Path,
                                                    broker_url: str, database: str) -> None:
    config_text, steps = walkthrough()
    agents = tmp_path / "agents"
    for name in ("alpha", "beta"):
        (agents / name / "memory").mkdir(parents=True)
        (agents / name / "memory" / "2026-11-20.md").write_text(
            f"# 2026-11-20\n\nThe {name} team moved the standup to 9:30.\n")
    memory_md = "# Memory\n\n- We picked PostgreSQL as the database of the billing service.\n"
    (agents / "alpha" / "MEMORY.md").write_text(memory_md)
    (agents / "beta" / "MEMORY.md").write_text("# Memory\n\n- Beta ships on Fridays.\n")
    assert DOC_AGENTS in config_text and DOC_MODEL in config_text
    config = tmp_path / "openclaw.json"
    config.write_text(config_text.replace(DOC_AGENTS, f"{agents}/")
                      .replace(DOC_MODEL, str(tiny_model)))
    json.loads(config.read_text())  # the doc's config is valid JSON

    exports = {}
    for host, line in steps:
        if line.startswith("export "):
            assert host == "every host", line
            key = line.split()[1].split("=", 1)[0]
            exports[key] = line
    assert set(exports) == {"MEMQ_BROKER_URL", "MEMQ_RESULT_BACKEND", "MEMQ_CONFIG"}, exports
    assert DOC_CONFIG in exports["MEMQ_CONFIG"]
    fleet = SimulatedFleet(tmp_path / "hosts", broker_url, config, database)
    fleet.common["MEMQ_LOCAL_THREADS"] = "1"
    hosts: dict[str, Host] = {
        "store host": fleet.host("store", hide=(agents / "alpha", agents / "beta")),
        "gateway": fleet.host("gateway"),
        "agent host": fleet.host("agent", hide=(agents,)),
    }
    outputs: dict[str, str] = {}
    try:
        waiting: list[str] = []
        for number, (where, line) in enumerate(steps):
            if line.startswith("export "):
                continue
            host = hosts[where]
            argv = shlex.split(line)
            assert argv[0] == "memq", line
            if argv[-1] == "&":
                host.spawn(f"step{number}", *argv[1:-1])
                if argv[1] == "worker":
                    waiting += _queues(argv)
                continue
            if waiting:  # the workers started above serve before anyone asks them
                fleet.wait_for_nodes(waiting)
                waiting = []
            done = host.memq(*argv[1:], timeout=300)
            assert done.returncode == 0, f"{where}: {line}\n{done.stdout}\n{done.stderr}"
            outputs[line] = done.stdout

        def output(prefix: str) -> str:
            return next(out for line, out in outputs.items() if line.startswith(prefix))

        assert "PostgreSQL" in output("memq search") and "MEMORY.md" in output("memq search")
        assert output("memq get").rstrip("\n") == memory_md.rstrip("\n")
        assert "alpha:" in output("memq jobs")
        assert not [p for p in hosts["agent host"].home.rglob("*.sqlite")]

        # The gateway's watcher sends a saved note; the agent host finds it.
        (agents / "alpha" / "memory" / "2026-11-21.md").write_text(
            "# 2026-11-21\n\nThe kestrel nests on the water tower.\n")
        agent = hosts["agent host"]

        def found() -> bool:
            done = agent.memq("search", "--agent", "alpha", "--json", "kestrel water tower")
            return done.returncode == 0 and any(
                hit["path"] == "memory/2026-11-21.md"
                for hit in json.loads(done.stdout)["results"])

        wait_until(found, "a note saved on the gateway", logs=fleet.logs)
    finally:
        fleet.stop()
