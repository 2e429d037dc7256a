"""Secrets kept out of what leaves memq's control (exported transcripts, error text, the
environment of the ``qmd`` processes).

:func:`redact_secrets` is :func:`pipeline.ingest.redaction.redact_secrets` (OpenClaw's default
redaction patterns), shared with the transcripts memq indexes: an exported transcript keeps
OpenClaw's head and tail of a long token. Error text and logs use :func:`redact_for_errors`,
which keeps nothing of a secret.
"""

from __future__ import annotations

import re

from pipeline.ingest.redaction import redact_secrets

__all__ = ["is_secret_variable", "redact_for_errors", "redact_secrets"]

_SENSITIVE_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE",
                             re.IGNORECASE)


def is_secret_variable(name: str) -> bool:
    """Whether an environment variable probably holds a credential (``OPENAI_API_KEY``…).
    Hugging Face tokens (``HF_*``) are not counted: qmd may need them to fetch its models."""
    return bool(_SENSITIVE_NAME.search(name)) and not name.upper().startswith(("HF_", "HUGGING"))


def redact_for_errors(text: str) -> str:
    """``text`` with every secret OpenClaw's patterns find masked whole (``***``)."""
    return redact_secrets(text, hints=False)
