"""OpenClaw's CJK-weighted character count (``estimateStringChars``, OpenClaw 2026.9.6).

OpenClaw sizes chunks by an estimate of tokens × 4 rather than by string length: text with no
CJK counts its UTF-16 code units, and a character from one of five ranges counts more, so a CJK
chunk holds about as many tokens as a Latin one. Each code point costs its UTF-16 length (1, or
2 for an astral one) plus a bucket surcharge:

=========  =====================================================  ============
bucket     ranges (code points)                                   total weight
=========  =====================================================  ============
common     U+00B7, U+3000–U+318F, U+4E00–U+9FA5, Hangul
           syllables U+AC00–U+D7AF, full-width forms U+FF01–U+FF60  4
rare BMP   Hangul Jamo, CJK radicals, Ext. A, U+9FA6–U+9FFF, Yi,
           Hangul Jamo Ext., compatibility ideographs               12
two-token  spacing modifiers (ˇ ˉ–ˋ ˙ ˪ ˫ ̅ ̣), vertical/small
           forms U+FE10–U+FE4F, half-width forms                    8
three-tok  U+1D2E0–U+1D2F1 (astral)                                 2 + 10 = 12
astral     Tangut/Khitan/Nüshu, kana supplements, enclosed
           ideographic supplement, CJK Ext. B–F, Ext. G–H           2 + 14 = 16
=========  =====================================================  ============

The count is additive over code points, which is what lets the chunker weigh a prefix or a
suffix of a line by counting matches instead of walking it in Python.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

# NumPy weighs only the long lines of non-plain text (imported there): a pass that chunks
# nothing, or only plain text, never loads it.
if TYPE_CHECKING:
    import numpy as np

__all__ = ["code_point_weights", "estimate_string_chars", "is_plain", "utf16_len"]

# (surcharge, ranges) per bucket, copied from cjk-chars.ts's WEIGHTED_CJK_RANGES.
_BUCKETS: tuple[tuple[int, tuple[tuple[int, int], ...]], ...] = (
    (3, ((183, 183), (12288, 12703), (19968, 40869), (44032, 55215), (65281, 65376))),
    (11, ((4352, 4607), (11904, 12287), (12704, 19967), (40870, 40959), (40960, 42239),
          (42752, 42759), (43360, 43391), (55216, 55295), (63744, 64255))),
    (7, ((711, 711), (713, 715), (729, 729), (746, 747), (773, 773), (803, 803),
         (65040, 65103), (65377, 65500), (65504, 65510))),
    (10, ((119648, 119665),)),
    (14, ((94176, 94207), (110576, 110591), (110592, 110959), (127488, 127743),
          (131072, 195103), (196608, 210047))),
)


def _class(ranges: tuple[tuple[int, int], ...]) -> str:
    return "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)


_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_TABLE_SIZE = max(b for _, ranges in _BUCKETS for _, b in ranges) + 2


@functools.cache
def _patterns() -> tuple[re.Pattern[str], tuple[tuple[int, re.Pattern[str]], ...]]:
    """(any weighted character, (surcharge, its bucket's characters) per bucket), compiled on
    first use: only text with non-ASCII characters needs them, and a one-shot search that
    never chunks need not pay for them."""
    weighted = tuple((surcharge, re.compile(f"[{_class(ranges)}]"))
                     for surcharge, ranges in _BUCKETS)
    return re.compile("[" + "".join(_class(r) for _, r in _BUCKETS) + "]"), weighted


@functools.cache
def _surcharges() -> np.ndarray:
    """Surcharge by code point, for the vectorised weights of long lines."""
    import numpy as np

    table = np.zeros(_TABLE_SIZE, dtype=np.int64)
    for surcharge, ranges in _BUCKETS:
        for a, b in ranges:
            table[a : b + 1] = surcharge
    return table


def utf16_len(text: str) -> int:
    """JavaScript's ``text.length``: UTF-16 code units (an astral character counts 2)."""
    if text.isascii():
        return len(text)
    return len(text) + len(_ASTRAL.findall(text))


def estimate_string_chars(text: str) -> int:
    """``estimateStringChars(text)``: UTF-16 length plus the CJK surcharges (table above)."""
    if text.isascii():
        return len(text)
    total = utf16_len(text)
    any_weighted, weighted = _patterns()
    if any_weighted.search(text) is None:
        return total
    for surcharge, pattern in weighted:
        total += surcharge * len(pattern.findall(text))
    return total


def is_plain(text: str) -> bool:
    """True when every character of ``text`` weighs 1 (no astral and no weighted character),
    so weights, UTF-16 units and Python indices all agree."""
    return text.isascii() or (_ASTRAL.search(text) is None
                               and _patterns()[0].search(text) is None)


def code_point_weights(text: str) -> tuple[np.ndarray, np.ndarray]:
    """(UTF-16 units, weight) of each code point of ``text`` (no lone surrogates)."""
    import numpy as np

    cps = np.frombuffer(text.encode("utf-32-le"), dtype="<u4").astype(np.int64)
    units = 1 + (cps > 0xFFFF)
    return units, units + _surcharges()[np.minimum(cps, _TABLE_SIZE - 1)]
