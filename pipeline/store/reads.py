"""The reads the pipeline makes of a store's chunks and files (the writes are in
:mod:`pipeline.store.writer`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline.store.batches import LIVE_CHUNK_IDS
from pipeline.store.engine import Database
from pipeline.store.schema import get_meta, transaction

if TYPE_CHECKING:
    from pipeline.store.writer import PendingChunk

#: The live store's meta key naming the rebuild in progress (:mod:`pipeline.ingest.reindex`).
REINDEX_META = "reindex"


def rebuild_info(db: Database) -> dict[str, Any] | None:
    """The rebuild in progress for the live store ``db``, if any."""
    return get_meta(db, REINDEX_META)


@dataclass(frozen=True)
class PendingRow:
    """A chunk waiting for a vector, its file, and whether it was queued before."""

    chunk: PendingChunk
    path: str
    queued: bool


def pending_rows(db: Database, *, retry_failed: bool = False, queued_before: float
                 ) -> list[PendingRow]:
    """Chunks to queue for embedding, in file order: pending ones (and failed ones with
    ``retry_failed``) never queued or queued before ``queued_before`` (epoch seconds), and not
    held by a live provider batch job."""
    states = ("pending", "failed") if retry_failed else ("pending",)
    rows = db.conn.execute(
        f"SELECT rowid, id, hash, text, queued_at, path FROM chunks WHERE state IN "
        f"({','.join('?' * len(states))}) AND (queued_at IS NULL OR queued_at < ?) "
        f"AND id NOT IN ({LIVE_CHUNK_IDS}) ORDER BY path, start_line",
        (*states, queued_before),
    ).fetchall()
    from pipeline.store.writer import PendingChunk  # an index pass's, not a search's

    return [PendingRow(PendingChunk(*row[:4]), row[5], row[4] is not None) for row in rows]


def waiting_count(db: Database) -> int:
    """Chunks still waiting for a vector that something is working on (held chunks, refused
    until the configuration is fixed, are not waited for)."""
    return db.conn.execute(
        "SELECT count(*) FROM chunks WHERE state = 'pending' "
        "AND (error IS NULL OR queued_at IS NOT NULL)").fetchone()[0]


def state_counts(db: Database) -> dict[str, int]:
    """Chunks per state (``pending``, ``ready``, ``failed``)."""
    return dict(db.conn.execute("SELECT state, count(*) FROM chunks GROUP BY state"))


def pending_count(db: Database) -> int:
    """Chunks without a vector yet (held ones included)."""
    return db.conn.execute("SELECT count(*) FROM chunks WHERE state = 'pending'").fetchone()[0]


def unsent_count(db: Database) -> int:
    """Pending chunks no job was ever sent for (not queued, not held with a reason, not in a
    live provider batch): a producer stopped between writing them and sending their jobs."""
    return db.conn.execute(
        f"SELECT count(*) FROM chunks WHERE state = 'pending' AND queued_at IS NULL "
        f"AND error IS NULL AND id NOT IN ({LIVE_CHUNK_IDS})").fetchone()[0]


def ready_since(db: Database, since: float) -> int:
    """Chunks that got their vector at or after ``since`` (epoch seconds; cache hits too)."""
    return db.conn.execute("SELECT count(*) FROM chunks WHERE state = 'ready' "
                           "AND updated_at >= ?", (since,)).fetchone()[0]


def without_vector(db: Database) -> list[tuple[str, str | None, int]]:
    """(state, reason, chunks) of every chunk without a vector, grouped: ``failed`` ones and
    ``pending`` ones (a reason: held until the configuration is fixed; none: still waiting),
    the largest groups first."""
    return [(s, e, n) for s, e, n in db.conn.execute(
        "SELECT state, error, count(*) FROM chunks WHERE state IN ('failed', 'pending') "
        "GROUP BY state, error ORDER BY count(*) DESC, state, error")]


def forget_queued(db: Database) -> None:
    """Let the next pass queue every pending chunk again (their messages died with a private
    broker)."""
    with transaction(db):
        db.conn.execute("UPDATE chunks SET queued_at = NULL WHERE state = 'pending'")


def chunk_rows(db: Database, rowids: Sequence[int]) -> dict[int, tuple[Any, ...]]:
    """(path, start_line, end_line, text, source) per chunk rowid still in the store."""
    if not rowids:
        return {}
    marks = ",".join("?" * len(rowids))
    return {r[0]: r[1:] for r in db.conn.execute(
        f"SELECT rowid, path, start_line, end_line, text, source FROM chunks "
        f"WHERE rowid IN ({marks})", list(rowids))}


def file_counts(db: Database) -> tuple[int, int]:
    """(files indexed, files skipped with an error)."""
    ok, bad = db.conn.execute(
        "SELECT count(*) FILTER (WHERE error IS NULL), count(*) FILTER (WHERE error IS NOT NULL) "
        "FROM files").fetchone()
    return ok, bad


def file_errors(db: Database, limit: int) -> list[dict[str, str]]:
    """Files skipped with an error (unreadable, not UTF-8, too large…), by path."""
    return [{"path": p, "error": e} for p, e in db.conn.execute(
        "SELECT path, error FROM files WHERE error IS NOT NULL ORDER BY path LIMIT ?",
        (limit,))]


def chunk_errors(db: Database, limit: int) -> list[dict[str, Any]]:
    """The most common reasons chunks are failed or held, with their counts."""
    return [{"state": s, "error": e, "chunks": n} for s, e, n in db.conn.execute(
        "SELECT state, error, count(*) FROM chunks WHERE error IS NOT NULL "
        "AND state IN ('failed', 'pending') GROUP BY state, error "
        "ORDER BY count(*) DESC LIMIT ?", (limit,))]


def known_files(db: Database) -> dict[str, tuple[str, int, int, str | None]]:
    """path -> (hash, mtime_ns, size, error) of every file the store knows."""
    return {path: (h, m, s, e) for path, h, m, s, e in db.conn.execute(
        "SELECT path, hash, mtime_ns, size, error FROM files")}


def file_stats(db: Database, source: str) -> dict[str, tuple[int, int]]:
    """path -> (mtime_ns, size) of the files of ``source``."""
    return {path: (mtime, size) for path, mtime, size in db.conn.execute(
        "SELECT path, mtime_ns, size FROM files WHERE source = ?", (source,))}


def data_version(db: Database) -> int:
    """SQLite's ``PRAGMA data_version`` of this connection: it changes whenever another
    connection (in any process) has committed to the store since it was last read, so a value
    computed from the store stays true while it does not (a connection's own writes leave it)."""
    return int(db.conn.execute("PRAGMA data_version").fetchone()[0])


def has_files(db: Database) -> bool:
    return db.conn.execute("SELECT 1 FROM files LIMIT 1").fetchone() is not None


def present_sources(db: Database) -> set[str]:
    """The sources that have chunks, one index seek per source (``idx_chunks_source``), not a
    scan of every chunk, in one statement."""
    return {s for (s,) in db.conn.execute(
        "WITH RECURSIVE present(source) AS (SELECT min(source) FROM chunks UNION ALL "
        "SELECT (SELECT min(source) FROM chunks WHERE source > present.source) FROM present "
        "WHERE present.source IS NOT NULL) SELECT source FROM present WHERE source IS NOT NULL")}


def allowed_rowids(db: Database, sources: Sequence[str]) -> list[int]:
    """Chunk rowids of the wanted sources, ascending."""
    marks = ",".join("?" * len(sources))
    return [r for (r,) in db.conn.execute(
        f"SELECT rowid FROM chunks WHERE source IN ({marks}) ORDER BY rowid", list(sources))]


def bm25_ranks(db: Database, match: str | None, limit: int, sources: Sequence[str] | None
               ) -> dict[int, float]:
    """FTS5 hits of the ``MATCH`` expression ``match`` as rowid -> ``bm25()`` rank (negative,
    lower is better), best first, at most ``limit``; of the ``sources`` only, unless None.

    Sorting by ``bm25()`` with a ``LIMIT`` lets SQLite keep only the best ``limit`` rows while
    ranking; equal ranks go by rowid, so the cut is the same on every run.
    """
    if match is None:
        return {}
    if sources is None:
        rows = db.conn.execute(
            "SELECT rowid, bm25(chunks_fts) AS r FROM chunks_fts WHERE chunks_fts MATCH ? "
            "ORDER BY r, rowid LIMIT ?", (match, limit)).fetchall()
    else:
        marks = ",".join("?" * len(sources))
        rows = db.conn.execute(
            "SELECT f.rowid, bm25(chunks_fts) AS r FROM chunks_fts f JOIN chunks c "
            f"ON c.rowid = f.rowid WHERE chunks_fts MATCH ? AND c.source IN ({marks}) "
            "ORDER BY r, f.rowid LIMIT ?", (match, *sources, limit)).fetchall()
    return {int(r): float(rank) for r, rank in rows}


#: What :func:`chunk_weights` reads of a chunk: (rowid, path, its file's mtime_ns or None,
#: importance, triggers, project_key, start_line, end_line, text, source).
WeightRow = tuple[int, str, int | None, int | None, str | None, str | None, int, int, str, str]


_WEIGHTS = ("SELECT c.rowid, c.path, f.mtime_ns, c.importance, c.triggers, c.project_key, "
            "c.start_line, c.end_line, c.text, c.source "
            "FROM chunks c LEFT JOIN files f ON f.path = c.path")


def chunk_weights(db: Database, rowids: Sequence[int]) -> list[WeightRow]:
    """:data:`WeightRow` per chunk still in the store: what a search weighs its candidates by
    (decay, entry weights, exact paths), labels its hits with (provenance) and shows of them
    (lines, text, source, as :func:`chunk_rows`), in one read."""
    if not rowids:
        return []
    marks = ",".join("?" * len(rowids))
    return db.conn.execute(f"{_WEIGHTS} WHERE c.rowid IN ({marks})",
                           [int(r) for r in rowids]).fetchall()


def all_chunk_weights(db: Database) -> Iterator[WeightRow]:
    """:data:`WeightRow` of every chunk, read lazily (:mod:`pipeline.store.rows` holds them)."""
    cursor = db.conn.execute(_WEIGHTS)
    try:
        while batch := cursor.fetchmany(4096):
            yield from batch
    finally:
        cursor.close()


def first_chunks_named(db: Database, key: str, sources: Sequence[str] | None,
                       limit: int | None) -> list[tuple[int, str]]:
    """(rowid, path) of the first chunk (by line range, then rowid) of each file whose name
    or stem key (:mod:`pipeline.store.path_keys`) is ``key``, of the ``sources`` unless None;
    name matches first, then by path, at most ``limit`` files (None: all). Two index seeks,
    whatever the number of files."""
    where = "(name_key = ? OR stem_key = ?)"
    args: list[Any] = [key, key]
    if sources is not None:
        where += f" AND source IN ({','.join('?' * len(sources))})"
        args += list(sources)
    rows = db.conn.execute(
        f"SELECT path, (SELECT c.rowid FROM chunks c WHERE c.path = f.path "
        f"ORDER BY c.start_line, c.end_line, c.rowid LIMIT 1) FROM "
        f"(SELECT path FROM files WHERE {where} ORDER BY name_key = ? DESC, path LIMIT ?) f",
        [*args, key, -1 if limit is None else limit]).fetchall()
    return [(int(r), p) for p, r in rows if r is not None]


def kept_text(db: Database, path: str) -> str | None:
    """The text of memory file ``path`` as a producer on another host last sent it (None when
    the store keeps none: :mod:`pipeline.ingest.safety`)."""
    row = db.conn.execute("SELECT text FROM file_texts WHERE path = ?", (path,)).fetchone()
    return None if row is None else str(row[0])


def path_ranks(db: Database, match: str | None, sources: Sequence[str] | None
               ) -> Iterator[tuple[str, str, float]]:
    """(path, source, rank) of every file in the path index (``paths_fts``, schema 8) whose
    path matches the FTS5 expression ``match`` (``bm25()``: lower is better), best first, then
    by path and source; ``match`` None: every file, rank 0, by path. Only files of the
    ``sources`` unless None. Read lazily: stop when enough."""
    where, args = ("paths_fts MATCH ?", [match]) if match is not None else ("1=1", [])
    if sources is not None:
        where += f" AND source IN ({','.join('?' * len(sources))})"
        args += list(sources)
    rank = "bm25(paths_fts)" if match is not None else "0"
    cursor = db.conn.execute(f"SELECT path, source, {rank} AS r FROM paths_fts WHERE {where} "
                             f"ORDER BY r, path, source", args)
    try:
        for path, source, r in cursor:
            yield path, source, float(r)
    finally:
        cursor.close()


def path_probe(db: Database, key: str | None, matches: Sequence[str],
               sources: Sequence[str] | None) -> tuple[bool, set[str]] | None:
    """In one statement: whether a file has ``key`` as its name or stem key (what
    :func:`first_chunks_named` looks up; False for None), and which FTS5 expressions of
    ``matches`` match at least one file in the path index (``paths_fts``); of the ``sources``
    unless None. None when the statement is refused (no path index, or an expression the
    index refuses): then each must be asked alone, as :func:`first_chunks_named` and
    :func:`path_ranks` do."""
    if key is None and not matches:
        return False, set()
    of_sources, extra = "", []
    if sources is not None:
        of_sources = f" AND source IN ({','.join('?' * len(sources))})"
        extra = list(sources)
    columns = ["0" if key is None else
               f"EXISTS (SELECT 1 FROM files WHERE (name_key = ? OR stem_key = ?){of_sources})"]
    args: list[Any] = [] if key is None else [key, key, *extra]
    for match in matches:
        columns.append(f"EXISTS (SELECT 1 FROM paths_fts WHERE paths_fts MATCH ?{of_sources})")
        args += [match, *extra]
    try:
        named, *hits = db.conn.execute(f"SELECT {', '.join(columns)}", args).fetchone()
    except db.operational_error:
        return None
    return bool(named), {m for m, hit in zip(matches, hits, strict=True) if hit}


def first_chunk(db: Database, path: str) -> int | None:
    """The rowid of the first chunk (by line range, then rowid) of file ``path``, if any (a
    path is one file, whatever its source: ``files.path`` is the key)."""
    row = db.conn.execute("SELECT rowid FROM chunks WHERE path = ? "
                          "ORDER BY start_line, end_line, rowid LIMIT 1", (path,)).fetchone()
    return None if row is None else int(row[0])
