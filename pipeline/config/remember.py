"""``rememberAcrossConversations``'s default when memq reads an openclaw.json, as OpenClaw 2026.9.6.

OpenClaw (``resolveRememberAcrossConversations``) takes the agent's or ``memory.search``'s
explicit value; without one it remembers on a personal install: ``session.dmScope`` unset or
``"main"`` (every direct message in one main session), and no binding with a
``session.dmScope`` of its own. memq's own config file says nothing of OpenClaw's sessions, so
there the default stays off (``tests/test_remember_default.py`` compares this function with
OpenClaw's own, run by Node on the installed package).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def remembers_by_default(config: Mapping[str, Any]) -> bool:
    """Whether an openclaw.json (its parsed top level) without an explicit
    ``rememberAcrossConversations`` remembers across conversations."""
    session = config.get("session")
    if isinstance(session, Mapping) and "dmScope" in session and session["dmScope"] != "main":
        return False
    bindings = config.get("bindings")
    if not isinstance(bindings, list):
        return True
    return not any(isinstance(b, Mapping) and isinstance(b.get("session"), Mapping)
                   and "dmScope" in b["session"] for b in bindings)
