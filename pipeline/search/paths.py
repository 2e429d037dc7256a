"""Finding files by their path: OpenClaw 2026.9.6's path index (``searchPathKeyword``,
``prepareExactPathMatcher``), the one place a query is matched against file names.

* **Exact**: a query that, trimmed, with ``\\`` as ``/``, without a leading ``./``, NFC and
  lower-cased (:func:`~pipeline.store.path_keys.normalized_path`), equals a file's path is
  specificity 3; a query without ``/`` equal to its basename 2, to its stem (the basename
  before its last ``.``, unless that dot starts it) 1. Such files are found by an index seek
  on their name and stem keys (``files.name_key``, ``stem_key``), at most
  :data:`EXACT_PATH_LIMIT`, also where SQLite has no FTS5.
* **Partial**: the words of the query are looked up in the path index (``paths_fts``, FTS5
  ``unicode61`` over every file's path, schema 8): every word (AND), scored
  ``r/(1+r)`` of the path's BM25 magnitude r; and, as OpenClaw does for non-ASCII words,
  those words as case-insensitive substrings of the path (the other words still matched
  by the index), scored 1. The same is done for each keyword of the query
  (:func:`~pipeline.search.keywords.extract_keywords`, at most 6, not the whole query
  itself): OpenClaw searches them one by one when its AND query finds too little; memq,
  whose keyword side is an OR query, always does, so a file named by one word of a longer
  question is found. A file keeps its best score. Each file counts through its first chunk;
  at most ``limit`` files that are not exact matches, best first.

:mod:`pipeline.search.entries` ranks exact matches before everything else; a partial match is
a keyword hit whose keyword score is its path score, unless its chunk also matched by its text
(then the text's score), as OpenClaw's ``mergeKeywordSearchHits`` and ``mergeHybridResults``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pipeline.search.fts import bm25_to_score
from pipeline.search.keywords import extract_keywords
from pipeline.store import reads
from pipeline.store.engine import Database
from pipeline.store.path_keys import js_trim, name_keys, normalized_path
from pipeline.store.rows import FileNames
from pipeline.store.schema import has_path_index

__all__ = ["EXACT_PATH_LIMIT", "PathMatch", "exact_path_specificity", "names_nothing",
           "path_matches", "path_plans"]

#: OpenClaw's ``EXACT_PATH_CANDIDATE_LIMIT``: files an exact path query adds at most.
EXACT_PATH_LIMIT = 200
#: OpenClaw's ``KEYWORD_FALLBACK_SEARCH_TERM_LIMIT``: keywords searched one by one.
KEYWORD_LIMIT = 6
_ASCII_WORD = re.compile(r"[A-Za-z0-9_]+")


@dataclass(frozen=True)
class PathMatch:
    """A file the query names: its first chunk, path, exact specificity (3 path, 2 basename,
    1 stem, 0 partial) and path score (OpenClaw's ``pathScore``; 0 for an exact match found by
    name alone)."""

    rowid: int
    path: str
    specificity: int
    score: float


def exact_path_specificity(query: str, path: str) -> int:
    """How exactly ``query`` names ``path``: 3 the path, 2 its basename, 1 its stem, 0 not."""
    wanted = normalized_path(query)
    if not wanted or wanted == ".":
        return 0
    if wanted == normalized_path(path):
        return 3
    if "/" in wanted:
        return 0
    name, stem = name_keys(path)
    return 2 if wanted == name else 1 if wanted == stem else 0


def _words(text: str, marks: bool) -> list[str]:
    """``text.match(/[\\p{L}\\p{N}_]+/gu)`` (with ``\\p{M}`` too when ``marks``)."""
    if text.isascii():  # ASCII has letters and digits only where [A-Za-z0-9] says, no marks
        return _ASCII_WORD.findall(text)
    classes = "LMN" if marks else "LN"
    out, current = [], []
    for ch in text:
        if ch == "_" or unicodedata.category(ch)[0] in classes:
            current.append(ch)
        elif current:
            out.append("".join(current))
            current = []
    if current:
        out.append("".join(current))
    return out


def _match(words: Iterable[str]) -> str | None:
    """OpenClaw's ``buildMatchQueryFromTerms``: every word quoted, joined with AND."""
    quoted = ['"' + w.replace('"', "") + '"' for w in words]
    return " AND ".join(quoted) if quoted else None


@dataclass(frozen=True)
class Plan:
    """One lookup in the path index: an FTS5 expression (None: none) and words that must be
    substrings of the path."""

    match: str | None
    substrings: tuple[str, ...] = ()


def path_plans(query: str) -> list[Plan]:
    """OpenClaw's ``planPathKeywordSearch`` (``unicode61``): the AND of the query's words;
    then, for its NFC and NFD forms, the AND of its ASCII words with its other words as
    substrings (when it has any)."""
    plans = [Plan(_match(_words(query, marks=False)))]
    if query.isascii():  # its NFC and NFD forms are itself, and all its words ASCII
        return [p for p in plans if p.match is not None]
    for form in dict.fromkeys((unicodedata.normalize("NFC", query),
                               unicodedata.normalize("NFD", query))):
        words = _words(form, marks=True)
        other = tuple(w for w in words if not w.isascii())
        if other:
            plans.append(Plan(_match(w for w in words if w.isascii()), other))
    unique = list(dict.fromkeys(plans))
    return [p for p in unique if p.match is not None or p.substrings]


def _contains(substrings: Sequence[str]) -> list[re.Pattern[str]]:
    """``literalSearchMatcher``: the NFC word, case-insensitively, anywhere in the path."""
    return [re.compile(re.escape(unicodedata.normalize("NFC", s)), re.IGNORECASE)
            for s in substrings]


def _lookup(db: Database, plan: Plan, limit: int, sources: Sequence[str] | None, query: str,
            exact: dict[str, PathMatch], found: dict[str, PathMatch]) -> None:
    """Add the best ``limit`` files of ``plan`` that ``query`` does not name exactly to
    ``found`` (each file keeps its best score); an exact match of ``exact`` found here keeps
    its best score too."""
    matchers = _contains(plan.substrings)
    scored = plan.match is not None
    try:
        rows = reads.path_ranks(db, plan.match, sources)
        taken = 0
        for path, _, rank in rows:
            if taken >= limit:
                break
            normal = unicodedata.normalize("NFC", path)
            if not all(m.search(normal) for m in matchers):
                continue
            score = bm25_to_score(rank) if scored else 1.0
            if path in exact:
                old = exact[path]
                exact[path] = PathMatch(old.rowid, path, old.specificity, max(old.score, score))
                continue
            if exact_path_specificity(query, path) or (rowid := reads.first_chunk(
                    db, path)) is None:
                continue
            taken += 1
            old_match = found.get(path)
            if old_match is None or score > old_match.score:
                found[path] = PathMatch(rowid, path, 0, score)
    except db.operational_error:
        if not scored:
            raise
        # OpenClaw's fallback when the index refuses the expression: the words as substrings
        words = tuple(dict.fromkeys(re.findall(r'"([^"]*)"', plan.match or "")))
        _lookup(db, Plan(None, words + plan.substrings), limit, sources, query, exact, found)


def _exact(db: Database, query: str, sources: Sequence[str] | None) -> dict[str, PathMatch]:
    """The files ``query`` names exactly, by path: specificity, then path (at most
    :data:`EXACT_PATH_LIMIT`). The file a path names has the path's last segment as its name
    (all of them are read, then checked); a query without "/" is the name or stem of every
    file found."""
    wanted = normalized_path(query)
    if not wanted or wanted == ".":
        return {}
    found = reads.first_chunks_named(db, wanted.rsplit("/", 1)[-1], sources,
                                     None if "/" in wanted else EXACT_PATH_LIMIT)
    levels = sorted(((-level, path, rowid) for rowid, path in found
                     if (level := exact_path_specificity(query, path)) > 0))
    return {path: PathMatch(rowid, path, -level, 0.0)
            for level, path, rowid in levels[:EXACT_PATH_LIMIT]}


_ASCII_TOKEN = re.compile(r"[A-Za-z0-9]+")


def names_nothing(query: str, key: str | None, names: FileNames) -> bool:
    """True when ``query`` (plain ASCII) surely names no file, exactly or partially: no file
    has ``key`` (the query's last path segment) as its name or stem, and none of the query's
    tokens as the path index cuts them (``unicode61``: ASCII letter and digit runs,
    lower-cased) is in any path, while every lookup matches only paths holding all of its
    words' tokens (the words and keywords of an ASCII query are runs of its own)."""
    if names.tokens is None or not query.isascii() or (key is not None and key in names.keys):
        return False
    return not any(t.lower() in names.tokens for t in _ASCII_TOKEN.findall(query))


def path_matches(db: Database, query: str, limit: int, sources: Sequence[str] | None,
                 names: FileNames | None = None) -> list[PathMatch]:
    """Every file ``query`` names exactly (at most :data:`EXACT_PATH_LIMIT`, by specificity
    then path) and the best ``limit`` it names partially (by score, then path), of the
    ``sources`` unless None (see the module doc). ``names``: the store's file names held in
    memory (:mod:`pipeline.store.rows`) when current: a query that surely names no file
    (:func:`names_nothing`) is then not looked up at all."""
    wanted = normalized_path(query)
    key = wanted.rsplit("/", 1)[-1] if wanted and wanted != "." else None
    if names is not None and names_nothing(query, key, names):
        return []
    indexed = limit > 0 and db.fts_ok
    plans: list[Plan] = []
    if indexed:
        terms = [t for t in extract_keywords(query)
                 if t != js_trim(query).lower()][:KEYWORD_LIMIT]
        plans = [plan for text in [query, *terms] for plan in path_plans(text)]
    # Most queries name no file: one statement tells whether a file has the query's name, and
    # which of the path index's expressions match a file at all; a lookup that would find
    # nothing (so add nothing) is not made. Refused (no path index, or an expression it
    # refuses): every lookup is made, as it would be without the probe.
    asked = list(dict.fromkeys(p.match for p in plans if p.match is not None))
    probe = reads.path_probe(db, key, asked, sources)
    named, matching = (True, None) if probe is None else probe
    exact = _exact(db, query, sources) if named else {}
    if not indexed or ((matching is None or any(p.match is None for p in plans))
                       and not has_path_index(db)):
        return list(exact.values())
    found: dict[str, PathMatch] = {}
    for plan in plans:
        if matching is None or plan.match is None or plan.match in matching:
            _lookup(db, plan, limit, sources, query, exact, found)
    partial = sorted(found.values(), key=lambda m: (-m.score, m.path))[:limit]
    return list(exact.values()) + partial
