"""Keep the index following the disk from a long-running reader (the MCP server).

A search must never wait for indexing: the reader asks which files are stale, answers from the
index as it is, and leaves the sync to a background thread. A refresh is one producer pass
under the index's own identity (the provider and model it was built with): a reader never
switches models, which would drop every vector. It makes new text keyword-searchable at once
and queues embeddings only when a broker is configured; without one, new chunks stay pending
(and searches say so) until ``memq index`` runs.
"""

from __future__ import annotations

import logging
import threading

from pipeline.config import Settings
from pipeline.embeddings.registry import ProviderChoice, choose_provider
from pipeline.ingest.producer import IndexReport, index_once, stale_memory_paths
from pipeline.ingest.sources import memory_files, relative_path
from pipeline.jobs import provider_for
from pipeline.query import index_spec
from pipeline.store import schema
from pipeline.store.engine import Database, connect

log = logging.getLogger(__name__)


def index_choice(db: Database, settings: Settings) -> ProviderChoice:
    """The provider choice the index already made; a store never indexed chooses afresh
    (without fetching the default model: a reader must not start a download)."""
    spec = index_spec(db)
    reason = schema.get_meta(db, "mode_reason")
    if spec is not None:
        return ProviderChoice(provider_for(spec, settings), spec, reason)
    if schema.get_meta(db, "index") is not None:
        return ProviderChoice(None, None, reason)  # a keyword-only index stays keyword-only
    return choose_provider(settings, fetch_default_model=False)


VECTORS_QUEUED = "queued"
VECTORS_WAITING = "waiting for `memq index` (no broker configured)"
VECTORS_NONE = "none (keyword-only index)"


def refresh_index(settings: Settings) -> tuple[IndexReport, str]:
    """One producer pass: chunk rows follow the disk; vectors are queued if a broker is set.

    Returns the pass's report and what happens to the new chunks' vectors.
    """
    db = connect(settings.store.path, want_vectors=settings.store.vector_enabled)
    try:
        schema.ensure_schema(db)
        choice = index_choice(db, settings)
        if choice.spec is None or not settings.broker_url:
            report = index_once(db, settings, choice, None)
            return report, VECTORS_NONE if choice.spec is None else VECTORS_WAITING
    finally:
        db.close()
    from workers.indexing import run_index

    return run_index(settings, wait=False, choice=choice).report, VECTORS_QUEUED


def find_stale(settings: Settings) -> list[str]:
    """Memory files the index does not reflect yet (all of them when nothing is indexed)."""
    if not settings.store.path.exists():
        return [f.path for f in memory_files(settings.workspace, settings.extra_paths,
                                             settings.multimodal)]
    db = connect(settings.store.path, want_vectors=False)
    try:
        schema.ensure_schema(db)
        return [relative_path(settings.workspace, p) for p in stale_memory_paths(db, settings)]
    finally:
        db.close()


class BackgroundRefresher:
    """Runs refreshes one at a time; triggers that arrive during a run coalesce into one more."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.last_error: str | None = None
        self._run_lock = threading.Lock()
        self._state = threading.Lock()
        self._again = False
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        with self._state:
            return self._thread is not None

    def refresh_now(self) -> tuple[IndexReport, str]:
        """A synchronous pass (after an append); waits for a background pass in flight."""
        with self._run_lock:
            try:
                outcome = refresh_index(self.settings)
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                raise
            self.last_error = None
            return outcome

    def trigger(self) -> None:
        """Start a background pass unless one is running (which then runs once more)."""
        with self._state:
            self._again = True
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._loop, name="memq-refresh", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._state:
                if not self._again:
                    self._thread = None
                    return
                self._again = False
            try:
                self.refresh_now()
            except Exception:
                log.exception("background index refresh failed")
