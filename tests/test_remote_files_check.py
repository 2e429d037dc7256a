"""The files check of a remote search, shared by its concurrent callers
(:class:`pipeline.ingest.transfer.FilesHereDigest`): each caller gets the digest of a look at
the files begun after it asked, so a file changed before a search is always noticed, while
callers that ask together share one look."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipeline.config.settings import Settings
from pipeline.ingest import transfer
from pipeline.ingest.transfer import FilesHereDigest, files_here_digest


@pytest.fixture
def settings(workspace: Path, make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(workspace, provider="none")


class Looks:
    """The real :func:`files_here_digest`, counted; a look can be held until let go."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.hold = threading.Event()
        self.held = threading.Event()
        self.go = threading.Event()
        self.fail = False
        real = transfer.files_here_digest

        def look(settings: Settings) -> str | None:
            self.count += 1
            digest = real(settings)
            if self.hold.is_set():
                self.hold.clear()
                self.held.set()
                assert self.go.wait(10)
            if self.fail:
                self.fail = False
                raise OSError("the disk went away")
            return digest

        monkeypatch.setattr(transfer, "files_here_digest", look)


@pytest.fixture
def looks(monkeypatch: pytest.MonkeyPatch) -> Iterator[Looks]:
    counted = Looks(monkeypatch)
    yield counted
    counted.go.set()


def _asking(shared: FilesHereDigest, into: list[object]) -> threading.Thread:
    """A thread that asks ``shared`` once, started; back once it is about to ask (a moment
    later it waits inside :meth:`FilesHereDigest.get`)."""
    asking = threading.Event()

    def ask() -> None:
        asking.set()
        try:
            into.append(shared.get())
        except OSError as exc:
            into.append(exc)

    thread = threading.Thread(target=ask)
    thread.start()
    assert asking.wait(10)
    time.sleep(0.2)
    return thread


def _note(settings: Settings) -> Path:
    return next((settings.workspace / "memory").glob("*.md"))


def test_one_caller_looks_each_time(settings: Settings, looks: Looks) -> None:
    shared = FilesHereDigest(settings)
    first = shared.get()
    assert first == files_here_digest(settings) and first is not None
    _note(settings).write_text("changed\n")
    assert shared.get() == files_here_digest(settings) != first
    assert looks.count == 2


def test_a_look_under_way_is_never_given_to_a_later_ask(settings: Settings,
                                                        looks: Looks) -> None:
    """B and C ask while A's look runs (it read the files before they were changed): they get
    the next look, begun after they asked, which sees the change; they share it."""
    shared = FilesHereDigest(settings)
    before = files_here_digest(settings)
    looks.count = 0
    looks.hold.set()
    a: list[object] = []
    first = _asking(shared, a)
    assert looks.held.wait(10)
    _note(settings).write_text("changed while A looked\n")
    after = files_here_digest(settings)
    looks.count = 0
    later: list[object] = []
    others = [_asking(shared, later) for _ in range(2)]
    looks.go.set()
    for thread in (first, *others):
        thread.join(10)
    assert a == [before] and later == [after, after] and after != before
    assert looks.count == 1  # B and C shared one look


def test_a_failed_look_fails_its_caller_and_the_others_look_again(settings: Settings,
                                                                  looks: Looks) -> None:
    shared = FilesHereDigest(settings)
    looks.hold.set()
    looks.fail = True
    a: list[object] = []
    first = _asking(shared, a)
    assert looks.held.wait(10)
    b: list[object] = []
    second = _asking(shared, b)
    looks.go.set()
    first.join(10)
    second.join(10)
    assert isinstance(a[0], OSError) and b == [files_here_digest(settings)]
