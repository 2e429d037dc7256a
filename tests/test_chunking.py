"""Chunking and input-limit tests: golden outputs from OpenClaw's TypeScript, plus properties.

The JSON fixtures in tests/golden/chunking were produced by running OpenClaw 2026.9.6's own
``chunkMarkdown`` / ``enforceEmbeddingMaxInputTokens`` / ``prepareMemoryIndexChunks`` /
``stripMemoryAnnotationCarriers`` from the installed package under Node
(``tests/openclaw_chunking.mjs``; see tests/golden/chunking/README.md). ``model_limits.json`` is
older: OpenClaw 2026.3.25's ``resolveEmbeddingMaxInputTokens`` table.
"""

from __future__ import annotations

import hashlib
import json
import time
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.embeddings.limits import (
    HARD_MAX_INPUT_BYTES,
    max_input_bytes,
    max_input_tokens,
)
from pipeline.ingest.annotations import strip_memory_annotation_carriers
from pipeline.ingest.chunking import (
    CHUNKING_VERSION,
    PER_ENTRY_PATHS,
    Chunk,
    chunk_markdown,
    enforce_input_limit,
    hash_text,
    js_trim,
    memory_chunks,
)
from pipeline.ingest.weights import estimate_string_chars

GOLDEN = Path(__file__).parent / "golden" / "chunking"


@cache
def _load(name: str) -> dict:
    return json.loads((GOLDEN / name).read_text(encoding="utf-8"))


def _cases(name: str) -> list[dict]:
    return _load(name)["cases"]


def _ids(cases: list[dict]) -> list[str]:
    return [c["name"] for c in cases]


def _as_rows(chunks: list[Chunk], *, with_hash: bool = True) -> list[list]:
    if with_hash:
        return [[c.start_line, c.end_line, c.text, c.hash] for c in chunks]
    return [[c.start_line, c.end_line, c.text] for c in chunks]


# --- golden: chunkMarkdown -------------------------------------------------------------------

CHUNK_CASES = _cases("chunk_cases.json")
FUZZ_CASES = _cases("chunk_fuzz_cases.json")
LIMIT_CASES = _cases("limit_cases.json")


INDEX = _load("index_cases.json")


def _units(text: str) -> int:
    """JavaScript's ``.length``: UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def test_goldens_come_from_openclaw_2026_9_6_chunking_version_5() -> None:
    for name in ("chunk_cases.json", "chunk_fuzz_cases.json", "limit_cases.json",
                 "index_cases.json"):
        assert _load(name)["source"] == {"openclaw": "2026.9.6", "chunking_version": 5}
    assert CHUNKING_VERSION == 5


@pytest.mark.parametrize("case", CHUNK_CASES, ids=_ids(CHUNK_CASES))
def test_chunk_markdown_matches_openclaw(case: dict) -> None:
    got = chunk_markdown(case["content"], case["tokens"], case["overlap"])
    assert _as_rows(got) == case["chunks"]


@pytest.mark.parametrize("case", CHUNK_CASES, ids=_ids(CHUNK_CASES))
def test_raw_chunk_markdown_matches_openclaw_before_blank_filter(case: dict) -> None:
    got = chunk_markdown(case["content"], case["tokens"], case["overlap"], drop_blank=False)
    assert _as_rows(got, with_hash=False) == case["raw"]


@pytest.mark.parametrize("case", FUZZ_CASES, ids=_ids(FUZZ_CASES))
def test_chunk_markdown_matches_openclaw_fuzz(case: dict) -> None:
    got = chunk_markdown(case["content"], case["tokens"], case["overlap"])
    assert _as_rows(got, with_hash=False) == case["chunks"]
    digest = hashlib.sha256(",".join(c.hash for c in got).encode()).hexdigest()
    assert digest == case["hashes_sha256"]


@pytest.mark.parametrize("case", INDEX["cases"], ids=_ids(INDEX["cases"]))
def test_memory_file_chunks_match_openclaw_indexer(case: dict) -> None:
    """Annotation stripping + per-entry mode for exactly MEMORY.md/USER.md + blank filter."""
    got = memory_chunks(case["path"], case["content"], case["tokens"], case["overlap"])
    assert _as_rows(got) == case["chunks"]


@pytest.mark.parametrize(("text", "stripped"), INDEX["strip"])
def test_strip_annotation_carriers_matches_openclaw(text: str, stripped: str) -> None:
    assert strip_memory_annotation_carriers(text) == stripped


def test_golden_set_covers_the_hard_cases() -> None:
    names = set(_ids(CHUNK_CASES))
    for wanted in (
        "empty",
        "crlf_default",
        "cjk_default",
        "astral_tokens8_splits_pairs",
        "ascii_note_overlap_ge_tokens",
        "long_line_5000",
        "daily_note_default",
        "unicode_whitespace_chunks",
        "ascii_note_tokens1",
        "v5_cjk_one_long_line",
        "v5_ext_b_long_line",
        "v5_surrogates_long_line",
        "v5_long_paragraphs",
    ):
        assert wanted in names
    index = {c["name"]: c for c in INDEX["cases"]}
    for wanted in ("memory_md_per_entry", "user_md_per_entry", "daily_note_not_per_entry",
                   "lowercase_memory_md_not_per_entry", "nested_memory_md_not_per_entry"):
        assert wanted in index
    # Per-entry mode really changes the output: same text, different chunks.
    assert index["memory_md_per_entry"]["chunks"] != index["daily_note_not_per_entry"]["chunks"]
    # Annotation carriers really were removed from the goldens.
    assert not any("importance:" in row[2] for row in index["memory_md_per_entry"]["chunks"])


def test_per_entry_chunks_start_at_each_bullet_and_heading() -> None:
    text = "# Me\nlikes tea\n- entry one\n  more of one\n- entry two\n## Work\nnotes\n-no"
    got = [(c.start_line, c.end_line) for c in memory_chunks("USER.md", text)]
    assert got == [(1, 2), (3, 4), (5, 5), (6, 8)]
    # Elsewhere the same text is one chunk.
    assert [(c.start_line, c.end_line) for c in memory_chunks("memory/x.md", text)] == [(1, 8)]
    assert [(c.start_line, c.end_line) for c in memory_chunks("MEMORY.md", text)] == got
    assert {"MEMORY.md", "USER.md"} == PER_ENTRY_PATHS


def test_no_overlap_across_entries() -> None:
    entry = "- " + " ".join(f"word{i}" for i in range(600))  # one entry longer than maxChars
    text = entry + "\n- short entry"
    chunks = memory_chunks("MEMORY.md", text)
    assert chunks[-1].text == "- short entry"  # nothing of the long entry rides along
    assert chunks[-2].start_line == chunks[-2].end_line == 1


def test_annotations_are_stripped_but_line_numbers_kept() -> None:
    text = "- a <!-- importance: 9 -->\n- b <!-- trigger: x, y -->\n<!-- keep: me -->"
    chunks = memory_chunks("memory/2026-09-01.md", text)
    assert [(c.start_line, c.end_line, c.text) for c in chunks] == [
        (1, 3, "- a\n- b\n<!-- keep: me -->")]


def test_cjk_weighs_four_and_ext_b_sixteen() -> None:
    assert estimate_string_chars("abc") == 3
    assert estimate_string_chars("中文") == 8
    assert estimate_string_chars("한") == 4
    assert estimate_string_chars("𠜎") == 16
    assert estimate_string_chars("😀") == 2  # astral but not CJK: its UTF-16 length
    assert estimate_string_chars("ｶ") == 8  # half-width katakana: two tokens
    assert estimate_string_chars("㐀") == 12  # Extension A: rare BMP
    # 400 CJK characters fill a default chunk (1600): 400 of them and one more do not fit.
    assert len(chunk_markdown("中" * 400, overlap=0)) == 1
    assert len(chunk_markdown("中" * 401, overlap=0)) == 2


def test_surrogate_pairs_are_never_split() -> None:
    # maxChars 32: "a" + 15 emoji = 31 units; the 16th emoji would cut at 32, so it moves on.
    chunks = chunk_markdown("a" + "😀" * 16, tokens=8, overlap=0)
    assert [c.text for c in chunks] == ["a" + "😀" * 15, "😀"]
    for c in chunk_markdown("😀" * 1000 + "𠜎" * 50, tokens=8, overlap=3):
        assert "\ufffd" not in c.text
        assert c.hash == hash_text(c.text)


def test_astral_characters_count_two_units() -> None:
    # 16 emoji = 32 UTF-16 units = maxChars: fits one piece, cost 33 > 32 only with a neighbour.
    assert [c.text for c in chunk_markdown("😀" * 16 + "\nb", tokens=8, overlap=0)] == [
        "😀" * 16,
        "b",
    ]
    # 15 emoji + "\n" + "b" = 30 + 1 + 1 + 1 = 33 > 32: still two chunks.
    assert len(chunk_markdown("😀" * 15 + "\nb", tokens=8, overlap=0)) == 2
    # 14 emoji: 29 + 2 = 31 <= 32: one chunk.
    assert len(chunk_markdown("😀" * 14 + "\nb", tokens=8, overlap=0)) == 1


def test_defaults_and_clamping() -> None:
    text = "\n".join(f"line {i} " + "x" * 50 for i in range(200))
    assert chunk_markdown(text) == chunk_markdown(text, 400, 80)
    assert chunk_markdown(text, 20, 500) == chunk_markdown(text, 20, 19)
    assert chunk_markdown(text, 20, -3) == chunk_markdown(text, 20, 0)
    assert chunk_markdown(text, 0, 0) == chunk_markdown(text, 8, 0)  # both maxChars = 32


def test_js_trim_rules() -> None:
    assert js_trim("\ufeff\u3000\u00a0 \t") == ""
    assert js_trim("\x1c") == "\x1c"  # Python's str.strip() would drop it
    assert js_trim("\x85") == "\x85"


# --- golden: limits ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", LIMIT_CASES, ids=_ids(LIMIT_CASES))
def test_enforce_input_limit_matches_openclaw(case: dict) -> None:
    chunks = chunk_markdown(case["content"], case["tokens"], case["overlap"])
    assert len(chunks) == case["input_count"]
    digest = hashlib.sha256(",".join(c.hash for c in chunks).encode()).hexdigest()
    assert digest == case["input_hashes_sha256"]
    if case["provider"] != "test":
        assert max_input_bytes(case["provider"], case["model"]) == case["max_bytes"]
    got = enforce_input_limit(chunks, case["max_bytes"])
    assert _as_rows(got) == case["output"]


@pytest.mark.parametrize(
    "row", _cases("model_limits.json"), ids=lambda r: f"{r['provider']}:{r['model']}"
)
def test_model_limits_match_openclaw(row: dict) -> None:
    assert max_input_tokens(row["provider"], row["model"]) == row["max_input_tokens"]
    assert max_input_bytes(row["provider"], row["model"]) == row["max_input_bytes"]


def test_limits_table_and_cap() -> None:
    assert _load("model_limits.json")["hard_max_bytes"] == HARD_MAX_INPUT_BYTES == 8000
    assert max_input_bytes("gemini", "gemini-embedding-001") == 2048
    assert max_input_bytes("gemini", "models/gemini-embedding-2-preview") == 8000
    assert max_input_bytes("local", "anything.gguf") == 2048
    assert max_input_bytes("voyage", "voyage-3") == 8000
    assert max_input_tokens("voyage", "voyage-3") == 32000
    assert max_input_tokens("openai", "openai/text-embedding-ada-002") == 8191
    assert max_input_tokens("mistral", "mistral-embed") == 8192
    assert max_input_tokens("ollama", "nomic-embed-text") == 8192


# --- enforce_input_limit properties ----------------------------------------------------------


def _check_split(chunks: list[Chunk], max_bytes: int) -> list[Chunk]:
    out = enforce_input_limit(chunks, max_bytes)
    by_range: dict[tuple[int, int], list[Chunk]] = {}
    for c in out:
        assert len(c.text.encode("utf-8")) <= max_bytes
        assert c.hash == hash_text(c.text)
        by_range.setdefault((c.start_line, c.end_line), []).append(c)
    # Pieces of one chunk are consecutive, keep its line range and reassemble to its text.
    rebuilt = []
    i = 0
    for original in chunks:
        pieces = []
        text = ""
        while text != original.text:
            piece = out[i]
            assert (piece.start_line, piece.end_line) == (original.start_line, original.end_line)
            pieces.append(piece)
            text += piece.text
            i += 1
            assert len(text) <= len(original.text)
        if len(original.text.encode("utf-8")) <= max_bytes:
            assert pieces == [original]
        rebuilt.append(text)
    assert i == len(out)
    assert rebuilt == [c.text for c in chunks]
    return out


def test_enforce_input_limit_multibyte() -> None:
    text = "日本語のテキスト🎌 mixed ASCII, 한국어, emoji 👨‍👩‍👧‍👦, Ext-B 𠜎𠜎 " * 300
    chunks = chunk_markdown(text, tokens=3000, overlap=0)
    assert any(len(c.text.encode()) > 2048 for c in chunks)
    for max_bytes in (4, 5, 6, 7, 13, 100, 2048, 8000):
        out = _check_split(chunks, max_bytes)
        assert len(out) > len(chunks) or max_bytes == 8000


def test_enforce_input_limit_keeps_fitting_chunks_and_order() -> None:
    chunks = [Chunk(1, 2, "short", hash_text("short")), Chunk(3, 9, "é" * 10, hash_text("é" * 10))]
    out = enforce_input_limit(chunks, 8)
    assert out[0] is chunks[0]
    assert [c.text for c in out] == ["short", "éééé", "éééé", "éé"]
    assert all((c.start_line, c.end_line) == (3, 9) for c in out[1:])
    assert enforce_input_limit(chunks, 0) == chunks


def test_enforce_input_limit_never_splits_code_points() -> None:
    chunk = Chunk(1, 1, "a😀b", hash_text("a😀b"))
    assert [c.text for c in enforce_input_limit([chunk], 4)] == ["a", "😀", "b"]
    assert [c.text for c in enforce_input_limit([chunk], 5)] == ["a😀", "b"]
    # Budget below one character: that character goes alone (OpenClaw would drop the rest).
    assert [c.text for c in enforce_input_limit([chunk], 3)] == ["a", "😀", "b"]
    assert [c.text for c in enforce_input_limit([Chunk(1, 1, "中中", "")], 2)] == ["中", "中"]


@settings(max_examples=300, deadline=None)
@given(
    text=st.lists(
        st.sampled_from(["a", " ", "\n", "é", "中", "😀", "𠜎", "\u3000", "x" * 5, "\r\n", "ｶ",
                         "㐀", "- ", "# "]),
        max_size=200,
    ).map("".join),
    tokens=st.integers(min_value=0, max_value=30),
    overlap=st.integers(min_value=-2, max_value=40),
    max_bytes=st.integers(min_value=4, max_value=120),
)
def test_properties_random_text(text: str, tokens: int, overlap: int, max_bytes: int) -> None:
    chunks = chunk_markdown(text, tokens, overlap)
    assert chunks == _reference_chunk_markdown(text, tokens, overlap)
    assert all(estimate_string_chars(c.text) <= max(32, tokens * 4) for c in chunks)
    n_lines = text.count("\n") + 1
    for c in chunks:
        c.text.encode("utf-8")
        assert 1 <= c.start_line <= c.end_line <= n_lines
        assert js_trim(c.text)
    _check_split(chunks, max_bytes)


def _weights(text: str) -> list[int]:
    """Per code point weight, one ``estimate_string_chars`` call each."""
    return [estimate_string_chars(ch) for ch in text]


def _reference_chunk_markdown(content: str, tokens: int, overlap: int) -> list[Chunk]:
    """Literal transcription of OpenClaw 2026.9.6's TypeScript, code point by code point
    (slow, obvious)."""
    overlap = max(0, min(overlap, max(0, tokens - 1)))
    max_chars = max(32, tokens * 4)
    overlap_chars = max(0, overlap * 4)
    chunks: list[Chunk] = []
    current: list[tuple[str, int]] = []
    current_chars = 0

    def flush() -> None:
        if current:
            text = "\n".join(seg for seg, _ in current)
            if js_trim(text):
                chunks.append(Chunk(current[0][1], current[-1][1], text, hash_text(text)))

    def carry(window: int) -> tuple[list[tuple[str, int]], int]:
        if window <= 0 or not current:
            return [], 0
        acc = 0
        kept: list[tuple[str, int]] = []
        for seg, line_no in reversed(current):
            size = sum(_weights(seg)) + 1
            remaining = window - acc
            if size > remaining:
                if not kept:
                    start, tail_acc = len(seg), 0
                    while start > 0:
                        tail_acc += estimate_string_chars(seg[start - 1])
                        if tail_acc > remaining - 1:
                            break
                        start -= 1
                    if start < len(seg):
                        kept.insert(0, (seg[start:], line_no))
                        acc += sum(_weights(seg[start:])) + 1
                break
            acc += size
            kept.insert(0, (seg, line_no))
            if acc >= window:
                break
        return kept, acc

    def append(seg: str, line_no: int, chars: int) -> None:
        nonlocal current, current_chars
        if current_chars + chars + 1 > max_chars and current:
            flush()
            current, current_chars = carry(min(overlap_chars, max(0, max_chars - chars - 1)))
        current.append((seg, line_no))
        current_chars += chars + 1

    for i, line in enumerate(content.split("\n")):
        if not line:
            append("", i + 1, 0)
        start = 0
        while start < len(line):
            coarse, units = "", 0
            for ch in line[start:]:
                if units + _units(ch) > max_chars:
                    break
                coarse += ch
                units += _units(ch)
            part, part_chars = "", 0
            for ch in coarse:
                w = estimate_string_chars(ch)
                if part_chars + w > max_chars:
                    append(part, i + 1, part_chars)
                    part, part_chars = "", 0
                part += ch
                part_chars += w
            append(part, i + 1, part_chars)
            start += len(coarse)
    flush()
    return chunks


# --- chunk sizes stay bounded -----------------------------------------------------------------


def _paragraph(n: int, seed: int = 0) -> str:
    """``n`` characters of words on one line, different for each seed."""
    words = " ".join(f"w{seed}x{i}" for i in range(n))
    return words[:n]


@pytest.mark.parametrize(("tokens", "overlap"), [(400, 80), (64, 16), (50, 49), (8, 7), (8, 2)])
def test_chunks_never_exceed_max_chars(tokens: int, overlap: int) -> None:
    shorts = [f"- note {i}: " + "y" * (i * 7 % 90) for i in range(40)]
    text = "\n".join(["# Title", "", _paragraph(5000), *shorts, _paragraph(3300, 3), "😀" * 900,
                      "中文" * 700])
    max_chars = max(32, tokens * 4)
    chunks = chunk_markdown(text, tokens, overlap)
    assert max(estimate_string_chars(c.text) for c in chunks) <= max_chars
    # The overlap stays bounded: what is embedded is the text plus at most one carry per chunk.
    carried = sum(_units(c.text) + 1 for c in chunks) - _units(text) - 1
    assert carried <= (len(chunks) - 1) * overlap * 4


# --- speed ------------------------------------------------------------------------------------


def _timed(fn, *args):
    t0 = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - t0


def test_speed_5mb_single_line() -> None:
    text = ("memory search chunking speed test ünïcödé 中文 " * 120_000)[: 5 * 1024 * 1024]
    chunks, t_chunk = _timed(chunk_markdown, text)
    limited, t_limit = _timed(enforce_input_limit, chunks, 2048)
    assert chunks and all(c.start_line == c.end_line == 1 for c in chunks)
    assert all(len(c.text.encode()) <= 2048 for c in limited)
    assert t_chunk < 5 and t_limit < 5, (t_chunk, t_limit)


def test_speed_5mb_single_line_emoji() -> None:
    text = "😀" * (5 * 1024 * 1024 // 4)
    chunks, t_chunk = _timed(chunk_markdown, text)
    limited, t_limit = _timed(enforce_input_limit, chunks, 8000)
    assert len(chunks) > 1000
    assert all(len(c.text.encode()) <= 8000 for c in limited)
    assert t_chunk < 5 and t_limit < 5, (t_chunk, t_limit)


def test_speed_10k_lines() -> None:
    text = "\n".join(f"- {i}: note about topic {i % 97} with some words ✓" for i in range(10_000))
    chunks, elapsed = _timed(chunk_markdown, text)
    assert chunks[0].start_line == 1 and chunks[-1].end_line == 10_000
    assert elapsed < 2, elapsed


# --- the goldens are what OpenClaw's installed code says -------------------------------------


def test_generator_reproduces_the_goldens_from_the_installed_openclaw(tmp_path: Path) -> None:
    """``tests/openclaw_chunking.mjs`` run now against the pinned package rewrites the four
    golden files byte for byte: they are OpenClaw's output, not hand edits."""
    import shutil
    import subprocess

    from tests.tools import tool, tools_dir

    node = tool("node")
    package = tools_dir() / "openclaw/node_modules/openclaw"
    tool("openclaw")
    names = ("chunk_cases.json", "chunk_fuzz_cases.json", "limit_cases.json", "index_cases.json")
    for name in names:
        shutil.copy(GOLDEN / name, tmp_path / name)
    (tmp_path / "index_cases.json").unlink()  # written from the script's own case list
    done = subprocess.run([str(node), str(Path(__file__).with_name("openclaw_chunking.mjs")),
                           str(package), str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "chunking version 5" in done.stdout
    for name in names:
        assert (tmp_path / name).read_bytes() == (GOLDEN / name).read_bytes(), name
