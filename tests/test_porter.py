"""The Python cut of plain ASCII words (:mod:`pipeline.store.porter`) gives FTS5's own
``porter unicode61`` token for every word: the repository's text, every rule's suffix on many
stems, random strings (letters, digits, mixed case, past the 64-character limit)."""

from __future__ import annotations

import random
import re
from pathlib import Path

from pipeline.store import porter, postings
from pipeline.store.engine import connect
from pipeline.store.schema import FTS_TOKENIZER

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = ([s for s, _ in porter._STEP2] + [s for s, _ in porter._STEP3] + list(porter._STEP4)
            + ["s", "es", "ies", "sses", "ss", "ed", "eed", "ing", "y", "e", "ly", "ll", "at",
               "bl", "iz", "ated", "ating", "izing", "ements", "ations", "yed", "ying", "ys"])


def words() -> list[str]:
    found: set[str] = set()
    for path in [*ROOT.glob("docs/*.md"), *ROOT.glob("pipeline/**/*.py"), ROOT / "README.md"]:
        found.update(re.findall(r"[A-Za-z0-9]+", path.read_text(encoding="utf-8")))
    rng = random.Random(37)
    stems = sorted(w.lower() for w in found if w.isalpha() and 2 <= len(w) <= 8)
    for stem in rng.sample(stems, min(600, len(stems))):
        found.update(stem + suffix for suffix in SUFFIXES)
    for _ in range(30_000):
        found.add("".join(rng.choice("aeiouyybcdlmnrstwxz") for _ in range(rng.randint(1, 12))))
    for _ in range(2_000):
        found.add("".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCYZ0123456789")
                          for _ in range(rng.randint(1, 70))))
    return sorted(found)


def fts5_tokens(texts: list[str]) -> list[list[str]]:
    db = connect(":memory:", want_vectors=False)
    try:
        conn = db.conn
        conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{FTS_TOKENIZER}')")
        conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        conn.executemany("INSERT INTO t(rowid, text) VALUES (?, ?)", list(enumerate(texts)))
        out: list[list[str]] = [[] for _ in texts]
        for term, doc in conn.execute("SELECT term, doc FROM v ORDER BY doc, offset"):
            out[doc].append(term)
        return out
    finally:
        db.close()


def test_every_plain_ascii_word_is_cut_as_fts5_cuts_it() -> None:
    assert porter.TOKENIZER == FTS_TOKENIZER
    every = words()
    assert len(every) > 40_000
    wrong = [(w, fts, porter.ascii_token(w)) for w, fts in zip(every, fts5_tokens(every),
                                                             strict=True)
             if fts != [porter.ascii_token(w)]]
    assert wrong == []


def test_other_words_are_left_to_fts5() -> None:
    for word in ["foo_bar", "café", "naïve", "会议", "a-b", "", "x y", '"q"']:
        assert porter.ascii_token(word) is None


def test_tokenize_gives_the_same_tokens_either_way(monkeypatch) -> None:
    """postings.tokenize cuts ASCII words in Python and the rest through FTS5: the same tokens
    as FTS5 alone."""
    phrases = ['"Running"', '"q17"', '"café"', '"foo_bar"', '"generalizations"', '"ies"',
               '"x"', '"会议"', '"会"*', '"two words"']
    db = connect(":memory:", want_vectors=False)
    try:
        monkeypatch.setattr(postings, "_TOKENIZED", {})
        mixed = postings._cut(db, FTS_TOKENIZER, phrases)
        monkeypatch.setattr(porter, "TOKENIZER", "none")  # FTS5 cuts every phrase
        alone = postings._cut(db, FTS_TOKENIZER, phrases)
    finally:
        db.close()
    assert mixed == alone
    assert mixed['"Running"'] == ("run",) and mixed['"foo_bar"'] == ("foo", "bar")
