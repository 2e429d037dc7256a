"""Session transcripts exported as Markdown for QMD (``memory.qmd.sessions.enabled``).

As OpenClaw 2026.3.24 ``exportSessions`` (``dist/qmd-manager-CdVu0x02.js``), before every
``qmd update``: each ``<sessionsDir>/<name>.jsonl`` becomes ``<exportDir>/<name>.md`` holding
``# Session <name>``, a blank line and the transcript's user and assistant turns (``User: …`` /
``Assistant: …``, text blocks only, whitespace collapsed;
:func:`pipeline.ingest.sessions.transcript`), with secrets masked
(:func:`pipeline.qmd.sanitize.redact_secrets`), or ``(empty)``.
Transcripts older than ``retentionDays`` (by modification time) are not exported, and exports
whose transcript is gone or too old are deleted. A file is rewritten only when its text changed.
**memq:** only files memq exported (first line ``# Session ``) are ever deleted from the export
folder, so pointing ``exportDir`` at a folder of notes cannot delete them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.ingest.sessions import transcript
from pipeline.qmd.sanitize import redact_secrets

HEADING = "# Session "


@dataclass(frozen=True)
class ExportReport:
    written: int
    unchanged: int
    removed: int


def render(name: str, raw: str) -> str:
    """The Markdown export of transcript ``name`` (its JSONL text ``raw``)."""
    text = redact_secrets(transcript(raw).text).strip()
    return f"{HEADING}{name}\n\n{text or '(empty)'}\n"


def export_sessions(sessions_dir: Path, export_dir: Path, retention_days: int | None,
                    now: float | None = None) -> ExportReport:
    """Bring ``export_dir`` in line with the transcripts in ``sessions_dir``."""
    export_dir.mkdir(parents=True, exist_ok=True)
    cutoff = None if not retention_days else (now or time.time()) - retention_days * 86_400
    keep: set[str] = set()
    written = unchanged = 0
    try:
        entries = sorted(os.scandir(sessions_dir), key=lambda e: e.name)
    except OSError:
        entries = []
    for entry in entries:
        if not entry.name.endswith(".jsonl") or not entry.is_file(follow_symlinks=False):
            continue
        if cutoff is not None and entry.stat().st_mtime < cutoff:
            continue
        name = entry.name.removesuffix(".jsonl")
        target = export_dir / f"{name}.md"
        raw = Path(entry.path).read_text(encoding="utf-8", errors="replace")
        text = render(name, raw)
        keep.add(target.name)
        if _read(target) == text:
            unchanged += 1
            continue
        tmp = export_dir / f".{target.name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
        written += 1
    removed = 0
    for path in export_dir.glob("*.md"):
        if path.name not in keep and _read(path).startswith(HEADING) and not path.is_symlink():
            path.unlink()
            removed += 1
    return ExportReport(written, unchanged, removed)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
