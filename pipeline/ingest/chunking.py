"""Markdown chunking and embedding-input limits, ported from OpenClaw.

This is a port of OpenClaw's ``chunkMarkdown`` (``src/memory/internal.ts``) and of its
input-limit splitter (``enforceEmbeddingMaxInputTokens`` in ``src/memory/embedding-chunk-limits.ts``
with ``splitTextToUtf8ByteLimit`` from ``src/memory/embedding-input-limits.ts``), as of the
2026-03 baseline (OpenClaw 2026.3.25), with one deliberate change: the overlap carried from a
long line is capped (``CHUNKING_VERSION`` 2, below). For files of short lines it is the same
input, same chunks: the golden tests in ``tests/golden/chunking`` were produced by running the
TypeScript originals under Node.

How ``chunk_markdown`` works:

* ``maxChars = max(32, tokens * 4)`` and ``overlapChars = overlap * 4``, where ``overlap`` is first
  clamped to ``[0, max(0, tokens - 1)]`` as OpenClaw's config resolver does.
* Sizes are JavaScript ``.length``: UTF-16 code units, so an astral character (emoji, CJK
  Extension B) counts 2.
* The text is split on ``"\\n"`` only (a CRLF file keeps its ``"\\r"`` at the end of each line).
  A line longer than ``maxChars`` is first cut into ``maxChars``-unit segments; every line or
  segment costs its length + 1.
* A chunk is flushed *before* a segment would push it past ``maxChars`` (a chunk that is empty
  always takes the segment). After a flush the chunk restarts with tail lines of the previous
  chunk, taken from the end until they add up to at least ``overlapChars``. A line shorter than
  ``overlapChars`` is carried whole, as OpenClaw's baseline does. A longer one (a paragraph
  written on one line, or a segment of it) is not: only its last ``overlapChars - 1`` units ride
  along, and only when it closes the chunk (the new chunk then starts inside that line, and its
  ``start_line`` is that line). The carry also leaves room for the incoming segment, so no chunk
  is longer than ``maxChars``. The baseline carried whole segments, so a chunk could grow to about
  twice ``maxChars`` and one paragraph was embedded two or three times (OpenClaw #138722; OpenClaw
  bounded its own carry in 2026.9, its ``chunkingVersion`` 5).
* Chunks whose text is blank (JavaScript ``String.prototype.trim`` rules) are dropped, as
  OpenClaw's indexer does right after chunking.
* ``hash`` is the SHA-256 hex digest of the chunk text encoded as UTF-8.

The one place where Python cannot copy JavaScript literally: OpenClaw slices long lines by UTF-16
index, which can cut an astral character in half and leave a lone surrogate at the end of one
segment and at the start of the next. A Python ``str`` holding lone surrogates cannot be encoded
as UTF-8, so each lone surrogate is replaced here by U+FFFD. That is exactly what OpenClaw ends up
with anyway: Node encodes a lone surrogate as U+FFFD both when it hashes the text and when it
stores it in SQLite, and U+FFFD is also one UTF-16 unit and three UTF-8 bytes. So texts, line
ranges, sizes and hashes all match OpenClaw's persisted values.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

__all__ = ["CHUNKING_VERSION", "Chunk", "chunk_markdown", "enforce_input_limit", "hash_text",
           "js_trim"]

#: memq's chunking version, part of the index fingerprint: a change rebuilds every index once.
#: 1 was OpenClaw 2026.3.25's carry (whole tail lines, even a full segment of a long line);
#: 2 caps the carry from a long line at the overlap and never lets a chunk pass ``maxChars``.
CHUNKING_VERSION = 2

# JavaScript String.prototype.trim() strips WhiteSpace and LineTerminator code points (ES2023):
# TAB VT FF SP NBSP ZWNBSP(BOM) + Unicode Zs, and LF CR LS PS. Python's str.strip() differs: it
# also strips U+001C..U+001F and U+0085 but keeps U+FEFF.
_JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Chunk:
    """One chunk of a file: 1-based inclusive line range, the text, sha256(text) in hex."""

    start_line: int
    end_line: int
    text: str
    hash: str


def hash_text(text: str) -> str:
    """OpenClaw's ``hashText``: SHA-256 hex digest of the UTF-8 encoded text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def js_trim(text: str) -> str:
    """``text.trim()`` with JavaScript's definition of whitespace."""
    return text.strip(_JS_WHITESPACE)


def _segments(line: str, max_chars: int) -> list[tuple[str, int]]:
    """Cut ``line`` like ``line.slice(start, start + maxChars)`` does, with UTF-16 lengths.

    Lone surrogates left by a cut through an astral character become U+FFFD (see module doc).
    """
    if not line:
        return [("", 0)]
    if line.isascii() or _ASTRAL.search(line) is None:
        # Every character is one UTF-16 unit: Python indices are JavaScript indices.
        n = len(line)
        if n <= max_chars:
            return [(line, n)]
        pieces = [line[i : i + max_chars] for i in range(0, n, max_chars)]
        return [(piece, len(piece)) for piece in pieces]
    units = line.encode("utf-16-le")
    n = len(units) // 2
    if n <= max_chars:
        return [(line, n)]
    out: list[tuple[str, int]] = []
    step = 2 * max_chars
    for i in range(0, len(units), step):
        piece = units[i : i + step]
        text = piece.decode("utf-16-le", "surrogatepass")
        if _SURROGATE.search(text) is not None:
            text = _SURROGATE.sub("\ufffd", text)
        out.append((text, len(piece) // 2))
    return out


def _utf16_tail(text: str, budget: int) -> tuple[str, int]:
    """The longest suffix of ``text`` of at most ``budget`` UTF-16 units, and its size in units.

    An astral character is never cut (its two units go together or not at all).
    """
    if budget <= 0:
        return "", 0
    if text.isascii() or _ASTRAL.search(text) is None:
        tail = text[-budget:]
        return tail, len(tail)
    units = 0
    start = len(text)
    while start > 0:
        width = 2 if ord(text[start - 1]) > 0xFFFF else 1
        if units + width > budget:
            break
        units += width
        start -= 1
    return text[start:], units


def _carry_overlap(texts: list[str], sizes: list[int], lines: list[int], overlap_chars: int,
                   room: int) -> tuple[list[str], list[int], list[int]]:
    """The tail of a flushed chunk that starts the next one: at most ``room`` units (so the
    next segment still fits in ``maxChars``).

    Whole lines no longer than ``overlap_chars`` are taken from the end until they reach
    ``overlap_chars``, as OpenClaw's baseline does (so notes of short lines chunk as before).
    A line longer than that (a long paragraph, or one segment of it) is cut: only its last
    ``min(overlap_chars, room) - 1`` units ride along, and only when it is the last line.
    """
    if overlap_chars <= 0 or room <= 0:
        return [], [], []
    acc = 0
    i = len(texts)
    while i > 0 and acc < overlap_chars:
        size = sizes[i - 1]
        if size <= overlap_chars and acc + size <= room:
            acc += size
            i -= 1
            continue
        if i == len(texts):
            tail, units = _utf16_tail(texts[i - 1], min(overlap_chars, room) - 1)
            if units > 0:
                return [tail], [units + 1], [lines[i - 1]]
        break
    return texts[i:], sizes[i:], lines[i:]


def chunk_markdown(
    content: str, tokens: int = 400, overlap: int = 80, *, drop_blank: bool = True
) -> list[Chunk]:
    """Split Markdown ``content`` into overlapping line chunks exactly like OpenClaw.

    ``tokens`` and ``overlap`` are OpenClaw's ``chunking.tokens`` / ``chunking.overlap`` (defaults
    400 / 80); ``overlap`` is clamped to ``[0, tokens - 1]``. ``drop_blank=False`` returns the raw
    ``chunkMarkdown`` output, before the indexer's blank-chunk filter.
    """
    tokens = int(tokens)
    overlap = max(0, min(int(overlap), max(0, tokens - 1)))
    max_chars = max(32, tokens * 4)
    overlap_chars = max(0, overlap * 4)

    if _SURROGATE.search(content) is not None:
        # Text decoded from UTF-8 never holds surrogates; treat stray ones like Node's decoder
        # treats invalid bytes.
        content = _SURROGATE.sub("\ufffd", content)

    chunks: list[Chunk] = []
    # Parallel lists for the chunk being built: segment text, its UTF-16 size + 1, its line number.
    cur_text: list[str] = []
    cur_size: list[int] = []
    cur_line: list[int] = []
    cur_chars = 0

    def flush() -> None:
        if not cur_text:
            return
        text = "\n".join(cur_text)
        if drop_blank and not js_trim(text):
            return
        chunks.append(Chunk(cur_line[0], cur_line[-1], text, hash_text(text)))

    for line_no, line in enumerate(content.split("\n"), start=1):
        for segment, seg_len in _segments(line, max_chars):
            size = seg_len + 1
            if cur_chars + size > max_chars and cur_text:
                flush()
                cur_text, cur_size, cur_line = _carry_overlap(
                    cur_text, cur_size, cur_line, overlap_chars, max_chars - size)
                cur_chars = sum(cur_size)
            cur_text.append(segment)
            cur_size.append(size)
            cur_line.append(line_no)
            cur_chars += size
    flush()
    return chunks


def _utf8_prefix_end(data: bytes, start: int, max_bytes: int) -> int:
    """End of the longest run of whole UTF-8 characters from ``start`` within ``max_bytes``.

    If even the first character is larger than ``max_bytes``, that one character is taken.
    """
    n = len(data)
    end = start + max_bytes
    if end >= n:
        return n
    # Back up to a character boundary: continuation bytes look like 0b10xxxxxx.
    while end > start and (data[end] & 0xC0) == 0x80:
        end -= 1
    if end > start:
        return end
    end = start + 1
    while end < n and (data[end] & 0xC0) == 0x80:
        end += 1
    return end


def _split_to_utf8_limit(text: str, max_bytes: int) -> list[str]:
    """``splitTextToUtf8ByteLimit``: greedy longest pieces of at most ``max_bytes`` UTF-8 bytes.

    OpenClaw binary-searches a UTF-16 cut point and then steps back out of a surrogate pair; the
    result is the longest prefix of whole characters that fits, which is what this computes
    directly on the UTF-8 bytes (linear time).
    """
    if max_bytes <= 0:
        return [text]
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return [text]
    parts: list[str] = []
    pos = 0
    while pos < len(data):
        end = _utf8_prefix_end(data, pos, max_bytes)
        parts.append(data[pos:end].decode("utf-8"))
        pos = end
    return parts


def enforce_input_limit(chunks: list[Chunk], max_bytes: int) -> list[Chunk]:
    """Re-split every chunk whose UTF-8 size exceeds ``max_bytes`` (OpenClaw's limit enforcement).

    Each piece is the longest run of whole characters that fits in ``max_bytes`` (a code point,
    and so a surrogate pair, is never cut), keeps the original chunk's line range and gets its own
    hash. Chunks that fit are returned unchanged. ``max_bytes`` is normally
    ``pipeline.embeddings.limits.max_input_bytes(provider, model)``.

    Only reachable with ``max_bytes < 4`` (OpenClaw's limits are at least 2048): a single character
    bigger than the budget is emitted on its own, so that piece exceeds ``max_bytes``. OpenClaw does
    the same for a BMP character but, for an astral one, silently drops the rest of the chunk.
    """
    if max_bytes <= 0:
        return list(chunks)
    out: list[Chunk] = []
    for chunk in chunks:
        text = chunk.text
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
        if size <= max_bytes:
            out.append(chunk)
            continue
        for piece in _split_to_utf8_limit(text, max_bytes):
            out.append(Chunk(chunk.start_line, chunk.end_line, piece, hash_text(piece)))
    return out
