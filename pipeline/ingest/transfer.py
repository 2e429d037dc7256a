"""A producer pass across hosts: the files on one host, the store on another.

The host that holds a memory's files but not its store (an agent's gateway) runs the sending
half, :func:`changes_of` over a scan (:func:`~pipeline.ingest.producer.scan_sources`): it
lists the memory's files as a local pass would, compares them with the store's manifest (what
its shard's reader says the store holds: hash, stat, error of each file) and turns what
changed into :class:`~pipeline.messages.FileChange` items (the bytes of new and changed files,
the new stat of touched ones, the paths that are gone), packed into
:class:`~pipeline.messages.FileChanges` messages of at most :data:`MESSAGE_MAX_BYTES`
(:func:`packed`). A pass over unchanged files sends nothing.

The shard's writer runs the receiving half, :func:`apply_changes`: each path is checked
against the memory's own sources (:mod:`pipeline.ingest.admission`), and the rest is the
local pass's own code (:func:`~pipeline.ingest.producer.apply_read`): the same chunks, the
same fingerprint, the same cache hits. Files larger than :data:`FILE_MAX_BYTES` are not sent:
the writer records them as skipped, as a local pass records a file over its limit.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from functools import partial

from pipeline.config import Settings
from pipeline.embeddings.registry import ProviderChoice
from pipeline.ingest.admission import Admission
from pipeline.ingest.multimodal import MediaFile, check_media, classify
from pipeline.ingest.producer import (
    MAX_FILE_BYTES,
    FileRead,
    IndexReport,
    Known,
    Scan,
    adopt_identity,
    apply_read,
    decide,
    decoded,
    index_identity,
    scan_sources,
)
from pipeline.ingest.refresh import stat_memory_files
from pipeline.ingest.transcripts import SESSIONS_SOURCE
from pipeline.messages import FileChange, FileChanges
from pipeline.store import reads, schema, writer
from pipeline.store.engine import Database

log = logging.getLogger(__name__)

#: At most this much of a pass's file bytes travels in one message (a larger file travels
#: alone, up to :data:`FILE_MAX_BYTES`).
MESSAGE_MAX_BYTES = 4 * 1024 * 1024
#: The first message of a pass is sent once it holds this much: the writer applies it while the
#: producer reads and sends the rest.
FIRST_MESSAGE_BYTES = 512 * 1024
#: The largest file a producer sends to its shard (a local pass's limit too).
FILE_MAX_BYTES = MAX_FILE_BYTES


def _source_of(path: str) -> str:
    return SESSIONS_SOURCE if path.startswith(f"{SESSIONS_SOURCE}/") else "memory"


def _change(read: FileRead, decision: str) -> FileChange:
    raw = read.raw
    digest = hashlib.sha256(raw).hexdigest() if raw is not None else ""
    if decision == "touch":
        return FileChange(read.path, read.source, "touch", read.mtime_ns, read.size, digest)  # type: ignore[arg-type]
    if raw is None:  # nothing could be read: the error travels instead
        return FileChange(read.path, read.source, "write", read.mtime_ns, read.size,  # type: ignore[arg-type]
                          error=read.error or "unreadable")
    if len(raw) > FILE_MAX_BYTES:
        return FileChange(read.path, read.source, "write", read.mtime_ns, read.size,  # type: ignore[arg-type]
                          error=f"skipped: {len(raw)} bytes is over the {FILE_MAX_BYTES} "
                                "bytes a file may carry to its shard")
    text = read.text if read.text is not None and read.media is None else None
    if text is not None and text.encode("utf-8") != raw:  # a live transcript's repairs
        text = None
    data = None if text is not None else base64.b64encode(raw).decode("ascii")
    return FileChange(read.path, read.source, "write", read.mtime_ns, read.size, digest,  # type: ignore[arg-type]
                      text=text, data=data)


def changes_of(scan: Scan, manifest: dict[str, Known], settings: Settings
               ) -> Iterator[FileChange]:
    """What changed in a scan's files since the store saw them (``manifest``: the store's
    files, as its shard's reader lists them), each change as soon as its file is read (a pass
    sends its first part while it reads the rest); the paths that are gone come last."""
    for read in scan.reads(manifest, settings):
        decision = decide(read, manifest.get(read.path), settings)
        if decision != "skip":
            yield _change(read, decision)
    for path in sorted(scan.gone):
        yield FileChange(path, _source_of(path), "delete")  # type: ignore[arg-type]


def packed(changes: Iterable[FileChange], *, memory: str, job: str, files: int,
           errors: list[str], shard: int, interactive: bool, origin: str,
           retry_failed: bool = False, folder: str | None = None,
           empty: bool = True) -> Iterator[FileChanges]:
    """``changes`` as the messages of one pass, in order, each sent as soon as it is full: the
    first of at most :data:`FIRST_MESSAGE_BYTES` of file bytes (the shard's writer starts on it
    while the rest is read), the others of at most :data:`MESSAGE_MAX_BYTES` (a larger file
    alone); the last one says it is the last. ``errors`` (the pass's report's, which may grow
    while ``changes`` is read) travel in the first part, those added later in the last.
    ``folder`` is the identity of the folder they were read from
    (:func:`~pipeline.ingest.safety.folder_identity`). No change at all: one empty message with
    ``empty``, else none."""
    group: list[FileChange] = []
    size, part, sent_errors = 0, 0, 0

    def message(last: bool) -> FileChanges:
        nonlocal part, sent_errors
        told = tuple(errors[sent_errors:]) if part == 0 or last else ()
        sent_errors = len(errors) if told else sent_errors
        out = FileChanges(memory, job, tuple(group), part, last, files, told, origin, shard,
                          interactive, retry_failed, folder)
        part += 1
        return out

    for change in changes:
        limit = FIRST_MESSAGE_BYTES if part == 0 else MESSAGE_MAX_BYTES
        if group and size + change.weight > limit:
            yield message(last=False)
            group, size = [], 0
        group.append(change)
        size += change.weight
    if group or empty:  # after a first part, the last group always holds a change
        yield message(last=True)


def _read_of(change: FileChange, settings: Settings) -> FileRead:
    """The local pass's view of a file that came in a message."""
    read = FileRead(change.path, change.source, change.mtime_ns, change.size, change.raw())
    if read.raw is None:
        read.error = change.error or "unreadable on its host"
        return read
    modality = classify(change.path, settings.multimodal) if change.source == "memory" else None
    if modality is not None:
        read.raw, read.media, read.error = check_media(read.raw, change.path, modality,
                                                       settings.multimodal)
    elif change.source == SESSIONS_SOURCE and change.path.count("/") == 2:
        # a live transcript of the agent database: read as the local pass reads it
        read.text = read.raw.decode("utf-8", errors="replace")
    else:
        read.text, read.error = decoded(read.raw)
    return read


def disk_stats(settings: Settings) -> dict[str, tuple[int, int]] | None:
    """The memory's files on this host (session transcripts left out): path -> (mtime_ns,
    size); None when a folder could not be listed (its files are unknown, not gone)."""
    unreadable: list[tuple[str, str]] = []
    stats = {file.path: (stat.st_mtime_ns, stat.st_size)
             for file, stat in stat_memory_files(settings, unreadable)}
    return None if unreadable else stats


def stats_digest(stats: dict[str, tuple[int, int]]) -> str:
    """One hash of a set of files' stats: equal on both hosts exactly when the store reflects
    every file here (the stat-only test of :func:`stale_against`) and holds no other."""
    digest = hashlib.sha256()
    for path in sorted(stats):
        mtime_ns, size = stats[path]
        digest.update(f"{path}\0{mtime_ns}\0{size}\n".encode())
    return digest.hexdigest()


def files_here_digest(settings: Settings) -> str | None:
    """:func:`stats_digest` of the memory's files on this host (:func:`disk_stats`); None when
    a folder could not be listed (the files are unknown: never in step)."""
    stats = disk_stats(settings)
    return None if stats is None else stats_digest(stats)


class FilesHereDigest:
    """:func:`files_here_digest` of one memory, shared by the searches that ask for it at the
    same time (a :class:`~pipeline.remote.RemoteMemory`'s callers' threads): each gets the
    digest of a look at the files that *began after it asked*, never of one already under way
    (that one could miss a file changed just before the ask), so a search notices changed
    files exactly as with a look of its own. One look runs at a time; the callers that asked
    while it ran share the next one. A look that raises raises in the caller that ran it; the
    others start another."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._cond = threading.Condition()
        self._started = 0  # looks started so far (each numbered by its place)
        self._running = False
        self._last: tuple[int, str | None] = (0, None)  # the last look done, and its digest

    def get(self) -> str | None:
        """The digest of the files here as a look begun after this call found them (None:
        a folder could not be listed)."""
        with self._cond:
            wanted = self._started + 1  # the first look to begin from now on
            while self._last[0] < wanted:
                if not self._running:  # a look of its own, numbered after every ask so far
                    self._running = True
                    self._started += 1
                    look = self._started
                    break
                self._cond.wait()
            else:
                return self._last[1]
        try:
            digest = files_here_digest(self.settings)
        except BaseException:
            with self._cond:
                self._running = False
                self._cond.notify_all()
            raise
        with self._cond:
            self._running = False
            self._last = (look, digest)
            self._cond.notify_all()
        return digest


def stale_against(settings: Settings, manifest: dict[str, Known]) -> list[str]:
    """Memory files on this host that the store (``manifest``) does not reflect: new, gone,
    or with another stat. Stat only, as :func:`~pipeline.ingest.refresh.stale_memory_paths`
    (session transcripts left out: they have their own thresholds)."""
    scan = scan_sources(settings, manifest, allow_deletions=True)  # a look: nothing deleted
    stale = []
    for file in scan.on_disk:
        if file.source != "memory":
            continue
        try:
            stat = os.stat(file.file)
        except OSError:
            continue
        known = manifest.get(file.path)
        if known is None or known[1:3] != (stat.st_mtime_ns, stat.st_size):
            stale.append(file.path)
    return sorted([*stale, *(p for p in scan.gone if _source_of(p) == "memory")])


def apply_changes(db: Database, settings: Settings, choice: ProviderChoice,
                  changes: tuple[FileChange, ...]) -> tuple[IndexReport, dict[str, MediaFile]]:
    """Write the changes a producer on another host sent, as a local pass would write what it
    read. A path outside the memory's own files is refused (logged, counted in
    ``report.errors``, nothing written); a file whose bytes do not match their hash is
    refused too. Returns the report and the media files that came with the changes (their
    chunks are embedded from these bytes)."""
    schema.ensure_schema(db)
    report = IndexReport()
    if not adopt_identity(db, index_identity(choice.spec, settings)):
        report.rebuild_needed = True
        return report, {}
    with schema.transaction(db):
        schema.set_meta(db, "mode_reason", choice.reason)
    max_input = choice.provider.max_input_bytes if choice.provider else None
    known = reads.known_files(db)
    media: dict[str, MediaFile] = {}
    admission = Admission(settings)
    with schema.WriteBatch(db) as batch:
        for change in changes:
            why = admission.refused(change.path, change.source)
            raw = change.raw()
            if why is None and raw is not None and hashlib.sha256(raw).hexdigest() != change.hash:
                why = "its bytes do not match their hash"
            if why is not None:
                log.warning("memory %s: refused a file change for %r: %s", settings.agent_id,
                            change.path, why)
                report.errors.append(f"{change.path}: refused: {why}")
                continue
            current = known.get(change.path)
            if change.op == "delete":
                if current is not None:
                    with batch.unit():
                        writer.delete_file(db, change.path)
                    report.deleted += 1
            elif change.op == "touch":
                if current is not None and current[0] == change.hash and current[3] is None:
                    with batch.unit():
                        writer.touch_file(db, change.path, change.mtime_ns, change.size)
            else:
                read = _read_of(change, settings)
                if read.media is not None:
                    media[read.path] = read.media
                kept = None
                if change.source == "memory" and read.media is None and read.text is not None:
                    kept = partial(writer.keep_text, path=change.path, text=read.text)
                # memory_get's text on a host without the files, in the file's own unit
                apply_read(batch, read, current, settings, max_input, report, also=kept)
    return report, media
