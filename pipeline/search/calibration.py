"""Which keyword hits are ``MEMORY.md``/``USER.md`` entries: the keyword score's two scales.

Since chunking version 5 each entry of ``MEMORY.md`` and ``USER.md`` is its own chunk
(:data:`pipeline.ingest.chunking.PER_ENTRY_PATHS`), often one line. BM25 favours short rows
(its length term), and many short rows also lower the average length every row is measured
against, so a one-line entry holding the query's words outscores any paragraph. The weighted
merge therefore takes the keyword score of the other chunks as a share of the best among them,
not of an entry (:func:`pipeline.search.fusion.share_of_best`): adding entries to a memory does
not push the notes that answer under ``minScore`` (docs/search.md, issue 36).
"""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.store import reads
from pipeline.store.engine import Database

#: The per-entry files, as chunk paths hold them (the chunker's ``PER_ENTRY_PATHS``; kept here
#: so a one-shot search does not import the chunker; a test checks they agree).
ENTRY_PATHS = frozenset({"MEMORY.md", "USER.md"})


def entry_rows(db: Database, ranks: Mapping[int, float]) -> frozenset[int]:
    """The keyword hits (rowid -> FTS5 rank, lower is better) that are entries of
    ``MEMORY.md`` or ``USER.md``; empty when the best hit is not one, since the scores are then
    the plain share of the best whatever the others are (one row read instead of all)."""
    if not ranks:
        return frozenset()
    best = min(ranks, key=lambda r: (ranks[r], r))
    if not _entries(db, [best]):
        return frozenset()
    return _entries(db, list(ranks))


def _entries(db: Database, rowids: list[int]) -> frozenset[int]:
    return frozenset(r for r, path, _ in reads.chunk_files(db, rowids)
                     if path.replace("\\", "/") in ENTRY_PATHS)
