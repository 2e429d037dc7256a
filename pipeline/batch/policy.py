"""When to stop using a provider's batch API (OpenClaw's rule, but remembered in the store).

Each finished job counts: a failure (failed validation, expired) adds 1, a timeout adds 2, a
success resets the count to 0; at :data:`DISABLE_AT` the provider's batch mode is turned off.
An API that says it has no batch endpoint (HTTP 404 on create, Gemini's
"asyncBatchEmbedContent not available") turns it off at once. OpenClaw forgets all this when
the process ends; memq keeps it in the store's ``meta`` table, shows it in ``memq status``,
and ``memq batch enable PROVIDER`` turns it back on. While off, chunks go the sync path.
"""

from __future__ import annotations

import time
from typing import Any

from pipeline.store import schema
from pipeline.store.engine import Database

DISABLE_AT = 2
META_KEY = "batch_policy"
#: What each way of finishing adds to the failure count (None: resets it; absent: no change).
WEIGHTS: dict[str, int | None] = {"completed": None, "failed": 1, "expired": 1, "timeout": 2}


def provider_policy(db: Database, provider: str) -> dict[str, Any]:
    """``{"failures": n, "disabled": bool, "reason": str | None, "at": ts | None}``."""
    state = (schema.get_meta(db, META_KEY) or {}).get(provider) or {}
    return {"failures": int(state.get("failures", 0)), "disabled": bool(state.get("disabled")),
            "reason": state.get("reason"), "at": state.get("at")}


def all_policies(db: Database) -> dict[str, dict[str, Any]]:
    return {name: provider_policy(db, name) for name in schema.get_meta(db, META_KEY) or {}}


def _save(db: Database, provider: str, state: dict[str, Any]) -> None:
    with schema.transaction(db):
        stored = schema.get_meta(db, META_KEY) or {}
        stored[provider] = state
        schema.set_meta(db, META_KEY, stored)


def record_outcome(db: Database, provider: str, outcome: str, error: str | None = None
                   ) -> dict[str, Any]:
    """Count how a job ended; returns the provider's policy state after it."""
    state = provider_policy(db, provider)
    if outcome == "disabled":
        state.update(disabled=True, reason=f"batch API not available: {error}", at=time.time())
    elif outcome in WEIGHTS:
        weight = WEIGHTS[outcome]
        state["failures"] = 0 if weight is None else state["failures"] + weight
        if state["failures"] >= DISABLE_AT and not state["disabled"]:
            state.update(disabled=True, at=time.time(),
                         reason=f"{state['failures']} failure points (last: {outcome}"
                                + (f": {error}" if error else "") + ")")
    else:
        return state
    _save(db, provider, state)
    return state


def enable(db: Database, provider: str) -> None:
    """Turn a provider's batch mode back on, with a clean count (``memq batch enable``)."""
    _save(db, provider, {"failures": 0, "disabled": False, "reason": None, "at": None})
