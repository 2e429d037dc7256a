"""Hybrid search over one store: OpenClaw's ranking pipeline, as a plain function.

A vec0 k-nearest-neighbour query and an FTS5 BM25 query (:mod:`pipeline.search.retrievers`),
merged by weighted fusion or reciprocal rank fusion (:mod:`pipeline.search.fusion`), then
temporal decay, sort, ``minScore``, the optional reranker (:mod:`pipeline.search.rerank`,
``rerank.*``), MMR and ``maxResults``. Unlike OpenClaw, decay and MMR apply
in every mode (hybrid, vector-only and keyword-only), keyword search covers
Chinese/Japanese/Korean, and a keyword hit without a vector is not capped below ``minScore``.
On a SQLite without FTS5 (``Database.fts_ok`` False) the keyword side is empty: vector-only.
See docs/search.md.

A long-running reader passes :class:`HeldCopies`: the store's vectors and BM25 statistics held
in its memory (:mod:`pipeline.store.matrix`, :mod:`pipeline.store.postings`), which give the
same results faster; a one-shot caller passes none and SQLite answers.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.config import Settings
from pipeline.embeddings.base import EmbeddingProvider
from pipeline.results import SearchHit
from pipeline.search import calibration, entries, fused, fusion, superseded
from pipeline.search.fusion import Candidate
from pipeline.search.mmr import mmr_order
from pipeline.search.paths import PathMatch, path_matches
from pipeline.search.provenance import provenance
from pipeline.search.rerank import Reranker
from pipeline.search.retrievers import (
    best_first,
    chunk_vectors,
    cosine_for,
    keyword_hits,
    matrix_hits,
    source_filter,
    vector_hits,
)
from pipeline.store import reads
from pipeline.store.engine import Database
from pipeline.store.matrix import MatrixCache, VectorMatrix
from pipeline.store.postings import TextStats, TextStatsCache
from pipeline.store.reads import WeightRow
from pipeline.store.rows import (
    VERSION_KEYS,
    ChunkRows,
    RowsCache,
    connection_mark,
    versions_of,
)
from pipeline.store.schema import TEXT_VERSION_KEY, get_metas
from pipeline.store.vectors import SINGLE_THREAD_ROWS
from pipeline.store.vectors import VERSION_KEY as VECTORS_VERSION_KEY

SNIPPET_CHARS = 700
SCORE_DECIMALS = 6
MAX_CANDIDATES = 200
#: Connections whose last current versions a :class:`HeldCopies` remembers.
MAX_SEEN = 16


@dataclass
class HeldCopies:
    """A long-running reader's copies of its stores, each reloaded in the background whenever
    the store changed (never stale; see :mod:`pipeline.store.snapshots`): the vectors as one
    matrix, the BM25 statistics, the chunk rows (:mod:`pipeline.store.rows`), and a thread
    that scans the matrix while the keyword side ranks. ``fused``: rank a hybrid search's
    candidates over arrays (:mod:`pipeline.search.fused`) when the copies allow it; False:
    the general path (the same results; tests compare the two)."""

    matrices: MatrixCache = field(default_factory=MatrixCache)
    text_stats: TextStatsCache = field(default_factory=TextStatsCache)
    rows: RowsCache = field(default_factory=lambda: RowsCache(prepare=fused.prepare))
    scans: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(
        max_workers=2, thread_name_prefix="memq-vector-scan"))
    fused: bool = True
    #: Per connection a search last found its copies current on (by ``id``, with a weak
    #: reference to it): its ``data_version`` and ``total_changes`` then, the versions it read
    #: and the rows (:meth:`current_of`).
    _seen: dict[int, tuple[weakref.ref[Database], tuple[int, int], dict[str, Any], ChunkRows]
                ] = field(default_factory=dict, repr=False)
    _seen_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def versions(self, db: Database) -> dict[str, Any]:
        """The store's text and vectors versions, which every copy is checked by, in one
        read."""
        return get_metas(db, VERSION_KEYS)

    def current_of(self, db: Database) -> Current:
        """What a search on ``db`` finds current: the store's versions and the held rows
        (:meth:`versions`, :meth:`current_rows`).

        Nothing was committed to the store ``db`` sees since the last search on ``db`` found
        the rows current when ``db``'s :func:`~pipeline.store.rows.connection_mark` (SQLite's
        data version, changed by a commit on any other connection in any process, and its
        total changes, its own writes) is what it was: then that search's versions and rows
        stand, one statement instead of a read of the versions and a check of the rows' own
        connection."""
        if db.conn.in_transaction:  # its view may differ from the committed store
            return Current(self.versions(db), None)
        mark = connection_mark(db)
        with self._seen_lock:
            seen = self._seen.get(id(db))
        if (seen is not None and seen[0]() is db and seen[1] == mark
                and self.rows.held(db.key) is seen[3]):
            return Current(seen[2], seen[3])
        versions = self.versions(db)
        rows = self.current_rows(db, versions)
        if rows is not None:
            with self._seen_lock:
                self._seen.pop(id(db), None)
                while len(self._seen) >= MAX_SEEN:
                    del self._seen[next(iter(self._seen))]
                self._seen[id(db)] = (weakref.ref(db), mark, versions, rows)
        return Current(versions, rows)

    def current_rows(self, db: Database, versions: dict[str, Any]) -> ChunkRows | None:
        """The store's held chunk rows if current (``versions``: :meth:`versions`); never
        while ``db`` is inside a transaction, whose view may differ from the committed
        store."""
        if db.conn.in_transaction:
            return None
        return self.rows.current_at(db, versions_of(versions))

    def current(self, db: Database, *, text: bool, vectors: bool,
                versions: dict[str, Any] | None = None
                ) -> tuple[TextStats | None, VectorMatrix | None]:
        """The store's held BM25 statistics (when ``text``) and vectors (when ``vectors``),
        each None unless current (as their caches' ``current`` gives them); ``versions``:
        :meth:`versions`, read here when None."""
        if versions is None:
            versions = self.versions(db)
        return (self.text_stats.current_at(db, versions.get(TEXT_VERSION_KEY)) if text else None,
                self.matrices.current_at(db, versions.get(VECTORS_VERSION_KEY)) if vectors
                else None)

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the background loads started so far (tests and benchmarks)."""
        self.matrices.wait(timeout)
        self.text_stats.wait(timeout)
        self.rows.wait(timeout)

    def close(self) -> None:
        """Drop the copies and stop the scan threads."""
        self.matrices.clear()
        self.text_stats.clear()
        self.rows.clear()
        self.scans.shutdown(wait=False)


@dataclass
class Current:
    """What one search found current in the held copies: the store's versions as its
    connection read them, and the chunk rows if held and current."""

    versions: dict[str, Any]
    rows: ChunkRows | None


def _retrieve(db: Database, query: str, query_vector: np.ndarray, candidates: int,
              sources: list[str] | None, use_text: bool, held: HeldCopies | None,
              stats: TextStats | None, matrix: VectorMatrix | None, rows: ChunkRows | None,
              scored: Callable[[dict[int, float]], dict[int, float]] | None = None
              ) -> tuple[dict[int, float], dict[int, float], VectorMatrix | None,
                         dict[int, float] | None]:
    """Both retrievers' hits (vector, text), the in-memory vectors if used (``matrix``: the
    held copy if current) and, with ``scored``, the keyword scores it gives the text hits
    (worked out before the in-memory scan, or while it runs: what runs after the scan
    starts with cold caches). The vector side's scores are the scan's own
    (:func:`_exact_sides` makes them exact).

    The in-memory scan needs no connection, so a large one (more than
    :data:`~pipeline.store.vectors.SINGLE_THREAD_ROWS` chunks) runs on another thread while the
    keyword side ranks on this one (NumPy and SQLite both release the GIL): hybrid costs the
    slower side, not the sum.
    """
    if matrix is None or held is None:
        text = keyword_hits(db, query, candidates, sources, stats) if use_text else {}
        return (vector_hits(db, query_vector, candidates, sources), text, None,
                None if scored is None else scored(text))
    among = (None if sources is None else rows.allowed(sources) if rows is not None
             else reads.allowed_rowids(db, sources))
    # A thread hop pays off only for a scan that takes longer than a wake-up: on a busy
    # machine the woken thread waits for a core (2.6 ms inline vs 4.7 ms with a hop at 10,000
    # chunks, load 6); nothing to overlap with in a vector-only search.
    if not use_text or len(matrix.ids) <= SINGLE_THREAD_ROWS:
        # The keyword side first: the scan streams the whole matrix through the core's caches,
        # and what runs after it starts cold.
        text = keyword_hits(db, query, candidates, sources, stats, among) if use_text else {}
        scores = None if scored is None else scored(text)
        return matrix_hits(matrix, query_vector, candidates, among), text, matrix, scores
    scan = held.scans.submit(matrix_hits, matrix, query_vector, candidates, among)
    text = keyword_hits(db, query, candidates, sources, stats, among)
    scores = None if scored is None else scored(text)
    return scan.result(), text, matrix, scores


def _exact_sides(db: Database, hits: dict[int, float], others: Sequence[int],
                 query_vector: np.ndarray, matrix: VectorMatrix | None
                 ) -> tuple[dict[int, float], dict[int, float]]:
    """The vector side's ``hits`` with their exact scores, best first
    (:func:`~pipeline.search.retrievers.rescored`), and the exact cosine of the ``others`` (not
    among the hits) that have a vector: one lookup for both."""
    exact = cosine_for(db, [*hits, *others], query_vector, matrix)
    return (best_first({r: exact[r] for r in hits if r in exact}),
            {r: exact[r] for r in others if r in exact})


@dataclass(frozen=True)
class Unfused:
    """What a held hybrid search hands :func:`pipeline.search.fused.rank`: the query's
    vector, the held matrix, the rows, the vector side's hits and the keyword scores."""

    query_vector: np.ndarray
    matrix: VectorMatrix
    rows: ChunkRows
    vector: list[int]
    text: dict[int, float]
    weights: tuple[float, float]


@dataclass
class Ranking:
    """What the retrievers found for one query, fused (or, ``unfused``, ready to be fused
    over arrays; ``ranked`` then empty)."""

    ranked: list[Candidate]  # fused candidates, best first
    text: dict[int, float]  # the keyword side's hits (FTS5 ranks)
    #: The chunks the vector side returned; None when no vector search ran (keyword-only).
    vector_side: frozenset[int] | None = None
    #: The files the query names (:mod:`pipeline.search.paths`): exact, then partial matches.
    paths: list[PathMatch] = field(default_factory=list)
    #: Whether a keyword search ran (False: vector-only).
    text_side: bool = True
    unfused: Unfused | None = None

    def keyword_side(self) -> set[int]:
        """The keyword hits: text matches and the first chunks of partially named files."""
        return set(self.text) | {m.rowid for m in self.paths if m.specificity == 0}


def _with_paths(scores: dict[int, float], paths: list[PathMatch]) -> dict[int, float]:
    """A keyword side's scores with each partially named file's first chunk scored by its path
    score, unless its text matched (OpenClaw: a body match's score wins), in rank order."""
    extra = {m.rowid: m.score for m in paths if m.specificity == 0 and m.rowid not in scores}
    return {**scores, **extra} if extra else scores


def _rank(db: Database, settings: Settings, query: str, candidates: int,
          provider: EmbeddingProvider | None, held: HeldCopies | None,
          sources: list[str] | None, current: Current | None, fuse: bool = False) -> Ranking:
    """Fused candidates and what each retriever returned; ``sources`` as
    :func:`~pipeline.search.retrievers.source_filter` gives them. Files named partially by the
    query (:func:`~pipeline.search.paths.path_matches`) are keyword hits in every mode (in a
    vector-only search, scored by their vector). ``fuse``: a weighted hybrid search over
    held copies that names no file exactly is left :attr:`Ranking.unfused`."""
    hybrid = settings.query.hybrid
    use_text = (provider is None or hybrid.enabled) and db.fts_ok  # no FTS5: vector-only
    query_vector = provider.embed_query(query) if provider is not None and query.strip() else None
    rows = current.rows if current is not None else None
    paths = path_matches(db, query, candidates, sources, None if rows is None else rows.names)
    # BM25 magnitudes depend on corpus size (a small memory gives small ranks that would all
    # fall under minScore), so keyword scores are relative to the best hit in every mode.
    vectors = query_vector is not None and bool(np.any(query_vector))
    stats, matrix = (held.current(db, text=use_text, vectors=vectors,
                                  versions=current.versions)
                     if held is not None and current is not None else (None, None))
    if query_vector is None or not vectors:
        among = rows.allowed(sources) if rows is not None and sources is not None else None
        text = keyword_hits(db, query, candidates, sources, stats, among) if use_text else {}
        scores = _with_paths(fusion.relative(fusion.text_scores(text)), paths)
        return Ranking(fusion.weighted({}, scores, (0.0, 1.0)), text, paths=paths,
                       text_side=use_text)
    weighted = use_text and hybrid.fusion != "rrf"
    found, text, matrix, scores = _retrieve(
        db, query, query_vector, candidates, sources, use_text, held, stats, matrix, rows,
        (lambda hits: _with_paths(calibration.keyword_scores(
            db, query, hits, stats, rule=hybrid.keyword_score), paths)) if weighted else None)
    if not use_text:
        named = [r for r in _with_paths({}, paths) if r not in found]
        vector, missing = _exact_sides(db, found, named, query_vector, matrix)
        return Ranking(fusion.weighted({**vector, **missing}, {}, (1.0, 0.0)), text,
                       frozenset(vector), paths, text_side=False)
    weights = hybrid.normalized_weights()
    if scores is None:  # reciprocal rank fusion
        vector, _ = _exact_sides(db, found, (), query_vector, matrix)
        return Ranking(fusion.rrf(vector, _with_paths(fusion.text_scores(text), paths), weights,
                                  hybrid.rrf_k), text, frozenset(vector), paths)
    if (fuse and matrix is not None and rows is not None
            and not any(m.specificity > 0 for m in paths)):
        return Ranking([], text, frozenset(found), paths,
                       unfused=Unfused(query_vector, matrix, rows, list(found), scores, weights))
    vector, missing = _exact_sides(db, found, [r for r in scores if r not in found],
                                   query_vector, matrix)
    return Ranking(fusion.weighted({**vector, **missing}, scores, weights), text,
                   frozenset(vector), paths)


@dataclass
class Answer:
    """:func:`search`'s hits, best first, and the reranker's note (None when none is
    configured; see :mod:`pipeline.search.rerank`)."""

    hits: list[SearchHit]
    rerank: dict[str, Any] | None = None


def search_store(db: Database, settings: Settings, query: str, *,
                 max_results: int | None = None, min_score: float | None = None,
                 provider: EmbeddingProvider | None = None, now: float | None = None,
                 held: HeldCopies | None = None, sources: Sequence[str] | None = None,
                 projects: Sequence[str] | None = None) -> list[SearchHit]:
    """Search an open store; the hits, best first (:func:`search` without a reranker).

    ``provider`` embeds the query (None: keyword-only; its errors are raised). ``now`` (epoch
    seconds) is the moment temporal decay measures ages from. ``held``: the caller's in-memory
    copies of the store, used when current (loaded in the background on first use and again
    whenever the store changed, vec0 and FTS5 answering meanwhile); the results are the same.
    ``sources`` narrows the search to some of the configured sources (``memory_search``'s
    ``corpus``); None reads them all. ``projects``: the active project keys (OpenClaw's
    ``activeProjectKeys``; :mod:`pipeline.search.entries`).
    """
    return search(db, settings, query, max_results=max_results, min_score=min_score,
                  provider=provider, now=now, held=held, sources=sources,
                  projects=projects).hits


def search(db: Database, settings: Settings, query: str, *, max_results: int | None = None,
           min_score: float | None = None, provider: EmbeddingProvider | None = None,
           now: float | None = None, held: HeldCopies | None = None,
           reranker: Reranker | None = None, sources: Sequence[str] | None = None,
           projects: Sequence[str] | None = None) -> Answer:
    """As :func:`search_store`, with the ``reranker`` stage (``rerank.*``) when one is given:
    fusion, temporal decay, importance and project weights, exact-path order
    (:mod:`pipeline.search.entries`), ``minScore``, then the reranker re-orders the best
    ``topN``, then MMR and ``maxResults``."""
    max_results = settings.query.max_results if max_results is None else max(0, int(max_results))
    min_score = settings.query.min_score if min_score is None else float(min_score)
    hybrid = settings.query.hybrid
    candidates = min(MAX_CANDIDATES, max(1, max_results * hybrid.candidate_multiplier))
    current = held.current_of(db) if held is not None else None
    held_rows = current.rows if current is not None else None
    wanted = source_filter(db, settings.sources if sources is None else sources,
                           None if held_rows is None else held_rows.sources)
    found = _rank(db, settings, query, candidates, provider, held, wanted, current,
                  fuse=reranker is None and held is not None and held.fused)
    recency = hybrid.temporal_decay
    # Superseded recency compares chunk vectors: keyword-only, OpenClaw's decay stands in.
    superseding = recency.enabled and recency.mode == "superseded" and provider is not None
    now = time.time() if now is None else now
    if found.unfused is not None:
        return Answer(_fused_hits(settings, found, found.unfused, min_score, max_results,
                                  now, projects, superseding=superseding))
    weighed = entries.weigh(db, query, found.ranked, sources=wanted,
                            decay_days=recency.half_life_days if recency.enabled else None,
                            now=now, projects=projects,
                            paths=found.paths, decay_floor=recency.min_factor,
                            held=held_rows, defer_decay=superseding)
    ranked, exact = weighed.rest, weighed.exact
    # Scores are what a hit shows (6 decimals) before they are compared: a hit shown as 0.35
    # is kept at minScore 0.35, and equal shown scores go by rowid on every path.
    for c in ranked + exact:
        c.score = round(c.score, SCORE_DECIMALS)
    if superseding:
        _supersede(db, settings, weighed, held, current)
    ranked.sort(key=lambda c: (-c.score, c.rowid))
    exact = [c for c in exact if c.score >= min_score]
    picked, fill = _select(ranked, found, min_score, max_results, len(exact))
    rows = weighed.rows  # read with the weights: every candidate still in the store
    exact = _exact_order(weighed, {c.rowid for c in exact if c.rowid in rows}, rows,
                         hybrid.mmr.lambda_ if hybrid.mmr.enabled else None, max_results)
    picked = [c for c in picked if c.rowid in rows]  # deleted between ranking and reading
    fill = [c for c in fill if c.rowid in rows]
    note, head = None, len(picked)
    if reranker is not None:
        picked, reranked, note = reranker.apply(query, picked,
                                                [rows[c.rowid][8] for c in picked],
                                                weighed.factors)
        head = reranked or head  # MMR stays among the reranked: their scores are another scale
    if hybrid.mmr.enabled:  # only the places left after the exact matches are shown
        pool = picked[:head]
        word_sets = (None if held_rows is None
                     else lambda i: held_rows.word_set(pool[i].rowid))
        picked = mmr_order(pool, [c.score for c in pool], [rows[c.rowid][8] for c in pool],
                           hybrid.mmr.lambda_, limit=max_results - len(exact),
                           word_sets=word_sets) + picked[head:]
    shown = (exact + picked + fill)[:max_results]
    return Answer([_hit(c, rows[c.rowid], found) for c in shown], note)


def _supersede(db: Database, settings: Settings, weighed: entries.Weighed,
               held: HeldCopies | None, current: Current | None) -> None:
    """Superseded recency over ``weighed.rest`` (:mod:`pipeline.search.superseded`), the
    chunk vectors from the held matrix when current; a demoted candidate's reranker factor
    shrinks by its demotion."""
    recency = settings.query.hybrid.temporal_decay
    dated = [c.rowid for c in weighed.rest if weighed.written.get(c.rowid) is not None]
    if len(dated) < 2:
        return
    matrix = (held.current(db, text=False, vectors=True, versions=current.versions)[1]
              if held is not None and current is not None else None)
    demoted = superseded.supersede(weighed.rest, weighed.written,
                                   chunk_vectors(db, dated, matrix),
                                   similarity=recency.similarity, band=recency.band,
                                   shown=settings.query.min_score)
    for rowid, factor in demoted.items():
        weighed.factors[rowid] *= factor


def _exact_order(weighed: entries.Weighed, kept: set[int], rows: Mapping[int, WeightRow],
                 mmr_lambda: float | None, limit: int) -> list[Candidate]:
    """The first ``limit`` exact-path matches that were ``kept``, in order; with MMR on
    (``mmr_lambda``), each group re-ordered by MMR over its ranking scores, as OpenClaw's
    ``rerankExactGroup``."""
    out: list[Candidate] = []
    for group in weighed.groups:
        if len(out) >= limit:
            break
        members = [(c, score) for c, score in group if c.rowid in kept]
        if mmr_lambda is None or len(members) < 2:
            out += [c for c, _ in members]
            continue
        out += mmr_order([c for c, _ in members], [score for _, score in members],
                         [rows[c.rowid][8] for c, _ in members], mmr_lambda,
                         limit=limit - len(out))
    return out[:limit]


def _select(ranked: list[Candidate], found: Ranking, min_score: float, max_results: int,
            exact: int = 0) -> tuple[list[Candidate], list[Candidate]]:
    """OpenClaw 2026.9's choice among the ranked candidates: those that clear ``minScore``;
    when none does (and no ``exact`` path match was kept), the keyword hits (its relaxed
    fallback: a keyword match is an answer, not nothing); and when fewer than ``max_results``
    do in a hybrid search, the free slots filled, after them, with keyword-only matches (ones
    the vector side did not return) below ``minScore``. A vector-only search keeps what
    clears, nothing else."""
    picked = [c for c in ranked if c.score >= min_score]
    keyword = found.keyword_side()
    if not keyword or len(picked) + exact >= max_results:
        return picked, []
    if not picked and not exact:
        return [c for c in ranked if c.rowid in keyword], []
    if found.vector_side is None:
        return picked, []
    fill = [c for c in ranked if c.score < min_score and c.rowid in keyword
            and c.rowid not in found.vector_side]
    return picked, fill[:max_results - len(picked) - exact]


def _fused_hits(settings: Settings, found: Ranking, unfused: Unfused, min_score: float,
                max_results: int, now: float, projects: Sequence[str] | None, *,
                superseding: bool) -> list[SearchHit]:
    """:func:`search`'s hits for a ranking left unfused (no exact-path match, no reranker):
    fusion, decay (or superseded recency) and entry weights over arrays
    (:func:`pipeline.search.fused.rank`), then the selection, MMR and the hits as on the
    general path."""
    hybrid = settings.query.hybrid
    decay_on = hybrid.temporal_decay.enabled and not superseding
    f = fused.rank(unfused.rows, unfused.matrix, unfused.query_vector, unfused.vector,
                   unfused.text, unfused.weights,
                   decay_days=hybrid.temporal_decay.half_life_days if decay_on else None,
                   decay_floor=hybrid.temporal_decay.min_factor, now=now, projects=projects,
                   decimals=SCORE_DECIMALS)
    if superseding:
        f = _fused_supersede(settings, f, unfused)
    everyone = range(len(f.rowids))
    picked = [i for i in everyone if f.scores[i] >= min_score]
    keyword, fill = found.keyword_side(), []
    if keyword and len(picked) < max_results:  # as _select
        if not picked:
            picked = [i for i in everyone if f.rowids[i] in keyword]
        else:
            vector_side = found.vector_side or frozenset()
            fill = [i for i in everyone if f.scores[i] < min_score and f.rowids[i] in keyword
                    and f.rowids[i] not in vector_side][:max_results - len(picked)]
    picked = [i for i in picked if f.held[i]]  # deleted between ranking and reading
    fill = [i for i in fill if f.held[i]]
    rows = unfused.rows
    if hybrid.mmr.enabled:
        pool = picked
        picked = mmr_order(pool, [f.scores[i] for i in pool],
                           [rows.rows[f.rowids[i]][8] for i in pool], hybrid.mmr.lambda_,
                           limit=max_results,
                           word_sets=lambda n: rows.word_set(f.rowids[pool[n]]))
    return [_hit_of(f.scores[i], f.vector[i], f.text[i], rows.rows[f.rowids[i]], found)
            for i in (picked + fill)[:max_results]]


def _fused_supersede(settings: Settings, f: fused.Fused, unfused: Unfused) -> fused.Fused:
    """Superseded recency (:mod:`pipeline.search.superseded`) over a fused ranking: as
    :func:`_supersede` on the general path, the note times the fused ranking read and the
    chunk vectors from the held matrix."""
    recency = settings.query.hybrid.temporal_decay
    written = dict(zip(f.rowids, f.written, strict=True))
    dated = [r for r in f.rowids if written[r] is not None]
    if len(dated) < 2:
        return f
    ranked = [Candidate(rowid, score=score) for rowid, score in zip(f.rowids, f.scores,
                                                                      strict=True)]
    if not superseded.supersede(ranked, written, unfused.matrix.vectors(dated),
                                similarity=recency.similarity, band=recency.band,
                                shown=settings.query.min_score):
        return f
    return fused.rescored(f, [c.score for c in ranked])


def _hit(c: Candidate, row: WeightRow, found: Ranking) -> SearchHit:
    """The hit of candidate ``c`` (its chunk's ``row``): as :func:`_hit_of`."""
    return _hit_of(c.score, c.vector_score, c.text_score, row, found)


def _hit_of(score: float, vector_score: float, text_score: float, row: WeightRow,
            found: Ranking) -> SearchHit:
    """The hit of a chunk (its ``row``): its fused ``score`` and the two sides' scores it was
    fused from (OpenClaw's ``vectorScore`` and ``textScore``; a side that did not run has
    none)."""
    _, path, mtime_ns, importance, triggers, project, start, end, text, source = row
    vector = round(vector_score, SCORE_DECIMALS) if found.vector_side is not None else None
    keyword = round(text_score, SCORE_DECIMALS) if found.text_side else None
    return SearchHit(path, start, end, score, text[:SNIPPET_CHARS], source,
                     importance=importance, triggers=triggers, project_key=project,
                     vector_score=vector, text_score=keyword,
                     provenance=provenance(path, source, mtime_ns))
