"""Which memories' stores a host holds (``fleet.localShards``, claims), the read messages'
contract, and the reader's pool of warm memories: no broker needed."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pipeline.config import ConfigError, load_settings
from pipeline.errors import MessageRefused
from pipeline.fleet.placement import claim, claimed, store_is_here
from pipeline.messages import QueryReply, QueryRequest
from pipeline.results import Appended, MemoryText, SearchHit, SearchResults
from workers.runtime import WarmMemories


def _settings(tmp_path: Path, **env: str):
    base = {"HOME": str(tmp_path / "home"), "MEMQ_HOME": str(tmp_path / "data"),
            "MEMQ_FLEET_SHARDS": "3", "MEMQ_BROKER_URL": "redis://127.0.0.1:1/0"}
    return load_settings(workspace=tmp_path, env={**base, **env})


def test_without_a_broker_every_memory_is_here(tmp_path: Path) -> None:
    settings = load_settings(workspace=tmp_path, env={"HOME": str(tmp_path),
                                                      "MEMQ_LOCAL_SHARDS": "none"})
    assert store_is_here(settings)


def test_local_shards_words_and_numbers(tmp_path: Path) -> None:
    shard = _settings(tmp_path).fleet.shard_of("main")
    assert store_is_here(_settings(tmp_path, MEMQ_LOCAL_SHARDS="all"))
    assert not store_is_here(_settings(tmp_path, MEMQ_LOCAL_SHARDS="none"))
    assert store_is_here(_settings(tmp_path, MEMQ_LOCAL_SHARDS=str(shard)))
    other = ",".join(str(s) for s in range(3) if s != shard)
    assert not store_is_here(_settings(tmp_path, MEMQ_LOCAL_SHARDS=other))
    assert _settings(tmp_path, MEMQ_LOCAL_SHARDS="2, 0 2").fleet.local_shards == (0, 2)
    for bad in ("3", "x", "-1", "somewhere"):
        with pytest.raises(ConfigError, match=r"fleet\.localShards"):
            _settings(tmp_path, MEMQ_LOCAL_SHARDS=bad)


def test_auto_follows_this_hosts_claims_and_stores(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMQ_HOME", str(tmp_path / "data"))
    settings = _settings(tmp_path, MEMQ_LOCAL_SHARDS="auto")
    shard = settings.fleet.shard_of("main")
    assert claimed() == set() and not store_is_here(settings)
    claim([(shard + 1) % 3], "writer@elsewhere", "writer")
    assert not store_is_here(settings)
    written = claim([shard, shard], "reader-1@here", "reader")
    assert claimed() == {shard, (shard + 1) % 3} and len(written) == 1
    assert store_is_here(settings)
    (tmp_path / "data" / "shards" / f"{shard}.json").unlink()
    settings.store.path.parent.mkdir(parents=True, exist_ok=True)
    settings.store.path.touch()  # a store this host already has stays this host's
    assert store_is_here(settings)


def test_auto_reads_the_claims_of_the_settings_own_data_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Several hosts in one process: each one's settings answer from its own ``MEMQ_HOME``,
    never from the process's."""
    monkeypatch.setenv("MEMQ_HOME", str(tmp_path / "process"))
    hosts = {name: {"HOME": str(tmp_path / "home"), "MEMQ_HOME": str(tmp_path / name),
                    "MEMQ_FLEET_SHARDS": "3", "MEMQ_BROKER_URL": "redis://127.0.0.1:1/0",
                    "MEMQ_LOCAL_SHARDS": "auto",
                    "MEMQ_STORE_PATH": str(tmp_path / "nowhere" / f"{name}.sqlite")}
             for name in ("a", "b")}
    settings = {name: load_settings(workspace=tmp_path, env=env) for name, env in hosts.items()}
    assert settings["a"].data_dir == tmp_path / "a"
    shard = settings["a"].fleet.shard_of("main")
    claim([shard], "writer-1@a", "writer", env=hosts["a"])
    assert claimed(hosts["a"]) == {shard} and claimed() == set()
    assert store_is_here(settings["a"])
    assert not store_is_here(settings["b"])
    claim([shard], "reader-1@process", "reader")  # the process's own data dir
    assert not store_is_here(settings["b"])


def test_query_messages_are_checked(tmp_path: Path) -> None:
    request = QueryRequest("main", "search", {"query": "x", "maxResults": 3}, shard=2)
    assert QueryRequest.from_json(request.to_json()) == request
    assert request.to_json()["route"] == {"shard": 2, "interactive": True}
    refused = [
        {"v": 2, "memory": "main", "op": "status"},
        {"v": 1, "memory": "", "op": "status"},
        {"v": 1, "memory": "main", "op": "drop"},
        {"v": 1, "memory": "main", "op": "get", "args": {}},
        {"v": 1, "memory": "main", "op": "get", "args": {"path": 3}},
        {"v": 1, "memory": "main", "op": "search", "args": {"query": "x", "maxResults": True}},
        {"v": 1, "memory": "main", "op": "search", "args": {"query": "x", "shell": "rm"}},
        {"v": 1, "memory": "main", "op": "status", "args": []},
        {"v": 1, "memory": "main", "op": "status", "route": {"shard": -1}},
        "not an object",
    ]
    for data in refused:
        with pytest.raises(MessageRefused):
            QueryRequest.from_json(data)  # type: ignore[arg-type]
    reply = QueryReply(error="no", kind="path", node="reader@h")
    assert QueryReply.from_json(reply.to_json()) == reply
    with pytest.raises(MessageRefused):
        QueryReply.from_json({"v": 1, "error_kind": "boom"})


def test_results_travel_whole() -> None:
    results = SearchResults(hits=[SearchHit("MEMORY.md", 1, 3, 0.5, "text", "memory", "c")],
                            provider="local", model="m", mode="hybrid", citations="on",
                            pending=2, warning="w", rebuilding="reindex",
                            fallback={"from": "qmd", "reason": "r"}, backend="builtin")
    assert SearchResults.from_dict(results.to_dict()).to_dict() == results.to_dict()
    down = SearchResults(mode="unavailable", error="e", action="a")
    assert SearchResults.from_dict(down.to_dict()).to_dict() == down.to_dict()
    text = MemoryText("memory/a.md", "x\ny", 2, 2)
    assert MemoryText.from_dict(text.to_dict()) == text
    note = Appended("MEMORY.md", "longterm", 4, 5, 30, True, "queued")
    assert Appended.from_dict(note.to_dict()) == note


class _Fake:
    def __init__(self, settings: object) -> None:
        self.settings, self.closed = settings, False

    def close(self) -> None:
        self.closed = True


def test_warm_memories_close_the_least_recently_used_idle_one() -> None:
    built: list[_Fake] = []

    def build(settings: object) -> _Fake:
        built.append(_Fake(settings))
        return built[-1]

    pool = WarmMemories(build, max_open=2)  # type: ignore[arg-type]
    s = {name: object() for name in "abc"}
    with pool.use("a", s["a"]) as first:
        with pool.use("b", s["b"]):
            pass
        with pool.use("c", s["c"]):  # "a" is busy: "b" goes, "a" stays open
            pass
        assert not first.closed and built[1].closed and len(pool) == 2
    with pool.use("a", s["a"]) as again:
        assert again is first  # kept warm
    changed = object()
    with pool.use("a", changed) as fresh:  # its settings changed: a new one
        assert fresh is not first and first.closed and fresh.settings is changed
    pool.close()
    assert all(m.closed for m in built)


def test_warm_memories_close_a_busy_one_when_its_user_is_done() -> None:
    pool = WarmMemories(lambda settings: _Fake(settings), max_open=1)  # type: ignore[arg-type]
    old = object()
    release = threading.Event()
    holder: dict[str, _Fake] = {}

    def use_long() -> None:
        with pool.use("a", old) as memory:
            holder["a"] = memory
            release.wait(10)

    thread = threading.Thread(target=use_long)
    thread.start()
    while "a" not in holder:
        pass
    with pool.use("a", object()):  # replaced while the thread still uses it
        assert not holder["a"].closed
    release.set()
    thread.join()
    assert holder["a"].closed
