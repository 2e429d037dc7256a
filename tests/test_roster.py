"""memq's own roster: ``memories`` and ``memoriesDir`` in memq.toml, names canonical, unknown names
refused, and no two memories sharing a store."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import ConfigError, listed_agents, load_settings, read_roster
from pipeline.config.paths import default_store_path
from pipeline.errors import UnknownMemory


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path / "home"), "MEMQ_HOME": str(tmp_path / "data")}


ROSTER = """
workspace = "own"
provider = "openai"
[chunking]
tokens = 300

[[memories]]
name = "Ops"
workspace = "ws/ops"
model = "text-embedding-3-large"
[memories.chunking]
tokens = 120

[[memories]]
name = "notes"
workspace = "~/notes"
"""


def test_memories_are_listed_and_layered_over_the_file(tmp_path: Path,
                                                       env: dict[str, str]) -> None:
    cfg = write(tmp_path / "conf/memq.toml", ROSTER)
    own = load_settings(config_file=cfg, env=env)
    assert (own.agent_id, own.workspace, own.chunking.tokens) == \
        ("main", tmp_path / "conf/own", 300)
    ops = load_settings(config_file=cfg, env=env, agent="OPS")
    assert ops.agent_id == "ops"
    assert ops.workspace == tmp_path / "conf/ws/ops"  # relative to the file
    assert (ops.provider, ops.model, ops.chunking.tokens) == \
        ("openai", "text-embedding-3-large", 120)
    notes = load_settings(config_file=cfg, env=env, agent="notes")
    assert notes.workspace == tmp_path / "home/notes"
    assert notes.chunking.tokens == 300  # inherited
    assert len({own.store.path, ops.store.path, notes.store.path}) == 3
    assert read_roster(cfg, env).names == ["ops", "notes"]
    assert listed_agents(cfg, env) == ["main", "ops", "notes"]
    assert load_settings(config_file=cfg, env=env, agent="main").workspace == own.workspace


def test_an_unknown_memory_lists_the_known_ones(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = write(tmp_path / "memq.toml", ROSTER)
    with pytest.raises(UnknownMemory) as err:
        load_settings(config_file=cfg, env=env, agent="opz")
    assert err.value.known == ("main", "ops", "notes")
    assert 'did you mean "ops"' in str(err.value)
    assert str(cfg) in str(err.value)


def test_without_a_roster_any_name_is_the_files_own_memory(tmp_path: Path,
                                                           env: dict[str, str]) -> None:
    cfg = write(tmp_path / "memq.toml", 'workspace = "w"\n')
    s = load_settings(config_file=cfg, env=env, agent="Anything")
    assert (s.agent_id, s.workspace) == ("anything", tmp_path / "w")
    assert listed_agents(cfg, env) == []


def test_memories_dir_makes_one_memory_per_folder(tmp_path: Path, env: dict[str, str]) -> None:
    root = tmp_path / "agents"
    for name in ("Alice", "bob smith", ".hidden"):
        (root / name).mkdir(parents=True)
    (root / "README.md").write_text("not a workspace")
    cfg = write(tmp_path / "memq.toml", 'memoriesDir = "agents"\n')
    assert read_roster(cfg, env).names == ["alice", "bob-smith"]
    bob = load_settings(config_file=cfg, env=env, agent="Bob Smith")
    assert (bob.agent_id, bob.workspace) == ("bob-smith", root / "bob smith")
    assert bob.store.path == default_store_path(root / "bob smith", env)
    with pytest.raises(UnknownMemory):
        load_settings(config_file=cfg, env=env, agent="hidden")


@pytest.mark.parametrize(("text", "words"), [
    ('memories = "x"', "memories: must be a list"),
    ("[[memories]]\nworkspace = \"w\"", "memories[0].name"),
    ("[[memories]]\nname = \"!!\"\nworkspace = \"w\"", "memories[0].name"),
    ("[[memories]]\nname = \"a\"", "memories[0].workspace"),
    ("[[memories]]\nname = \"a\"\nworkspace = \"w\"\nbrokerUrl = \"redis://x\"",
     "memories[0].brokerUrl: is a setting of the whole file"),
    ("[[memories]]\nname = \"a\"\nworkspace = \"w\"\n[memories.fleet]\nshards = 2",
     "memories[0].fleet.shards"),
    ("[[memories]]\nname = \"Main\"\nworkspace = \"w\"", "the file's own memory"),
    ("[[memories]]\nname = \"a\"\nworkspace = \"w\"\n[[memories]]\nname = \"A\"\n"
     "workspace = \"v\"", "memory names must differ"),
    ("[[memories]]\nname = \"a\"\nworkspace = \"w\"\nchunkin = 3", 'unknown key "memories[0].'),
    ('memoriesDir = "nowhere"', "memoriesDir:"),
])
def test_bad_rosters_say_what_is_wrong(tmp_path: Path, env: dict[str, str], text: str,
                                       words: str) -> None:
    cfg = write(tmp_path / "memq.toml", text + "\n")
    with pytest.raises(ConfigError) as err:
        load_settings(config_file=cfg, env=env, agent="a")
    assert words in str(err.value)
    assert str(cfg) in str(err.value)


def test_a_shared_store_path_without_agent_id_is_not_shared(tmp_path: Path,
                                                             env: dict[str, str]) -> None:
    cfg = write(tmp_path / "memq.toml", '[store]\npath = "one.sqlite"\n'
                '[[memories]]\nname = "a"\nworkspace = "wa"\n'
                '[[memories]]\nname = "b"\nworkspace = "wb"\n[memories.store]\npath = "b.sqlite"\n')
    own = load_settings(config_file=cfg, env=env, workspace=tmp_path)
    a = load_settings(config_file=cfg, env=env, agent="a")
    b = load_settings(config_file=cfg, env=env, agent="b")
    assert own.store.path == tmp_path / "one.sqlite"
    assert a.store.path == default_store_path(tmp_path / "wa", env)
    assert any("{agentId}" in w and "own store" in w for w in a.warnings)
    assert b.store.path == tmp_path / "b.sqlite"  # its own explicit choice
    templated = write(tmp_path / "t/memq.toml", '[store]\npath = "{agentId}.sqlite"\n'
                      '[[memories]]\nname = "a"\nworkspace = "wa"\n')
    assert load_settings(config_file=templated, env=env, agent="a").store.path == \
        tmp_path / "t/a.sqlite"


def test_a_store_is_refused_to_a_memory_that_does_not_own_it(tmp_path: Path,
                                                             env: dict[str, str]) -> None:
    from pipeline.errors import StoreOwnedElsewhere
    from pipeline.memory import Memory
    from pipeline.store.engine import connect
    from pipeline.store.owner import owner_of, recorded_owner

    for name in ("wa", "wb"):
        write(tmp_path / name / "MEMORY.md", f"- the secret of {name} is basalt\n")
    # A careless config: both memories name one store file.
    cfg = write(tmp_path / "memq.toml", 'provider = "none"\n'
                '[[memories]]\nname = "a"\nworkspace = "wa"\n[memories.store]\npath = "s.db"\n'
                '[[memories]]\nname = "b"\nworkspace = "wb"\n[memories.store]\npath = "s.db"\n')
    with Memory(settings=load_settings(config_file=cfg, env=env, agent="a")) as a:
        a.index()
        assert [h.path for h in a.search("basalt", min_score=0)] == ["MEMORY.md"]
    db = connect(tmp_path / "s.db")
    try:
        assert recorded_owner(db) == owner_of("a", tmp_path / "wa")
    finally:
        db.close()
    with Memory(settings=load_settings(config_file=cfg, env=env, agent="b")) as b:
        with pytest.raises(StoreOwnedElsewhere) as err:
            b.index()
        assert "belongs to memory 'a'" in str(err.value) and "{agentId}" in str(err.value)
        found = b.search("basalt", min_score=0)  # never a's text
        assert (found.mode, list(found)) == ("unavailable", [])
        assert "belongs to memory 'a'" in (found.error or "")


def test_a_listed_memory_keeps_its_workspace_whatever_the_environment_says(
        tmp_path: Path, env: dict[str, str]) -> None:
    cfg = write(tmp_path / "conf/memq.toml", ROSTER)
    e = {**env, "MEMQ_WORKSPACE": str(tmp_path / "elsewhere"), "MEMQ_AGENT_ID": "notes"}
    assert load_settings(config_file=cfg, env=e).workspace == tmp_path / "home/notes"
    assert load_settings(config_file=cfg, env=e, agent="ops").workspace == \
        tmp_path / "conf/ws/ops"
    assert load_settings(config_file=cfg, env=e, agent="main").workspace == \
        tmp_path / "elsewhere"  # the file's own memory follows MEMQ_WORKSPACE, as before


def test_a_bad_own_agent_id_is_refused_even_with_a_roster(tmp_path: Path,
                                                          env: dict[str, str]) -> None:
    cfg = write(tmp_path / "memq.toml", 'agentId = "../evil"\n[[memories]]\nname = "a"\n'
                'workspace = "wa"\n')
    for agent in (None, "../evil", "evil"):
        with pytest.raises(ConfigError) as err:
            load_settings(config_file=cfg, env=env, agent=agent)
        assert "file names" in str(err.value) or "unknown memory" in str(err.value), agent
