"""Secrets masked out of transcript text before memq keeps, exports or shows it.

The patterns are OpenClaw's ``DEFAULT_REDACT_PATTERNS`` (2026.3.24, ``dist/redact-BDinS1q9.js``,
``src/logging/redact.ts``), which it applies to every user/assistant turn of a session
transcript before indexing it (``buildSessionEntry``: ``redactSensitiveText(text, {mode:
"tools"})``) and before exporting it for QMD, case-insensitively. **memq:** a match is replaced
by ``***`` whole; OpenClaw keeps the first 6 and last 4 characters of long tokens. OpenClaw
2026.9 added patterns of its own (AWS secret keys among them) that memq does not have yet.
"""

from __future__ import annotations

import re

_PATTERNS = [re.compile(p, re.IGNORECASE) for p in (
    r"\b[A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)\b\s*[=:]\s*([\"']?)([^\s\"'\\]+)\1",
    r"\"(?:apiKey|token|secret|password|passwd|accessToken|refreshToken)\"\s*:\s*\"([^\"]+)\"",
    r"--(?:api[-_]?key|token|secret|password|passwd)\s+([\"']?)([^\s\"']+)\1",
    r"Authorization\s*[:=]\s*Bearer\s+([A-Za-z0-9._\-+=]+)",
    r"\bBearer\s+([A-Za-z0-9._\-+=]{18,})\b",
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]+?-----END [A-Z ]*PRIVATE KEY-----",
    r"\b(sk-[A-Za-z0-9_-]{8,})\b",
    r"\b(ghp_[A-Za-z0-9]{20,})\b",
    r"\b(github_pat_[A-Za-z0-9_]{20,})\b",
    r"\b(xox[baprs]-[A-Za-z0-9-]{10,})\b",
    r"\b(xapp-[A-Za-z0-9-]{10,})\b",
    r"\b(gsk_[A-Za-z0-9_-]{10,})\b",
    r"\b(AIza[0-9A-Za-z\-_]{20,})\b",
    r"\b(pplx-[A-Za-z0-9_-]{10,})\b",
    r"\b(npm_[A-Za-z0-9]{10,})\b",
    r"\bbot(\d{6,}:[A-Za-z0-9_-]{20,})\b",
    r"\b(\d{6,}:[A-Za-z0-9_-]{20,})\b",
)]
MASK = "***"


def _mask(match: re.Match[str]) -> str:
    whole = match.group(0)
    if "PRIVATE KEY-----" in whole:
        lines = [line for line in whole.splitlines() if line]
        return f"{lines[0]}\n{MASK}\n{lines[-1]}" if len(lines) >= 2 else MASK
    last = next((i for i in range(len(match.groups()), 0, -1) if match.group(i)), None)
    if last is None:  # no capture: the whole match is the secret
        return MASK
    start, end = match.start(last) - match.start(), match.end(last) - match.start()
    return whole[:start] + MASK + whole[end:]


def redact_secrets(text: str) -> str:
    """``text`` with API keys, tokens, passwords and private keys replaced by ``***``."""
    for pattern in _PATTERNS:
        text = pattern.sub(_mask, text)
    return text
