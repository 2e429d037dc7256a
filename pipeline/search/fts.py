"""Turn any user text into a safe FTS5 ``MATCH`` expression, and BM25 ranks into scores.

Raw user text breaks FTS5 (``rate-limit`` becomes a column filter, ``c++`` and a lone ``"`` are
syntax errors, ``AND`` is an operator). The builder keeps only word tokens, quotes each one,
keeps "quoted phrases" as phrases, and joins them with OR so a multi-word query is not empty
when one word is missing (OpenClaw's AND join was: #15339). BM25 then ranks by how many and
how rare the matched words are.

Chinese, Japanese and Korean runs become the same bigrams the index holds
(:mod:`pipeline.store.tokens`); a lone CJK character is a prefix query, so it matches every
indexed bigram that starts with it.
"""

from __future__ import annotations

import math
import re

from pipeline.store.tokens import is_cjk, query_text

_TOKEN = re.compile(r"\w+", re.UNICODE)
_PHRASE = re.compile(r'"([^"]*)"')
MAX_TERMS = 64


def _quote(term: str) -> str:
    quoted = '"' + term.replace('"', '""') + '"'
    return quoted + "*" if len(term) == 1 and is_cjk(term) else quoted


def match_terms(text: str) -> list[str]:
    """The quoted phrases of the MATCH expression for ``text`` (OR-ed), each once, in order."""
    text = query_text(text)
    terms: list[str] = []
    for phrase in _PHRASE.findall(text):
        words = _TOKEN.findall(phrase)
        if len(words) > 1:
            terms.append(_quote(" ".join(words)))
    for word in _TOKEN.findall(_PHRASE.sub(" ", text) if terms else text):
        terms.append(_quote(word))
    return list(dict.fromkeys(terms))[:MAX_TERMS]


def build_match_query(text: str) -> str | None:
    """A MATCH expression for ``text``, or None when it has no searchable word at all."""
    terms = match_terms(text)
    return " OR ".join(terms) if terms else None


def bm25_to_score(rank: float) -> float:
    """Map an FTS5 bm25() rank (more negative = better) to a score in (0, 1], higher = better.

    OpenClaw once clamped negative ranks to 0, so every hit scored 1.0 (#5767); here a better
    rank always gives a higher score.
    """
    if not math.isfinite(rank):
        return 0.001
    if rank < 0:
        r = -rank
        return r / (1 + r)
    return 1 / (1 + rank)
