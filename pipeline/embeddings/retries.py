"""How often and after how long a job a provider failed is retried: the embed task's retry
policy (:func:`max_retries`, :func:`retry_delay`), apart from :mod:`pipeline.embeddings.runner`
so that a worker's task modules read it at import without NumPy."""

from __future__ import annotations

import os
import random
from collections.abc import Mapping


def max_retries(env: Mapping[str, str] = os.environ) -> int:
    """``MEMQ_EMBED_MAX_RETRIES``: retries of a retryable provider error before a job's chunks
    are marked failed (default 8: with a 30% error rate the chance of 9 failures in a row is
    2e-5 per job)."""
    raw = env.get("MEMQ_EMBED_MAX_RETRIES", "").strip()
    if not raw:
        return 8
    if not raw.isdigit():
        raise ValueError(f"MEMQ_EMBED_MAX_RETRIES must be a whole number >= 0; got {raw!r}")
    return int(raw)


MAX_RETRIES = max_retries()
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 8.0
#: The longest provider-requested wait honoured (a daily-quota Retry-After is not retried).
MAX_RETRY_AFTER_S = 300.0


def retry_delay(retries: int, retry_after: float | None = None) -> float:
    """Seconds before retry number ``retries + 1``: about 0.5 s doubling to an 8 s cap with up
    to 20% jitter (OpenClaw's schedule), but never sooner than the provider asked."""
    delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**retries) * (1 + random.random() * 0.2)
    if retry_after is not None:
        delay = max(delay, min(float(retry_after), MAX_RETRY_AFTER_S))
    return delay
