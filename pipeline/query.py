"""``memory_search`` and ``memory_get``: plain library calls over the store, no broker needed.

Search runs OpenClaw's pipeline: a vec0 k-nearest-neighbour query and an FTS5 BM25 query
(:mod:`pipeline.search.retrievers`), merged by weighted fusion or reciprocal rank fusion
(:mod:`pipeline.search.fusion`), then temporal decay, sort, MMR, ``minScore`` and
``maxResults``. Unlike OpenClaw, decay and MMR apply in every mode (hybrid, vector-only and
keyword-only), keyword search covers Chinese/Japanese/Korean, and a keyword hit without a
vector is not capped below ``minScore``. See docs/search.md.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.config import Settings, load_settings
from pipeline.embeddings.base import EmbeddingProvider
from pipeline.embeddings.registry import ProviderChoice, ProviderSpec
from pipeline.errors import EmbeddingError, MemoryPathError, StoreError
from pipeline.ingest.producer import stale_memory_paths, sync_files
from pipeline.ingest.reindex import rebuild_info
from pipeline.ingest.sessions import session_get
from pipeline.ingest.sources import IGNORED_DIRS, memory_files, relative_path
from pipeline.jobs import provider_for
from pipeline.search import decay, fusion
from pipeline.search.citations import apply_citations, check_mode
from pipeline.search.fusion import Candidate
from pipeline.search.mmr import mmr_order
from pipeline.search.retrievers import (
    allowed_rowids,
    cosine_for,
    keyword_hits,
    matrix_hits,
    source_filter,
    vector_hits,
)
from pipeline.store import schema
from pipeline.store.engine import Database, connect
from pipeline.store.matrix import MATRICES, VectorMatrix
from pipeline.store.postings import TEXT_STATS, TextStats

SNIPPET_CHARS = 700
MAX_CANDIDATES = 200
_SCANS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="memq-vector-scan")


def open_store(settings: Settings) -> Database | None:
    """The workspace's store, or None when nothing was indexed yet."""
    if not settings.store.path.exists():
        return None
    db = connect(settings.store.path, want_vectors=settings.store.vector_enabled)
    schema.ensure_schema(db)
    return db


def index_spec(db: Database) -> ProviderSpec | None:
    index = schema.get_meta(db, "index") or {}
    if not index.get("provider"):
        return None
    return ProviderSpec(index["provider"], index["model"], index["provider_key"],
                        index.get("options") or {})


def _rows(db: Database, rowids: list[int]) -> dict[int, tuple[Any, ...]]:
    """(path, start_line, end_line, text, source) per chunk rowid still in the store."""
    if not rowids:
        return {}
    marks = ",".join("?" * len(rowids))
    return {r[0]: r[1:] for r in db.conn.execute(
        f"SELECT rowid, path, start_line, end_line, text, source FROM chunks "
        f"WHERE rowid IN ({marks})", rowids)}


def _result(c: Candidate, row: tuple[Any, ...]) -> dict[str, Any]:
    path, start, end, text, source = row
    return {"path": path, "startLine": start, "endLine": end, "score": round(c.score, 6),
            "snippet": text[:SNIPPET_CHARS], "source": source}


def _pending_count(db: Database) -> int:
    return db.conn.execute("SELECT count(*) FROM chunks WHERE state = 'pending'").fetchone()[0]


def _retrieve(db: Database, query: str, query_vector: np.ndarray, candidates: int,
              sources: list[str] | None, use_text: bool, in_memory: bool,
              stats: TextStats | None
              ) -> tuple[dict[int, float], dict[int, float], VectorMatrix | None]:
    """Both retrievers' hits (vector, text) and the in-memory vectors if used.

    The in-memory scan needs no connection, so it runs on another thread while the keyword
    side ranks on this one (NumPy and SQLite both release the GIL): hybrid costs the slower
    side, not the sum.
    """
    matrix = MATRICES.current(db) if in_memory else None
    if matrix is None:
        text = keyword_hits(db, query, candidates, sources, stats) if use_text else {}
        return vector_hits(db, query_vector, candidates, sources), text, None
    among = None if sources is None else allowed_rowids(db, sources)
    if not use_text:  # nothing to overlap with: a thread hop would only add a wake-up
        return matrix_hits(matrix, query_vector, candidates, among), {}, matrix
    scan = _SCANS.submit(matrix_hits, matrix, query_vector, candidates, among)
    text = keyword_hits(db, query, candidates, sources, stats, among)
    return scan.result(), text, matrix


def _rank(db: Database, settings: Settings, query: str, candidates: int,
          provider: EmbeddingProvider | None, in_memory: bool
          ) -> tuple[list[Candidate], dict[int, float]]:
    """Fused candidates, best first, and the keyword side's hits (FTS5 ranks)."""
    hybrid = settings.query.hybrid
    sources = source_filter(db, settings.sources)
    use_text = provider is None or hybrid.enabled
    query_vector = provider.embed_query(query) if provider is not None and query.strip() else None
    # BM25 magnitudes depend on corpus size (a small memory gives small ranks that would all
    # fall under minScore), so keyword scores are relative to the best hit in every mode.
    stats = TEXT_STATS.current(db) if in_memory and use_text else None
    if query_vector is None or not np.any(query_vector):
        text = keyword_hits(db, query, candidates, sources, stats) if use_text else {}
        return fusion.weighted({}, fusion.relative(fusion.text_scores(text)), (0.0, 1.0)), text
    vector, text, matrix = _retrieve(db, query, query_vector, candidates, sources, use_text,
                                     in_memory, stats)
    if not use_text:
        return fusion.weighted(vector, {}, (1.0, 0.0)), text
    weights = hybrid.normalized_weights()
    if hybrid.fusion == "rrf":
        return fusion.rrf(vector, fusion.text_scores(text), weights, hybrid.rrf_k), text
    missing = cosine_for(db, [r for r in text if r not in vector], query_vector, matrix)
    return fusion.weighted({**vector, **missing}, fusion.share_of_best(text), weights), text


def search_store(db: Database, settings: Settings, query: str, *,
                 max_results: int | None = None, min_score: float | None = None,
                 provider: EmbeddingProvider | None = None, now: float | None = None,
                 in_memory: bool = True) -> dict[str, Any]:
    """Search an open store. ``provider`` embeds the query; None means keyword-only.

    ``now`` (epoch seconds) is the moment temporal decay measures ages from. ``in_memory``
    (default) answers from the store's vectors and BM25 statistics held in this process's
    memory, loaded in the background on first use and again whenever they changed, vec0 and
    FTS5 answering meanwhile (:mod:`pipeline.store.matrix`, :mod:`pipeline.store.postings`);
    the results are the same. False always asks vec0 and FTS5 and holds nothing (a process
    that searches once).
    """
    max_results = settings.query.max_results if max_results is None else max(0, int(max_results))
    min_score = settings.query.min_score if min_score is None else float(min_score)
    hybrid = settings.query.hybrid
    candidates = min(MAX_CANDIDATES, max(1, max_results * hybrid.candidate_multiplier))
    ranked, text = _rank(db, settings, query, candidates, provider, in_memory)
    if hybrid.temporal_decay.enabled and ranked:
        factors = decay.multipliers(db, [c.rowid for c in ranked], time.time() if now is None
                                    else now, hybrid.temporal_decay.half_life_days)
        for c in ranked:
            c.score *= factors.get(c.rowid, 1.0)
        ranked.sort(key=lambda c: (-c.score, c.rowid))
    picked = [c for c in ranked if c.score >= min_score]
    if not picked and text:
        # OpenClaw's relaxed fallback: when no fused score clears minScore, keyword hits whose
        # own BM25 score clears min(minScore, textWeight) are still answers, not nothing.
        floor = min(min_score, hybrid.normalized_weights()[1])
        picked = [c for c in ranked if c.text_score >= floor]
    rows = _rows(db, [c.rowid for c in picked])
    picked = [c for c in picked if c.rowid in rows]  # deleted between ranking and reading
    if hybrid.mmr.enabled:
        picked = mmr_order(picked, [c.score for c in picked],
                           [rows[c.rowid][3] for c in picked], hybrid.mmr.lambda_)
    return {"results": [_result(c, rows[c.rowid]) for c in picked[:max_results]]}


def _sync_if_stale(db: Database, settings: Settings, spec: ProviderSpec | None,
                   provider: EmbeddingProvider | None) -> int:
    """``sync.onSearch``: bring the chunk rows of changed memory files up to date before
    answering, so a search never answers silently from old text. Returns the files synced.

    Only rows are written (keyword search sees the new text at once); their vectors are queued
    by the next ``memq index`` or ``memq watch`` pass, and the result says they are pending.
    Nothing happens while the index is being rebuilt for another configuration, or when the
    index's provider cannot be built here (its input limit decides how chunks are cut).
    """
    if spec is not None and provider is None:
        return 0
    stale = stale_memory_paths(db, settings)
    if not stale:
        return 0
    choice = ProviderChoice(provider, spec, schema.get_meta(db, "mode_reason"))
    report = sync_files(db, settings, choice, paths=stale)
    return report.changed + report.deleted


def memory_search(query: str, *, settings: Settings | None = None,
                  workspace: str | os.PathLike[str] | None = None,
                  max_results: int | None = None, min_score: float | None = None,
                  sync: bool | None = None, citations: str | None = None,
                  in_memory: bool = True) -> dict[str, Any]:
    """Search an agent's memory; returns OpenClaw's result shape plus provider/model/mode.

    Never raises for the content of ``query``: any text gives results or an empty list.
    ``sync`` (default: ``sync.onSearch``) first brings changed files' rows up to date; a
    long-running server passes False and refreshes in the background instead. ``citations``
    (auto, on, off; default: the ``citations`` setting) adds ``citation`` and a ``Source:``
    line to each snippet. ``in_memory``: see :func:`search_store` (one-shot callers such as
    ``memq search`` pass False).
    """
    settings = settings or load_settings(workspace=workspace)
    citations = check_mode(citations or settings.citations)
    query = str(query)
    try:
        db = open_store(settings)
    except StoreError as exc:  # OpenClaw's "unavailable" shape: the agent is told, not crashed
        return {"results": [], "provider": None, "model": None, "mode": "unavailable",
                "unavailable": True, "error": str(exc),
                "action": "rebuild the index with `memq index` after moving the store aside"}
    if db is None:
        return {"results": [], "provider": None, "model": None, "mode": "keyword-only",
                "warning": f"nothing indexed yet at {settings.store.path}: run `memq index`"}
    try:
        spec = index_spec(db)
        provider, warning = None, None
        if spec is not None:
            try:
                provider = provider_for(spec, settings)
            except EmbeddingError as exc:
                warning = f"query embedding unavailable, keyword results only: {exc}"
        if sync is None:
            sync = settings.sync.on_search
        synced = _sync_if_stale(db, settings, spec, provider) if sync else 0
        try:
            out = search_store(db, settings, query, max_results=max_results,
                               min_score=min_score, provider=provider,
                               in_memory=in_memory)
        except EmbeddingError as exc:
            provider, warning = None, f"query embedding failed, keyword results only: {exc}"
            out = search_store(db, settings, query, max_results=max_results,
                               min_score=min_score, provider=None, in_memory=in_memory)
        out.update(provider=spec.name if spec else None, model=spec.model if spec else None,
                   mode="hybrid" if provider is not None else "keyword-only",
                   citations=citations, results=apply_citations(out["results"], citations))
        reason = schema.get_meta(db, "mode_reason")
        if spec is None and reason:
            out["reason"] = reason
        pending = _pending_count(db) if spec is not None else 0
        if pending:
            out["pending"] = pending
        if warning:
            out["warning"] = warning
        if synced:
            out["synced"] = synced
        rebuild = rebuild_info(db)
        if rebuild is not None:  # answered from the live index while its successor is built
            out["rebuilding"] = rebuild.get("reason") or "reindex"
        return out
    finally:
        db.close()




_PATH_REQUIRED = "path required: a memory .md file (MEMORY.md, memory/…, or an extra path)"


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _could_be_memory(settings: Settings, path: Path) -> bool:
    """Is ``path`` where a memory file lives, whether or not it exists yet? No part of it may be
    a symlink or an ignored folder."""
    workspace = settings.workspace
    if os.path.realpath(path.parent) != str(path.parent):
        return False
    if path in (workspace / "MEMORY.md", workspace / "memory.md"):
        return True
    roots = [workspace / "memory", *(p if p.is_absolute() else workspace / p
                                      for p in settings.extra_paths)]
    for root in roots:
        if _under(path, root) and path != root:
            return not IGNORED_DIRS.intersection(path.relative_to(root).parts[:-1])
    return False


def resolve_memory_path(settings: Settings, requested: str) -> Path:
    """The file ``requested`` names, if it is (or could be) a memory file; else raise."""
    if not requested or "\x00" in requested:
        raise MemoryPathError(_PATH_REQUIRED)
    candidate = Path(requested)
    if not candidate.is_absolute():
        candidate = settings.workspace / candidate
    candidate = Path(os.path.normpath(candidate))
    if candidate.suffix.lower() != ".md":
        raise MemoryPathError(_PATH_REQUIRED)
    listed = {Path(os.path.normpath(f.abs_path))
              for f in memory_files(settings.workspace, settings.extra_paths)}
    if candidate in listed:
        return candidate
    # Not listed: a file that does not exist yet, or that a concurrent append created after the
    # listing, is fine where memory files live; a symlink or anything but a file is not.
    if candidate.is_symlink() or not _could_be_memory(settings, candidate):
        raise MemoryPathError(_PATH_REQUIRED)
    if candidate.exists() and not candidate.is_file():
        raise MemoryPathError(_PATH_REQUIRED)
    return candidate


def memory_get(path: str, from_line: int | None = None, lines: int | None = None, *,
               settings: Settings | None = None,
               workspace: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Read lines of a memory file, only inside the memory roots (OpenClaw's ``memory_get``).

    A missing (but allowed) file gives empty text; anything outside the roots, a symlink or a
    non-``.md`` path raises :class:`MemoryPathError`. With session memory on, session hits
    (``sessions/<file>.jsonl``) open too, by JSONL line
    (:func:`pipeline.ingest.sessions.session_get`).
    """
    settings = settings or load_settings(workspace=workspace)
    session = session_get(settings, str(path), from_line, lines)
    if session is not None:
        return session
    target = resolve_memory_path(settings, str(path))
    rel = relative_path(settings.workspace, target)
    if not target.exists():
        return {"path": rel, "text": ""}
    start = max(1, int(from_line or 1))
    content = target.read_text(encoding="utf-8", errors="replace").split("\n")
    end = len(content) if lines is None else min(len(content), start - 1 + max(0, int(lines)))
    return {"path": rel, "text": "\n".join(content[start - 1 : end]), "from": start,
            "lines": max(0, end - start + 1)}
