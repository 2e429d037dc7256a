"""Which turns of a session transcript are searchable, and their text, as OpenClaw 2026.9.6 cleans
them (pure functions, no I/O).

A port of ``buildSessionEntryInProcess``'s per-message rules (packages/memory-host-sdk/src/host/
session-files.ts) and the helpers it calls: ``stripInboundMetadata`` (src/auto-reply/reply/
strip-inbound-meta.ts), ``stripInternalRuntimeContext`` (src/agents/internal-runtime-context.ts),
``isSilentReplyPayloadText`` (src/auto-reply/tokens.ts), ``isHeartbeatUserMessage``
(src/auto-reply/heartbeat-filter.ts) and ``isExecCompletionEvent``
(src/infra/heartbeat-events-filter.ts). Dropped: heartbeat turns (a user message whose
provenance is the heartbeat, and the replies up to the next user message), memory-recall turns
(provenance ``memory_search``/``memory_get``) likewise, user messages routed from another
session, heartbeat prompts and ``HEARTBEAT_OK``, ``System: [...]`` envelopes and ``[cron:...]``
prompts, silent replies (``NO_REPLY`` and its JSON/reasoning forms), exec-completion events,
and whole dreaming-narrative transcripts. Kept text has inbound metadata blocks, timestamp
prefixes and runtime-context blocks removed, whitespace collapsed, secrets masked, and is
wrapped into lines of at most 800 UTF-16 units.

Not ported: OpenClaw's cron-run classification of a transcript file from its session store
(``sessions.json``) and from the records of reset/deleted archive files.
"""

from __future__ import annotations

import json
import re
import unicodedata
from array import array
from typing import Any

from pipeline.ingest.chunking import js_trim

WRAP_UNITS = 800  # SESSION_EXPORT_CONTENT_WRAP_CHARS
ROLES = {"user": "User", "assistant": "Assistant"}

_S = "\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
_NEWLINES = re.compile(f"[{_S}]*\\n+[{_S}]*")
_SPACES = re.compile(f"[{_S}]+")

# --- tokens.ts ---------------------------------------------------------------------------------
HEARTBEAT_TOKEN = "HEARTBEAT_OK"
SILENT_REPLY_TOKEN = "NO_REPLY"
_SILENT_EXACT = re.compile(f"^[{_S}]*NO_REPLY(?:[{_S}]+NO_REPLY)*[{_S}]*\\Z", re.IGNORECASE)
_REASON = r"(?:(?:antml:|mm:)?(?:think(?:ing)?|thought)|antthinking)"
_TAGGED_REASONING = re.compile(
    f"^[{_S}]*<[{_S}]*{_REASON}\\b[^<>]*>[\\s\\S]*?<[{_S}]*/[{_S}]*{_REASON}[{_S}]*>[{_S}]*",
    re.IGNORECASE | re.ASCII)
_OPEN_REASONING = re.compile(f"^[{_S}]*<[{_S}]*{_REASON}\\b[^<>]*>", re.IGNORECASE | re.ASCII)
_PLAIN_REASONING = re.compile(
    f"^[{_S}]*(?:think(?:ing)?|thought|analysis|reasoning)[{_S}]*:?[{_S}]*\\r?\\n", re.IGNORECASE)
_FINAL_SILENT = re.compile(f"(?:^|[{_S}*.])NO_REPLY[{_S}]*\\Z", re.IGNORECASE)
_W = f"[{_S}]+"
_QUIET = (f"(?:{_W}(?:here|for{_W}now|on{_W}this|in{_W}this{_W}"
          f"(?:chat|thread|channel|conversation)))?")
_SILENT_INTENT = re.compile(
    f"^[{_S}]*(?:i|i'll|i{_W}will|i'm|i{_W}am|we|we'll|we{_W}will|the{_W}assistant|assistant|"
    f"the{_W}bot|bot|openclaw){_W}(?:(?:will{_W})?(?:stay|remain|keep|be){_W}(?:quiet|silent)"
    f"{_QUIET}|(?:do{_W}not|don't|dont|will{_W}not|won't|would{_W}not|should{_W}not){_W}"
    f"(?:reply|respond){_QUIET}|(?:have|has){_W}nothing{_W}(?:to|for){_W}"
    f"(?:say|add|reply|respond))(?:[.!?]+)?[{_S}]*\\Z", re.IGNORECASE)
_ANSWER_CUE = re.compile(
    f"\\b(?:answer|here(?:'s|{_W}is)|tell{_W}them|you{_W}(?:should|can|could|need|must)|please|"
    f"try|use|send|service{_W}is|resolved|retry|yes|no,|sure)\\b", re.IGNORECASE | re.ASCII)
_BARE_REASONING = re.compile(
    f"^[{_S}]*(?:(?:internal|private){_W})?(?:reasoning|thinking|thoughts?|analysis)"
    f"(?:{_W}notes?)?[{_S}]*\\Z", re.IGNORECASE)


def _edge_punctuation_stripped(text: str) -> str:
    start = 0
    while start < len(text) and unicodedata.category(text[start]).startswith("P"):
        start += 1
    end = len(text)
    while end > start and unicodedata.category(text[end - 1]).startswith("P"):
        end -= 1
    return text[start:end]


def _is_silent_text(text: str) -> bool:
    return bool(text) and (bool(_SILENT_EXACT.match(text)) or
                           bool(_SILENT_EXACT.match(_edge_punctuation_stripped(js_trim(text)))))


def _is_silent_json(text: str, *, envelope: bool) -> bool:
    trimmed = js_trim(text)
    opening, closing = ("{", "}") if envelope else ("\"", "\"")
    if not (trimmed.startswith(opening) and trimmed.endswith(closing)
            and SILENT_REPLY_TOKEN in trimmed):
        return False
    try:
        parsed = json.loads(trimmed)
    except ValueError:
        return False
    if envelope:
        return (isinstance(parsed, dict) and list(parsed) == ["action"]
                and isinstance(parsed["action"], str)
                and js_trim(parsed["action"]) == SILENT_REPLY_TOKEN)
    return isinstance(parsed, str) and js_trim(parsed) == SILENT_REPLY_TOKEN


def _without_final_silent(text: str) -> str | None:
    stripped = js_trim(_FINAL_SILENT.sub("", text, count=1))
    return None if stripped == js_trim(text) else stripped


def _silent_intent_final(text: str) -> bool:
    rest = _without_final_silent(text)
    return rest is not None and (not rest or bool(_SILENT_INTENT.match(rest)))


def _plain_reasoning_final(text: str) -> bool:
    rest = _without_final_silent(text)
    if rest is None:
        return False
    if not rest or _SILENT_INTENT.match(rest):
        return True
    lines = [js_trim(line) for line in re.split(r"\r?\n", rest)]
    lines = [line for line in lines if line]
    final = lines[-1] if lines else ""
    previous = "\n".join(lines[:-1])
    return (bool(final and _SILENT_INTENT.match(final) and previous
                 and not _ANSWER_CUE.search(previous))
            or bool(_BARE_REASONING.match(rest)))


def _is_reasoning_prefixed_silent(text: str) -> bool:
    trimmed = js_trim(text)
    if not trimmed:
        return False
    current = trimmed
    while True:
        nxt = _TAGGED_REASONING.sub("", current, count=1)
        if nxt == current:
            break
        current = nxt
    if current != trimmed:
        return _is_silent_text(current) or _silent_intent_final(current)
    if _OPEN_REASONING.match(trimmed):
        rest = _OPEN_REASONING.sub("", trimmed, count=1)
        return _is_silent_text(rest) or _plain_reasoning_final(rest)
    if not _PLAIN_REASONING.match(trimmed):
        return False
    rest = _PLAIN_REASONING.sub("", trimmed, count=1)
    return _is_silent_text(rest) or _plain_reasoning_final(rest)


def is_silent_reply(text: str) -> bool:
    """``isSilentReplyPayloadText``: a ``NO_REPLY`` answer, bare, as JSON or after reasoning."""
    return bool(text) and (_is_silent_text(text) or _is_silent_json(text, envelope=False)
                           or _is_silent_json(text, envelope=True)
                           or _is_reasoning_prefixed_silent(text))


# --- heartbeat.ts, heartbeat-filter.ts, heartbeat-events-filter.ts ------------------------------
_HEARTBEAT_CONTEXT = ("Follow the heartbeat monitor scratch context when provided. Recurring tasks "
                      "are automations; create or change their schedules with the automations "
                      "tool, not heartbeat scratch. Do not infer or repeat old tasks from prior "
                      "chats.")
HEARTBEAT_PROMPT = f"{_HEARTBEAT_CONTEXT} If nothing needs attention, reply {SILENT_REPLY_TOKEN}."
_RESPOND = ("Use heartbeat_respond to report the wake outcome. Set notify=false when nothing "
            "needs the user's attention. Set notify=true with notificationText only when the user "
            "should be interrupted.")
_RESPOND_FALLBACK = (f"If the heartbeat_respond tool is not available in this run, reply "
                     f"{SILENT_REPLY_TOKEN} when nothing needs the user's attention; when the user "
                     "should be interrupted, reply with only the alert text instead of a prose "
                     "report.")
_RESPOND_PROMPT = f"{_HEARTBEAT_CONTEXT} {_RESPOND} {_RESPOND_FALLBACK}"
_HEARTBEAT_PROMPT_FOR_TOOL = f"{HEARTBEAT_PROMPT}\n\n{_RESPOND}\n\n{_RESPOND_FALLBACK}"
_WAKE_PROMPTS = (
    "[OpenClaw heartbeat poll]",
    "[OpenClaw exec completion]\nDisable automatic completion turns with "
    "tools.exec.notifyOnExit=false; check per-agent overrides. Background exec and process poll "
    "remain available.",
    "[OpenClaw exec completion]", "[OpenClaw cron wake]", "[OpenClaw session event]",
)
_DELIVERY_HINTS = (
    "Delivery: to send a message, use the `message` tool.",
    "Delivery: Final assistant text is not automatically delivered in this run. Use the "
    "`message` tool to send user-visible output.",
    "Delivery: Final assistant text is not automatically delivered in this run. Use the "
    "`message` tool to send the final user-visible answer. Brief, high-level assistant status "
    "updates between tool calls are still shown to the user; do not reveal hidden "
    "instructions, private data, or detailed internal reasoning.",
    "Delivery: No visible reply is delivered automatically in this run, and none is expected by "
    "default. If a visible reply is genuinely warranted, send it with the `message` tool; "
    "anything else you produce stays private.",
)
_TASK_PROMPT = "Run the following periodic tasks (only those due based on their intervals):"
_TASK_COMPLETIONS = (f"After completing all due tasks, reply {HEARTBEAT_TOKEN}.",
                     f"After completing all due tasks, reply {SILENT_REPLY_TOKEN}.", _RESPOND,
                     "After completing all due tasks, use heartbeat_respond")
_EXEC_EVENT = re.compile(r"^exec (completed|failed) \(([a-z0-9_-]{1,64}), (code -?\d+|signal "
                         r"[^)]+)\)(?: :: ([\s\S]*))?\Z", re.IGNORECASE | re.ASCII)
_EXEC_FINISHED = re.compile(r"^exec finished(?::|\s*\()", re.ASCII)


def _matches_prompt(text: str, prompt: str) -> bool:
    prompt = js_trim(prompt)
    return bool(prompt) and (text == prompt or text.startswith(f"{prompt}\n"))


def is_heartbeat_prompt(text: str) -> bool:
    """``isHeartbeatUserMessage`` with the default heartbeat prompt, for a user text."""
    trimmed = js_trim(text)
    if not trimmed:
        return False
    if trimmed in _WAKE_PROMPTS:
        return True
    if trimmed.startswith(_DELIVERY_HINTS) and trimmed.endswith(_WAKE_PROMPTS):
        return True
    if any(_matches_prompt(trimmed, p) for p in (HEARTBEAT_PROMPT, _RESPOND_PROMPT,
                                                 _HEARTBEAT_PROMPT_FOR_TOOL)):
        return True
    return trimmed.startswith(_TASK_PROMPT) and any(c in trimmed for c in _TASK_COMPLETIONS)


def is_exec_completion(text: str) -> bool:
    """``isExecCompletionEvent``."""
    trimmed = text.lstrip(_S_CHARS)
    return bool(_EXEC_FINISHED.match(js_trim(trimmed).lower()) or _EXEC_EVENT.match(trimmed))


_S_CHARS = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009" \
           "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"

# --- strip-inbound-meta.ts ----------------------------------------------------------------------
_CTX_MARKER = "⟦openclaw:ctx⟧"
_TIMESTAMP_PREFIX = re.compile(r"^\[[A-Za-z]{3} \d{4}-\d{2}-\d{2} \d{2}:\d{2}[^\]]*\] *", re.ASCII)
_CHANNEL_CONTEXT_HEADER = f"Context: {_CTX_MARKER}"
_ACTIVE_MEMORY_HEADER = "Context:"
_ACTIVE_MEMORY_OPEN = "<active_memory_plugin>"
_ACTIVE_MEMORY_CLOSE = "</active_memory_plugin>"
_ACTIVE_MEMORY_LINE = re.compile(r"^[ \t]*Context:[ \t]*$", re.MULTILINE)
_METADATA_TOKENS = re.compile("|".join(re.escape(t) for t in (_CTX_MARKER, *_DELIVERY_HINTS)))


class _Line:
    __slots__ = ("end", "next", "start", "trimmed")

    def __init__(self, text: str, start: int) -> None:
        newline = text.find("\n", start)
        self.start = start
        self.end = len(text) if newline < 0 else newline
        self.next = self.end + 1
        self.trimmed = js_trim(text[start:self.end])


def _line(text: str, start: int) -> _Line | None:
    return None if start > len(text) else _Line(text, start)


def _find_line(text: str, value: str, start: int = 0) -> _Line | None:
    index = text.find(value, start)
    while index >= 0:
        line = _Line(text, text.rfind("\n", 0, index) + 1)
        if line.trimmed == value:
            return line
        index = text.find(value, line.next)
    return None


def _skip_empty(text: str, start: int) -> int:
    line = _line(text, start)
    while line is not None and line.trimmed == "":
        start = line.next
        line = _line(text, start)
    return start


def _has_sentinel(text: str) -> bool:
    return (_CTX_MARKER in text or any(h in text for h in _DELIVERY_HINTS)
            or (_ACTIVE_MEMORY_HEADER in text and bool(_ACTIVE_MEMORY_LINE.search(text))))


def _block_end(text: str, header: _Line) -> int:
    line = _line(text, header.next)
    if line is not None and line.trimmed == "```json":
        close = _find_line(text, "```", line.next)
        return close.next if close else len(text) + 1
    while line is not None and line.trimmed != "":
        line = _line(text, line.next)
    return _skip_empty(text, line.start if line else len(text) + 1)


def _remove_spans(text: str, spans: list[tuple[int, int]]) -> str:
    parts: list[str] = []
    cursor = 0
    for start, nxt in spans:
        start = start - 1 if nxt > len(text) and start > 0 else start
        parts.append(text[cursor:max(cursor, start)])
        cursor = nxt
    parts.append(text[cursor:])
    return "".join(parts)


def _strip_active_memory(text: str) -> str:
    if _ACTIVE_MEMORY_OPEN not in text:
        return text
    spans: list[tuple[int, int]] = []
    header = _find_line(text, _ACTIVE_MEMORY_HEADER)
    while header is not None:
        opening = _line(text, header.next)
        close = (_find_line(text, _ACTIVE_MEMORY_CLOSE, opening.next)
                 if opening is not None and opening.trimmed == _ACTIVE_MEMORY_OPEN else None)
        nxt = _skip_empty(text, close.next) if close else header.next
        if close:
            spans.append((header.start, nxt))
        header = _find_line(text, _ACTIVE_MEMORY_HEADER, nxt)
    return _remove_spans(text, spans)


def strip_inbound_metadata(text: str) -> str:
    """``stripInboundMetadata``: a user message without its injected context blocks, delivery
    hints and leading ``[Mon 2026-01-05 09:00 …]`` timestamp."""
    text = _TIMESTAMP_PREFIX.sub("", text, count=1)
    if not _has_sentinel(text):
        return text
    source = _strip_active_memory(text)
    spans: list[tuple[int, int]] = []
    pos = 0
    while True:
        match = _METADATA_TOKENS.search(source, pos)
        if match is None:
            break
        start = source.rfind("\n", 0, match.start()) + 1
        line = _Line(source, start)
        pos = line.next
        if line.trimmed == _CHANNEL_CONTEXT_HEADER:
            spans.append((start, len(source) + 1))
            break
        if len(line.trimmed) > 14 and line.trimmed.endswith(_CTX_MARKER):
            pos = _block_end(source, line)
            spans.append((start, pos))
        elif line.trimmed in _DELIVERY_HINTS:
            spans.append((start, line.next))
    out = _remove_spans(source, spans).lstrip("\n").rstrip("\n")
    return _TIMESTAMP_PREFIX.sub("", out, count=1)


# --- internal-runtime-context.ts ----------------------------------------------------------------
_BEGIN = "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>"
_END = "<<<END_OPENCLAW_INTERNAL_CONTEXT>>>"
_BEGIN_RE = re.compile(f"(?:^|\\r?\\n)[ \\t]*{re.escape(_BEGIN)}[ \\t]*(?=\\r?\\n|\\Z)")
_END_RE = re.compile(f"(?:^|\\r?\\n)[ \\t]*{re.escape(_END)}[ \\t]*(?=\\r?\\n|\\Z)")
_NOTICE = "This context is runtime-generated, not user-authored. Keep internal details private."
_NOTICE_RE = f"[{_S}]+".join(re.escape(w) for w in _NOTICE.split())
_LEGACY_HEADER = f"OpenClaw runtime context (internal):\n{_NOTICE}\n\n"
_LEGACY_EVENT = "[Internal task completion event]"
_LEGACY_SEPARATOR = "\n\n---\n\n"
_LEGACY_RESULT_BEGIN = "<<<BEGIN_UNTRUSTED_CHILD_RESULT>>>"
_LEGACY_RESULT_END = "<<<END_UNTRUSTED_CHILD_RESULT>>>"
_PROMPT_HEADERS = (
    "OpenClaw runtime context for the active user request in this turn. Do not reply to or "
    "describe this context. Use it to continue answering the active user request now. Do not "
    "wait for another message.",
    "OpenClaw runtime context for the immediately preceding user message.",
    "OpenClaw runtime event.",
)


def _header_alternatives() -> str:
    out = []
    for header in _PROMPT_HEADERS:
        sentences = header.split(". ")
        for i in range(len(sentences)):
            out.append(f"[{_S}]+".join(re.escape(w) for w in ". ".join(sentences[i:]).split()))
    return "|".join(out)


_PREFACE = re.compile(
    f"^[ \\t]*(?:{_header_alternatives()})[{_S}]+{_NOTICE_RE}[ \\t]*(?:\\r?\\n|$)", re.MULTILINE)


def _delimited(text: str, pattern: re.Pattern[str], token: str, start: int) -> int:
    match = pattern.search(text, max(0, start))
    return -1 if match is None else match.start() + match.group(0).index(token)


def _strip_delimited(text: str) -> str:
    while True:
        start = _delimited(text, _BEGIN_RE, _BEGIN, 0)
        if start == -1:
            return text
        cursor = start + len(_BEGIN)
        depth, finish = 1, -1
        while depth > 0:
            nxt_begin = _delimited(text, _BEGIN_RE, _BEGIN, cursor)
            nxt_end = _delimited(text, _END_RE, _END, cursor)
            if nxt_end == -1:
                break
            if nxt_begin != -1 and nxt_begin < nxt_end:
                depth += 1
                cursor = nxt_begin + len(_BEGIN)
                continue
            depth -= 1
            finish = nxt_end
            cursor = nxt_end + len(_END)
        before = text[:start].rstrip(_S_CHARS)
        if finish == -1 or depth != 0:
            return before
        end = finish + len(_END)
        while end < len(text) and text[end] in " \t":
            end += 1
        after = text[end:].lstrip(_S_CHARS)
        text = f"{before}\n\n{after}" if before and after else f"{before}{after}"


def _legacy_event_end(text: str, start: int) -> int | None:
    if not text.startswith(_LEGACY_EVENT, start):
        return None
    begin = text.find(_LEGACY_RESULT_BEGIN, start + 32)
    if begin == -1:
        return None
    end = text.find(_LEGACY_RESULT_END, begin + 34)
    if end == -1:
        return None
    action = text.find("\n\nAction:\n", end + 32)
    if action == -1:
        return None
    after = action + 10
    nxt = text.find(f"{_LEGACY_SEPARATOR}{_LEGACY_EVENT}", after)
    if nxt != -1:
        return nxt
    paragraph = text.find("\n\n", after)
    return len(text) if paragraph == -1 else paragraph


def _strip_legacy(text: str) -> str:
    search_from = 0
    while True:
        header = text.find(_LEGACY_HEADER, search_from)
        if header == -1:
            return text
        event = header + len(_LEGACY_HEADER)
        if not text.startswith(_LEGACY_EVENT, event):
            search_from = event
            continue
        block_end = _legacy_event_end(text, event)
        if block_end is None:
            paragraph = text.find("\n\n", event + 32)
            block_end = len(text) if paragraph == -1 else paragraph
        else:
            while text.startswith(f"{_LEGACY_SEPARATOR}{_LEGACY_EVENT}", block_end):
                nxt = _legacy_event_end(text, block_end + 7)
                if nxt is None:
                    break
                block_end = nxt
        before = text[:header].rstrip(_S_CHARS)
        after = text[block_end:].lstrip(_S_CHARS)
        text = f"{before}\n\n{after}" if before and after else f"{before}{after}"
        search_from = max(0, len(before) - 1)


def strip_internal_runtime_context(text: str) -> str:
    """``stripInternalRuntimeContext``: without OpenClaw's runtime-context blocks."""
    if _BEGIN not in text and _END not in text and not re.search(_NOTICE_RE, text):
        return text
    text = _strip_legacy(_END_RE.sub("", _strip_delimited(text)))
    stripped = _PREFACE.sub("", text)
    return text if stripped == text else js_trim(re.sub(r"\n{3,}", "\n\n", stripped))


# --- session-files.ts ---------------------------------------------------------------------------
_SYSTEM_ENVELOPE = re.compile(r"^System(?: \(untrusted\))?: \[[^\]]+\]" f"[{_S}]*")
_CRON_PROMPT = re.compile(r"^\[cron:[^\]]+\]")
_INPUT_KINDS = ("external_user", "inter_session", "internal_system")
_DREAMING_PREFIX = "dreaming-narrative-"


def normalize_session_text(text: str) -> str:
    return js_trim(_SPACES.sub(" ", _NEWLINES.sub(" ", text)))


def sanitize(text: str, role: str) -> str | None:
    """``sanitizeSessionText``: the text of a turn worth indexing, or None."""
    stripped = strip_inbound_metadata(text) if role == "user" else text
    normalized = normalize_session_text(strip_internal_runtime_context(stripped))
    if not normalized:
        return None
    if role == "user" and (_SYSTEM_ENVELOPE.match(normalized) or _CRON_PROMPT.match(normalized)
                           or is_heartbeat_prompt(normalized)):
        return None
    if is_silent_reply(normalized):
        return None
    if role == "assistant" and normalized == HEARTBEAT_TOKEN:
        return None
    if is_exec_completion(js_trim(_SYSTEM_ENVELOPE.sub("", normalized, count=1))):
        return None
    return normalized


def raw_text(content: Any) -> str | None:
    """``collectRawSessionText``: a string content, or its text blocks joined by newlines."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    parts = [block["text"] for block in content if isinstance(block, dict)
             and block.get("type") == "text" and isinstance(block.get("text"), str)]
    return "\n".join(parts) if parts else None


def _provenance(message: dict[str, Any]) -> dict[str, Any]:
    value = message.get("provenance")
    return value if isinstance(value, dict) else {}


def _source_tool(provenance: dict[str, Any]) -> str | None:
    return provenance.get("sourceTool") if provenance.get("kind") == "internal_system" else None


def is_heartbeat_turn(message: dict[str, Any]) -> bool:
    return _source_tool(_provenance(message)) == "heartbeat"


def is_recall_turn(message: dict[str, Any]) -> bool:
    return _source_tool(_provenance(message)) in ("memory_search", "memory_get")


def is_inter_session(message: dict[str, Any]) -> bool:
    """``hasInterSessionUserProvenance`` (for a user message)."""
    return _provenance(message).get("kind") == "inter_session"


def _dreaming_key(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    trimmed = js_trim(value)
    if not trimmed:
        return False
    first = trimmed.find(":")
    if first < 0:
        return trimmed.startswith(_DREAMING_PREFIX)
    second = trimmed.find(":", first + 1)
    return (trimmed if second < 0 else trimmed[second + 1:]).startswith(_DREAMING_PREFIX)


def is_dreaming_record(record: Any) -> bool:
    """``isDreamingNarrativeGeneratedRecord``: a record of a memory-dreaming run."""
    if not isinstance(record, dict):
        return False
    data = record.get("data") if isinstance(record.get("data"), dict) else {}
    if (record.get("type") == "custom"
            and record.get("customType") == "openclaw:bootstrap-context:full"
            and isinstance(data.get("runId"), str)
            and data["runId"].startswith(_DREAMING_PREFIX)):
        return True
    message = record.get("message") if record.get("type") == "message" else None
    message = message if isinstance(message, dict) else {}
    meta = message.get("__openclaw") if isinstance(message.get("__openclaw"), dict) else {}
    return (_dreaming_key(record.get("runId")) or _dreaming_key(record.get("sessionKey"))
            or _dreaming_key(data.get("runId")) or _dreaming_key(data.get("sessionKey"))
            or (message.get("role") in ("assistant", "toolResult")
                and _dreaming_key(meta.get("runId"))))


def _utf16(text: str) -> str:
    """``text`` as UTF-16 code units (surrogate pairs split), so indexes are JavaScript's."""
    return "".join(map(chr, array("H", text.encode("utf-16-le"))))


def _from_utf16(units: str) -> str:
    return units.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def wrap(text: str, max_units: int = WRAP_UNITS) -> list[str]:
    """``splitLongSessionLine``: segments of at most ``max_units`` UTF-16 units, cut at the last
    space before the limit (else at the limit, never inside a surrogate pair)."""
    units = _utf16(js_trim(text))
    if not units:
        return []
    if len(units) <= max_units:
        return [_from_utf16(units)]
    segments: list[str] = []
    cursor = 0
    while cursor < len(units):
        if len(units) - cursor <= max_units:
            segments.append(js_trim(_from_utf16(units[cursor:])))
            break
        limit = cursor + max_units
        split_at = limit
        for index in range(limit, cursor, -1):
            if units[index] == " ":
                split_at = index
                break
        if (cursor < split_at < len(units) and "\ud800" <= units[split_at - 1] <= "\udbff"
                and "\udc00" <= units[split_at] <= "\udfff"):
            split_at -= 1
        segments.append(js_trim(_from_utf16(units[cursor:split_at])))
        cursor = split_at
        while cursor < len(units) and units[cursor] == " ":
            cursor += 1
    return [s for s in segments if s]
