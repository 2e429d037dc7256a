"""Unicode word tokens, with Chinese, Japanese and Korean runs cut into overlapping bigrams.

FTS5's ``unicode61`` tokenizer splits on spaces and punctuation, so a CJK sentence (no spaces)
becomes one huge token that no query ever matches. memq indexes a segmented copy of each chunk
instead: every run of CJK characters is replaced by its overlapping bigrams plus the run's last
character (``会议纪要`` → ``会议 议纪 纪要 要``), so any two-character word of the run is a
token and a one-character query can match by prefix. Queries are segmented the same way
(bigrams only), which makes mixed-script text like ``Redis缓存`` searchable on both sides.
The same tokens serve MMR's Jaccard similarity.
"""

from __future__ import annotations

import functools
import re

# Han (with extensions and compatibility), Hiragana, Katakana (not the middle dot U+30FB, which
# unicode61 treats as punctuation), Katakana extensions and half-width forms, Hangul.
_CJK_CLASS = (
    "\u3040-\u309f\u30a0-\u30fa\u30fc-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uf900-\ufaff\uff66-\uff9f\u1100-\u11ff\u3130-\u318f\uac00-\ud7af"
    "\U00020000-\U0002ffff"
)
#: The lowest code point of the class (Hangul Jamo): text below it holds no CJK character.
_CJK_FIRST = "\u1100"
_WORD = re.compile(r"\w+", re.UNICODE)


@functools.cache
def _cjk_run() -> re.Pattern[str]:
    """Runs of CJK characters. Compiled on first use, not at import: the class's ranges take
    milliseconds to compile, which a one-shot search of plain text never needs."""
    return re.compile(f"[{_CJK_CLASS}]+")


def is_cjk(text: str) -> bool:
    """True when ``text`` contains at least one CJK character."""
    if text.isascii():  # most text: one C pass that stops at the first non-ASCII byte
        return False
    return max(text) >= _CJK_FIRST and _cjk_run().search(text) is not None


def _bigrams(run: str) -> list[str]:
    return [run[i : i + 2] for i in range(len(run) - 1)] or [run]


def _segment(text: str, *, with_tail: bool) -> str:
    def cut(match: re.Match[str]) -> str:
        run = match.group(0)
        grams = _bigrams(run)
        if with_tail and len(run) > 1:
            grams.append(run[-1])
        return " " + " ".join(grams) + " "

    return _cjk_run().sub(cut, text)


def index_text(text: str) -> str:
    """The text FTS5 indexes for a chunk: CJK runs as bigrams plus their last character."""
    return _segment(text, with_tail=True) if is_cjk(text) else text


def query_text(text: str) -> str:
    """A query with its CJK runs as bigrams (a one-character run stays one character)."""
    return _segment(text, with_tail=False) if is_cjk(text) else text


def words(text: str) -> list[str]:
    """Word tokens of ``text`` (any script), lower-cased, CJK runs as bigrams."""
    if text.isascii():  # lower-casing ASCII maps letter to letter: the same tokens, one call
        return _WORD.findall(text.lower())
    return [w.lower() for w in _WORD.findall(query_text(text))]


#: Byte by byte, ASCII as :data:`_WORD` sees it: word characters lower-cased, the rest spaces.
_ASCII_WORD_BYTES = bytes(
    (c | 0x20 if chr(c).isalpha() else c) if chr(c).isalnum() or c == 0x5F else 0x20
    for c in range(128)) + bytes(128)


def word_set(text: str) -> frozenset[bytes]:
    """The distinct :func:`words` of ``text``, UTF-8 encoded (what MMR compares). Plain ASCII
    is cut without a regular expression: its bytes mapped through a table and split, the same
    tokens three times faster (a search compares a few dozen texts of hundreds of words)."""
    if text.isascii():
        return frozenset(text.encode("ascii").translate(_ASCII_WORD_BYTES).split())
    return frozenset(w.encode() for w in words(text))
