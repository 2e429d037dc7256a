"""``memory.qmd.scope``: which chats may see QMD results.

As OpenClaw 2026.3.24 (``isQmdScopeAllowed`` / ``parseQmdSessionScope`` in
``dist/qmd-manager-CdVu0x02.js``): the session key (``agent:<id>:<channel>:<kind>:…``) is
lower-cased, its ``agent:<id>:`` prefix stripped (the *normalised* key; a ``subagent:`` key has
none), and the first rule whose every ``match`` field holds decides; else ``default``.
``chatType`` is ``group`` or ``channel`` when the key says so, else ``direct``; ``channel`` is
the key's first part when its second part names a chat kind. ``keyPrefix`` matches the
normalised key (the raw key when the prefix itself starts with ``agent:``), ``rawKeyPrefix``
the raw key.

**memq:** a search with no session key (the CLI, the library, an MCP client: one user's own
chat) counts as a direct chat, as ``citations: auto`` does; OpenClaw matched no chat type then,
so its default scope denied it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.config.qmd_values import QmdScope

_KINDS = ("group", "channel", "direct", "dm")


@dataclass(frozen=True)
class SessionScope:
    normalized: str | None
    channel: str | None
    chat_type: str | None


def parse_session_key(key: str | None) -> SessionScope:
    """The channel and chat type a session key names (``direct`` for no key: memq)."""
    if key is None or not key.strip():
        return SessionScope(None, None, "direct")
    raw = key.strip().lower()
    parts = [p for p in raw.split(":") if p]
    normalized: str | None = raw
    if len(parts) >= 3 and parts[0] == "agent":
        normalized = ":".join(parts[2:])
    if normalized.startswith("subagent:"):
        return SessionScope(None, None, None)
    parts = [p for p in normalized.split(":") if p]
    if len(parts) >= 2 and parts[1] in _KINDS:
        kind = "group" if "group" in parts else "channel" if "channel" in parts else "direct"
        return SessionScope(normalized, parts[0], kind)
    if ":group:" in normalized:
        return SessionScope(normalized, None, "group")
    if ":channel:" in normalized:
        return SessionScope(normalized, None, "channel")
    return SessionScope(normalized, None, "direct")


def scope_allows(scope: QmdScope, session_key: str | None) -> bool:
    """Whether ``scope`` lets the chat of ``session_key`` see QMD results."""
    parsed = parse_session_key(session_key)
    raw = (session_key or "").strip().lower()
    normalized = parsed.normalized or ""
    for rule in scope.rules:
        if rule.channel and rule.channel != parsed.channel:
            continue
        if rule.chat_type and rule.chat_type != parsed.chat_type:
            continue
        raw_prefix = (rule.raw_key_prefix or "").strip().lower()
        if raw_prefix and not raw.startswith(raw_prefix):
            continue
        prefix = (rule.key_prefix or "").strip().lower()
        if prefix and not (raw if prefix.startswith("agent:") else normalized).startswith(prefix):
            continue
        return rule.action == "allow"
    return scope.default == "allow"
