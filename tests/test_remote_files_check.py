"""The files check of a remote search: shared by its concurrent callers
(:class:`pipeline.ingest.transfer.FilesHereDigest`: each caller gets the digest of a look at
the files begun after it asked, so a file changed before a search is always noticed, while
callers that ask together share one look), and asked of a reader older than ``storeDigest``
as it was asked before."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipeline.config.settings import Settings
from pipeline.fleet.reader import unwrap
from pipeline.ingest import transfer
from pipeline.ingest.transfer import FilesHereDigest, files_here_digest
from pipeline.memory import Memory
from pipeline.messages import QueryReply, QueryRequest
from pipeline.remote import RemoteMemory
from workers.reader import Reader


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


class _CountingCondition(threading.Condition):
    """A condition that counts the threads waiting on it (``wait`` is entered holding its
    lock), so a test knows a caller is parked inside :meth:`FilesHereDigest.get`."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = 0

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting += 1
        try:
            return super().wait(timeout)
        finally:
            self.waiting -= 1


def _shared(settings: Settings) -> FilesHereDigest:
    """A FilesHereDigest whose callers can be seen waiting (its condition counts them)."""
    shared = FilesHereDigest(settings)
    shared._cond = _CountingCondition()
    return shared


def _asking(shared: FilesHereDigest, into: list[object], *, waiting: int | None = None
            ) -> threading.Thread:
    """A thread that asks ``shared`` once, started; with ``waiting``, back once that many
    callers wait inside :meth:`FilesHereDigest.get` (this one among them)."""

    def ask() -> None:
        try:
            into.append(shared.get())
        except OSError as exc:
            into.append(exc)

    thread = threading.Thread(target=ask)
    thread.start()
    deadline = time.monotonic() + 30
    while waiting is not None and shared._cond.waiting < waiting:
        assert time.monotonic() < deadline, "the caller never waited for the look under way"
        time.sleep(0.002)
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
    shared = _shared(settings)
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
    others = [_asking(shared, later, waiting=n) for n in (1, 2)]
    looks.go.set()
    for thread in (first, *others):
        thread.join(10)
    assert a == [before] and later == [after, after] and after != before
    assert looks.count == 1  # B and C shared one look


def test_a_failed_look_fails_its_caller_and_the_others_look_again(settings: Settings,
                                                                  looks: Looks) -> None:
    shared = _shared(settings)
    looks.hold.set()
    looks.fail = True
    a: list[object] = []
    first = _asking(shared, a)
    assert looks.held.wait(10)
    b: list[object] = []
    second = _asking(shared, b, waiting=1)
    looks.go.set()
    first.join(10)
    second.join(10)
    assert isinstance(a[0], OSError) and b == [files_here_digest(settings)]


class OlderReader:
    """The way to a reader of a memq before ``storeDigest`` (a fleet being upgraded): a real
    :class:`~workers.reader.Reader` of the store in this process, behind a door that refuses
    ``storeDigest`` as such a reader's message check does."""

    def __init__(self, memory: Memory, reader: Reader) -> None:
        self.memory, self.reader = memory, reader
        self.asked: list[dict[str, object]] = []

    def ask(self, request: QueryRequest) -> QueryReply:
        self.asked.append(dict(request.args))
        if "storeDigest" in request.args:
            return QueryReply(error="query.args has an unknown field 'storeDigest'",
                              kind="refused", node="older")
        return self.reader.reply_to(self.memory, request, "older")

    send = ask

    def wait(self, sent: QueryReply) -> QueryReply:
        return sent

    def answer(self, request: QueryRequest) -> object:
        return unwrap(self.ask(request), request)


def test_a_reader_older_than_the_store_digest_is_asked_as_before(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its refusal of ``storeDigest`` brings the same search again with the digest of the
    files here (``filesDigest``): in step, nothing more; a changed file is counted and sent."""
    with Memory(settings=settings) as memory:
        memory.index()
    with Memory(settings=settings) as memory, Reader() as reader:
        older = OlderReader(memory, reader)
        monkeypatch.setattr(RemoteMemory, "reader", property(lambda self: older))
        sent: list[list[Path] | None] = []
        monkeypatch.setattr(RemoteMemory, "produce",
                            lambda self, **kw: sent.append(kw.get("paths")) or (None, None))
        remote = RemoteMemory(settings)
        found = remote.search("Zigbee", sync=True)
        assert found.hits and found.dirty is None and not found.syncing
        assert [sorted(a) for a in older.asked] == [
            ["citations", "query", "stale", "storeDigest"],
            ["citations", "filesDigest", "query", "stale"]]
        assert older.asked[1]["filesDigest"] == files_here_digest(settings)
        _note(settings).write_text(_note(settings).read_text() + "\nZigbee again.\n")
        changed = remote.search("Zigbee", sync=True)
        assert (changed.dirty, changed.syncing) == (1, True)
        assert sent == [[_note(settings)]]


class RefusingReader(OlderReader):
    """A reader that refuses every search, for a reason of its own."""

    def ask(self, request: QueryRequest) -> QueryReply:
        self.asked.append(dict(request.args))
        return QueryReply(error="this reader's own reason", kind="refused", node="refusing")

    send = ask


def test_a_refusal_for_another_reason_is_asked_once_more_and_told(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any refusal of a search that asked for ``storeDigest`` is asked again the old way (an
    older reader's refusal is known by its kind, not its words); a reader that refuses that
    too is not asked a third time, and its reason reaches the caller."""
    with Memory(settings=settings) as memory:
        memory.index()
    with Memory(settings=settings) as memory, Reader() as reader:
        refusing = RefusingReader(memory, reader)
        monkeypatch.setattr(RemoteMemory, "reader", property(lambda self: refusing))
        found = RemoteMemory(settings).search("Zigbee", sync=True)
        assert found.mode == "unavailable" and "this reader's own reason" in found.error
        assert [sorted(a) for a in refusing.asked] == [
            ["citations", "query", "stale", "storeDigest"],
            ["citations", "filesDigest", "query", "stale"]]
