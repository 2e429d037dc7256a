"""Secrets masked out of transcript text before memq keeps, exports or shows it.

OpenClaw 2026.9.6 masks every user/assistant turn of a session transcript before indexing it
(``buildSessionEntryInProcess``: ``redactSensitiveText(text, {mode: "tools"})``, src/logging/
redact.ts). memq applies its default patterns
(:data:`pipeline.ingest.redaction_patterns.DEFAULT_REDACT_PATTERNS`, verbatim, translated from
JavaScript's regex dialect here) one after the other, in OpenClaw's order and masking form: the
last non-empty capture of a match is the secret (the whole match when there is none); a
secret of 18 characters or more keeps its first 6 and last 4 (``sk-abc…1234``), a shorter
one becomes ``***``; quotes and trailing ``,;)}]`` around it stay; ``KEY=$KEY`` shell
references stay; a PEM private key keeps its first and last lines around ``…redacted…``.

Not ported (OpenClaw runs them before the patterns): structured ``Authorization`` parameter
lists, URL query and form-body parameters named like secrets, and its heuristic scan for
bare AWS secret access keys outside ``aws_secret_access_key=…`` assignments.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.ingest.redaction_patterns import DEFAULT_REDACT_PATTERNS

MASK = "***"
_MIN_HINTED = 18  # DEFAULT_REDACT_MIN_LENGTH
_KEEP_START = 6  # DEFAULT_REDACT_KEEP_START

# JavaScript's \s, and its line terminators (what `.` does not match)
_JS_SPACE = ("\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f"
             "\\u3000\\ufeff")
_JS_LINE_END = "\\n\\r\\u2028\\u2029"
# OpenClaw's BASE64_SAFE_TOKEN_BOUNDARY lookbehind: variable width, which `re` cannot do
_BASE64_GUARD = "(?<!;base64,[A-Za-z0-9+/=]*)"
_BASE64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
_LITERAL = re.compile(r"^/(.+)/([gimsuy]*)$", re.DOTALL)
_SHELL_KEY = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_SHELL_BARE = re.compile(r"^\$([A-Z_][A-Z0-9_]*)$")
_SHELL_BRACED = re.compile(r"^\$\{([A-Z_][A-Z0-9_]*)(?::[-=?+])?\}$")
_ENV_KEY = re.compile(r"\b([A-Z_][A-Z0-9_]*)\b\s*[=:]", re.ASCII)
_EMPTY_EXPANSION_TAIL = re.compile(r"^[-=?+]\}$")
_TRAILING_DELIMITER = re.compile(r"([\"'`,;)}\]]+)\Z")
_SUFFIX_ONLY = re.compile(r"[\"'`,;)}\]]*\Z")


def js_regex(source: str, flags: str) -> re.Pattern[str]:
    """A JavaScript regex source (the subset OpenClaw's patterns use) compiled for ``re``:
    JavaScript's ``\\s``, ``.``, ``^``/``$`` and ASCII ``\\b``/``\\w``/``\\d``."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(source):
        ch = source[i]
        if ch == "\\" and i + 1 < len(source):
            nxt = source[i + 1]
            if nxt == "s":
                out.append(_JS_SPACE if in_class else f"[{_JS_SPACE}]")
            elif nxt == "S" and not in_class:
                out.append(f"[^{_JS_SPACE}]")
            elif nxt == "/":
                out.append("/")
            else:
                out.append(source[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
            out.append(ch)
        elif ch == "[":
            in_class = True
            out.append(ch)
        elif ch == "$":
            out.append(f"(?=[{_JS_LINE_END}]|\\Z)" if "m" in flags else "\\Z")
        elif ch == "^" and "m" in flags:
            out.append(f"(?:(?<=[{_JS_LINE_END}])|\\A)")
        elif ch == "." and "s" not in flags:
            out.append(f"[^{_JS_LINE_END}]")
        else:
            out.append(ch)
        i += 1
    options = re.ASCII | (re.IGNORECASE if "i" in flags else 0) | (re.DOTALL if "s" in flags
                                                                   else 0)
    return re.compile("".join(out), options)


# The roles OpenClaw gives some patterns (redact.ts), by their place in DEFAULT_REDACT_PATTERNS
# (the list is pinned to OpenClaw's by a test): SHELL_REFERENCE_PRESERVING_PATTERN_SOURCES,
# FORM_AWARE_EQUALS_ASSIGNMENT_PATTERN_SOURCES, and the CHUNK_UNSAFE ones (Authorization
# headers, standalone Bearer, Telegram tokens; every token-boundary pattern is chunk-unsafe too).
_SHELL = frozenset({0, 1, 23, 24})
_FORM_AWARE = frozenset({16, 18})
_CHUNK_UNSAFE = frozenset({*range(8, 17), 19, len(DEFAULT_REDACT_PATTERNS) - 2,
                           len(DEFAULT_REDACT_PATTERNS) - 1})
_TOKEN_BOUNDARIES = ("(^|[^A-Za-z0-9])", "(^|[^A-Za-z0-9_])")
# replacePatternBounded: past this length, chunk-safe patterns run on slices of the text
_CHUNK_THRESHOLD = 32768
_CHUNK_SIZE = 16384
_FORM_PAIR = re.compile(r"&[A-Za-z_][A-Za-z0-9_.-]*=")


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    shell: bool  # an environment assignment: ``KEY=$KEY`` stays, the value masked whole
    form_aware: bool  # a value ends before ``&name=``
    chunk_safe: bool  # may run on slices of a long text
    base64_guard: bool  # not right after ``;base64,`` and base64 text

    def matches(self, text: str) -> list[re.Match[str]]:
        """Non-overlapping matches, left to right (JavaScript's global ``replace``)."""
        found: list[re.Match[str]] = []
        pos = 0
        while pos <= len(text):
            match = self.regex.search(text, pos)
            if match is None:
                break
            if self.base64_guard and _after_base64(text, match):
                pos = match.start() + 1
                continue
            found.append(match)
            pos = match.end() if match.end() > match.start() else match.end() + 1
        return found


def _after_base64(text: str, match: re.Match[str]) -> bool:
    """Whether the token follows ``;base64,`` and base64 characters (the lookbehind)."""
    start = match.start(match.lastindex or 0)
    while start > 0 and text[start - 1] in _BASE64_CHARS:
        start -= 1
    return start >= 8 and text[start - 8:start].lower() == ";base64,"  # the pattern's flag i


def _compile(index: int, raw: str) -> _Pattern:
    literal = _LITERAL.match(raw)
    source, flags = (literal.group(1), literal.group(2)) if literal else (raw, "gi")
    pem = "PRIVATE KEY-----" in source  # a matcher object in OpenClaw, never sliced
    chunk_safe = not (pem or index in _CHUNK_UNSAFE or raw.startswith(_TOKEN_BOUNDARIES))
    return _Pattern(js_regex(source.replace(_BASE64_GUARD, ""), flags), index in _SHELL,
                    index in _FORM_AWARE, chunk_safe, _BASE64_GUARD in source)


_PATTERNS = tuple(_compile(i, raw) for i, raw in enumerate(DEFAULT_REDACT_PATTERNS))


def _units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def mask_token(token: str) -> str:
    """OpenClaw's ``maskToken``: ``***`` under 18 characters, else the first 6 and last 4 around
    ``…`` (UTF-16 units, never splitting a surrogate pair: Python strings have none)."""
    if token == MASK:
        return token
    if _units(token) < _MIN_HINTED:
        return MASK
    return f"{token[:_KEEP_START]}…{token[-4:]}"


def _split_for_mask(token: str) -> tuple[str, str]:
    """``splitSecretValueForMask``: (the secret, the quote/delimiter suffix that stays)."""
    if token[:1] in ("\"", "'", "`"):
        closing = token.rfind(token[0])
        if closing > 0 and _SUFFIX_ONLY.match(token[closing + 1:]):
            return token[1:closing], token[closing + 1:]
        rest = token[1:]
        tail = _TRAILING_DELIMITER.search(rest)
        trailing = tail.group(1) if tail else ""
        if trailing and len(trailing) < len(rest):
            return rest[:-len(trailing)], trailing
        return rest, ""
    tail = _TRAILING_DELIMITER.search(token)
    trailing = tail.group(1) if tail else ""
    if trailing and len(trailing) < len(token):
        return token[:-len(trailing)], trailing
    return token, ""


def _is_shell_reference(key: str, value: str) -> bool:
    if not _SHELL_KEY.match(key):
        return False
    bare = _SHELL_BARE.match(value)
    if bare:
        return bare.group(1) == key
    braced = _SHELL_BRACED.match(value)
    return braced is not None and braced.group(1) == key


def _pem(block: str) -> str:
    lines = [line for line in re.split(r"\r?\n", block) if line]
    return f"{lines[0]}\n…redacted…\n{lines[-1]}" if len(lines) >= 2 else MASK


def _replacement(pattern: _Pattern, hints: bool) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        whole = match.group(0)
        if "PRIVATE KEY-----" in whole:
            return _pem(whole)
        index = next((i for i in range(len(match.groups()), 0, -1) if match.group(i)), 0)
        token = match.group(index)
        if token == MASK:
            return whole
        cut = _FORM_PAIR.search(token) if pattern.form_aware else None
        value, form_suffix = (token[:cut.start()], token[cut.start():]) if cut else (token, "")
        secret, suffix = _split_for_mask(value)
        if secret == MASK:
            return whole
        if pattern.shell:
            key = _ENV_KEY.search(whole)
            if (key and _is_shell_reference(key.group(1), token)) or \
                    _EMPTY_EXPANSION_TAIL.match(token):
                return whole
            masked = mask_token(token) if hints else MASK
        else:
            masked = (mask_token(secret) if hints else MASK) + suffix + form_suffix
        start, end = match.start(index) - match.start(), match.end(index) - match.start()
        return whole[:start] + masked + whole[end:]
    return replace


def _apply(pattern: _Pattern, text: str, hints: bool) -> str:
    matches = pattern.matches(text)
    if not matches:
        return text
    replace = _replacement(pattern, hints)
    parts: list[str] = []
    cursor = 0
    for match in matches:
        parts.append(text[cursor:match.start()])
        parts.append(replace(match))
        cursor = match.end()
    parts.append(text[cursor:])
    return "".join(parts)


def redact_secrets(text: str, *, hints: bool = True) -> str:
    """``text`` with API keys, tokens, passwords and private keys masked as OpenClaw 2026.9.6's
    ``redactSensitiveText`` masks them (what memq indexes of a transcript). ``hints=False``
    masks every secret whole (``***``), keeping no head or tail: for error text and logs."""
    for pattern in _PATTERNS:
        if pattern.chunk_safe and len(text) > _CHUNK_THRESHOLD:
            text = "".join(_apply(pattern, text[i:i + _CHUNK_SIZE], hints)
                           for i in range(0, len(text), _CHUNK_SIZE))
        else:
            text = _apply(pattern, text, hints)
    return text
