"""How a producer pass on the files' host is cut into messages for the shard's writer
(:func:`pipeline.ingest.transfer.packed`): the first part goes as soon as it holds
``FIRST_MESSAGE_BYTES`` (the writer applies it while the rest is read), the others hold up to
``MESSAGE_MAX_BYTES``; nothing is lost, the order is kept, the last part says so, and the
pass's errors travel even when they turn up after the first part left."""

from __future__ import annotations

from collections.abc import Iterator

from pipeline.ingest import transfer
from pipeline.ingest.transfer import FIRST_MESSAGE_BYTES, MESSAGE_MAX_BYTES, packed
from pipeline.messages import FileChange, FileChanges


def change(n: int, size: int = 10_000) -> FileChange:
    text = f"# note {n}\n" + "x" * size
    return FileChange(f"memory/n{n:05d}.md", "memory", "write", 1, len(text), "0" * 64,
                      text=text)


def cut(changes: list[FileChange], errors: list[str] | None = None,
        **keys: object) -> list[FileChanges]:
    return list(packed(iter(changes), memory="m", job="m:j", files=len(changes),
                       errors=errors if errors is not None else [], shard=0,
                       interactive=False, origin="remote", **keys))


def test_the_first_part_is_small_the_others_large_and_nothing_is_lost() -> None:
    changes = [change(n) for n in range(600)]  # ~6 MB
    parts = cut(changes)
    sizes = [sum(c.weight for c in p.changes) for p in parts]
    assert sizes[0] <= FIRST_MESSAGE_BYTES < sizes[0] + changes[0].weight
    assert all(size <= MESSAGE_MAX_BYTES for size in sizes[1:])
    assert sizes[1] > MESSAGE_MAX_BYTES - changes[0].weight  # full, not first-sized
    assert [c for p in parts for c in p.changes] == changes
    assert [p.part for p in parts] == list(range(len(parts)))
    assert [p.last for p in parts] == [False] * (len(parts) - 1) + [True]
    assert {p.files for p in parts} == {600}


def test_a_small_pass_is_one_message_and_an_empty_one_none_unless_asked() -> None:
    parts = cut([change(1), change(2)])
    assert len(parts) == 1 and parts[0].last and len(parts[0].changes) == 2
    assert cut([], empty=False) == []
    (only,) = cut([], retry_failed=True, empty=True)
    assert only.changes == () and only.last and only.retry_failed


def test_the_first_part_leaves_before_the_rest_is_read() -> None:
    read: list[int] = []

    def reading() -> Iterator[FileChange]:
        for n in range(400):
            read.append(n)
            yield change(n)

    parts = packed(reading(), memory="m", job="m:j", files=400, errors=[], shard=0,
                   interactive=False, origin="remote")
    first = next(parts)
    assert not first.last and len(read) < 100  # ~50 files of 10 kB make the first part
    assert len(first.changes) == len(read) - 1  # the one that did not fit opens the next
    assert sum(len(p.changes) for p in parts) + len(first.changes) == 400


def test_errors_found_after_the_first_part_travel_in_the_last() -> None:
    errors = ["memory/old/: unreadable folder"]

    def reading() -> Iterator[FileChange]:
        for n in range(300):
            if n == 200:
                errors.append("sessions/x.jsonl: unreadable")
            yield change(n)

    parts = list(packed(reading(), memory="m", job="m:j", files=300, errors=errors, shard=0,
                        interactive=False, origin="remote"))
    assert len(parts) >= 2
    assert parts[0].errors == ("memory/old/: unreadable folder",)
    assert parts[-1].errors == ("sessions/x.jsonl: unreadable",)
    assert all(p.errors == () for p in parts[1:-1])


def test_a_first_part_of_one_large_file_goes_alone() -> None:
    big = change(0, size=FIRST_MESSAGE_BYTES * 2)
    parts = cut([big, change(1)])
    assert [len(p.changes) for p in parts] == [1, 1]
    assert len(big.text or "") <= transfer.FILE_MAX_BYTES


def test_the_writer_keeps_each_memory_files_text_with_its_chunks(tmp_path, make_settings) -> None:
    """What the writer applies (:func:`pipeline.ingest.transfer.apply_changes`): each memory
    file's chunks and its text for ``memory_get`` on hosts without the files, written together;
    the same bytes again (a touch) keep the text; a file that could not be read keeps none."""
    import hashlib

    from pipeline.embeddings.registry import choose_provider
    from pipeline.ingest.transfer import apply_changes
    from pipeline.store.engine import connect

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    settings = make_settings(ws, provider="none")

    def write(path: str, text: str, mtime: int = 1) -> FileChange:
        body = text.encode()
        return FileChange(path, "memory", "write", mtime, len(body),
                          hashlib.sha256(body).hexdigest(), text=text)

    first = [write("memory/a.md", "# A\n\nAlpha herons.\n"),
             write("memory/b.md", "# B\n\nBeta egrets.\n"),
             FileChange("memory/c.md", "memory", "write", 1, 3, error="unreadable")]
    db = connect(settings.store.path, want_vectors=False)
    try:
        choice = choose_provider(settings)
        report, _ = apply_changes(db, settings, choice, tuple(first))
        assert report.changed == 3 and report.errors == ["memory/c.md: unreadable"]
        texts = dict(db.conn.execute("SELECT path, text FROM file_texts").fetchall())
        assert texts == {"memory/a.md": "# A\n\nAlpha herons.\n",
                         "memory/b.md": "# B\n\nBeta egrets.\n"}
        chunks = {row[0] for row in db.conn.execute("SELECT path FROM chunks").fetchall()}
        assert chunks == {"memory/a.md", "memory/b.md"}
        again, _ = apply_changes(db, settings, choice,
                                 (write("memory/a.md", "# A\n\nAlpha herons.\n", mtime=2),))
        assert again.changed == 0
        texts = dict(db.conn.execute("SELECT path, text FROM file_texts").fetchall())
        assert texts["memory/a.md"] == "# A\n\nAlpha herons.\n"
    finally:
        db.close()
