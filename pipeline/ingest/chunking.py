"""Markdown chunking and embedding-input limits, ported from OpenClaw 2026.9.6.

This is a port of OpenClaw's ``chunkMarkdown`` (``packages/memory-host-sdk/src/host/
markdown-chunks.ts``, its ``MEMORY_CHUNKING_VERSION`` 5), of the indexer's preparation of memory
files (``prepareMemoryIndexChunks``: annotation stripping, per-entry mode, blank filter) and of
its input-limit splitter (``enforceEmbeddingMaxInputTokens`` with ``splitTextToUtf8ByteLimit``).
Same input, same chunks: the golden tests in ``tests/golden/chunking`` were produced by running
OpenClaw's own code from the installed package under Node (``tests/openclaw_chunking.mjs``).

How ``chunk_markdown`` works:

* ``maxChars = max(32, tokens * 4)`` and ``overlapChars = overlap * 4``, where ``overlap`` is first
  clamped to ``[0, max(0, tokens - 1)]`` as OpenClaw's config resolver does.
* Sizes are *weighted*: :func:`~pipeline.ingest.weights.estimate_string_chars`, the UTF-16
  length plus a surcharge for CJK characters (a common ideograph or Hangul syllable weighs 4,
  a CJK Extension B character 16), so a chunk of Chinese holds about as many tokens as one of
  English.
* The text is split on ``"\\n"`` only (a CRLF file keeps its ``"\\r"`` at the end of each line).
  A line is cut into pieces of at most ``maxChars`` UTF-16 units, never through a surrogate pair
  (``truncateUtf16Safe``), and a piece that still weighs more than ``maxChars`` into the longest
  runs of code points that fit. Every piece costs its weight + 1.
* A chunk is flushed *before* a piece would push it past ``maxChars`` (a chunk that is empty
  always takes the piece). The next chunk starts with an overlap of at most
  ``min(overlapChars, maxChars - incoming)``: whole tail pieces, from the end, until they reach
  it; only if not even the last piece fits, that piece's tail (of weight ``window - 1``, whole
  code points). So no chunk weighs more than ``maxChars``.
* Per-entry mode (``MEMORY.md`` and ``USER.md``, :func:`memory_chunks`): each top-level ``- ``
  bullet and each heading ``#{1,6}`` starts a new chunk, with no overlap across entries.
* Chunks whose text is blank (JavaScript ``String.prototype.trim`` rules) are dropped, as
  OpenClaw's indexer does right after chunking.
* ``hash`` is the SHA-256 hex digest of the chunk text encoded as UTF-8.

Versions (part of the index fingerprint, so a change rebuilds every index once): 1 was OpenClaw
2026.3.25's UTF-16 sizes and unbounded carry, 2 memq's own cap on that carry; memq now numbers
its chunking as OpenClaw does, and 5 is OpenClaw's version 5.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from pipeline.ingest.annotations import strip_memory_annotation_carriers
from pipeline.ingest.entry_metadata import chunk_metadata
from pipeline.ingest.weights import code_point_weights, estimate_string_chars, is_plain

# NumPy only searches the prefix sums of a long non-plain line (imported there, as in
# :mod:`pipeline.ingest.weights`): a pass that chunks nothing never loads it.
if TYPE_CHECKING:
    import numpy as np

__all__ = ["CHUNKING_VERSION", "PER_ENTRY_PATHS", "Chunk", "chunk_markdown",
           "enforce_input_limit", "hash_text", "js_trim", "memory_chunks"]

#: memq's chunking version, part of the index fingerprint: a change rebuilds every index once.
#: 5 is OpenClaw 2026.9.6's ``MEMORY_CHUNKING_VERSION`` (weighted sizes, bounded carry,
#: per-entry ``MEMORY.md``/``USER.md``, annotation comments stripped).
CHUNKING_VERSION = 5

#: Workspace-relative paths chunked one entry at a time (compared exactly, as OpenClaw does).
PER_ENTRY_PATHS = frozenset({"MEMORY.md", "USER.md"})

# JavaScript String.prototype.trim() strips WhiteSpace and LineTerminator code points (ES2023):
# TAB VT FF SP NBSP ZWNBSP(BOM) + Unicode Zs, and LF CR LS PS. Python's str.strip() differs: it
# also strips U+001C..U+001F and U+0085 but keeps U+FEFF.
_JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_SURROGATE = re.compile("[\ud800-\udfff]")
_HEADING = re.compile("#{1,6}(?:[" + _JS_WHITESPACE + "]|\\Z)")


@dataclass(frozen=True)
class Chunk:
    """One chunk of a file: 1-based inclusive line range, the text, sha256(text) in hex, and
    its entry's annotation values (:mod:`pipeline.ingest.entry_metadata`; None when absent)."""

    start_line: int
    end_line: int
    text: str
    hash: str
    importance: int | None = None
    triggers: str | None = None
    project_key: str | None = None


def hash_text(text: str) -> str:
    """OpenClaw's ``hashText``: SHA-256 hex digest of the UTF-8 encoded text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def js_trim(text: str) -> str:
    """``text.trim()`` with JavaScript's definition of whitespace."""
    return text.strip(_JS_WHITESPACE)


def _prefix(values: np.ndarray) -> np.ndarray:
    """Prefix sums with a leading 0: ``out[k]`` is the sum of the first ``k`` values."""
    import numpy as np

    out = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(values, out=out[1:])
    return out


def _segments(line: str, max_chars: int) -> Iterator[tuple[str, int]]:
    """The pieces of one line, with their weighted sizes, as OpenClaw's loop cuts it.

    A coarse piece is the longest run of whole code points of at most ``maxChars`` UTF-16 units
    (``truncateUtf16Safe``); if its weight is over ``maxChars`` (CJK), it is cut again into the
    longest runs of code points whose weight fits. Weights are additive, so both cuts are found
    by a binary search in prefix sums of the line's code point units and weights.
    """
    if not line:
        yield "", 0
        return
    if is_plain(line):
        for i in range(0, len(line), max_chars):
            piece = line[i : i + max_chars]
            yield piece, len(piece)
        return
    if len(line) <= max_chars // 16:  # fits however heavy its characters (16 at most)
        yield line, estimate_string_chars(line)
        return
    import numpy as np

    units, weights = code_point_weights(line)
    u, w = _prefix(units), _prefix(weights)
    start, n = 0, len(line)
    while start < n:
        end = int(np.searchsorted(u, u[start] + max_chars, side="right")) - 1
        part = start
        while w[end] - w[part] > max_chars:
            cut = int(np.searchsorted(w, w[part] + max_chars, side="right")) - 1
            yield line[part:cut], int(w[cut] - w[part])
            part = cut
        yield line[part:end], int(w[end] - w[part])
        start = end


def _weighted_tail(text: str, budget: int) -> str:
    """``takeTailByEstimatedChars``: the longest suffix of whole code points weighing at most
    ``budget``."""
    if budget <= 0:
        return ""
    if is_plain(text):
        return text[-budget:]
    import numpy as np

    _, weights = code_point_weights(text)
    from_end = np.cumsum(weights[::-1])
    k = int(np.searchsorted(from_end, budget, side="right"))
    return text[len(text) - k :]


@dataclass
class _Building:
    """The chunk being built: its pieces, their line numbers and weighted sizes (+1 each)."""

    texts: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    chars: int = 0

    def add(self, text: str, line: int, size: int) -> None:
        self.texts.append(text)
        self.lines.append(line)
        self.sizes.append(size)
        self.chars += size

    def carry(self, window: int) -> _Building:
        """``carryOverlap(window)``: the tail that starts the next chunk.

        Whole pieces are taken from the end while they fit in ``window`` (stopping once they
        reach it); if not even the last piece fits, only its tail of ``window - 1`` weight.
        """
        kept = _Building()
        if window <= 0 or not self.texts:
            return kept
        i = len(self.texts)
        acc = 0
        while i > 0:
            size = self.sizes[i - 1]
            if size > window - acc:
                if i == len(self.texts):
                    tail = _weighted_tail(self.texts[i - 1], window - acc - 1)
                    if tail:
                        kept.add(tail, self.lines[i - 1], estimate_string_chars(tail) + 1)
                break
            acc += size
            i -= 1
            if acc >= window:
                break
        if kept.texts:
            return kept
        kept.texts, kept.lines, kept.sizes = self.texts[i:], self.lines[i:], self.sizes[i:]
        kept.chars = acc
        return kept


def _entry_start(line: str, index: int) -> bool:
    """Whether a line opens a new entry in per-entry mode: a top-level ``- `` bullet, a
    heading ``#{1,6}`` followed by whitespace or the end, or the first line."""
    return index == 0 or line.startswith("- ") or _HEADING.match(line) is not None


def chunk_markdown(
    content: str, tokens: int = 400, overlap: int = 80, *, drop_blank: bool = True,
    per_entry: bool = False,
) -> list[Chunk]:
    """Split Markdown ``content`` into overlapping line chunks exactly like OpenClaw 2026.9.6.

    ``tokens`` and ``overlap`` are OpenClaw's ``chunking.tokens`` / ``chunking.overlap`` (defaults
    400 / 80); ``overlap`` is clamped to ``[0, tokens - 1]``. ``per_entry`` starts a new chunk,
    with no overlap, at every entry (see :func:`memory_chunks`). ``drop_blank=False`` returns
    the raw ``chunkMarkdown`` output, before the indexer's blank-chunk filter.
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
    cur = _Building()

    def flush() -> None:
        if not cur.texts:
            return
        text = "\n".join(cur.texts)
        if drop_blank and not js_trim(text):
            return
        chunks.append(Chunk(cur.lines[0], cur.lines[-1], text, hash_text(text)))

    for index, line in enumerate(content.split("\n")):
        if per_entry and _entry_start(line, index):
            flush()
            cur = _Building()
        for segment, weight in _segments(line, max_chars):
            size = weight + 1
            if cur.chars + size > max_chars and cur.texts:
                flush()
                cur = cur.carry(min(overlap_chars, max(0, max_chars - size)))
            cur.add(segment, index + 1, size)
    flush()
    return chunks


def memory_chunks(path: str, content: str, tokens: int = 400, overlap: int = 80, *,
                  chunker: Callable[..., list[Chunk]] | None = None) -> list[Chunk]:
    """Chunks of a file of the ``memory`` source, as OpenClaw's indexer prepares them.

    Entry annotation comments are stripped first (:mod:`pipeline.ingest.annotations`; line
    numbers do not move), and their values given to each chunk of the entry
    (:mod:`pipeline.ingest.entry_metadata`). ``MEMORY.md`` and ``USER.md`` at the workspace
    root (``path`` exactly that, relative to the workspace) are chunked per entry: a chunk never
    spans two entries
    and carries no overlap from the previous one. ``chunker`` replaces :func:`chunk_markdown`
    (a benchmark comparing chunker versions swaps it; its chunks become this module's
    :class:`Chunk`); it gets ``per_entry=True`` only for those two files.
    """
    chunk = chunker or chunk_markdown
    text = strip_memory_annotation_carriers(content)
    per_entry = path.replace("\\", "/") in PER_ENTRY_PATHS
    chunks = [c if isinstance(c, Chunk) else Chunk(c.start_line, c.end_line, c.text, c.hash)
              for c in (chunk(text, tokens, overlap, per_entry=True) if per_entry
                        else chunk(text, tokens, overlap))]  # another version's chunker: ours
    if "<!--" not in content:
        return chunks  # no annotation: nothing to attach
    values = chunk_metadata(path, content, [(c.start_line, c.end_line) for c in chunks],
                            chunked=text if per_entry else None)
    return [replace(c, importance=v.importance, triggers=v.triggers, project_key=v.project_key)
            for c, v in zip(chunks, values, strict=True)]


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
            out.append(replace(chunk, text=piece, hash=hash_text(piece)))
    return out
