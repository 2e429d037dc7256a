"""OpenClaw's agent ids, canonicalised exactly as OpenClaw 2026.9.6 does.

A port of ``packages/normalization-core/src/agent-id.ts`` (``normalizeAgentId``,
``normalizeAgentIdStrict``, ``isValidAgentId``): trim JavaScript's whitespace, lower-case,
turn every run of characters outside ``[a-z0-9_-]`` into one ``-``, drop leading and trailing
dashes, keep at most 64 characters. So ``Ops``, `` ops `` and ``OPS`` name one agent, and
``My Agent`` is ``my-agent``. ``tests/test_agent_id.py`` compares these functions with
OpenClaw's own code, run by Node on the installed package.
"""

from __future__ import annotations

import re

#: The agent OpenClaw falls back to (``DEFAULT_AGENT_ID``).
DEFAULT_AGENT_ID = "main"
#: At most this many characters.
MAX_AGENT_ID_LENGTH = 64

# JavaScript's /i without /u folds only ASCII letters onto [a-z]; Python's re.IGNORECASE would
# also fold KELVIN SIGN and the like, hence the explicit ranges.
_VALID_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_INVALID_CHARS = re.compile(r"[^a-z0-9_-]+")
#: What String.prototype.trim removes (WhiteSpace and LineTerminator of ECMA-262): not quite
#: Python's str.strip (which also strips U+001C..U+001F and U+0085, but not U+FEFF).
_JS_WHITESPACE = ("\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
                  "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff")


def _js_trim(value: str) -> str:
    return value.strip(_JS_WHITESPACE)


def normalize_agent_id_strict(value: str | None) -> str | None:
    """The canonical form of ``value``, or None when nothing of it can be kept (OpenClaw's
    ``normalizeAgentIdStrict``: ``"!!!"`` and ``""`` are unrepresentable)."""
    trimmed = _js_trim(value or "")
    lowered = trimmed.lower()
    if _VALID_ID.fullmatch(trimmed):
        return lowered
    agent_id = _INVALID_CHARS.sub("-", lowered).lstrip("-").rstrip("-")[:MAX_AGENT_ID_LENGTH]
    return agent_id or None


def normalize_agent_id(value: str | None) -> str:
    """The canonical form of ``value``; ``main`` when nothing of it can be kept (OpenClaw's
    ``normalizeAgentId``)."""
    return normalize_agent_id_strict(value) or DEFAULT_AGENT_ID


def is_valid_agent_id(value: str | None) -> bool:
    """Whether ``value`` (trimmed) is already an agent id as written (OpenClaw's
    ``isValidAgentId``; upper case is allowed, it only folds)."""
    return bool(_VALID_ID.fullmatch(_js_trim(value or "")))
