"""What is searchable in a session transcript, wherever it is kept (pure functions, no I/O).

A transcript is OpenClaw's JSONL: one JSON record per line, as in its archived ``.jsonl``
files, and as the records of a live transcript in its agent database read one per line
(:mod:`pipeline.ingest.live_sessions`). What is worth searching is what OpenClaw 2026.9.6's
session indexer keeps (``buildSessionEntryInProcess``, ported in
:mod:`pipeline.ingest.session_text`): ``type: "message"`` records from the user or the
assistant, their ``text`` blocks only (no tool calls, tool results or thinking), without
heartbeat and memory-recall turns, system/cron/heartbeat prompts, silent replies and injected
metadata, whitespace collapsed, secrets masked (:func:`pipeline.ingest.redaction.redact_secrets`),
written as ``User: …`` / ``Assistant: …`` lines of at most 800 characters. A line map sends
every such line back to its JSONL line, so a hit names the transcript lines it came from.

Transcripts grow by a few lines per turn; re-indexing one on every write would re-chunk it
forever. A known transcript is synced again only once it grew by ``deltaBytes`` (100,000) or
``deltaMessages`` (50) lines, or when it is no longer an extension of what was indexed (it was
truncated, rotated or rewritten): then it counts as new, in full. ``postCompactionForce``
(default true) also syncs it, whatever the deltas, once it has grown by a compaction: OpenClaw
runs a targeted sync of the transcript after its agent compacts the context; memq, outside
the agent, sees the ``{"type": "compaction", …}`` record the agent appends.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from pipeline.config import Settings
from pipeline.ingest.chunking import Chunk, chunk_markdown, js_trim

SESSIONS_SOURCE = "sessions"  # the ``sources`` entry, and the first part of their store paths
#: What a transcript's indexed text is made of; bump it when that changes, so stores index
#: their session chunks again (2: OpenClaw 2026.9.6's cleaning, masking and 800-unit lines).
TRANSCRIPT_VERSION = 2


@dataclass(frozen=True)
class Transcript:
    text: str
    line_map: tuple[int, ...]  # 1-based JSONL line of each text line


def transcript(raw: str) -> Transcript:
    """The searchable text of a JSONL transcript, and where each of its lines came from.

    Lines that are not JSON (a half-written last line) or not a user/assistant message are
    skipped, never fatal.
    """
    # OpenClaw's cleaning rules and 122 secret patterns compile on first use: a search that
    # reads no transcript never pays for them (tests/test_oneshot_startup.py).
    from pipeline.ingest import session_text
    from pipeline.ingest.redaction import redact_secrets
    from pipeline.ingest.session_text import ROLES

    lines: list[str] = []
    line_map: list[int] = []
    dreaming = heartbeat_turn = recall_turn = False
    for number, line in enumerate(raw.split("\n"), start=1):
        if not js_trim(line):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not dreaming and session_text.is_dreaming_record(record):
            dreaming = True  # the whole transcript is a dreaming run's: nothing is kept
            lines.clear()
            line_map.clear()
        if not isinstance(record, dict) or record.get("type") != "message":
            continue
        message = record.get("message")
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            continue
        role = message["role"]
        if role == "user":
            heartbeat_turn = session_text.is_heartbeat_turn(message)
            recall_turn = session_text.is_recall_turn(message)
            if session_text.is_inter_session(message):
                continue
        if heartbeat_turn or recall_turn or dreaming:
            continue
        raw_text = session_text.raw_text(message.get("content"))
        text = None if raw_text is None else session_text.sanitize(raw_text, role)
        if not text:
            continue
        for segment in session_text.wrap(redact_secrets(text)):
            lines.append(f"{ROLES[role]}: {segment}")
            line_map.append(number)
    return Transcript("\n".join(lines), tuple(line_map))


def transcript_chunks(raw: str, tokens: int, overlap: int) -> list[Chunk]:
    """Chunks of a transcript with their line ranges mapped back to the JSONL lines."""
    t = transcript(raw)
    if not t.text:
        return []
    return [Chunk(t.line_map[c.start_line - 1], t.line_map[c.end_line - 1], c.text, c.hash)
            for c in chunk_markdown(t.text, tokens, overlap)]


def needs_sync(raw: bytes, known_hash: str, known_size: int, settings: Settings) -> bool:
    """Whether a transcript changed enough since it was indexed to be synced again."""
    if len(raw) < known_size or hashlib.sha256(raw[:known_size]).hexdigest() != known_hash:
        return True  # truncated, rotated or rewritten: index it again in full
    grown = raw[known_size:]
    deltas = settings.sync.sessions
    if len(grown) >= deltas.delta_bytes or grown.count(b"\n") >= deltas.delta_messages:
        return True
    return deltas.post_compaction_force and compacted(grown)


def compacted(grown: bytes) -> bool:
    """Whether the new lines of a transcript hold a compaction record (the agent summarised
    the conversation so far)."""
    if b"compaction" not in grown:
        return False
    for line in grown.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("type") == "compaction":
            return True
    return False
