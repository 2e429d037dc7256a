"""The QMD backend (``backend: "qmd"``): memory search through the ``qmd`` CLI (tobi/qmd).

OpenClaw's experimental backend (2026.2 to 2026.7; retired in 2026.8, whose ``openclaw doctor
--fix`` rewrites ``memory.qmd`` into ``memory.search.extraPaths``) shells out to ``qmd`` instead
of its builtin SQLite index. memq keeps the documented behaviour of OpenClaw 2026.3.24 (its
``dist/qmd-manager-CdVu0x02.js`` and ``dist/search-manager-BS0Qj_gi.js``), for configs written
for it, and falls back to its own index whenever QMD cannot answer.

:class:`QmdBackend` is the API; the modules are ``layout`` (the home and its collections),
``runner`` (one qmd process, with a timeout), ``commands`` (the command lines),
``collections`` (``qmd collection add``), ``results`` (JSON output to memq's results),
``export`` (session transcripts as Markdown), ``scope`` (which chats may see results),
``state`` (what every process knows about the home: bindings, last update, outage),
``sanitize`` (secrets out of exported text), ``errors``, and ``jobs`` (the update jobs: what is
due, and a background runner for a process without a fleet). :class:`memq.Memory` serves
searches, reads and status through it when ``backend`` is ``qmd``.
"""

from pipeline.errors import QmdPathError, QmdUnavailable
from pipeline.qmd.backend import QmdBackend, backend_status
from pipeline.qmd.layout import Collection, QmdHome, collections, qmd_home

__all__ = ["Collection", "QmdBackend", "QmdHome", "QmdPathError", "QmdUnavailable",
           "backend_status", "collections", "qmd_home"]
