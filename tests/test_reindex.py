"""Safe reindex through real workers: a model change builds a new index beside the live one
while searches keep answering from the old one, then swaps it in; a second full reindex embeds
nothing (the cache serves it); ``--no-wait`` hands the rebuild to the writer's queue."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from pipeline.embeddings.registry import choose_provider
from pipeline.ingest.reindex import rebuild_step, start_rebuild
from pipeline.query import memory_search
from pipeline.status import index_status
from pipeline.store import schema
from pipeline.store.engine import connect
from tests.fakes.tiny_gguf import write_tiny_gguf
from tests.indexcheck import index_vs_disk, wait_until
from workers.indexing import run_index

pytestmark = pytest.mark.integration


def _generations(settings) -> list[str]:
    """Store generation files (not their -wal/-shm) next to the store path."""
    folder = settings.store.path.parent
    return sorted(p.name for p in folder.iterdir()
                  if ".gen-" in p.name and not p.name.endswith(("-wal", "-shm")))


def test_model_change_rebuilds_beside_while_searches_answer(workspace: Path, make_settings,
                                                            tiny_model, broker_url, fleet,
                                                            tmp_path: Path) -> None:
    old = make_settings(workspace, provider="local", brokerUrl=broker_url,
                        local={"modelPath": str(tiny_model)}, query={"minScore": 0.0})
    fleet.start(["store.0"], "writer")
    embed = fleet.start(["embed.local"], "embed")
    run_index(old, wait=True)
    assert index_status(old)["dims"] == 32
    embed.terminate()  # the rebuild's jobs wait in the queue until a worker comes back
    embed.wait(20)
    other = write_tiny_gguf(tmp_path / "tiny-bert-b.gguf", hidden=48)
    new = make_settings(workspace, provider="local", brokerUrl=broker_url,
                        local={"modelPath": str(other)}, query={"minScore": 0.0})
    seen: list[tuple[str | None, int, str | None]] = []
    rebuilding: list[str | None] = []
    stop = threading.Event()

    def search_loop() -> None:
        while not stop.is_set():
            try:
                out = memory_search("Zigbee coordinator antenna", settings=new)
                rebuilding.append(out.get("rebuilding"))
                seen.append((out["model"], len(out["results"]), out.get("warning")))
            except Exception as exc:  # recorded, asserted below
                seen.append((None, 0, repr(exc)))

    searcher = threading.Thread(target=search_loop, daemon=True)
    searcher.start()
    result: dict[str, object] = {}
    rebuild = threading.Thread(target=lambda: result.update(run=run_index(new, wait=True)),
                               daemon=True)
    try:
        rebuild.start()
        wait_until(lambda: [] if (index_status(new)["reindex"] or {}).get("pending") else
                   ["no rebuild pending yet"], 30, "rebuild start")
        during = len(seen)
        deadline = time.monotonic() + 30
        while len(seen) < during + 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(seen) >= during + 10 and rebuild.is_alive()
        assert {m for m, _, _ in seen[during:]} == {"tiny-bert"}  # the live (old) index
        assert set(rebuilding[during:]) == {"configuration changed"}  # and it says so
        fleet.start(["embed.local"], "embed")
        rebuild.join(60)
        swapped = len(seen)
        deadline = time.monotonic() + 30  # the first query with the new model loads it
        while len(seen) < swapped + 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        searcher.join(10)
    run = result["run"]
    assert run.rebuild is not None and run.rebuild.done and run.rebuild.queued > 0
    errors = [s for s in seen if s[2] is not None or s[1] == 0]
    assert not errors, errors[:5]
    models = [m for m, _, _ in seen]
    assert models[0] == "tiny-bert" and models[-1] == "tiny-bert-b", sorted(set(models))
    switch = models.index("tiny-bert-b")
    assert set(models[switch:]) == {"tiny-bert-b"}  # no flapping back
    assert rebuilding[-1] is None
    s = index_status(new)
    assert (s["model"], s["dims"], s["reindex"]) == ("tiny-bert-b", 48, None)
    wait_until(lambda: index_vs_disk(new), 10, "after the swap")
    assert settings_link(new) and _generations(new) == [os.readlink(new.store.path)]


def settings_link(settings) -> bool:
    path = settings.store.path
    return path.is_symlink() and (path.parent / os.readlink(path)).is_file()


def test_second_full_reindex_embeds_nothing(workspace: Path, make_settings, tiny_model,
                                            broker_url, fleet) -> None:
    settings = make_settings(workspace, provider="local", brokerUrl=broker_url,
                             local={"modelPath": str(tiny_model)})
    fleet.start(["store.0"], "writer")
    embed = fleet.start(["embed.local"], "embed")
    first = run_index(settings, wait=True)
    chunks = index_status(settings)["chunks"]
    assert first.report.chunks_queued == chunks > 0
    embed.terminate()
    embed.wait(20)  # no embedding worker at all: anything needing one would never finish
    result: dict[str, object] = {}
    worker = threading.Thread(target=lambda: result.update(run=run_index(
        settings, wait=True, rebuild="test: full reindex")), daemon=True)
    worker.start()
    worker.join(60)
    assert "run" in result, "the reindex waited for an embedding worker"
    progress = result["run"].rebuild
    assert progress.done and (progress.queued, progress.cached) == (0, chunks)
    wait_until(lambda: index_vs_disk(settings), 10, "after the cached reindex")
    again = run_index(settings, wait=True, rebuild="test: once more")  # a second swap
    assert again.rebuild.done and again.rebuild.queued == 0
    assert _generations(settings) == [os.readlink(settings.store.path)]  # old ones deleted


def test_reindex_no_wait_is_finished_by_the_writer(workspace: Path, make_settings, tiny_model,
                                                   broker_url, fleet) -> None:
    settings = make_settings(workspace, provider="local", brokerUrl=broker_url,
                             local={"modelPath": str(tiny_model)})
    fleet.env.update(MEMQ_CONFIG=str(settings.config_file), MEMQ_WORKSPACE=str(workspace))
    writer = fleet.start(["store.0"], "writer")
    fleet.start(["embed.local"], "embed")
    run_index(settings, wait=True)
    before = os.path.realpath(settings.store.path)
    # No writer while the job is queued: every chunk is in the cache, so a running writer
    # could swap the rebuild in before the status below is read.
    writer.terminate()
    writer.wait(20)
    run = run_index(settings, wait=False, rebuild="test: no wait")
    assert not run.waited and run.rebuild is not None and not run.rebuild.done
    assert index_status(settings)["reindex"]["reason"] == "test: no wait"
    fleet.start(["store.0"], "writer")
    deadline = time.monotonic() + 60
    while index_status(settings)["reindex"] is not None and time.monotonic() < deadline:
        time.sleep(0.3)
    assert index_status(settings)["reindex"] is None, fleet.logs()
    assert os.path.realpath(settings.store.path) != before
    wait_until(lambda: index_vs_disk(settings), 10, "after the queued reindex")


def test_rebuild_for_an_outdated_configuration_is_retargeted(workspace: Path,
                                                             make_settings) -> None:
    """No queue needed (keyword-only): a rebuild started for configuration B is replaced by
    one for C when the configuration changes again before B was swapped in."""
    a = make_settings(workspace, provider="none")
    run_index(a, wait=True)
    b = make_settings(workspace, provider="none", chunking={"tokens": 64, "overlap": 8})
    swapped = run_index(b, wait=False)  # keyword-only: no queue, so rebuilt at once
    assert swapped.report.rebuild_needed and swapped.rebuild.done
    target_b = start_rebuild(b, choose_provider(b), "forced, never stepped")
    assert target_b.exists() and index_status(b)["reindex"]["target"] == str(target_b)
    c = make_settings(workspace, provider="none", chunking={"tokens": 128, "overlap": 0})
    progress = rebuild_step(c, choose_provider(c), None)
    assert progress.done and progress.target != str(target_b)
    assert not target_b.exists()
    s = index_status(c)
    assert s["reindex"] is None and s["chunks"] == progress.chunks > 0
    db = connect(c.store.path)
    try:
        assert schema.get_meta(db, "index")["chunk_tokens"] == 128
    finally:
        db.close()


def test_a_rebuild_whose_jobs_died_with_their_broker_sends_them_again(
        workspace: Path, make_settings, tiny_model) -> None:
    """A rebuild's target, synced and its jobs sent, then the broker that held them is gone
    (an embedded one dies with its process; ``Memory.forget_queued`` clears the marks): the
    next step sends the jobs again instead of waiting for vectors that will never come."""
    from pipeline.memory import Memory

    run_index(make_settings(workspace, provider="none"), wait=True)
    settings = make_settings(workspace, provider="local", local={"modelPath": str(tiny_model)})
    choice = choose_provider(settings)
    start_rebuild(settings, choice, "test: broker lost")
    sent: list = []
    progress = rebuild_step(settings, choice, sent.append)
    chunks = sum(len(job.chunks) for job in sent)
    assert chunks > 0 and progress is not None and not progress.done
    waiting: list = []
    assert rebuild_step(settings, choice, waiting.append).pending == chunks
    assert waiting == []  # in flight: a step only counts them
    with Memory(settings=settings) as memory:
        memory.forget_queued()
    again: list = []
    progress = rebuild_step(settings, choice, again.append)
    assert sum(len(job.chunks) for job in again) == chunks, "the lost jobs were not sent again"
    assert not progress.done
