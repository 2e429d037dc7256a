"""Producers anywhere: the Markdown stays on the agents' host, the stores on the shard hosts.

Host A holds the workspaces (and the session transcripts); hosts C and D hold shard 0 and
shard 1 and cannot see the workspaces at all (their processes run in a mount namespace where
the workspaces' folder is an empty tmpfs). A's ``memq index`` and ``memq watch --all`` send
what changed to the shards' writers; searches from A answer from the shards' readers.
Real Redis, real worker processes, the real CLI.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.fleet.broker import FleetDispatcher
from pipeline.fleet.job_log import JobLog
from pipeline.memory import Memory
from pipeline.messages import FileChange, FileChanges
from pipeline.routing import new_job_id
from tests.hostkit import SimulatedFleet, fleet_with_job_file, two_memories, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def split(tmp_path: Path, tiny_model: Path, broker_url: str
          ) -> Iterator[tuple[SimulatedFleet, dict[str, Path]]]:
    """C (shard 0) and D (shard 1) without the workspaces; A with them."""
    config, workspaces = two_memories(tmp_path, tiny_model)
    fleet = fleet_with_job_file(tmp_path, broker_url, config)
    hidden = (tmp_path / "workspaces",)
    try:
        c = fleet.host("hostC", hide=hidden)
        d = fleet.host("hostD", hide=hidden)
        fleet.host("hostA")
        fleet.start_shard(c, 0)
        fleet.start_shard(d, 1)
        fleet.wait_for_nodes(["store.0", "control.0", "query.0", "store.1", "control.1",
                              "query.1", "embed.local"])
        yield fleet, workspaces
    finally:
        fleet.stop()


def _json(done: Any) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _hashes(workspace: Path) -> dict[str, str]:
    return {p.relative_to(workspace).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in workspace.rglob("*.md")}


def _manifest(fleet: SimulatedFleet, memory: str) -> dict[str, str]:
    a = fleet.hosts["hostA"]
    with Memory(settings=a.settings(fleet.config, memory), local=False) as there:
        return {path: row[0] for path, row in there.remote.manifest().items()}


def test_a_host_with_the_files_indexes_and_watches_a_store_elsewhere(
        split: tuple[SimulatedFleet, dict[str, Path]]) -> None:
    fleet, workspaces = split
    a, c = fleet.hosts["hostA"], fleet.hosts["hostC"]
    assert c.memq("get", "--agent", "alpha", "MEMORY.md").returncode != 0  # C cannot see it

    first = _json(a.memq("index", "--agent", "alpha", "--json"))
    assert (first["mode"], first["waited"]) == ("remote", True), first
    assert first["files"] == len(_hashes(workspaces["alpha"])) and first["changed"] > 10
    assert first["chunksQueued"] > 0 and first["job"].startswith("alpha:")
    assert _manifest(fleet, "alpha") == _hashes(workspaces["alpha"])
    status = _json(a.memq("status", "--agent", "alpha", "--json"))
    assert status["pending"] == 0 and status["vectors"] == status["chunks"] > 0

    # A second pass sends nothing (only the manifest question).
    log = JobLog(fleet.common["MEMQ_RESULT_BACKEND"])
    before = len(log.recent("alpha"))
    again = _json(a.memq("index", "--agent", "alpha", "--json"))
    assert again["job"] is None and again["changed"] == 0 and again["chunksQueued"] == 0
    assert len(log.recent("alpha")) == before

    # A search from A while its files are in step asks for no manifest (a digest of the
    # stats travels with the query); an edit is found, sent, and then in step again.
    with Memory(settings=a.settings(fleet.config, "alpha"), local=False) as there:
        asked: list[int] = []
        fetch = there.remote.manifest
        there.remote.manifest = lambda: asked.append(1) or fetch()  # type: ignore[method-assign]
        assert there.search("which database", sync=True).dirty is None and asked == []
        note = workspaces["alpha"] / "MEMORY.md"
        note.write_text(note.read_text() + "\n- The heron left the pond in March.\n")
        edited = there.search("heron pond", sync=True)
        assert (edited.dirty, edited.syncing) == (1, True) and asked
        wait_until(lambda: _manifest(fleet, "alpha") == _hashes(workspaces["alpha"]),
                   "a sync on search", logs=fleet.logs)
        seen = len(asked)
        after = there.search("heron pond", sync=True)
        assert after.dirty is None and not after.syncing and len(asked) == seen
        assert after.hits and after.hits[0].path == "MEMORY.md"
        # The files here are looked at while the reader searches (after the query was sent):
        # a file changed while the query is in flight is noticed, sent, and then in step.
        reader = there.remote.reader
        send = reader.send

        def send_then_edit(request: Any) -> Any:
            sent = send(request)
            note.write_text(note.read_text() + "\n- The heron came back in May.\n")
            return sent

        reader.send = send_then_edit  # type: ignore[method-assign]
        in_flight = there.search("heron May", sync=True)
        reader.send = send  # type: ignore[method-assign]
        assert (in_flight.dirty, in_flight.syncing) == (1, True)
        wait_until(lambda: _manifest(fleet, "alpha") == _hashes(workspaces["alpha"]),
                   "a sync of a file changed in flight", logs=fleet.logs)
        assert there.search("heron May", sync=True).dirty is None

    # memq watch --all on A: a saved note, an edit, a delete and a rename converge.
    a.spawn("watch", "watch", "--all", "--debounce-ms", "200")
    memory = workspaces["alpha"] / "memory"

    def found(query: str) -> list[str]:
        out = _json(a.memq("search", "--agent", "alpha", "--json", query))
        return [hit["path"] for hit in out["results"]]

    (memory / "kestrel.md").write_text("# Kestrel\n\nThe kestrel nests on the water tower.\n")
    wait_until(lambda: "memory/kestrel.md" in found("kestrel water tower"), "a new note",
               logs=fleet.logs)
    (memory / "kestrel.md").write_text("# Kestrel\n\nThe kestrel moved to the lighthouse.\n")
    wait_until(lambda: _manifest(fleet, "alpha") == _hashes(workspaces["alpha"]), "an edit",
               logs=fleet.logs)
    assert "memory/kestrel.md" in found("kestrel lighthouse")
    (memory / "kestrel.md").rename(memory / "falcon.md")
    wait_until(lambda: _manifest(fleet, "alpha") == _hashes(workspaces["alpha"]), "a rename",
               logs=fleet.logs)
    assert found("kestrel lighthouse")[:1] == ["memory/falcon.md"]
    (memory / "falcon.md").unlink()
    wait_until(lambda: "memory/falcon.md" not in _manifest(fleet, "alpha"), "a delete",
               logs=fleet.logs)
    assert "memory/falcon.md" not in found("kestrel lighthouse")
    status = _json(a.memq("status", "--agent", "alpha", "--json"))
    assert status["pending"] == 0 and status["vectors"] == status["chunks"]
    # Nothing of the memory's was stored on A.
    assert not [p for p in a.home.rglob("*") if p.suffix.startswith(".sqlite")]
    log.close()


def test_session_transcripts_travel_to_the_shard(
        split: tuple[SimulatedFleet, dict[str, Path]]) -> None:
    """A transcript in A's sessions folder is indexed by the shard's writer (which has no
    sessions folder) and found from A, with its JSONL lines."""
    fleet, workspaces = split
    a = fleet.hosts["hostA"]
    folder = a.home / ".openclaw" / "agents" / "alpha" / "sessions"  # OpenClaw's, on A
    folder.mkdir(parents=True)
    lines = [json.dumps({"type": "session", "id": "s1"}),
             json.dumps({"type": "message", "message": {
                 "role": "user", "content": "Where did we park the pelican drone?"}}),
             json.dumps({"type": "message", "message": {
                 "role": "assistant", "content": "The pelican drone is in hangar nine."}})]
    (folder / "s1.jsonl").write_text("\n".join(lines) + "\n")
    out = _json(a.memq("index", "--agent", "alpha", "--json"))
    assert out["files"] == len(_hashes(workspaces["alpha"])) + 1
    hits = _json(a.memq("search", "--agent", "alpha", "--json", "pelican drone hangar"))
    top = hits["results"][0]
    # OpenClaw 2026.9.6's path of a file in agent alpha's folder
    assert (top["path"], top["source"]) == ("sessions/alpha/s1.jsonl", "sessions")
    assert "hangar nine" in top["snippet"]
    # memq get refuses a session path, as OpenClaw's memory_get does
    refused = a.memq("get", "--agent", "alpha", "--json", "sessions/alpha/s1.jsonl")
    assert refused.returncode == 2, refused.stderr
    assert json.loads(refused.stdout)["code"] == "MEMORY_PATH_NOT_ALLOWED"


def test_an_append_on_the_files_host_is_searchable_when_it_returns(
        split: tuple[SimulatedFleet, dict[str, Path]]) -> None:
    fleet, workspaces = split
    a = fleet.hosts["hostA"]
    _json(a.memq("index", "--agent", "beta", "--json"))
    with Memory(settings=a.settings(fleet.config, "beta"), local=False) as memory:
        note = memory.append("The vault is named kestrel-seven.", target="longterm")
        assert note.indexed is True and note.warning is None
        hits = memory.search("vault kestrel-seven").hits
    assert hits and hits[0].path == "MEMORY.md"
    assert "kestrel-seven" in (workspaces["beta"] / "MEMORY.md").read_text()


def test_a_writer_refuses_files_outside_the_memory(
        split: tuple[SimulatedFleet, dict[str, Path]], tmp_path: Path) -> None:
    """File messages crafted by hand: paths outside alpha's sources, alpha's files sent on
    beta's shard, a body that does not match its hash. Each is refused and logged; the honest
    change next to them is written."""
    fleet, _ = split
    a, c = fleet.hosts["hostA"], fleet.hosts["hostC"]
    _json(a.memq("index", "--agent", "alpha", "--json"))

    def write(path: str, text: str, digest: str | None = None) -> FileChange:
        body = text.encode()
        return FileChange(path, "memory", "write", 1, len(body),
                          digest or hashlib.sha256(body).hexdigest(), text=text)

    bad = [write("../beta/MEMORY.md", "stolen"), write("memory/../../x.md", "up"),
           write("/etc/passwd.md", "abs"), write("memory/.git/x.md", "ignored"),
           write("notes/x.md", "not memory"), write("memory/lie.md", "lie", "0" * 64)]
    honest = write("memory/honest.md", "# Honest\n\nThe honest note about herons.\n")
    job = new_job_id("alpha")
    with FleetDispatcher(fleet.broker) as sender:
        sender.file_changes(FileChanges("alpha", job, (*bad, honest), shard=0))
        # alpha's files on beta's shard: refused as a whole by D's writer
        sender.file_changes(FileChanges("alpha", new_job_id("alpha"), (honest,), shard=1))
    log = JobLog(fleet.common["MEMQ_RESULT_BACKEND"])
    done = wait_until(lambda: (j := log.get(job)) is not None and not j.running and j,
                      "the crafted job", logs=fleet.logs)
    assert done.state == "done"
    assert sum("refused" in e for e in done.result["errors"]) == len(bad)
    with FleetDispatcher(fleet.broker) as waiting:  # C's writer said so, for a producer waiting
        assert waiting.await_job_end(job, 5.0) is True
    listed = _manifest(fleet, "alpha")
    assert "memory/honest.md" in listed
    assert not {"../beta/MEMORY.md", "memory/lie.md", "notes/x.md"} & set(listed)
    logs = c.log_text() + fleet.hosts["hostD"].log_text()
    assert "refused a file change for '../beta/MEMORY.md'" in logs
    wait_until(lambda: "belongs to writer shard 0, not 1" in fleet.hosts["hostD"].log_text(),
               "D's writer to refuse alpha", logs=fleet.logs)
    log.close()
    assert _manifest(fleet, "beta") == {}  # D's store of beta was never touched


def _embedded(fleet: SimulatedFleet) -> int:
    """Embedding jobs every embed worker of the fleet has run so far."""
    return sum(log.read_text(errors="replace").count("memq.embed_chunks[")
               // 2  # a received line and a succeeded line per job
               for host in fleet.hosts.values() for log in host.logs.glob("embed*.log"))


def test_a_shard_moves_to_a_new_host_and_survives_losing_it(
        split: tuple[SimulatedFleet, dict[str, Path]], tmp_path: Path) -> None:
    """Shard 1 (beta) moves from D to E with `memq shard copy`: the same answers, nothing
    lost, nothing embedded again. Then E is lost with its data: F takes the shard over empty,
    and A's next pass sends every file again: nothing lost."""
    from tests.hostkit import queries_of

    fleet, workspaces = split
    a, d = fleet.hosts["hostA"], fleet.hosts["hostD"]
    _json(a.memq("index", "--agent", "beta", "--json"))
    queries = queries_of(workspaces["beta"], 50, seed=5)
    with Memory(settings=a.settings(fleet.config, "beta"), local=False) as memory:
        before = [memory.search(q).to_dict() for q in queries]
    chunks = _json(a.memq("status", "--agent", "beta", "--json"))["chunks"]
    embedded = _embedded(fleet)

    d.kill("writer-1")  # drained: the index above waited for every vector
    e = fleet.host("hostE", hide=(tmp_path / "workspaces",))
    copied = _json(e.memq("shard", "copy", "--shard", "1", "--json"))["memories"]
    assert [(m["memory"], m["chunks"], m["vectors"]) for m in copied] == [
        ("beta", chunks, chunks)]
    for label in ("reader-1", "embed"):
        d.kill(label)
    assert _json(d.memq("shard", "forget", "--shard", "1", "--json"))["forgotten"] is True
    fleet.start_shard(e, 1)
    fleet.wait_for_nodes(["store.1", "control.1", "query.1"])
    with Memory(settings=a.settings(fleet.config, "beta"), local=False) as memory:
        assert [memory.search(q).to_dict() for q in queries] == before
    again = _json(a.memq("index", "--agent", "beta", "--json"))
    assert again["job"] is None  # the copy is current: nothing to send
    status = _json(a.memq("status", "--agent", "beta", "--json"))
    assert status["servedBy"] == "reader-1@hostE" and status["chunks"] == chunks
    assert status["vectors"] == chunks and status["pending"] == 0
    assert _embedded(fleet) == embedded  # 0 chunks embedded again

    # E is lost, data and all; F takes shard 1 over with nothing.
    for label in list(e.procs):
        e.kill(label)
    f = fleet.host("hostF", hide=(tmp_path / "workspaces",))
    fleet.start_shard(f, 1)
    fleet.wait_for_nodes(["store.1", "control.1", "query.1"])
    resent = _json(a.memq("index", "--agent", "beta", "--json"))
    assert resent["changed"] == len(_hashes(workspaces["beta"]))
    status = _json(a.memq("status", "--agent", "beta", "--json"))
    assert status["servedBy"] == "reader-1@hostF"
    assert status["chunks"] == chunks == status["vectors"] and status["pending"] == 0


def test_a_shard_of_unpinned_memories_moves_as_documented(
        tmp_path: Path, tiny_model: Path, broker_url: str) -> None:
    """Issue 33, 5: `memq shard copy --shard N` as docs/deploy.md writes it, for memories
    whose shard comes from their name (no pin, no --from-shards): it asked shard None's
    reader ('query.None') and failed after its timeout. Now every chunk and vector arrives,
    and no 'query.None' queue is left on the broker."""
    from pipeline.config import load_settings
    from tests.conftest import redis_client

    config, _ = two_memories(tmp_path, tiny_model)
    body = json.loads(config.read_text())
    for memory in body["memories"]:
        memory.pop("fleet")  # the shard is the name's hash
    config.write_text(json.dumps(body))
    shard = load_settings(config_file=config, agent="beta").fleet.shard_of("beta")
    fleet = fleet_with_job_file(tmp_path, broker_url, config)
    hidden = (tmp_path / "workspaces",)
    try:
        d, a = fleet.host("hostD", hide=hidden), fleet.host("hostA")
        fleet.start_shard(d, shard)
        fleet.wait_for_nodes([f"store.{shard}", f"query.{shard}", "embed.local"])
        _json(a.memq("index", "--agent", "beta", "--json"))
        chunks = _json(a.memq("status", "--agent", "beta", "--json"))["chunks"]
        assert chunks > 0
        d.kill(f"writer-{shard}")
        e = fleet.host("hostE", hide=hidden)
        done = e.memq("shard", "copy", "--shard", str(shard), "--timeout", "20", "--json")
        copied = {m["memory"]: m for m in _json(done)["memories"]}
        beta = copied["beta"]
        assert (beta["fromShard"], beta["chunks"], beta["vectors"]) == (shard, chunks, chunks)
        assert e.settings(config, "beta").store.path.exists()
        client = redis_client(broker_url)
        try:
            assert not [k for k in client.keys("*query.None*")]
        finally:
            client.close()
    finally:
        fleet.stop()
