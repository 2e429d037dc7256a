"""The entry-weight and exact-path stage of a search (OpenClaw 2026.9.6's ``mergeHybridResults``
after fusion), between fusion and ``minScore``.

* Exact path: every file whose path the query names (:func:`paths.exact_path_specificity`
  above 0; :mod:`pipeline.search.paths` finds them, and the files it names partially, which
  are ordinary candidates here) is a candidate through its first chunk, and every fused
  candidate of such a file is one too. They rank before everything else, by specificity
  (path, basename, stem), then by their ranking score: with temporal decay on,
  ``(1 + clamp(content, 0, 1)) / 2`` decayed; off, the content score (1 for a path-only
  match, which then follows the content-backed ones of its tier). The score they show is
  their project multiplier (1 without active projects), as OpenClaw shows.
* Every candidate's score is then multiplied by its entry's importance multiplier and, with
  active project keys, its project multiplier; entries with an unreadable project
  annotation are dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pipeline.search import decay, weights
from pipeline.search.fusion import Candidate
from pipeline.search.paths import PathMatch, path_matches
from pipeline.store import reads
from pipeline.store.engine import Database
from pipeline.store.reads import WeightRow
from pipeline.store.rows import ChunkRows

EntryValues = tuple[int | None, str | None, str | None]


@dataclass
class Weighed:
    """The candidates after this stage: ``exact`` (in their final order, showing their
    project multiplier) and ``rest`` (weighted scores, unsorted), and the rows read.
    ``groups`` holds ``exact`` as OpenClaw's MMR sees it: per tier (with decay off, its
    content-backed and its path-only matches apart), each with its ranking score."""

    exact: list[Candidate] = field(default_factory=list)
    groups: list[list[tuple[Candidate, float]]] = field(default_factory=list)
    rest: list[Candidate] = field(default_factory=list)
    #: Decay × importance × project multiplier per candidate of ``rest`` (what a reranker's
    #: relevance is multiplied by in place of the fused score).
    factors: dict[int, float] = field(default_factory=dict)
    #: :data:`~pipeline.store.reads.WeightRow` per candidate still in the store (more rows
    #: when they are the held copy's: every chunk of the store).
    rows: Mapping[int, WeightRow] = field(default_factory=dict)
    #: With the decay of ``rest`` left to the caller (``weigh(defer_decay=True)``): each
    #: candidate of ``rest``'s note time (None: evergreen), for :mod:`pipeline.search.superseded`.
    written: dict[int, float | None] = field(default_factory=dict)


def entry_values(row: WeightRow) -> EntryValues | None:
    """A row's (importance, triggers, project key), None when it has none of them."""
    values = row[3:6]
    return None if values == (None, None, None) else values


def _with_named(matches: Sequence[PathMatch], ranked: list[Candidate]) -> dict[str, int]:
    """Specificity per path the query names exactly (``matches``:
    :func:`pipeline.search.paths.path_matches`); each such file's first chunk not yet among
    ``ranked`` is appended to it (a path-only candidate, content score 0)."""
    levels = {m.path: (m.rowid, m.specificity) for m in matches if m.specificity > 0}
    have = {c.rowid for c in ranked} if levels else set()
    ranked.extend(Candidate(rowid) for rowid, _ in levels.values() if rowid not in have)
    return {path: level for path, (_, level) in levels.items()}


def weigh(db: Database, query: str, ranked: list[Candidate], *, sources: Sequence[str] | None,
          decay_days: float | None, now: float, projects: Sequence[str] | None,
          paths: Sequence[PathMatch] | None = None, decay_floor: float = 0.0,
          held: ChunkRows | None = None, defer_decay: bool = False) -> Weighed:
    """Temporal decay (``decay_days``: the half-life, None when off; ``decay_floor``: its
    ``minFactor``; ``defer_decay``: not applied to ``rest``, whose note times are kept in
    ``written`` instead, for superseded recency; exact-path matches still decay), importance,
    project
    ranking and exact-path order over the fused ``ranked`` candidates (see module doc).
    ``paths``: the files the query names (:func:`pipeline.search.paths.path_matches`), looked
    up here (exact matches only) when None. ``held``: the store's chunk rows held in memory
    (:mod:`pipeline.store.rows`) when current; else the rows are read from the store."""
    if paths is None:
        paths = path_matches(db, query, 0, sources)
    named = _with_named(paths, ranked)
    if held is not None:
        rows: Mapping[int, WeightRow] = held.rows
        times = held.written
    else:
        rows = {row[0]: row for row in reads.chunk_weights(db, [c.rowid for c in ranked])}
        times = None
    active = weights.active_keys(projects)
    out = Weighed(rows=rows)
    per_file: dict[tuple[str, int | None], float] = {}
    tiers: dict[int, list[tuple[float, bool, Candidate]]] = {3: [], 2: [], 1: []}
    for c in ranked:
        row = rows.get(c.rowid)
        if row is None:  # deleted since it was ranked: dropped later
            out.rest.append(c)
            out.factors[c.rowid] = 1.0
            continue
        factor = 1.0
        if decay_days is not None:
            file = row[1], row[2]
            factor = per_file.get(file, -1.0)
            if factor < 0:
                factor = per_file[file] = decay.file_multiplier(
                    row[1], row[2], now, decay_days, decay_floor, times)
        values = entry_values(row)
        level = named.get(row[1], 0) if named else 0
        if defer_decay and not level:
            out.written[c.rowid] = decay.written_at(row[1], row[2], times)
            factor = 1.0
        if values is None and not level:  # most: only decay applies
            c.score *= factor  # importance and project multipliers are 1
            out.rest.append(c)
            out.factors[c.rowid] = factor
            continue
        importance, _, project = values or (None, None, None)
        if not weights.project_eligible(project):
            continue
        content = c.score
        if level:
            content = ((1 + max(0.0, min(1.0, content))) / 2 if decay_days is not None
                       else content if content > 0 else 1.0)
        factor = (factor * weights.importance_multiplier(importance)
                  * weights.project_multiplier(project, active))
        c.score = content * factor
        if level:
            tiers[level].append((c.score, c.vector_score > 0 or c.text_score > 0, c))
        else:
            out.rest.append(c)
            out.factors[c.rowid] = factor
    for level in (3, 2, 1):
        tier = tiers[level]
        # decay off: content-backed matches before path-only ones of the same tier
        tier.sort(key=lambda t: (decay_days is None and not t[1], -t[0], t[2].rowid))
        parts = ([tier] if decay_days is not None
                 else [[t for t in tier if t[1]], [t for t in tier if not t[1]]])
        out.groups += [[(c, score) for score, _, c in part] for part in parts if part]
    for group in out.groups:
        for c, _ in group:
            c.score = weights.project_multiplier(rows[c.rowid][5], active)
            out.exact.append(c)
    return out
