"""``memq watch`` for real: a watchdog observer, a real Redis broker and real ``celery worker``
processes. Bursts of edits end in an index equal to the disk; events and queue messages dropped
on purpose (in the live index and in a rebuild) are healed by the reconcile."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.embeddings.registry import choose_provider
from pipeline.fleet.broker import FleetDispatcher
from pipeline.ingest.reindex import rebuild_step
from pipeline.status import index_status
from tests.fakes.tiny_gguf import write_tiny_gguf
from tests.indexcheck import index_vs_disk, wait_until
from workers.app import app
from workers.indexing import run_index
from workers.watching import WatchService

pytestmark = pytest.mark.integration


@pytest.fixture
def local_settings(workspace: Path, make_settings, tiny_model, broker_url):
    return make_settings(workspace, provider="local", brokerUrl=broker_url,
                         local={"modelPath": str(tiny_model)})


@pytest.fixture
def service(local_settings, broker_url) -> Iterator[WatchService]:
    """A watch service (observer not started) with a real broker connection."""
    choice = choose_provider(local_settings)
    with FleetDispatcher(broker_url) as fleet:
        yield WatchService(local_settings, choice, fleet, reconcile_s=3600, lost_after_s=0.0,
                           debounce_s=0.3)


@pytest.fixture
def running(service: WatchService) -> Iterator[WatchService]:
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    try:
        yield service
    finally:
        service.stop()
        thread.join(10)


def test_burst_of_500_files_then_edits_moves_deletes(running: WatchService, fleet,
                                                     workspace: Path) -> None:
    settings = running.settings
    fleet.start(["store.0"], "writer")
    fleet.start(["embed.local"], "embed", concurrency=2)
    wait_until(lambda: index_vs_disk(settings), 60, "startup reconcile")
    assert running.stats.reconciles == 1
    time.sleep(0.5)
    # A `git checkout` of 500 files.
    burst = workspace / "memory" / "burst"
    burst.mkdir()
    for i in range(500):
        (burst / f"note-{i:03d}.md").write_text(f"# Note {i}\n\nProject codename blue-{i} "
                                                f"ships in week {i % 52}.\n")
    wait_until(lambda: index_vs_disk(settings), 120, "after the burst")
    assert index_status(settings)["files"] == 505
    # Editors save by writing a temporary file and renaming it over the note; files move and
    # vanish; a symlink and a file in node_modules appear (neither is memory).
    for i in range(0, 100):
        tmp = burst / f".note-{i:03d}.md.tmp"
        tmp.write_text(f"# Note {i}\n\nRewritten: codename green-{i}.\n")
        os.replace(tmp, burst / f"note-{i:03d}.md")
    for i in range(100, 150):
        (burst / f"note-{i:03d}.md").unlink()
    (workspace / "memory" / "archive").mkdir()
    for i in range(150, 170):
        os.replace(burst / f"note-{i:03d}.md", workspace / "memory" / "archive" / f"{i}.md")
    (workspace / "memory" / "node_modules").mkdir()
    (workspace / "memory" / "node_modules" / "pkg.md").write_text("# not memory\n")
    (workspace / "memory" / "alias.md").symlink_to(burst / "note-200.md")
    wait_until(lambda: index_vs_disk(settings), 120, "after edits, moves and deletes")
    assert index_status(settings)["files"] == 505 - 50
    # All of it came through watcher batches, not through the periodic reconcile.
    assert running.stats.reconciles == 1 and running.stats.batches >= 2, running.stats
    assert running.stats.last_report is not None and running.stats.last_report.files < 505


def test_dropped_events_are_healed_by_reconcile(running: WatchService, fleet,
                                                workspace: Path) -> None:
    settings = running.settings
    fleet.start(["store.0", "embed.local"], "both")
    wait_until(lambda: index_vs_disk(settings), 60, "startup reconcile")
    running.watcher.observer.unschedule_all()  # from here on, every event is lost
    (workspace / "memory" / "2026-11-10.md").write_text("# 2026-11-10\n\n- Sold the boat.\n")
    (workspace / "memory" / "2026-11-18.md").unlink()
    (workspace / "memory" / "late.md").write_text("# Late\n\n- Learned to juggle.\n")
    time.sleep(1.5)
    assert index_vs_disk(settings), "the changes should not have been seen yet"
    running._next_reconcile = 0.0  # the periodic reconcile comes due
    wait_until(lambda: index_vs_disk(settings), 60, "after reconcile")
    assert running.stats.reconciles == 2


def test_lost_queue_messages_are_queued_again(service: WatchService, fleet, broker_url) -> None:
    settings = service.settings
    fleet.start(["store.0"], "writer")
    first = service.reconcile()
    assert first.chunks_queued > 0 and service.stats.requeued_lost == 0
    with app.connection_for_write(broker_url) as connection:
        assert connection.default_channel.queue_purge("embed.local") == first.jobs
    fleet.start(["embed.local"], "embed")
    time.sleep(2.0)
    assert index_status(settings)["pending"] == first.chunks_queued  # nothing will come
    second = service.reconcile()
    assert second.chunks_queued == first.chunks_queued
    assert service.stats.requeued_lost == first.chunks_queued
    wait_until(lambda: index_vs_disk(settings), 60, "after re-queueing lost chunks")


def test_lost_messages_of_a_rebuild_are_queued_again(local_settings, make_settings, workspace,
                                                     broker_url, fleet, tmp_path) -> None:
    fleet.start(["store.0"], "writer")
    embed = fleet.start(["embed.local"], "embed")
    run_index(local_settings, wait=True)
    embed.terminate()
    embed.wait(20)
    other = write_tiny_gguf(tmp_path / "tiny-bert-b.gguf", hidden=48)
    new = make_settings(workspace, provider="local", brokerUrl=broker_url,
                        local={"modelPath": str(other)})
    choice = choose_provider(new)
    with app.connection_for_write(broker_url) as connection, \
            FleetDispatcher(broker_url) as dispatcher:
        service = WatchService(new, choice, dispatcher, reconcile_s=3600, lost_after_s=0.0)
        service.reconcile()  # sees the new model: starts a rebuild, whose first pass queues
        queued = index_status(new)["reindex"]["pending"]
        assert queued > 0 and index_status(new)["reindex"]["chunksQueued"] == queued
        assert connection.default_channel.queue_purge("embed.local") >= 1  # lost, on purpose
        fleet.start(["embed.local"], "embed")
        time.sleep(2.0)
        assert index_status(new)["reindex"]["pending"] == queued  # nothing will come
        service.reconcile()  # queues idle: the rebuild's lost chunks are queued again
        assert index_status(new)["reindex"]["chunksQueued"] == 2 * queued
        deadline = time.monotonic() + 60
        progress = rebuild_step(new, choice, service.submit)
        while not progress.done and time.monotonic() < deadline:
            time.sleep(0.3)
            progress = rebuild_step(new, choice, service.submit)
    assert progress.done, fleet.logs()
    assert index_status(new)["model"] == "tiny-bert-b"
    wait_until(lambda: index_vs_disk(new), 10, "after the rebuild")
