"""``QmdBackend``: one memory's QMD backend (``backend: "qmd"``), as OpenClaw's QmdMemoryManager.

Reads (:meth:`QmdBackend.search`, :meth:`QmdBackend.get`, :meth:`QmdBackend.status`) never
change the QMD home and may run on any thread, concurrently. Writes
(:meth:`QmdBackend.ensure_collections`, :meth:`QmdBackend.update`, :meth:`QmdBackend.embed`,
:meth:`QmdBackend.boot`) take seconds to minutes and belong on the queue of the host that owns
the memory; they also hold the home's write lock (a thread lock and an ``flock``), so two never
overlap even when called from elsewhere.

Every reason QMD cannot answer a search (no executable, a non-zero exit, a kill, a timeout,
output that is not JSON, collections not set up, a vector search with no vectors) raises
:class:`~pipeline.qmd.errors.QmdUnavailable`, logged once per outage as a warning; the
caller answers from memq's own index. The outage is remembered in the home's state file, so
for ``cooldown_s`` seconds searches raise at once, in every process, without running qmd;
then QMD is tried again, and a success (or a successful update) ends the outage.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.config import Settings
from pipeline.errors import QmdPathError, QmdUnavailable
from pipeline.qmd import commands
from pipeline.qmd.collections import ensure_collections
from pipeline.qmd.export import export_sessions
from pipeline.qmd.layout import Collection, collections, has_glob, qmd_home
from pipeline.qmd.results import Location, parse_entries, to_results
from pipeline.qmd.runner import QmdRunner, qmd_env
from pipeline.qmd.scope import scope_allows
from pipeline.qmd.state import StateFile, exclusive
from pipeline.results import MemoryText, SearchHit

log = logging.getLogger("memq.qmd")

DEFAULT_COOLDOWN_S = 60.0
#: OpenClaw's embed back-off: 1 min, doubling, at most 1 h.
EMBED_BACKOFF_BASE_S = 60.0
EMBED_BACKOFF_MAX_S = 3600.0
#: OpenClaw retries a boot-time ``qmd update`` twice (3 tries) on a timeout or a busy index.
BOOT_UPDATE_TRIES = 3
_UNSUPPORTED = ("unknown flag", "unknown option", "unrecognized option",
                "flag provided but not defined", "unexpected argument")


def _unescape(pattern: str) -> str:
    return pattern.replace("\\", "")


class QmdBackend:
    """The QMD backend of the memory ``settings`` describe.

    ``env`` is the environment qmd starts from (default ``os.environ``; credentials are
    removed, the home's XDG folders added); ``cooldown_s`` is how long a failed QMD is left
    alone before it is tried again. Building one runs nothing and writes nothing.
    """

    def __init__(self, settings: Settings, *, env: Mapping[str, str] | None = None,
                 cooldown_s: float = DEFAULT_COOLDOWN_S) -> None:
        self.settings = settings
        self.qmd = settings.qmd
        self.home = qmd_home(settings)
        self.collections: list[Collection] = collections(settings, self.home)
        self._by_name = {c.name: c for c in self.collections}
        base = os.environ if env is None else env
        self.runner = QmdRunner(self.qmd.command,
                                qmd_env(base, self.home.config_home, self.home.cache_home),
                                settings.workspace)
        self.state = StateFile(self.home.state_path)
        self.cooldown_s = cooldown_s
        self._write = threading.Lock()
        self._models_from = Path(base.get("XDG_CACHE_HOME") or Path.home() / ".cache")

    # -----------------------------------------------------------------------------------------
    # search

    def search_command(self, query: str, max_results: int | None = None,
                       mode: str | None = None) -> list[str]:
        """The command line :meth:`search` runs for ``query`` in ``mode`` (default
        ``searchMode``), executable first."""
        limit = self._limit(max_results)
        names = [c.name for c in self.collections]
        return self.runner.argv(commands.search_args(mode or self.qmd.search_mode, query, limit,
                                                     names))

    def scope_allows(self, session_key: str | None) -> bool:
        """Whether ``memory.qmd.scope`` lets the chat of ``session_key`` see QMD results."""
        return scope_allows(self.qmd.scope, session_key)

    def search(self, query: str, max_results: int | None = None, min_score: float | None = None,
               session_key: str | None = None) -> list[SearchHit]:
        """QMD's results for ``query`` as memq's hits, best first.

        A hit's ``path`` is workspace-relative for files inside the workspace and ``qmd://<collection>/<path>``
        for others. At most ``min(limits.maxResults, max_results)`` results; ``min_score``
        defaults to 0 (OpenClaw: QMD results are not held to ``query.minScore``). An empty
        query, or a chat ``scope`` denies (logged), gives ``[]``. Raises
        :class:`QmdUnavailable` when QMD cannot answer. Runs one qmd process (about 0.3-0.5 s
        for ``search``); thread-safe.
        """
        if not self.scope_allows(session_key):
            log.warning("qmd search denied by memory.qmd.scope for session %r", session_key)
            return []
        if not query.strip():
            return []
        limit = self._limit(max_results)
        if limit <= 0 or not self.collections:
            return []
        self._raise_if_down()
        try:
            entries = self._run_search(self.qmd.search_mode, query, limit)
        except QmdUnavailable as exc:
            self._mark_down(exc)
            raise
        self._mark_up()
        results = to_results(entries, self._locate, limit=limit,
                             min_score=0.0 if min_score is None else float(min_score),
                             max_snippet_chars=self.qmd.limits.max_snippet_chars,
                             max_injected_chars=self.qmd.limits.max_injected_chars)
        return [SearchHit(r["path"], r["startLine"], r["endLine"], r["score"], r["snippet"],
                          r["source"]) for r in results]

    def _limit(self, max_results: int | None) -> int:
        cap = self.qmd.limits.max_results
        return cap if max_results is None else min(cap, max(0, int(max_results)))

    def _run_search(self, mode: str, query: str, limit: int) -> list[dict[str, Any]]:
        if not self.home.index_path.exists():
            raise QmdUnavailable("collections", "the QMD index is not set up yet (no "
                                 "collections): run the QMD update job")
        names = [c.name for c in self.collections]
        args = commands.search_args(mode, query, limit, names)
        timeout = self.qmd.limits.timeout_ms
        try:
            done = self.runner.run(args, timeout)
        except QmdUnavailable as exc:
            lowered = exc.reason.lower()
            if exc.kind == "exit" and "collection not found" in lowered:
                raise QmdUnavailable("collections", f"{exc.reason} (run the QMD update job to "
                                     "create the collections)") from None
            if mode != "query" and exc.kind == "exit" and any(m in lowered for m in _UNSUPPORTED):
                log.warning("qmd %s does not take memq's flags; retrying with qmd query", mode)
                return self._run_search("query", query, limit)
            raise
        entries = parse_entries(done.stdout, done.stderr, f"qmd {mode}")
        if mode == "vsearch" and not entries and "(100%) need embeddings" in done.stderr:
            raise QmdUnavailable("no-vectors", "qmd vsearch: no document has a vector yet "
                                 "(qmd embed has not run)")
        return entries

    def _locate(self, entry: dict[str, Any]) -> Location | None:
        """Where a qmd result entry's document is (None: not in a managed collection)."""
        found = self._entry_file(entry)
        if found is None:
            return None
        name, rel = found
        c = self._by_name.get(name)
        if c is None or not rel:
            return None
        target = Path(os.path.normpath(c.path / rel))
        if not target.is_relative_to(c.path):
            return None
        workspace = self.settings.workspace
        if target.is_relative_to(workspace):
            return Location(target.relative_to(workspace).as_posix(), c.kind)
        return Location(f"qmd://{name}/{target.relative_to(c.path).as_posix()}", c.kind)

    def _entry_file(self, entry: dict[str, Any]) -> tuple[str, str] | None:
        file = entry.get("file")
        if isinstance(file, str) and file.lower().startswith("qmd://"):
            name, _, rel = file[len("qmd://"):].partition("/")
            return name, rel
        docid = entry.get("docid")
        if isinstance(docid, str) and docid.strip("#"):
            return self._doc_by_id(docid.strip("#"), entry.get("collection"))
        return None

    def _doc_by_id(self, docid: str, collection: Any) -> tuple[str, str] | None:
        """(collection, path) of a document qmd names by its id only (older qmd builds)."""
        rows = self._index_rows("SELECT collection, path FROM documents "
                                "WHERE hash LIKE ? AND active = 1", (docid + "%",))
        rows.sort(key=lambda r: r[0] != collection)
        return (rows[0][0], rows[0][1]) if rows else None

    def _index_rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of qmd's own index, read-only ([] when it cannot be read)."""
        if not self.home.index_path.exists():
            return []
        try:
            conn = sqlite3.connect(f"file:{self.home.index_path}?mode=ro", uri=True, timeout=1)
            try:
                return conn.execute(sql, params).fetchall()
            finally:
                conn.close()
        except sqlite3.Error as exc:
            log.warning("cannot read the QMD index %s: %s", self.home.index_path, exc)
            return []

    # -----------------------------------------------------------------------------------------
    # get

    def get(self, path: str, from_line: int | None = None,
            lines: int | None = None) -> MemoryText:
        """Lines of a QMD document: ``qmd://<collection>/<path>`` (OpenClaw's
        ``qmd/<collection>/<path>`` too) from the collection's folder, or a workspace path that
        a collection covers; a missing file gives empty text. Raises :class:`QmdPathError` for
        anything else (not ``.md``, no such collection, outside its folder, a symlink). Reads
        one file; thread-safe."""
        shown, target = self._read_target(str(path))
        if not target.exists():
            return MemoryText(shown, "")
        return MemoryText.window(shown, target.read_text(encoding="utf-8", errors="replace"),
                                 from_line, lines)

    def _read_target(self, requested: str) -> tuple[str, Path]:
        if not requested.strip() or "\x00" in requested:
            raise QmdPathError("path required")
        for prefix in ("qmd://", "qmd/"):
            if requested.startswith(prefix):
                name, _, rel = requested[len(prefix):].partition("/")
                c = self._by_name.get(name)
                if c is None and prefix == "qmd/":
                    break  # OpenClaw's form names a collection; else a workspace folder "qmd"
                if c is None:
                    raise QmdPathError(f"unknown qmd collection: {name!r}")
                target = Path(os.path.normpath(c.path / rel)) if rel else c.path
                if target == c.path or not target.is_relative_to(c.path):
                    raise QmdPathError("qmd path escapes its collection")
                self._check_file(target, c)
                return f"qmd://{name}/{target.relative_to(c.path).as_posix()}", target
        workspace = self.settings.workspace
        target = Path(os.path.normpath(workspace / requested))
        for c in sorted(self.collections, key=lambda c: -len(c.path.parts)):
            if target != c.path and target.is_relative_to(c.path) and self._admits(c, target):
                self._check_file(target, c)
                shown = (target.relative_to(workspace).as_posix()
                         if target.is_relative_to(workspace)
                         else f"qmd://{c.name}/{target.relative_to(c.path).as_posix()}")
                return shown, target
        raise QmdPathError("path required: a .md file of a QMD collection")

    @staticmethod
    def _admits(c: Collection, target: Path) -> bool:
        if has_glob(c.pattern):
            return True
        return target.relative_to(c.path).as_posix() == _unescape(c.pattern)

    @staticmethod
    def _check_file(target: Path, c: Collection) -> None:
        if target.suffix.lower() != ".md":
            raise QmdPathError("path required: a .md file")
        real_root = Path(os.path.realpath(c.path))
        if target.is_symlink() or not Path(os.path.realpath(target)).is_relative_to(real_root):
            raise QmdPathError("path required: not a symlink or a file outside the collection")
        if target.exists() and not target.is_file():
            raise QmdPathError("path required: a regular file")

    # -----------------------------------------------------------------------------------------
    # writes: on the owning host's queue

    def ensure_collections(self) -> dict[str, Any]:
        """Create the home and bind its collections (``qmd collection add``…); see
        :mod:`pipeline.qmd.collections`. Returns ``{added, kept, removed, failed}``. Raises
        :class:`QmdUnavailable` when qmd cannot run or no collection could be bound. Slow
        (one qmd process per change, each indexing its files): run it on the writer's queue."""
        with exclusive(self.home.write_lock, self._write):
            self._prepare()
            try:
                report = ensure_collections(self.runner, self.collections, self.state,
                                            self.qmd.update.command_timeout_ms)
            except QmdUnavailable as exc:
                self._note_write_failure(exc)
                raise
            self._mark_up()
            return report.as_dict()

    def boot(self) -> dict[str, Any]:
        """What OpenClaw does when the memory opens with ``update.onBoot``: bind the
        collections, then a forced update (3 tries on a timeout or a busy index). Slow."""
        bound = self.ensure_collections()
        return {"collections": bound, **self.update("boot", force=True)}

    def update(self, reason: str = "manual", force: bool = False) -> dict[str, Any]:
        """Export session transcripts (when on), ``qmd update``, then ``qmd embed`` when due
        (never in ``search`` mode; after ``embedInterval``, outside its failure back-off).

        Skipped (``{"skipped": "debounced", "lastUpdateAt", "dueAt"}``) when the last update is
        less than ``update.debounceMs`` old, unless ``force``: a minimum gap, as in OpenClaw, so
        a caller that must not miss a change runs it again at ``dueAt`` (or forces it).
        Returns ``{updated, seconds, sessions?, embed?}``. Raises :class:`QmdUnavailable` when
        ``qmd update`` fails; an embed failure is recorded (back-off, ``status()``) and
        reported, not raised. Slow (seconds
        to minutes): run it on the writer's queue.
        """
        with exclusive(self.home.write_lock, self._write):
            now = time.time()
            last = self.state.read().get("lastUpdateAt")
            debounce = self.qmd.update.debounce_ms / 1000
            if not force and debounce > 0 and last and now - last < debounce:
                return {"skipped": "debounced", "lastUpdateAt": last, "dueAt": last + debounce}
            self._prepare()
            out: dict[str, Any] = {"updated": True}
            sessions = self.qmd.sessions
            if sessions.enabled:
                folder = sessions.export_dir or self.home.default_sessions_dir
                report = export_sessions(self.settings.sessions_dir, folder,
                                         sessions.retention_days)
                out["sessions"] = report.__dict__
            tries = BOOT_UPDATE_TRIES if reason == "boot" or reason.startswith("boot:") else 1
            try:
                self._update_with_retry(reason, tries)
            except QmdUnavailable as exc:
                self._note_write_failure(exc)
                raise
            self._mark_up()
            if self._embed_due(force, time.time()):
                out["embed"] = self._embed(reason)
            finished = time.time()
            self.state.update(lambda s: s.__setitem__("lastUpdateAt", finished))
            out["seconds"] = round(finished - now, 3)
            return out

    def _update_with_retry(self, reason: str, tries: int) -> None:
        for attempt in range(1, tries + 1):
            try:
                self.runner.run(commands.UPDATE_ARGS, self.qmd.update.update_timeout_ms,
                                discard_stdout=True)
                return
            except QmdUnavailable as exc:
                busy = "sqlite_busy" in exc.reason.lower() or "locked" in exc.reason.lower()
                if attempt >= tries or not (exc.kind == "timeout" or busy):
                    raise
                log.warning("qmd update retry %d/%d (%s): %s", attempt, tries - 1, reason,
                            exc.reason)
                time.sleep(0.5 * 2 ** (attempt - 1))

    def embed(self, force: bool = False) -> dict[str, Any]:
        """``qmd embed`` now, unless its failure back-off is running (``force`` ignores it).
        Returns ``{embedded: true, seconds}`` or ``{skipped: reason}``; raises
        :class:`QmdUnavailable` when it fails (the failure starts or lengthens the back-off).
        Slow (minutes; it downloads qmd's embedding model on first use): run it on the writer's
        queue."""
        with exclusive(self.home.write_lock, self._write):
            until = self.state.read().get("embedBackoffUntil")
            if not force and until and time.time() < until:
                return {"skipped": "backoff", "until": until}
            self._prepare()
            result = self._embed("manual")
            if "error" in result:
                raise QmdUnavailable(result["kind"], result["error"])
            return result

    def _embed_due(self, force: bool, now: float) -> bool:
        if self.qmd.search_mode == "search":
            return False
        state = self.state.read()
        until = state.get("embedBackoffUntil")
        if until and now < until:
            return False
        last, interval = state.get("lastEmbedAt"), self.qmd.update.embed_interval_ms / 1000
        return force or not last or (interval > 0 and now - last > interval)

    def _embed(self, reason: str) -> dict[str, Any]:
        started = time.time()
        try:
            self.runner.run(commands.EMBED_ARGS, self.qmd.update.embed_timeout_ms,
                            discard_stdout=True)
        except QmdUnavailable as exc:
            def failed(s: dict[str, Any]) -> None:
                s["embedFailures"] = int(s.get("embedFailures") or 0) + 1
                delay = min(EMBED_BACKOFF_MAX_S,
                            EMBED_BACKOFF_BASE_S * 2 ** (s["embedFailures"] - 1))
                s["embedBackoffUntil"] = time.time() + delay
            state = self.state.update(failed)
            log.warning("qmd embed failed (%s): %s; backing off until %s", reason, exc.reason,
                        time.strftime("%H:%M:%S", time.localtime(state["embedBackoffUntil"])))
            return {"error": exc.reason, "kind": exc.kind,
                    "backoffUntil": state["embedBackoffUntil"]}
        done = time.time()

        def succeeded(s: dict[str, Any]) -> None:
            s.update(lastEmbedAt=done, embedFailures=0)
            s.pop("embedBackoffUntil", None)
        self.state.update(succeeded)
        return {"embedded": True, "seconds": round(done - started, 3)}

    def due(self, now: float | None = None) -> list[str]:
        """The periodic jobs due now: ``"update"`` once ``update.interval`` passed since the
        last update (or there was none), ``"embed"`` once ``embedInterval`` passed since the last
        embed (never in ``search`` mode, nor during the failure back-off). Cheap."""
        now = time.time() if now is None else now
        state = self.state.read()
        jobs = []
        interval = self.qmd.update.interval_ms / 1000
        last = state.get("lastUpdateAt")
        if interval > 0 and (not last or now - last >= interval):
            jobs.append("update")
        if self.qmd.search_mode != "search" and self.qmd.update.embed_interval_ms > 0 \
                and self._embed_due(False, now):
            jobs.append("embed")
        return jobs

    def _prepare(self) -> None:
        """Create the home's folders, and share the user's downloaded qmd models with it."""
        for folder in (self.home.config_home, self.home.index_path.parent):
            folder.mkdir(parents=True, exist_ok=True)
        shared = self._models_from / "qmd" / "models"
        target = self.home.index_path.parent / "models"
        if shared.is_dir() and not os.path.lexists(target) \
                and shared.resolve() != target.resolve():
            try:
                target.symlink_to(shared, target_is_directory=True)
            except OSError as exc:
                log.warning("cannot share qmd models from %s: %s", shared, exc)

    # -----------------------------------------------------------------------------------------
    # health

    def _down(self) -> dict[str, Any] | None:
        """The current outage, with ``retryAt`` by this backend's cool-down, or None."""
        down = self.state.read().get("down")
        if not isinstance(down, dict):
            return None
        return {**down, "retryAt": float(down.get("failedAt") or 0) + self.cooldown_s}

    def _raise_if_down(self) -> None:
        down = self._down()
        if down and time.time() < down["retryAt"]:
            raise QmdUnavailable(down.get("kind") or "exit", down.get("reason") or "QMD is down",
                                 since=down.get("since"), retry_at=down["retryAt"])

    def _mark_down(self, exc: QmdUnavailable) -> None:
        now = time.time()
        previous: dict[str, Any] = {}

        def change(s: dict[str, Any]) -> None:
            previous.update(s.get("down") or {})
            s["down"] = {"since": previous.get("since") or now, "failedAt": now,
                         "kind": exc.kind, "reason": exc.reason}
        state = self.state.update(change)
        exc.since, exc.retry_at = state["down"]["since"], now + self.cooldown_s
        if previous.get("reason") != exc.reason:
            log.warning("QMD unavailable, answering from memq's own index until it recovers "
                        "(retry in %.0f s): %s", self.cooldown_s, exc.reason)

    def _note_write_failure(self, exc: QmdUnavailable) -> None:
        """A write that failed because qmd cannot run at all means searches cannot either; a
        slow or failed update says nothing about searches, which go on being tried."""
        if exc.kind == "missing":
            self._mark_down(exc)
        else:
            log.warning("QMD write job failed: %s", exc.reason)

    def _mark_up(self) -> None:
        if not self.state.read().get("down"):
            return
        gone: dict[str, Any] = {}
        self.state.update(lambda s: gone.update(s.pop("down", None) or {}))
        if gone:
            log.warning("QMD recovered (down since %s: %s)",
                        time.strftime("%H:%M:%S", time.localtime(gone.get("since") or 0)),
                        gone.get("reason"))

    # -----------------------------------------------------------------------------------------
    # status

    def status(self) -> dict[str, Any]:
        """What ``memq status`` shows for this backend; cheap (reads the state file and qmd's
        index, runs no qmd process); thread-safe."""
        state = self.state.read()
        counts = dict(self._index_rows("SELECT collection, count(*) FROM documents "
                                       "WHERE active = 1 GROUP BY collection"))
        bound = state.get("collections") or {}
        down = self._down()
        return {
            "backend": "qmd",
            "command": self.qmd.command,
            "searchMode": self.qmd.search_mode,
            "home": str(self.home.root),
            "index": str(self.home.index_path),
            "available": not (down and time.time() < down["retryAt"]),
            "down": down,
            "documents": sum(counts.get(c.name, 0) for c in self.collections),
            "collections": [{"name": c.name, "path": str(c.path), "pattern": c.pattern,
                             "kind": c.kind, "bound": c.name in bound,
                             "documents": counts.get(c.name, 0)} for c in self.collections],
            "lastUpdateAt": state.get("lastUpdateAt"),
            "lastEmbedAt": state.get("lastEmbedAt"),
            "embedFailures": state.get("embedFailures", 0),
            "embedBackoffUntil": state.get("embedBackoffUntil"),
            "sessions": {"enabled": self.qmd.sessions.enabled,
                         "exportDir": str(self.qmd.sessions.export_dir
                                          or self.home.default_sessions_dir)},
            "scope": self.qmd.scope.to_json(),
        }


def backend_status(settings: Settings) -> dict[str, Any]:
    """``{"backend": "builtin"}``, or ``{"backend": "qmd", "qmd": <QmdBackend.status()>}``:
    which engine answers searches, for ``memq status``. Cheap (runs no qmd process)."""
    if settings.backend != "qmd":
        return {"backend": "builtin"}
    return {"backend": "qmd", "qmd": QmdBackend(settings).status()}
