"""The producer: make the store follow the disk, and hand the embedding work to the queues.

One pass diffs the memory files against the ``files`` table (stat first, sha256 to confirm),
re-chunks what changed, writes chunk rows at once (so keyword search sees new text before any
vector exists), serves vectors from the embedding cache, and submits the remaining chunks as
size-bounded embedding jobs. It knows nothing of Celery: the caller passes ``submit``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.chunking import chunk_markdown, enforce_input_limit
from pipeline.config import Settings
from pipeline.embeddings.registry import ProviderChoice, ProviderSpec
from pipeline.sources import SourceFile, memory_files
from pipeline.store import cache, schema, writer
from pipeline.store.engine import Database
from pipeline.store.vectors import drop_vectors

MAX_FILE_BYTES = 16 * 1024 * 1024
JOB_MAX_CHUNKS = 32
JOB_MAX_BYTES = 64 * 1024
REQUEUE_AFTER_S = 3600.0  # a pending chunk queued longer ago than this is presumed lost

EmbedJob = dict[str, Any]


@dataclass
class IndexReport:
    files: int = 0
    changed: int = 0
    deleted: int = 0
    failed: int = 0
    chunks_cached: int = 0
    chunks_queued: int = 0
    jobs: int = 0
    errors: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """The numbers the job log keeps (see :mod:`pipeline.store.joblog`)."""
        return {"files": self.files, "changed": self.changed, "deleted": self.deleted,
                "chunks_queued": self.chunks_queued, "chunks_cached": self.chunks_cached,
                "embed_jobs": self.jobs}


def index_identity(spec: ProviderSpec | None, settings: Settings) -> dict[str, Any]:
    """What the vectors of an index depend on; a change means they must be rebuilt."""
    return {
        "provider": spec.name if spec else None,
        "model": spec.model if spec else None,
        "provider_key": spec.provider_key if spec else None,
        "options": spec.options if spec else {},
        "chunk_tokens": settings.chunking.tokens,
        "chunk_overlap": settings.chunking.overlap,
    }


def _adopt_identity(db: Database, identity: dict[str, Any]) -> None:
    """Record the index identity; if the model changed, drop every vector (no mixing, ever)."""
    current = schema.get_meta(db, "index")
    if current == identity:
        return
    with schema.transaction(db) as conn:
        if current is not None and (current.get("provider"), current.get("model")) != (
            identity["provider"], identity["model"]
        ):
            drop_vectors(db)
            conn.execute("UPDATE chunks SET state = 'pending', error = NULL, queued_at = NULL")
        if current is not None and (current.get("chunk_tokens"), current.get("chunk_overlap")) != (
            identity["chunk_tokens"], identity["chunk_overlap"]
        ):
            conn.execute("UPDATE files SET mtime_ns = -1")  # re-chunk every file
        schema.set_meta(db, "index", identity)


def _read_text(file: SourceFile, size: int) -> tuple[bytes | None, str | None, str | None]:
    """Return (raw bytes, text, error). Bad files get a reason instead of crashing the run."""
    if size > MAX_FILE_BYTES:
        return None, None, f"skipped: {size} bytes is over the {MAX_FILE_BYTES} byte limit"
    try:
        raw = file.abs_path.read_bytes()
    except OSError as exc:
        return None, None, f"unreadable: {exc.strerror or exc}"
    if b"\x00" in raw:
        return raw, None, "skipped: contains NUL bytes (binary, not Markdown)"
    try:
        return raw, raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return raw, None, f"skipped: not valid UTF-8 (byte {exc.start})"


def _sync_file(db: Database, file: SourceFile, known: tuple[str, int, int, str | None] | None,
               settings: Settings, max_input_bytes: int | None, report: IndexReport) -> None:
    try:
        stat = file.abs_path.stat()
    except OSError:
        return  # vanished between listing and stat: the next pass deletes it
    if known is not None and known[1:3] == (stat.st_mtime_ns, stat.st_size):
        return
    raw, text, error = _read_text(file, stat.st_size)
    digest = hashlib.sha256(raw).hexdigest() if raw is not None else ""
    if known is not None and error is None and known[0] == digest and known[3] is None:
        writer.touch_file(db, file.path, stat.st_mtime_ns, stat.st_size)
        return
    record = writer.FileRecord(file.path, file.source, digest, stat.st_mtime_ns, stat.st_size,
                               error)
    report.changed += 1
    if error is not None:
        report.failed += 1
        report.errors.append(f"{file.path}: {error}")
        writer.record_file_error(db, record)
        return
    chunks = chunk_markdown(text, settings.chunking.tokens, settings.chunking.overlap)
    if max_input_bytes:
        chunks = enforce_input_limit(chunks, max_input_bytes)
    writer.replace_file(db, record, chunks)


def sync_files(db: Database, settings: Settings, choice: ProviderChoice) -> IndexReport:
    """Bring chunk rows in line with the disk. Keyword search is complete when this returns."""
    schema.ensure_schema(db)
    _adopt_identity(db, index_identity(choice.spec, settings))
    with schema.transaction(db):
        schema.set_meta(db, "mode_reason", choice.reason)
    report = IndexReport()
    max_input = choice.provider.max_input_bytes if choice.provider else None
    known = {
        path: (h, m, s, e)
        for path, h, m, s, e in db.conn.execute(
            "SELECT path, hash, mtime_ns, size, error FROM files"
        )
    }
    on_disk = memory_files(settings.workspace, settings.extra_paths)
    report.files = len(on_disk)
    for file in on_disk:
        _sync_file(db, file, known.get(file.path), settings, max_input, report)
    present = {f.path for f in on_disk}
    for path in known.keys() - present:
        writer.delete_file(db, path)
        report.deleted += 1
    return report


def group_jobs(pending: Sequence[writer.PendingChunk], max_chunks: int = JOB_MAX_CHUNKS,
               max_bytes: int = JOB_MAX_BYTES) -> list[list[writer.PendingChunk]]:
    """Pack chunks into jobs of at most ``max_chunks`` and about ``max_bytes`` of text."""
    groups: list[list[writer.PendingChunk]] = []
    current: list[writer.PendingChunk] = []
    size = 0
    for chunk in pending:
        weight = len(chunk.text.encode("utf-8"))
        if current and (len(current) >= max_chunks or size + weight > max_bytes):
            groups.append(current)
            current, size = [], 0
        current.append(chunk)
        size += weight
    if current:
        groups.append(current)
    return groups


def queue_pending(db: Database, spec: ProviderSpec, submit: Callable[[EmbedJob], None], *,
                  retry_failed: bool = False, report: IndexReport | None = None) -> IndexReport:
    """Serve pending chunks from the cache and submit the rest as embedding jobs.

    Chunks queued less than ``REQUEUE_AFTER_S`` ago are left alone (their job is in flight);
    older ones are presumed lost with their message and queued again, which is safe because
    every write is idempotent.
    """
    report = report or IndexReport()
    states = ("pending", "failed") if retry_failed else ("pending",)
    cutoff = time.time() - REQUEUE_AFTER_S
    rows = db.conn.execute(
        f"SELECT rowid, id, hash, text FROM chunks WHERE state IN ({','.join('?' * len(states))})"
        " AND (queued_at IS NULL OR queued_at < ?) ORDER BY path, start_line",
        (*states, cutoff),
    ).fetchall()
    pending = [writer.PendingChunk(*row) for row in rows]
    if not pending:
        return report
    hits = cache.get_cached(db, spec.name, spec.model, spec.provider_key, (p.hash for p in pending))
    remaining = writer.attach_cached(db, pending, hits)
    report.chunks_cached += len(pending) - len(remaining)
    for group in group_jobs(remaining):
        job: EmbedJob = {
            "spec": spec.to_dict(),
            "store": str(db.path),
            "chunks": [[p.id, p.hash, p.text] for p in group],
            "attempt": 0,
        }
        submit(job)
        writer.mark_queued(db, [p.rowid for p in group])
        report.jobs += 1
        report.chunks_queued += len(group)
    return report


def index_once(db: Database, settings: Settings, choice: ProviderChoice,
               submit: Callable[[EmbedJob], None] | None, *, retry_failed: bool = False
               ) -> IndexReport:
    """One producer pass: sync chunk rows, then (with a provider) queue what needs vectors."""
    report = sync_files(db, settings, choice)
    if choice.spec is not None and submit is not None:
        queue_pending(db, choice.spec, submit, retry_failed=retry_failed, report=report)
    with schema.transaction(db):
        cache.prune_cache(db, settings.cache.max_entries)
        schema.set_meta(db, "last_index_at", time.time())
    return report
