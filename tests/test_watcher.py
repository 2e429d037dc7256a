"""The watcher's parts without queues: debounce, which paths are memory, targeted syncs, and
real watchdog observers (inotify and polling) turning file changes into batches."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from watchdog.observers import Observer

from pipeline.embeddings.registry import choose_provider
from pipeline.ingest.producer import index_once
from pipeline.ingest.sources import memory_files, memory_files_at
from pipeline.ingest.watcher import ChangeBatcher, Watcher, watch_targets
from pipeline.store.engine import connect


def test_batch_waits_until_writes_settle() -> None:
    b = ChangeBatcher(debounce_s=1.5, max_wait_s=10)
    b.add(Path("/a"), now=0.0)
    b.add(Path("/b"), now=1.0)
    assert b.take(now=2.0) is None  # 1.0 s since the last event
    assert b.take(now=2.5) == {Path("/a"), Path("/b")}
    assert b.take(now=9.0) is None


def test_batch_of_endless_writes_is_handed_over_after_max_wait() -> None:
    b = ChangeBatcher(debounce_s=1.5, max_wait_s=10)
    for t in range(0, 11):
        b.add(Path("/busy"), now=float(t))
        if t < 10:
            assert b.take(now=t + 0.5) is None
    assert b.take(now=10.5) == {Path("/busy")}


def _tree(ws: Path) -> None:
    (ws / "memory" / "sub").mkdir(parents=True)
    (ws / "memory" / "node_modules").mkdir()
    (ws / "notes").mkdir()
    (ws / "MEMORY.md").write_text("# root\n")
    (ws / "memory" / "a.md").write_text("a\n")
    (ws / "memory" / "sub" / "b.md").write_text("b\n")
    (ws / "memory" / "sub" / "c.txt").write_text("not markdown\n")
    (ws / "memory" / "node_modules" / "x.md").write_text("ignored\n")
    (ws / "notes" / "n.md").write_text("extra\n")
    (ws / "memory" / "link.md").symlink_to(ws / "notes" / "n.md")
    (ws / "memory" / "linkdir").symlink_to(ws / "notes")


def test_memory_files_at_matches_the_full_scan(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _tree(ws)
    extras = (Path("notes"),)
    full = {f.path for f in memory_files(ws, extras)}
    assert full == {"MEMORY.md", "memory/a.md", "memory/sub/b.md", "notes/n.md"}
    everything = [ws / "MEMORY.md", ws / "memory", ws / "notes", ws / "memory" / "link.md",
                  ws / "memory" / "linkdir" / "n.md", ws / "memory" / "node_modules" / "x.md",
                  ws / "memory" / "sub" / "c.txt", ws / "elsewhere.md"]
    found, scopes = memory_files_at(ws, extras, everything)
    assert {f.path for f in found} == full
    assert "elsewhere.md" not in scopes and "memory/node_modules/x.md" not in scopes
    assert "memory/linkdir/n.md" not in scopes  # below a symlink: never memory
    one, scopes = memory_files_at(ws, extras, [ws / "memory" / "sub" / "b.md"])
    assert [f.path for f in one] == ["memory/sub/b.md"] and scopes == {"memory/sub/b.md"}


def test_targeted_sync_adds_edits_deletes_and_moves(tmp_path: Path, make_settings) -> None:
    ws = tmp_path / "ws"
    _tree(ws)
    settings = make_settings(ws, provider="none", extraPaths=["notes"])
    choice = choose_provider(settings)
    db = connect(settings.store.path)
    try:
        index_once(db, settings, choice, None)
        paths = lambda: {p for (p,) in db.conn.execute("SELECT path FROM files")}  # noqa: E731
        assert paths() == {"MEMORY.md", "memory/a.md", "memory/sub/b.md", "notes/n.md"}
        (ws / "memory" / "sub").rename(ws / "memory" / "moved")
        (ws / "memory" / "a.md").write_text("a changed\n")
        (ws / "MEMORY.md").unlink()
        report = index_once(db, settings, choice, None, paths=[
            ws / "memory" / "sub", ws / "memory" / "moved", ws / "memory" / "a.md",
            ws / "MEMORY.md"])
        assert (report.changed, report.deleted) == (2, 2)
        assert paths() == {"memory/a.md", "memory/moved/b.md", "notes/n.md"}
        # A path outside every root changes nothing, even when the store knows a neighbour.
        report = index_once(db, settings, choice, None, paths=[ws / "other" / "a.md"])
        assert (report.changed, report.deleted) == (0, 0)
        assert paths() == {p.path for p in memory_files(ws, settings.extra_paths)}
    finally:
        db.close()


def test_watch_targets_are_folders_not_files(tmp_path: Path, make_settings) -> None:
    ws = tmp_path / "ws"
    _tree(ws)
    (ws / "single.md").write_text("one extra file\n")
    settings = make_settings(ws, provider="none", extraPaths=["notes", "single.md"])
    assert dict(watch_targets(settings)) == {ws: False, ws / "memory": True,
                                             ws / "notes": True}


@pytest.mark.parametrize("polling", [False, True], ids=["inotify", "polling"])
def test_observer_turns_changes_into_one_settled_batch(tmp_path: Path, make_settings,
                                                       polling: bool) -> None:
    ws = tmp_path / "ws"
    _tree(ws)
    settings = make_settings(ws, provider="none")
    batches: list[set[Path]] = []
    watcher = Watcher(settings, batches.append, debounce_s=0.5, polling=polling,
                      poll_interval_s=0.2)
    thread = threading.Thread(target=watcher.run)
    thread.start()
    try:
        time.sleep(0.5)  # the observer takes its first snapshot / adds its watches
        # An editor's save: write a temporary file, then rename it over the note.
        tmp = ws / "memory" / ".a.md.swp"
        tmp.write_text("a saved\n")
        os.replace(tmp, ws / "memory" / "a.md")
        (ws / "memory" / "node_modules" / "y.md").write_text("ignored\n")
        (ws / "memory" / "sub" / "new.md").write_text("new\n")
        deadline = time.monotonic() + 10
        while not batches and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        watcher.stop()
        thread.join(10)
    assert len(batches) == 1, batches
    batch = batches[0]
    assert ws / "memory" / "a.md" in batch and ws / "memory" / "sub" / "new.md" in batch
    assert not any("node_modules" in p.parts for p in batch)


@contextmanager
def running_watcher(ws: Path, make_settings) -> Iterator[tuple[Watcher, list[set[Path]]]]:
    """A native watcher of the tree ``_tree`` makes at ``ws``, running in a thread; its
    batches, appended as they come."""
    _tree(ws)
    batches: list[set[Path]] = []
    watcher = Watcher(make_settings(ws, provider="none"), batches.append, debounce_s=0.3)
    thread = threading.Thread(target=watcher.run)
    thread.start()
    try:
        time.sleep(0.3)
        yield watcher, batches
    finally:
        watcher.stop()
        thread.join(10)


def in_a_batch(path: Path, batches: list[set[Path]], timeout: float = 10) -> bool:
    """Whether ``path`` is in one of ``batches`` within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(path in b for b in batches):
            return True
        time.sleep(0.05)
    return False


def test_memory_folder_deleted_and_recreated_is_watched_again(tmp_path: Path,
                                                              make_settings) -> None:
    ws = tmp_path / "ws"
    with running_watcher(ws, make_settings) as (_, batches):
        shutil.rmtree(ws / "memory")
        assert in_a_batch(ws / "memory", batches)
        (ws / "memory").mkdir()
        time.sleep(0.5)  # the new folder is picked up by the loop
        (ws / "memory" / "again.md").write_text("back\n")
        assert in_a_batch(ws / "memory" / "again.md", batches), batches


def test_workspace_deleted_and_recreated_keeps_native_events(tmp_path: Path,
                                                             make_settings) -> None:
    """A workspace that vanishes is not an inotify limit: the watcher keeps native events (no
    fall-back to polling) and watches the workspace again once it is back."""
    ws = tmp_path / "ws"
    with running_watcher(ws, make_settings) as (watcher, batches):
        shutil.rmtree(ws)
        time.sleep(0.5)  # a few loop turns without the workspace
        assert not watcher.polling, watcher.polling_reason
        ws.mkdir()
        time.sleep(0.5)  # the loop schedules the workspace again
        (ws / "MEMORY.md").write_text("back\n")
        assert in_a_batch(ws / "MEMORY.md", batches), batches
        assert not watcher.polling, watcher.polling_reason


def test_sync_watch_false_watches_nothing(tmp_path: Path, make_settings) -> None:
    ws = tmp_path / "ws"
    _tree(ws)
    ticks: list[int] = []
    watcher = Watcher(make_settings(ws, provider="none", sync={"watch": False}),
                      lambda batch: pytest.fail(f"no batch expected: {batch}"),
                      on_tick=lambda: ticks.append(1), debounce_s=0.1)
    watcher.start()
    try:
        (ws / "memory" / "a.md").write_text("changed\n")
        for _ in range(10):
            time.sleep(0.05)
            watcher.step()
    finally:
        watcher.observer.stop()
        watcher.observer.join(5)
    assert len(ticks) == 10 and watcher.observer.emitters == set()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to count descriptors")
def test_watching_a_big_tree_costs_a_few_descriptors_not_one_per_file(tmp_path: Path,
                                                                      make_settings) -> None:
    ws = tmp_path / "ws"
    for d in range(60):
        folder = ws / "memory" / f"topic-{d:02d}"
        folder.mkdir(parents=True)
        for f in range(50):
            (folder / f"note-{f:02d}.md").write_text(f"note {d}/{f}\n")
    before = len(os.listdir("/proc/self/fd"))
    watcher = Watcher(make_settings(ws, provider="none"), lambda batch: None, debounce_s=0.1)
    watcher.start()
    try:
        during = len(os.listdir("/proc/self/fd"))
    finally:
        watcher.observer.stop()
        watcher.observer.join(5)
    assert during - before < 16, (before, during)  # 3,000 files in 61 folders


MOUNTINFO_SAMPLE = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /srv/share rw,relatime shared:20 - nfs4 nas:/export rw,vers=4.2
41 22 0:36 / /mnt/c rw,noatime - 9p drvfs rw,aname=drvfs
42 40 8:2 / /srv/share/local\\040disk rw,relatime - ext4 /dev/sdb1 rw
"""


def test_file_system_of_takes_the_deepest_mount() -> None:
    from pipeline.ingest.watcher import file_system_of, polling_needed

    assert file_system_of(Path("/home/me/ws"), MOUNTINFO_SAMPLE) == "ext4"
    assert file_system_of(Path("/srv/share/agent/memory"), MOUNTINFO_SAMPLE) == "nfs4"
    assert file_system_of(Path("/srv/share/local disk/ws"), MOUNTINFO_SAMPLE) == "ext4"
    assert file_system_of(Path("/srv/shared"), MOUNTINFO_SAMPLE) == "ext4"  # not /srv/share
    assert polling_needed([Path("/home/me/ws")], MOUNTINFO_SAMPLE) is None
    why = polling_needed([Path("/home/me/ws"), Path("/mnt/c/Users/me")], MOUNTINFO_SAMPLE)
    assert why == "/mnt/c/Users/me is on 9p, which raises no events for changes made elsewhere"


def test_polling_setting_forces_or_refuses_polling(tmp_path: Path, make_settings,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from watchdog.observers.polling import PollingObserver

    import pipeline.ingest.watcher as watcher_module

    ws = tmp_path / "ws"
    _tree(ws)
    share = tmp_path / "mountinfo"
    share.write_text(f"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
                     f"40 22 0:35 / {ws} rw - nfs nas:/export rw\n")
    monkeypatch.setattr(watcher_module, "MOUNTINFO", share)
    auto = Watcher(make_settings(ws, provider="none"), lambda batch: None)
    assert auto.polling and isinstance(auto.observer, PollingObserver)  # ws is on NFS
    never = Watcher(make_settings(ws, provider="none", watch={"polling": False}),
                    lambda batch: None)
    assert not never.polling and not isinstance(never.observer, PollingObserver)
    monkeypatch.setattr(watcher_module, "MOUNTINFO", tmp_path / "absent")
    always = Watcher(make_settings(ws, provider="none",
                                   watch={"polling": True, "pollIntervalMs": 250}),
                     lambda batch: None)
    assert always.polling and always.poll_interval_s == 0.25
    assert not Watcher(make_settings(ws, provider="none"), lambda batch: None).polling


class _ExhaustedInotify(Observer):  # type: ignore[misc, valid-type]
    """The native observer on a host whose inotify watch limit is used up."""

    def schedule(self, *args: object, **kwargs: object) -> object:
        raise OSError(28, "inotify watch limit reached")


def _watch_for_a_batch(watcher: Watcher, ws: Path, batches: list[set[Path]]) -> None:
    thread = threading.Thread(target=watcher.run)
    thread.start()
    try:
        time.sleep(0.5)
        (ws / "memory" / "late.md").write_text("late\n")
        deadline = time.monotonic() + 10
        while not batches and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        watcher.stop()
        thread.join(10)


def test_auto_polls_when_native_watches_cannot_be_set(tmp_path: Path, make_settings,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import pipeline.ingest.watcher as watcher_module

    ws = tmp_path / "ws"
    _tree(ws)
    monkeypatch.setattr(watcher_module, "Observer", _ExhaustedInotify)
    monkeypatch.setattr(watcher_module, "MOUNTINFO", tmp_path / "absent")
    batches: list[set[Path]] = []
    watcher = Watcher(make_settings(ws, provider="none"), batches.append, debounce_s=0.3,
                      poll_interval_s=0.2)
    _watch_for_a_batch(watcher, ws, batches)
    assert watcher.polling and batches and ws / "memory" / "late.md" in batches[0]
    refusing = Watcher(make_settings(ws, provider="none", watch={"polling": False}),
                       lambda batch: None)
    with pytest.raises(OSError, match="watch limit"):
        refusing.start()
