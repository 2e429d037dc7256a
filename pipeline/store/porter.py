"""The token SQLite FTS5's ``porter unicode61`` tokenizer makes of a plain ASCII word, in Python.

A search cuts each query word as the store's index does (:func:`pipeline.store.postings.tokenize`)
to find its postings. FTS5 does it through a scratch table, about 25 µs a new word, and 0.1 ms
right after a scan has emptied the caches; a word of ASCII letters and digits is cut here
instead: ``unicode61`` lower-cases it (one token: no separator inside), and the ``porter``
wrapper stems it with Martin Porter's algorithm as FTS5 implements it (tokens shorter than 3
or longer than 64 characters pass unchanged; ``y`` is a vowel after a consonant; each step takes
the first of its suffixes that ends the word, and only that one's condition decides).
``tests/test_porter.py`` checks every word of several hundred thousand (the repository's own
text, every rule's suffix on many stems, random strings) against FTS5 itself. Any other word
(an underscore, a non-ASCII letter) is left to FTS5.
"""

from __future__ import annotations

import re

__all__ = ["TOKENIZER", "ascii_token"]

#: The FTS5 tokenizer whose tokens :func:`ascii_token` gives (the store's, schema.FTS_TOKENIZER).
TOKENIZER = "porter unicode61"
MAX_TOKEN = 64  # FTS5_PORTER_MAX_TOKEN
_WORD = re.compile(r"[A-Za-z0-9]+\Z")


def _consonants(word: str) -> list[bool]:
    """Per letter: a consonant? (``y`` is a vowel after a consonant, a consonant first.)"""
    out: list[bool] = []
    previous = False  # "the letter before was a consonant": none before the first
    for ch in word:
        if ch in "aeiou":
            consonant = False
        elif ch == "y":
            consonant = not previous
        else:
            consonant = True
        out.append(consonant)
        previous = consonant
    return out


def _measure(stem: str) -> int:
    """Porter's m: the number of vowel-consonant sequences in ``stem``."""
    m, seen_vowel = 0, False
    for consonant in _consonants(stem):
        if not consonant:
            seen_vowel = True
        elif seen_vowel:
            m += 1
            seen_vowel = False
    return m


def _has_vowel(stem: str) -> bool:
    """Porter's ``*v*`` as FTS5 tests it: a, e, i, o or u anywhere, or y after the first
    letter."""
    return any(ch in "aeiou" or (ch == "y" and i > 0) for i, ch in enumerate(stem))


def _cvc(stem: str) -> bool:
    """Porter's ``*o``: consonant, vowel, consonant at the end, the last not w, x or y."""
    if len(stem) < 3 or stem[-1] in "wxy":
        return False
    kinds = _consonants(stem)
    return kinds[-3] and not kinds[-2] and kinds[-1]


#: Steps 2-4: (suffix, replacement), in the order FTS5 tries them; the first suffix that ends
#: the word (leaving at least one letter) is the one whose condition decides.
_STEP2 = (("ational", "ate"), ("tional", "tion"), ("enci", "ence"), ("anci", "ance"),
          ("izer", "ize"), ("logi", "log"), ("bli", "ble"), ("alli", "al"), ("entli", "ent"),
          ("eli", "e"), ("ousli", "ous"), ("ization", "ize"), ("ation", "ate"), ("ator", "ate"),
          ("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous"),
          ("aliti", "al"), ("iviti", "ive"), ("biliti", "ble"))
_STEP3 = (("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"), ("ical", "ic"),
          ("ful", ""), ("ness", ""))
_STEP4 = ("al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent",
          "ion", "ou", "ism", "ate", "iti", "ous", "ive", "ize")


def _grouped(rules: tuple[tuple[str, str], ...]) -> dict[str, tuple[tuple[str, str], ...]]:
    """The rules by their suffix's last-but-one letter (FTS5 switches on the word's), each
    group in the order given."""
    out: dict[str, list[tuple[str, str]]] = {}
    for suffix, replacement in rules:
        out.setdefault(suffix[-2], []).append((suffix, replacement))
    return {k: tuple(v) for k, v in out.items()}


_STEP2_BY = _grouped(_STEP2)
_STEP3_BY = _grouped(_STEP3)
_STEP4_BY = _grouped(tuple((s, "") for s in _STEP4))


def _step(word: str, rules: dict[str, tuple[tuple[str, str], ...]], least: int) -> str:
    """Replace the first of the word's group's suffixes that ends it, when the stem before it
    has m > ``least`` - 1 (step 4: ``ion`` only after ``s`` or ``t``)."""
    for suffix, replacement in rules.get(word[-2], ()) if len(word) > 1 else ():
        if len(word) > len(suffix) and word.endswith(suffix):
            stem = word[:-len(suffix)]
            if _measure(stem) >= least and (suffix != "ion" or stem[-1] in "st"):
                return stem + replacement
            return word
    return word


def _stem(word: str) -> str:
    """Porter's stem of ``word`` (lower-case ASCII letters and digits, 3 to 64 long), as
    FTS5's ``porter`` tokenizer makes it."""
    # Step 1a
    if word[-1] == "s":
        if word[-2] == "e":
            if (len(word) > 4 and word[-4:-2] == "ss") or (len(word) > 3 and word[-3] == "i"):
                word = word[:-2]
            else:
                word = word[:-1]
        elif word[-2] != "s":
            word = word[:-1]
    # Step 1b
    cut = False
    if len(word) > 3 and word.endswith("eed"):
        if _measure(word[:-3]) > 0:
            word = word[:-1]
    elif len(word) > 2 and word.endswith("ed"):
        if _has_vowel(word[:-2]):
            word, cut = word[:-2], True
    elif len(word) > 3 and word.endswith("ing") and _has_vowel(word[:-3]):
        word, cut = word[:-3], True
    if cut:
        if len(word) > 2 and word.endswith(("at", "bl", "iz")):
            word += "e"
        elif len(word) > 1 and word[-1] == word[-2] and word[-1] not in "aeioulsz":
            word = word[:-1]
        elif _measure(word) == 1 and _cvc(word):
            word += "e"
    # Step 1c
    if word[-1] == "y" and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    # Steps 2-4
    word = _step(word, _STEP2_BY, 1)
    word = _step(word, _STEP3_BY, 1)
    word = _step(word, _STEP4_BY, 2)
    # Step 5a
    if word[-1] == "e":
        m = _measure(word[:-1])
        if m > 1 or (m == 1 and not _cvc(word[:-1])):
            word = word[:-1]
    # Step 5b
    if len(word) > 1 and word[-1] == "l" and word[-2] == "l" and _measure(word[:-1]) > 1:
        word = word[:-1]
    return word


def ascii_token(word: str) -> str | None:
    """The one token ``porter unicode61`` makes of ``word`` when it is plain ASCII letters and
    digits; None for any other word (FTS5 must cut it)."""
    if not _WORD.match(word):
        return None
    word = word.lower()
    if len(word) < 3 or len(word) > MAX_TOKEN:
        return word
    return _stem(word)
