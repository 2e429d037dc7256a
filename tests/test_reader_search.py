"""A reader's search answer (:meth:`workers.reading.Reader.search_answer`): the files check the
asking host sends (``filesDigest``) is answered alongside the hits, computed beside the search
by threads the reader owns: started by the first search that asks for a digest, stopped when
the reader closes (the worker's stop)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path

import pytest
from celery.signals import worker_shutdown

from pipeline.config.settings import Settings
from pipeline.ingest.transfer import disk_stats, stats_digest
from pipeline.memory import Memory
from workers.reader import Reader


@pytest.fixture
def indexed(workspace: Path, make_settings: Callable[..., Settings]) -> Settings:
    """Keyword-only settings for the sample workspace, indexed in this process."""
    settings = make_settings(workspace, provider="none")
    with Memory(settings=settings) as memory:
        memory.index()
    return settings


def _digest_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("memq-digest")]


def test_files_match_when_the_digest_is_the_stores_and_not_otherwise(indexed: Settings) -> None:
    """The same hits with or without the check; ``filesMatch`` is true for the digest of the
    files the store reflects, false after a file changed, and absent when none was sent."""
    with Memory(settings=indexed) as memory, Reader() as reader:
        plain = reader.search_answer(memory, {"query": "Zigbee"})
        assert "filesMatch" not in plain and plain["results"]
        here = stats_digest(disk_stats(indexed) or {})
        checked = reader.search_answer(memory, {"query": "Zigbee", "filesDigest": here})
        assert checked.pop("filesMatch") is True
        assert checked["results"] == plain["results"]
        note = next((indexed.workspace / "memory").glob("*.md"))
        note.write_text(note.read_text() + "\nOne more line.\n")
        changed = stats_digest(disk_stats(indexed) or {})
        assert reader.search_answer(memory, {"query": "Zigbee",
                                             "filesDigest": changed})["filesMatch"] is False


def test_a_failed_search_still_fails_with_the_digest_asked(indexed: Settings,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """A search that raises raises to the reply (never a filesMatch without hits)."""
    with Memory(settings=indexed) as memory, Reader() as reader:
        def broken(*_: object, **__: object) -> None:
            raise RuntimeError("disk gone")

        monkeypatch.setattr(memory, "search", broken)
        with pytest.raises(RuntimeError, match="disk gone"):
            reader.search_answer(memory, {"query": "Zigbee", "filesDigest": "0" * 64})


def test_the_digest_threads_start_with_the_first_check_and_stop_with_the_reader(
        indexed: Settings) -> None:
    """No thread until a search asks for a digest; none left once the reader is closed."""
    import workers.reading

    # the module itself holds no pool: importing it (every worker does) builds none
    assert [n for n, v in vars(workers.reading).items() if isinstance(v, Executor)] == []
    before = _digest_threads()
    here = stats_digest(disk_stats(indexed) or {})
    with Memory(settings=indexed) as memory:
        reader = Reader()
        reader.search_answer(memory, {"query": "Zigbee"})
        assert _digest_threads() == before
        assert reader.search_answer(memory, {"query": "Zigbee", "filesDigest": here})[
            "filesMatch"] is True
        started = [t for t in _digest_threads() if t not in before]
        assert started and all(t.is_alive() for t in started)
        reader.close()
        assert not any(t.is_alive() for t in started)


def test_a_workers_reader_is_closed_when_the_worker_stops(indexed: Settings) -> None:
    """The worker's reader (:meth:`WorkerRuntime.reader`) is built on first use and its
    threads stop at Celery's ``worker_shutdown``; the next read builds another."""
    from workers.runtime import WorkerRuntime, runtime

    assert WorkerRuntime()._reader is None  # a worker serves no read: no reader
    reader = runtime.reader()
    assert runtime.reader() is reader
    here = stats_digest(disk_stats(indexed) or {})
    with Memory(settings=indexed) as memory:
        reader.search_answer(memory, {"query": "Zigbee", "filesDigest": here})
    started = _digest_threads()
    assert started
    worker_shutdown.send(sender=None)
    assert not any(t.is_alive() for t in started)
    assert runtime.reader() is not reader
    runtime.close_reader()


def test_a_reader_builds_its_reader_at_start_and_other_roles_do_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Celery's ``worker_init``: a worker consuming a query queue builds its reader (what a
    read imports is loaded before the first read), an embed worker or a writer does not."""
    from types import SimpleNamespace

    import workers.reading as reading
    from workers.runtime import WorkerRuntime

    def started(*queues: str) -> WorkerRuntime:
        own = WorkerRuntime()
        monkeypatch.setattr(reading, "runtime", own)
        reading.load_reader(SimpleNamespace(app=SimpleNamespace(amqp=SimpleNamespace(
            queues=SimpleNamespace(consume_from=dict.fromkeys(queues))))))
        return own

    assert started("query.1")._reader is not None
    assert started("embed.local")._reader is None
    assert started("store.0", "control.0")._reader is None


def test_the_store_digest_is_sent_when_asked_and_kept_while_the_store_is_unchanged(
        indexed: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """``storeDigest``: the reply carries the digest of the files the store reflects (the
    asking host compares it with its own). It is read again only after a commit to the store:
    a file edited on disk alone leaves it (and the store's connection) as it was; the index
    pass that takes the edit in gives the new files' digest."""
    from pipeline.store import reads

    computed: list[int] = []
    file_stats = reads.file_stats
    monkeypatch.setattr(reads, "file_stats",
                        lambda db, source: computed.append(1) or file_stats(db, source))
    with Memory(settings=indexed) as memory, Reader() as reader:
        plain = reader.search_answer(memory, {"query": "Zigbee"})
        assert "filesDigest" not in plain
        before = stats_digest(disk_stats(indexed) or {})
        first = reader.search_answer(memory, {"query": "Zigbee", "storeDigest": True})
        assert first.pop("filesDigest") == before
        assert first["results"] == plain["results"] and "filesMatch" not in first
        note = next((indexed.workspace / "memory").glob("*.md"))
        note.write_text(note.read_text() + "\nOne more line about Zigbee.\n")
        after = stats_digest(disk_stats(indexed) or {})
        assert after != before
        assert len(computed) == 1
        assert reader.search_answer(memory, {"query": "Zigbee", "storeDigest": True})[
            "filesDigest"] == before  # the store does not reflect the edit yet
        assert len(computed) == 1  # not computed again
        memory.index()
        both = reader.search_answer(memory, {"query": "Zigbee", "storeDigest": True,
                                             "filesDigest": after})
        assert (both["filesDigest"], both["filesMatch"]) == (after, True)
        assert len(computed) == 2  # once for both answers


def test_a_store_replaced_at_its_path_gives_its_own_digest(indexed: Settings) -> None:
    """A store moved aside and indexed again (a new file at the same path, with its own
    ``data_version``) is opened afresh: its digest is never the old file's."""
    from workers.shard_side import FilesDigests, files_digest

    with Memory(settings=indexed) as memory, FilesDigests() as digests:
        old = digests.of(memory.local)
        assert old == files_digest(memory.local) == stats_digest(disk_stats(indexed) or {})
        note = next((indexed.workspace / "memory").glob("*.md"))
        note.unlink()
        store = indexed.store.path
        store.rename(store.with_name("aside.sqlite"))
        for wal in store.parent.glob(store.name + "-*"):
            wal.unlink()
        memory.index()
        assert digests.of(memory.local) == files_digest(memory.local) != old
        assert digests.of(memory.local) == stats_digest(disk_stats(indexed) or {})


def test_a_store_slow_to_open_holds_back_its_own_callers_only(
        indexed: Settings, tmp_path: Path, make_settings: Callable[..., Settings]) -> None:
    """Digests of different stores are taken side by side: while one store's first open
    hangs (a store being created waits on SQLite's lock), another store's digest is given,
    and a deleted store's kept connection is closed."""
    from workers.shard_side import FilesDigests, files_digest

    other_ws = tmp_path / "other"
    (other_ws / "memory").mkdir(parents=True)
    (other_ws / "memory" / "2026-12-01.md").write_text("# Other\n\nPelicans.\n")
    other = make_settings(other_ws, provider="none",
                          store={"path": str(tmp_path / "other.sqlite")})
    with Memory(settings=other) as memory:
        memory.index()
    entered, release = threading.Event(), threading.Event()
    with Memory(settings=indexed) as slow, Memory(settings=other) as fast, \
            FilesDigests() as digests:
        opened = slow.local.open_store

        def hangs() -> object:
            entered.set()
            release.wait(30)
            return opened()

        slow.local.open_store = hangs  # type: ignore[method-assign]
        waiting = threading.Thread(target=digests.of, args=(slow.local,))
        waiting.start()
        try:
            assert entered.wait(30)
            given: list[str] = []
            beside = threading.Thread(target=lambda: given.append(digests.of(fast.local)))
            beside.start()
            beside.join(20)  # milliseconds when not held back; the slow open waits 30 s
            assert given == [files_digest(fast.local)]
        finally:
            release.set()
            waiting.join(30)
        assert not waiting.is_alive()
        assert len(digests._held) == 2
        other.store.path.unlink()
        digests.of(fast.local)
        assert len(digests._held) == 1  # the deleted store's connection was closed
