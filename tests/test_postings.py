"""BM25 from statistics held in memory (pipeline.store.postings) answers exactly as FTS5 does."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from memq import Memory
from pipeline.config import load_settings
from pipeline.embeddings.registry import choose_provider
from pipeline.ingest.producer import sync_files
from pipeline.query import memory_search
from pipeline.search.fts import match_terms
from pipeline.search.hybrid import HeldCopies, search_store
from pipeline.search.retrievers import keyword_hits
from pipeline.store import matrix as matrix_module
from pipeline.store import postings, schema
from pipeline.store import postings as postings_module
from pipeline.store.engine import Database, connect
from pipeline.store.postings import TextStatsCache, load, text_version
from tests.fakes.provider_doubles import Fault, ProviderDouble
from tests.secrets_scan import SENTINEL

WORDS = ["garden", "gardens", "gardening", "run", "running", "runs", "Kafka", "kafka", "the",
         "of", "and", "café", "cafe", "naïve", "rate_limit", "rate-limit", "x2", "2026",
         "日本語", "会议纪要", "Osaka", "vacuum", "spike", "lantern", "budget", "Ünïcode"]


def insert(conn, texts: list[str], source: str = "memory", start: int = 0) -> None:
    conn.executemany(
        "INSERT INTO chunks(id, path, source, start_line, end_line, hash, text, state, "
        "updated_at) VALUES (?, ?, ?, 1, 1, 'h', ?, 'ready', 0)",
        [(f"c{start + i}", f"memory/n{start + i}.md", source, t) for i, t in enumerate(texts)])


def random_texts(rng: random.Random, n: int) -> list[str]:
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(1, 30))) for _ in range(n)]
    return texts + texts[:n // 10]  # identical rows: equal scores, ordered by rowid


def random_query(rng: random.Random) -> str:
    words = rng.choices([*WORDS, "absent", "nowhere"], k=rng.randint(1, 5))
    return " ".join(words)


@pytest.fixture
def store(tmp_path: Path) -> Database:
    db = connect(tmp_path / "store.sqlite")
    schema.ensure_schema(db)
    yield db
    db.close()


def both(db: Database, query: str, limit: int, sources=None) -> tuple[list, list]:
    stats = load(db)
    assert stats is not None
    return (list(keyword_hits(db, query, limit, sources).items()),
            list(keyword_hits(db, query, limit, sources, stats).items()))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_in_memory_bm25_gives_fts5_scores_and_order_exactly(store: Database, seed: int) -> None:
    rng = random.Random(seed)
    with schema.transaction(store) as conn:
        insert(conn, random_texts(rng, 400))
        insert(conn, random_texts(rng, 60), source="sessions", start=1000)
    stats = load(store)
    answered = 0
    for _ in range(150):
        query, limit = random_query(rng), rng.choice([1, 6, 24, 200, 1000])
        for sources in (None, ["memory"], ["sessions"]):
            from_fts = list(keyword_hits(store, query, limit, sources).items())
            if stats.top(store, match_terms(query), limit) is not None:
                answered += 1
            assert list(keyword_hits(store, query, limit, sources, stats).items()) == from_fts, (
                query, limit, sources)
    assert answered > 100  # most of these queries were answered from memory, not FTS5


def test_phrases_prefixes_and_split_words_go_to_fts5(store: Database) -> None:
    with schema.transaction(store) as conn:
        insert(conn, ["rate limit hit at the gateway", "limit the rate", "猫が好き", "猫"])
    stats = load(store)
    for query in ['"rate limit"', "猫", "rate_limit"]:
        assert stats.top(store, match_terms(query), 10) is None, query
        fts, memory = both(store, query, 10)
        assert memory == fts and fts, query
    assert stats.top(store, match_terms("rate limit"), 10) is not None


def test_a_text_change_is_seen_by_the_next_search(tmp_path: Path, store: Database) -> None:
    settings = load_settings(workspace=tmp_path, env={})
    with schema.transaction(store) as conn:
        insert(conn, ["lantern by the garden gate", "a second lantern note"])

    copies = HeldCopies()
    stats_cache = copies.text_stats

    def paths(in_memory: bool) -> list[str]:
        hits = search_store(store, settings, "lantern garden", min_score=0,
                            held=copies if in_memory else None)
        return [h.path for h in hits]

    assert stats_cache.current(store) is None  # first search: FTS5 answers, a copy loads
    stats_cache.wait()
    held = stats_cache.current(store)
    assert held is not None and held.version == text_version(store)
    assert paths(True) == paths(False) == ["memory/n0.md", "memory/n1.md"]
    writer = connect(store.path)  # another process: the indexer
    for change in ("INSERT", "UPDATE", "DELETE"):
        before = text_version(store)
        with schema.transaction(writer) as conn:
            if change == "INSERT":
                insert(conn, ["lantern lantern garden garden"], start=2)
            elif change == "UPDATE":
                conn.execute("UPDATE chunks SET text = 'nothing here' WHERE rowid = 1")
            else:
                conn.execute("DELETE FROM chunks WHERE rowid = 2")
        assert text_version(store) != before, change
        assert stats_cache.current(store) is None, change  # behind the store: not used
        assert paths(True) == paths(False), change
        stats_cache.wait()
        assert stats_cache.current(store) is not None, change
        assert paths(True) == paths(False), change
    assert paths(True) == ["memory/n2.md"]
    writer.close()
    copies.close()


def test_state_changes_keep_the_text_version(store: Database) -> None:
    """The writer marks chunks embedded all day; that must not throw the held copy away."""
    with schema.transaction(store) as conn:
        insert(conn, ["lantern"])
    version = text_version(store)
    with schema.transaction(store) as conn:
        conn.execute("UPDATE chunks SET state = 'failed', error = 'x', updated_at = 1")
    assert text_version(store) == version


def test_postings_are_never_read_from_a_newer_store(store: Database) -> None:
    with schema.transaction(store) as conn:
        insert(conn, ["lantern garden", "garden"])
    stats = load(store)
    assert stats.top(store, ['"garden"'], 5) is not None  # loads "garden" at this version
    with schema.transaction(store) as conn:
        insert(conn, ["lantern"], start=5)
    assert stats.top(store, ['"lantern"'], 5) is None  # would mix two versions: refused


def test_held_postings_stay_within_their_cap(store: Database, monkeypatch) -> None:
    rng = random.Random(9)
    with schema.transaction(store) as conn:
        insert(conn, random_texts(rng, 300))
    monkeypatch.setattr(postings, "MAX_POSTINGS", 200)
    stats = load(store)
    for _ in range(40):
        query = random_query(rng)
        assert (list(keyword_hits(store, query, 24, None, stats).items())
                == list(keyword_hits(store, query, 24, None).items()))
        assert stats._held <= 200 or len(stats._postings) == 1


def test_a_store_without_a_text_version_is_never_held(store: Database) -> None:
    with schema.transaction(store) as conn:
        insert(conn, ["lantern"])
        conn.execute("DELETE FROM meta WHERE key = ?", (schema.TEXT_VERSION_KEY,))
    cache = TextStatsCache()
    assert cache.current(store) is None
    cache.wait()
    assert cache.current(store) is None and load(store) is None


def test_a_version_3_store_gains_the_text_version_triggers(tmp_path: Path) -> None:
    db = connect(tmp_path / "old.sqlite")
    schema.ensure_schema(db)
    db.conn.executescript(
        "DROP TRIGGER chunks_text_version_insert; DROP TRIGGER chunks_text_version_delete; "
        "DROP TRIGGER chunks_text_version_update; DELETE FROM meta WHERE key = 'text_version'; "
        "UPDATE meta SET value = '3' WHERE key = 'schema_version';")
    with schema.transaction(db) as conn:
        insert(conn, ["lantern"])
    assert text_version(db) is None
    db.close()
    db = connect(tmp_path / "old.sqlite")
    schema.ensure_schema(db)
    assert schema.get_meta(db, "schema_version") == schema.SCHEMA_VERSION
    seeded = text_version(db)
    assert seeded is not None
    with schema.transaction(db) as conn:
        insert(conn, ["garden"], start=1)
    assert text_version(db) not in (None, seeded)
    assert both(db, "lantern garden", 5)[0] == both(db, "lantern garden", 5)[1]
    db.close()


def test_rows_an_interrupted_tokenize_left_do_not_break_later_queries(
        store: Database, monkeypatch) -> None:
    monkeypatch.setattr(postings, "_TOKENIZED", {})  # so every query word is cut afresh
    # words with accents: FTS5 cuts them (plain ASCII words are cut in Python)
    with schema.transaction(store) as conn:
        insert(conn, ["lantern café", "garden naïve"])
    stats = load(store)
    assert stats.top(store, match_terms("café"), 5) is not None  # creates the scratch table
    # what a call interrupted between its insert and its delete would leave behind, in the
    # process's private scratch connection that cuts query words
    scratch = postings._Scratch.of(store, stats.tokenizer).conn
    scratch.execute("INSERT INTO temp.memq_query_text(rowid, text) VALUES (0, 'stale words')")
    fts, memory = both(store, "naïve café", 5)
    assert memory == fts and len(fts) == 2
    assert scratch.execute("SELECT count(*) FROM temp.memq_query_text").fetchone()[0] == 0


def test_a_database_error_in_the_held_copy_falls_back_to_fts5(store: Database, caplog) -> None:
    with schema.transaction(store) as conn:
        insert(conn, ["lantern budget", "garden spike", "lantern"])
    stats = load(store)
    # a scratch view under the name the postings are read through: every read of it fails
    store.conn.execute("CREATE TEMP TABLE memq_fts_instance(x)")
    with caplog.at_level("WARNING"):
        found = keyword_hits(store, "lantern", 5, None, stats)
    assert found == keyword_hits(store, "lantern", 5, None) and len(found) == 2
    assert "FTS5 answers instead" in caplog.text


def test_a_one_shot_search_loads_nothing_even_when_the_query_embedding_fails(
        tmp_path: Path, make_settings, monkeypatch) -> None:
    """``in_memory=False`` (``memq search``) holds to it on the keyword-only fallback too: a
    process that searches once must not start reading the store into memory (a Memory that
    keeps copies does, which shows the loads are seen)."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "2026-01-02.md").write_text("# Garden\n\n- the lantern by the gate\n")
    loads: list[str] = []
    monkeypatch.setattr(postings_module, "load", lambda db: loads.append("BM25"))
    monkeypatch.setattr(matrix_module, "load", lambda db: loads.append("vectors"))
    with ProviderDouble("openai", api_key=SENTINEL, script=[Fault("401")] * 8) as double:
        settings = make_settings(ws, provider="openai",
                                 remote={"baseUrl": double.url, "apiKey": SENTINEL})
        db = connect(settings.store.path)
        sync_files(db, settings, choose_provider(settings, env={}))  # chunks wait for vectors
        db.close()
        out = memory_search("lantern", settings=settings, sync=False, in_memory=False)
        assert loads == []
        with Memory(settings=settings) as memory:
            kept = memory.search("lantern", sync=False)
            memory.local.search_part().held.wait()  # type: ignore[union-attr]
    assert out["mode"] == "keyword-only" and "query embedding failed" in out["warning"]
    assert [r["path"] for r in out["results"]] == ["memory/2026-01-02.md"]
    assert [h.path for h in kept] == ["memory/2026-01-02.md"] and loads == ["BM25"]
