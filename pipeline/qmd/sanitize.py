"""Secrets kept out of what leaves memq's control (exported transcripts, error text, the
environment of the ``qmd`` processes).

:func:`redact_secrets` is :func:`pipeline.ingest.redaction.redact_secrets` (OpenClaw's default
redaction patterns), shared with the transcripts memq indexes.
"""

from __future__ import annotations

import re

from pipeline.ingest.redaction import redact_secrets

__all__ = ["is_secret_variable", "redact_secrets"]

_SENSITIVE_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE",
                             re.IGNORECASE)


def is_secret_variable(name: str) -> bool:
    """Whether an environment variable probably holds a credential (``OPENAI_API_KEY``…).
    Hugging Face tokens (``HF_*``) are not counted: qmd may need them to fetch its models."""
    return bool(_SENSITIVE_NAME.search(name)) and not name.upper().startswith(("HF_", "HUGGING"))
