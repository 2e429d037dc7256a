"""Safe reindex through real workers: a model change builds a new index beside the live one
while searches keep answering from the old one, then swaps it in; a second full reindex embeds
nothing (the cache serves it); ``--no-wait`` hands the rebuild to the writer's queue."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from pipeline.query import memory_search
from pipeline.status import index_status
from tests.fakes.tiny_gguf import write_tiny_gguf
from tests.indexcheck import index_vs_disk, wait_until
from workers.indexing import run_index

pytestmark = pytest.mark.integration


def _store_files(settings) -> list[str]:
    folder = settings.store.path.parent
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))


def test_model_change_rebuilds_beside_while_searches_answer(workspace: Path, make_settings,
                                                            tiny_model, broker_url, fleet,
                                                            tmp_path: Path) -> None:
    old = make_settings(workspace, provider="local", brokerUrl=broker_url,
                        local={"modelPath": str(tiny_model)}, query={"minScore": 0.0})
    fleet.start(["store"], "writer")
    embed = fleet.start(["embed.local"], "embed")
    run_index(old, wait=True)
    assert index_status(old)["dims"] == 32
    embed.terminate()  # the rebuild's jobs wait in the queue until a worker comes back
    embed.wait(20)
    other = write_tiny_gguf(tmp_path / "tiny-bert-b.gguf", hidden=48)
    new = make_settings(workspace, provider="local", brokerUrl=broker_url,
                        local={"modelPath": str(other)}, query={"minScore": 0.0})
    seen: list[tuple[str | None, int, str | None]] = []
    stop = threading.Event()

    def search_loop() -> None:
        while not stop.is_set():
            try:
                out = memory_search("Zigbee coordinator antenna", settings=new)
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
    s = index_status(new)
    assert (s["model"], s["dims"], s["reindex"]) == ("tiny-bert-b", 48, None)
    wait_until(lambda: index_vs_disk(new), 10, "after the swap")
    assert settings_link(new) and len(_store_files(new)) <= 4  # link + one generation (+wal/shm)


def settings_link(settings) -> bool:
    path = settings.store.path
    return path.is_symlink() and (path.parent / os.readlink(path)).is_file()


def test_second_full_reindex_embeds_nothing(workspace: Path, make_settings, tiny_model,
                                            broker_url, fleet) -> None:
    settings = make_settings(workspace, provider="local", brokerUrl=broker_url,
                             local={"modelPath": str(tiny_model)})
    fleet.start(["store"], "writer")
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
    generations = [f for f in _store_files(settings)
                   if ".gen-" in f and not f.endswith(("-wal", "-shm"))]
    assert len(generations) == 1, _store_files(settings)  # old generations are deleted


def test_reindex_no_wait_is_finished_by_the_writer(workspace: Path, make_settings, tiny_model,
                                                   broker_url, fleet) -> None:
    settings = make_settings(workspace, provider="local", brokerUrl=broker_url,
                             local={"modelPath": str(tiny_model)})
    fleet.env.update(MEMQ_CONFIG=str(settings.config_file), MEMQ_WORKSPACE=str(workspace))
    fleet.start(["store"], "writer")
    fleet.start(["embed.local"], "embed")
    run_index(settings, wait=True)
    before = os.path.realpath(settings.store.path)
    run = run_index(settings, wait=False, rebuild="test: no wait")
    assert not run.waited and run.rebuild is not None and not run.rebuild.done
    assert index_status(settings)["reindex"]["reason"] == "test: no wait"
    deadline = time.monotonic() + 60
    while index_status(settings)["reindex"] is not None and time.monotonic() < deadline:
        time.sleep(0.3)
    assert index_status(settings)["reindex"] is None, fleet.logs()
    assert os.path.realpath(settings.store.path) != before
    wait_until(lambda: index_vs_disk(settings), 10, "after the queued reindex")
