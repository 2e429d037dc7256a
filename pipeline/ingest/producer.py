"""The producer: make the store follow the disk, and hand the embedding work to the queues.

One pass diffs the memory files against the ``files`` table (stat first, sha256 to confirm),
re-chunks what changed, writes chunk rows at once (so keyword search sees new text before any
vector exists), serves vectors from the embedding cache, and submits the remaining chunks as
size-bounded embedding jobs. It knows nothing of Celery: the caller passes ``submit``.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import zstandard

from pipeline.config import Settings
from pipeline.embeddings.limits import HARD_MAX_INPUT_BYTES
from pipeline.embeddings.registry import ProviderChoice
from pipeline.errors import StoreError, WorkspaceMissing
from pipeline.ingest.chunking import (
    CHUNKING_VERSION,
    chunk_markdown,
    enforce_input_limit,
    memory_chunks,
)
from pipeline.ingest.globs import PathPatterns
from pipeline.ingest.live_sessions import (
    LiveScan,
    LiveSession,
    live_scope,
    live_sessions,
    live_sessions_at,
    read_live_session,
)
from pipeline.ingest.multimodal import (
    MediaFile,
    MediaParts,
    MediaSource,
    classify,
    file_chunks,
    read_media,
)
from pipeline.ingest.safety import check_deletions, check_files_here
from pipeline.ingest.sessions import (
    read_session_file,
    session_files,
    session_files_at,
    session_folder_path,
)
from pipeline.ingest.sources import (
    SourceFile,
    in_scope,
    memory_files,
    memory_files_at,
)
from pipeline.ingest.transcripts import (
    SESSIONS_SOURCE,
    TRANSCRIPT_VERSION,
    needs_sync,
    transcript_chunks,
)
from pipeline.message_fields import DEFAULT_ROUTE, ProviderSpec, Route
from pipeline.store import cache, reads, schema, writer
from pipeline.store.engine import Database
from pipeline.store.session_paths import move_session_rows
from pipeline.store.vectors import drop_vectors

# A pass with nothing to embed (keyword-only, or no file changed) imports neither the message
# classes (pydantic, NumPy) nor the batch workflow: :func:`queue_pending` does, when it runs.
if TYPE_CHECKING:
    from pipeline.batch.workflow import BatchRouting
    from pipeline.messages import EmbedJob

MAX_FILE_BYTES = 16 * 1024 * 1024
#: A remote provider's job is one HTTP request's worth (OpenClaw's 8000-byte request budget), so
#: a 429 or 5xx retries one request, not a whole group of them.
REMOTE_JOB_MAX_BYTES = HARD_MAX_INPUT_BYTES
REQUEUE_AFTER_S = 3600.0  # a pending chunk queued longer ago than this is presumed lost
#: Provider options that change no vector: the fleet-wide rate limit, whether an API key was
#: used, primary or fallback, and the extra HTTP headers (the endpoint has its own option).
VECTOR_NEUTRAL_OPTIONS = frozenset({"rate_limit", "auth", "role", "headers"})

Submit = Callable[["EmbedJob"], None]


@dataclass
class IndexReport:
    files: int = 0
    changed: int = 0
    deleted: int = 0
    failed: int = 0
    chunks_cached: int = 0
    chunks_queued: int = 0
    chunks_requeued: int = 0  # of those, chunks queued before whose message was presumed lost
    jobs: int = 0
    batch_jobs: int = 0  # provider batch jobs submitted (their chunks are in chunks_queued)
    errors: list[str] = field(default_factory=list)
    rebuild_needed: bool = False

    def counts(self) -> dict[str, int]:
        """The numbers the job log keeps (see :mod:`pipeline.fleet.job_log`)."""
        return {"files": self.files, "changed": self.changed, "deleted": self.deleted,
                "chunks_queued": self.chunks_queued, "chunks_cached": self.chunks_cached,
                "embed_jobs": self.jobs}

    @classmethod
    def from_counts(cls, counts: dict[str, Any]) -> IndexReport:
        """The report of a pass known only by its :meth:`counts` (run on another host)."""
        report = cls()
        for name, attr in (("files", "files"), ("changed", "changed"), ("deleted", "deleted"),
                           ("chunks_queued", "chunks_queued"),
                           ("chunks_cached", "chunks_cached"), ("embed_jobs", "jobs")):
            value = counts.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(report, attr, value)
        return report


def index_identity(spec: ProviderSpec | None, settings: Settings) -> dict[str, Any]:
    """What a store records about its index: the provider spec and what its chunks depend on.

    Provider, model, provider key and options (dimensions live there for remote providers),
    chunking (with memq's :data:`~pipeline.ingest.chunking.CHUNKING_VERSION`), and the scope
    (sources, extra paths, and the multimodal settings when they are on: OpenClaw's scope
    hash). Only its :func:`index_fingerprint` decides whether a store can be kept.
    """
    identity = {
        "provider": spec.name if spec else None,
        "model": spec.model if spec else None,
        "provider_key": spec.provider_key if spec else None,
        "options": spec.options if spec else {},
        "chunk_tokens": settings.chunking.tokens,
        "chunk_overlap": settings.chunking.overlap,
        "chunking_version": CHUNKING_VERSION,
        "sources": list(settings.sources),
        "extra_paths": sorted(str(p) for p in settings.extra_paths),
    }
    if SESSIONS_SOURCE in settings.sources:  # absent without sessions: those stores stay valid
        identity["transcript_version"] = TRANSCRIPT_VERSION
    if settings.multimodal.active:  # absent when off, so older stores keep their fingerprint
        identity["multimodal"] = {"modalities": list(settings.multimodal.modalities),
                                  "max_file_bytes": settings.multimodal.max_file_bytes}
    return identity


def index_fingerprint(identity: dict[str, Any]) -> dict[str, Any]:
    """The part of an index identity its vectors and chunks depend on.

    Provider, model, endpoint, dimensions, task types, local model path, chunking and scope.
    Not the provider key (it hashes the extra headers too), the rate limit, the headers or
    whether an API key was set: changing those must not rebuild an index. Any other change
    builds a new index beside the live one (:mod:`pipeline.ingest.reindex`); the live one is
    never altered in place. A store written before chunking had a version counts as version 1;
    one indexing sessions before transcripts had a version, as transcript version 1.
    """
    fingerprint = {k: v for k, v in identity.items() if k != "provider_key"}
    fingerprint["options"] = {k: v for k, v in (identity.get("options") or {}).items()
                              if k not in VECTOR_NEUTRAL_OPTIONS}
    fingerprint.setdefault("chunking_version", 1)
    if SESSIONS_SOURCE in (identity.get("sources") or ()):
        fingerprint.setdefault("transcript_version", 1)
    return fingerprint


def adopt_identity(db: Database, identity: dict[str, Any]) -> bool:
    """Record the identity of the store's index; False when it was built for another fingerprint.

    A store with the same fingerprint takes the new identity as it is (a new rate limit or
    header set, which moves the provider key); one with another fingerprint is left exactly
    as it is (searches keep answering from it) until a rebuild replaces it.
    """
    current = schema.get_meta(db, "index")
    if current == identity:
        return True
    same = current is not None and index_fingerprint(current) == index_fingerprint(identity)
    if current is not None and not same and reads.has_files(db):
        return False
    with schema.transaction(db):
        if current is not None and not same:
            drop_vectors(db)  # an empty store: nothing to keep, and the width may change
        schema.set_meta(db, "index", identity)
    return True


def decoded(raw: bytes) -> tuple[str | None, str | None]:
    """A text file's bytes as (text, error): Markdown and transcripts are UTF-8 without NUL;
    anything else gets a reason instead of crashing the run."""
    if len(raw) > MAX_FILE_BYTES:
        return None, f"skipped: over the {MAX_FILE_BYTES} byte limit once decompressed"
    if b"\x00" in raw:
        return None, "skipped: contains NUL bytes (binary, not Markdown)"
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return None, f"skipped: not valid UTF-8 (byte {exc.start})"


def _read_text(file: SourceFile, size: int) -> tuple[bytes | None, str | None, str | None]:
    """Return (raw bytes, text, error). Bad files get a reason instead of crashing the run."""
    if size > MAX_FILE_BYTES:
        return None, None, f"skipped: {size} bytes is over the {MAX_FILE_BYTES} byte limit"
    try:
        if file.source == SESSIONS_SOURCE:  # a .zst archive is decompressed
            raw = read_session_file(file.file, MAX_FILE_BYTES)
        else:
            with open(file.file, "rb") as fh:
                raw = fh.read()
    except OSError as exc:
        return None, None, f"unreadable: {exc.strerror or exc}"
    except zstandard.ZstdError as exc:
        return None, None, f"unreadable: a damaged zstd archive ({exc})"
    text, error = decoded(raw)
    return (None if len(raw) > MAX_FILE_BYTES else raw), text, error


@dataclass
class FileRead:
    """What one pass read of a memory file or live transcript, ready to be written."""

    path: str
    source: str
    mtime_ns: int
    size: int
    raw: bytes | None
    text: str | None = None
    error: str | None = None
    media: MediaFile | None = None  # a media file's checked bytes (multimodal)


Known = tuple[str, int, int, str | None]  # a file's (hash, mtime_ns, size, error) in the store


def _read_file(file: SourceFile, known: Known | None, settings: Settings) -> FileRead | None:
    """What a memory file holds now, or None when its stat says it has not changed (or it
    vanished between listing and stat: the next pass deletes it)."""
    try:
        stat = os.stat(file.file)
    except OSError:
        return None
    if known is not None and known[1:3] == (stat.st_mtime_ns, stat.st_size):
        return None
    read = FileRead(file.path, file.source, stat.st_mtime_ns, stat.st_size, None)
    modality = classify(file.path, settings.multimodal)
    if modality is not None:
        read.raw, read.media, read.error = read_media(file.file, file.path, modality,
                                                      stat.st_size, settings.multimodal)
    else:
        read.raw, read.text, read.error = _read_text(file, stat.st_size)
    return read


def _read_live(session: LiveSession, known: Known | None, settings: Settings,
               report: IndexReport) -> FileRead | None:
    """Like :func:`_read_file`, for a live transcript of the agent database: its last change
    and JSONL size stand for the stat; the records it reads are its bytes."""
    if session.cold or (known is not None
                        and known[1:3] == (session.mtime_ns, session.size)):
        return None  # unchanged, or in cold storage (what was indexed of it stays)
    try:
        raw = read_live_session(settings, session)
    except StoreError as exc:  # busy now, or a damaged record: the next pass tries again
        report.errors.append(f"{session.path}: {exc}")
        return None
    if raw is None:
        return None  # moved to cold storage since it was listed
    text = raw.decode("utf-8", errors="replace")
    return FileRead(session.path, SESSIONS_SOURCE, session.mtime_ns, len(raw), raw, text)


def decide(read: FileRead, known: Known | None, settings: Settings) -> str:
    """What a pass does with what it read: ``skip`` a transcript under its delta thresholds,
    ``touch`` unchanged bytes under a new stat, else ``write``."""
    raw = read.raw
    if (read.source == SESSIONS_SOURCE and raw is not None and known is not None
            and known[3] is None and not needs_sync(raw, known[0], known[2], settings)):
        return "skip"  # a transcript that grew a little: wait for the delta thresholds
    digest = hashlib.sha256(raw).hexdigest() if raw is not None else ""
    if known is not None and read.error is None and known[0] == digest and known[3] is None:
        return "touch"
    return "write"


def apply_read(batch: schema.WriteBatch, read: FileRead, known: Known | None,
               settings: Settings, max_input_bytes: int | None, report: IndexReport,
               also: Callable[[Database], None] | None = None) -> None:
    """Write what a pass read: nothing for a transcript under its delta thresholds, a touch
    for unchanged bytes, the error of an unreadable file, else its new chunks. ``also`` is
    written in the same unit (in one of its own when nothing else is written)."""
    db = batch.db
    raw = read.raw
    decision = decide(read, known, settings)
    if decision == "skip":
        if also is not None:
            with batch.unit():
                also(db)
        return
    if decision == "touch":
        with batch.unit():
            writer.touch_file(db, read.path, read.mtime_ns, read.size)
            if also is not None:
                also(db)
        return
    digest = hashlib.sha256(raw).hexdigest() if raw is not None else ""
    record = writer.FileRecord(read.path, read.source, digest, read.mtime_ns, read.size,
                               read.error)
    report.changed += 1
    if read.error is not None:
        report.failed += 1
        report.errors.append(f"{read.path}: {read.error}")
        with batch.unit():
            writer.record_file_error(db, record)
            if also is not None:
                also(db)
        return
    if read.media is not None:
        chunks = file_chunks(read.media)  # one chunk; exempt from the text input limit
    else:
        tokens, overlap = settings.chunking.tokens, settings.chunking.overlap
        if read.source == SESSIONS_SOURCE:
            chunks = transcript_chunks(read.text, tokens, overlap)
        else:  # annotations stripped, MEMORY.md/USER.md one chunk per entry (OpenClaw 2026.9)
            chunks = memory_chunks(read.path, read.text, tokens, overlap, chunker=chunk_markdown)
        if max_input_bytes:
            chunks = enforce_input_limit(chunks, max_input_bytes)
    with batch.unit():
        writer.replace_file(db, record, chunks)
        if also is not None:
            also(db)


@dataclass
class Scan:
    """What a pass found of a memory's files: those to look at (``on_disk``, the live
    transcripts ``live``), the known paths that are gone, and its report so far."""

    on_disk: list[SourceFile]
    live: LiveScan | None
    gone: set[str]
    report: IndexReport

    def reads(self, known: dict[str, Known], settings: Settings) -> Iterator[FileRead]:
        """What changed since the store (``known``) saw it, read now."""
        for file in self.on_disk:
            read = _read_file(file, known.get(file.path), settings)
            if read is not None:
                yield read
        for session in self.live.sessions if self.live else ():
            read = _read_live(session, known.get(session.path), settings, self.report)
            if read is not None:
                yield read


def scan_sources(settings: Settings, known: dict[str, Known],
                 paths: Iterable[Path] | None = None, *, allow_deletions: bool = False
                 ) -> Scan:
    """List a memory's files against what the store knows (``known``): every one, or with
    ``paths`` (what a watcher saw change: files or folders) only those. A full scan of a
    workspace that is not there raises :class:`~pipeline.errors.WorkspaceMissing`: its files
    are unknown, not deleted. A scan that would remove every file or most of them (an empty,
    missing or unmounted folder) raises :class:`~pipeline.errors.DeletionRefused` unless
    ``allow_deletions`` (:func:`pipeline.ingest.safety.check_deletions`)."""
    report = IndexReport()
    if paths is None:
        if not settings.workspace.is_dir():
            raise WorkspaceMissing(f"workspace {settings.workspace} of memory "
                                   f"{settings.agent_id!r} is not on this host: its files "
                                   "are indexed where they are (memq index / memq watch "
                                   "there)")
        unreadable: list[tuple[str, str]] = []
        on_disk = memory_files(settings.workspace, settings.extra_paths, settings.multimodal,
                               unreadable=unreadable, patterns=PathPatterns.of(settings))
        on_disk += session_files(settings)
        live = live_sessions(settings, _stats(known))
        # A folder that cannot be listed hides its files; they are not deleted from the index.
        hidden = {folder for folder, _ in unreadable}
        report.errors += [f"{folder}/: unreadable folder ({why}); files indexed from it before "
                          "are kept" for folder, why in unreadable]
        on_disk, hidden = _with_live(on_disk, hidden, live, known, report)
        gone = {p for p in known.keys() - _present(on_disk, live) if not in_scope(p, hidden)}
    else:
        paths = list(paths)
        on_disk, scopes = memory_files_at(settings.workspace, settings.extra_paths, paths,
                                          settings.multimodal,
                                          patterns=PathPatterns.of(settings))
        sessions, session_scopes = session_files_at(settings, paths)
        on_disk, scopes = on_disk + sessions, scopes | session_scopes
        live = live_sessions_at(settings, paths, _stats(known))
        if live is None and (sessions or any(in_scope(live_scope(settings), {s})
                                             for s in scopes)):
            # a legacy copy, or the folder's scope covers them
            live = live_sessions(settings, _stats(known))
        if live is not None:
            scopes.add(live.scope)
            # The live scope may be the sessions folder's too (sessions/<agentId>): what the
            # folder holds is present, not gone.
            listed = {f.path for f in on_disk}
            on_disk += [f for f in session_files(settings) if f.path not in listed]
        on_disk, hidden = _with_live(on_disk, set(), live, known, report)
        present = _present(on_disk, live)
        gone = {p for p in known if p not in present and in_scope(p, scopes)
                and not in_scope(p, hidden)}
    report.files = len(on_disk) + (len(live.sessions) if live else 0)
    check_deletions(settings, known.keys(), gone, report.files, allow=allow_deletions)
    return Scan(on_disk, live, gone, report)


def sync_files(db: Database, settings: Settings, choice: ProviderChoice,
               paths: Iterable[Path] | None = None, *, allow_deletions: bool = False,
               files_here: bool = False) -> IndexReport:
    """Bring chunk rows in line with the disk. Keyword search is complete when this returns.

    With ``paths`` (what a watcher saw change: files or folders), only those are looked at;
    without, every memory file is. A store built for another fingerprint is not touched:
    ``report.rebuild_needed`` says a new index must be built (see :mod:`pipeline.ingest.reindex`).
    A store fed from another host's folder is not synced from this one, and a pass that would
    empty the memory is refused (:mod:`pipeline.ingest.safety`; ``files_here`` and
    ``allow_deletions`` say otherwise).
    """
    schema.ensure_schema(db)
    check_files_here(db, settings, files_here=files_here)
    if not adopt_identity(db, index_identity(choice.spec, settings)):
        return IndexReport(rebuild_needed=True)
    with schema.transaction(db):
        schema.set_meta(db, "mode_reason", choice.reason)
    max_input = choice.provider.max_input_bytes if choice.provider else None
    if SESSIONS_SOURCE in settings.sources:  # transcripts stored as sessions/<file> before
        move_session_rows(db, session_folder_path(settings))
    known = reads.known_files(db)
    scan = scan_sources(settings, known, paths, allow_deletions=allow_deletions)
    report = scan.report
    with schema.WriteBatch(db) as batch:
        for read in scan.reads(known, settings):
            apply_read(batch, read, known.get(read.path), settings, max_input, report)
        for path in sorted(scan.gone):
            with batch.unit():
                writer.delete_file(db, path)
            report.deleted += 1
    return report


def _stats(known: dict[str, tuple[str, int, int, str | None]]) -> dict[str, tuple[int, int]]:
    """path → (mtime_ns, size) of the files the store knows, errors left out (re-read those)."""
    return {path: (mtime, size) for path, (_, mtime, size, error) in known.items()
            if error is None}


def _present(on_disk: list[SourceFile], live: LiveScan | None) -> set[str]:
    return {f.path for f in on_disk} | {s.path for s in (live.sessions if live else ())}


def _with_live(on_disk: list[SourceFile], hidden: set[str], live: LiveScan | None,
               known: dict[str, Any], report: IndexReport) -> tuple[list[SourceFile], set[str]]:
    """Files to sync and hidden scopes, given the live transcripts: a legacy
    ``<sessionId>.jsonl`` file of a live session is left to the live copy (in OpenClaw's
    folder of the agent both have the path ``sessions/<agentId>/<sessionId>.jsonl``); a
    database that cannot be read now hides what was indexed from it (and the legacy copies of
    those)."""
    if live is None:
        return on_disk, hidden
    if live.error is None:
        names = {f"{s.session_id}.jsonl" for s in live.sessions}
    else:
        report.errors.append(f"{live.scope}/: {live.error}; live transcripts indexed before "
                             "are kept")
        hidden = hidden | {live.scope}
        names = {p.rsplit("/", 1)[1] for p in known
                 if in_scope(p, {live.scope}) and p.endswith(".jsonl")}
    return [f for f in on_disk if f.source != SESSIONS_SOURCE
            or f.path.rsplit("/", 1)[1] not in names], hidden


def queue_pending(db: Database, spec: ProviderSpec, submit: Submit, *, memory: str,
                  retry_failed: bool = False, report: IndexReport | None = None,
                  requeue_after_s: float = REQUEUE_AFTER_S, media: MediaParts | None = None,
                  batch: BatchRouting | None = None, route: Route = DEFAULT_ROUTE,
                  use_cache: bool = True) -> IndexReport:
    """Serve pending chunks from the cache and submit the rest as embedding jobs of ``memory``.

    ``use_cache`` (``cache.enabled``) False: the cache is not looked up, every pending chunk
    is embedded.

    Chunks queued less than ``requeue_after_s`` ago are left alone (their job is in flight);
    older ones are presumed lost with their message and queued again, which is safe because
    every write is idempotent. Chunks held by a live provider batch job are never queued again
    while it runs (it may take hours; :mod:`pipeline.batch.workflow` resumes lost ones). Jobs
    name the store by its real path, so a job queued before a rebuild swapped the live index
    cannot write into the new one by accident. With ``batch`` routing on (and the provider's
    batch mode not disabled), text chunks go to provider batch jobs instead. A media chunk
    (``media``) never does: it travels alone in a sync job with the file's bytes inline, read
    now; one whose file changed since it was written waits for the pass that re-syncs it.
    Every job carries ``route`` (the memory's writer shard, and its lane).
    """
    report = report or IndexReport()
    rows = reads.pending_rows(db, retry_failed=retry_failed,
                                queued_before=time.time() - requeue_after_s)
    pending = [row.chunk for row in rows]
    paths = {row.chunk.rowid: row.path for row in rows}
    report.chunks_requeued += sum(1 for row in rows if row.queued)
    if not pending:
        return report
    from pipeline.batch import workflow  # with chunks to embed only (see the imports above)
    from pipeline.messages import JOB_MAX_BYTES, ChunkText, EmbedJob, embed_jobs

    hits = (cache.get_cached(db, spec.name, spec.model, spec.provider_key,
                             (p.hash for p in pending)) if use_cache else {})
    remaining = writer.attach_cached(db, pending, hits)
    report.chunks_cached += len(pending) - len(remaining)
    store = os.path.realpath(db.path)
    media_chunks = [p for p in remaining if media is not None and media.covers(paths[p.rowid])]
    texts = [p for p in remaining if media is None or not media.covers(paths[p.rowid])]
    if texts and batch is not None and workflow.uses_batch(db, spec, batch):
        jobs, chunks = workflow.queue_batches(db, memory, spec, store, texts, batch.options,
                                              batch.submit, Route(route.shard))
        report.batch_jobs += jobs
        report.chunks_queued += chunks
        texts = []
    max_bytes = JOB_MAX_BYTES if spec.name == "local" else REMOTE_JOB_MAX_BYTES
    sync_jobs = embed_jobs(memory, spec, store, texts, max_bytes=max_bytes, route=route)
    for p in media_chunks:
        part = media.inline(paths[p.rowid], p.hash) if media is not None else None
        if part is not None:
            sync_jobs.append(([p], EmbedJob(memory, spec, store,
                                            (ChunkText(p.id, p.hash, p.text, part),),
                                            route=route)))
    for group, job in sync_jobs:
        # Sent, then marked: a producer killed in between leaves the chunks unmarked, and the
        # next pass sends them again (writes are idempotent); marked first, they would wait
        # REQUEUE_AFTER_S for a job that was never sent. An in-process dispatcher writes
        # the job's verdict during ``submit``: ``sent_at`` keeps it from being overwritten.
        sent_at = time.time()
        submit(job)
        writer.mark_queued(db, [p.rowid for p in group], sent_at=sent_at)
        report.jobs += 1
        report.chunks_queued += len(group)
    return report


def index_once(db: Database, settings: Settings, choice: ProviderChoice,
               submit: Submit | None, *, retry_failed: bool = False,
               paths: Iterable[Path] | None = None, requeue_after_s: float = REQUEUE_AFTER_S,
               batch: BatchRouting | None = None, interactive: bool | None = None,
               allow_deletions: bool = False, files_here: bool = False) -> IndexReport:
    """One producer pass: sync chunk rows, then (with a provider) queue what needs vectors.

    ``paths`` limits the pass to what changed (a watcher's batch); ``requeue_after_s`` is how
    old a pending chunk's queue message must be before it is presumed lost; ``batch`` routes
    the chunks to provider batch jobs when ``remote.batch.enabled`` (see :func:`queue_pending`).
    ``interactive`` puts the jobs in the interactive lane, ahead of bulk work (by default, a
    pass over a watcher's ``paths`` is interactive and a full pass is bulk).
    ``allow_deletions`` and ``files_here``: see :func:`sync_files`.
    """
    report = sync_files(db, settings, choice, paths, allow_deletions=allow_deletions,
                        files_here=files_here)
    if report.rebuild_needed:
        return report
    if choice.spec is not None and submit is not None:
        media = (MediaSource(settings.workspace, settings.multimodal)
                 if settings.multimodal.active else None)
        lane = paths is not None if interactive is None else interactive
        queue_pending(db, choice.spec, submit, memory=settings.agent_id,
                      retry_failed=retry_failed, report=report,
                      requeue_after_s=requeue_after_s, media=media, batch=batch,
                      route=Route(settings.fleet.shard_of(settings.agent_id), lane),
                      use_cache=settings.cache.enabled)
    with schema.transaction(db):
        cache.prune_cache(db, settings.cache.max_entries)
        schema.set_meta(db, "last_index_at", time.time())
    return report
