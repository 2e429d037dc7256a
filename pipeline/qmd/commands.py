"""The qmd command lines memq runs (arguments after the executable).

From OpenClaw 2026.3.24 (``dist/qmd-manager-CdVu0x02.js``): ``collection add <path> --name
<name> --mask <pattern>``, ``collection remove <name>``, ``update``, ``embed``, and a search
``<mode> <query> --json -n <limit>`` with ``-c <collection>`` for each managed collection.

**memq:** one search process for all collections. OpenClaw 2026.3 ran one ``qmd`` per
collection and kept each document's best score, because older qmd builds filtered on one
collection only; qmd 2.8 takes ``-c`` repeatedly and does exactly that merge itself (it searches
each collection and keeps the best score per file: ``searchFTS`` in ``dist/store.js``, qmd
#775), so one process gives the same results for a fraction of the start-up cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipeline.store.tokens import is_cjk, words

#: OpenClaw's ``QMD_BM25_HAN_KEYWORD_LIMIT``.
HAN_KEYWORD_LIMIT = 12


def bm25_query(query: str) -> str:
    """The text ``qmd search`` gets: a query with Chinese/Japanese/Korean text becomes at most
    12 distinct keywords of 2 or more characters (OpenClaw's ``normalizeHanBm25Query``;
    **memq:** the keywords are the words and CJK bigrams of :mod:`pipeline.store.tokens`
    rather than OpenClaw's stop-word list). Other queries are kept as they are."""
    trimmed = query.strip()
    if not is_cjk(trimmed):
        return trimmed
    picked = list(dict.fromkeys(w for w in words(trimmed) if len(w) >= 2))[:HAN_KEYWORD_LIMIT]
    return " ".join(picked) or trimmed


def search_args(mode: str, query: str, limit: int, collections: Sequence[str]) -> list[str]:
    """``<mode> <query> --json -n <limit> -c <name>…`` (``search`` gets :func:`bm25_query`)."""
    text = bm25_query(query) if mode == "search" else query.strip()
    if text.startswith("-"):  # qmd would read it as an option and fail; a space keeps it a query
        text = " " + text
    args = [mode, text, "--json", "-n", str(limit)]
    for name in collections:
        args += ["-c", name]
    return args


def collection_add_args(path: Path, name: str, pattern: str) -> list[str]:
    return ["collection", "add", str(path), "--name", name, "--mask", pattern]


def collection_remove_args(name: str) -> list[str]:
    return ["collection", "remove", name]


UPDATE_ARGS = ["update"]
EMBED_ARGS = ["embed"]
LIST_ARGS = ["collection", "list"]
