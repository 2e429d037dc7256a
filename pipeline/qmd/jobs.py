"""QMD's write jobs (bind the collections, ``qmd update``, ``qmd embed``): what is due, and a
background runner for a process that has no fleet.

:func:`run_due` is the one plain function every caller runs, on the host that owns the memory:
the Celery task ``memq.qmd_update`` (``workers/tasks.py``, on the memory's ``control.<shard>``
queue) and, without a broker, :class:`QmdJobRunner`'s thread. The backend's write lock (a
thread lock and an ``flock`` on the home) keeps two from ever running at once, even across
processes; the runner also coalesces triggers, so at most one job runs and one waits.

Reasons: ``boot`` (the memory opened, ``update.onBoot``), ``changed`` (memq indexed changed
files: a debounced update), ``due`` (the update interval or the embed interval passed).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from pipeline.errors import QmdUnavailable
from pipeline.qmd.backend import QmdBackend
from pipeline.qmd.sanitize import redact_for_errors

log = logging.getLogger("memq.qmd")

REASONS = ("boot", "changed", "due")


def needs_boot(backend: QmdBackend) -> bool:
    """Whether the home is not set up for the configured collections yet (no index, a
    collection not bound to its folder and mask, or never updated). Cheap: reads the state."""
    state = backend.state.read()
    bound = state.get("collections") or {}
    wanted = all(bound.get(c.name) == {"path": str(c.path), "pattern": c.pattern}
                 for c in backend.collections)
    return not (backend.home.index_path.exists() and wanted and state.get("lastUpdateAt"))


def is_due(backend: QmdBackend, reason: str) -> bool:
    """Whether a job for ``reason`` would do anything now (cheap: reads the state)."""
    return needs_boot(backend) or reason == "changed" or bool(backend.due())


def run_due(backend: QmdBackend, reason: str = "due") -> dict[str, Any]:
    """Run the QMD job ``reason`` calls for, on the host that owns the memory. Slow.

    A home that is not set up (:func:`needs_boot`) is booted (collections bound, a forced
    update); else ``changed`` runs a debounced update (``{"skipped": "debounced", "dueAt"}``
    when the last one is younger than ``update.debounceMs``: run again at ``dueAt``), and
    ``boot``/``due`` run the update and the embed that are due. Never raises for QMD's
    failures: ``{"error", "kind"}`` says what failed (the backend logged it and, for a
    missing executable, remembers the outage so searches fall back at once).
    """
    if reason not in REASONS:
        raise ValueError(f"unknown QMD job reason {reason!r}; one of {', '.join(REASONS)}")
    started = time.time()
    try:
        if needs_boot(backend):
            out = {"job": "boot", **backend.boot()}
        elif reason == "changed":
            out = {"job": "update", **backend.update("watch")}
        else:
            due = backend.due()
            out = {"job": "+".join(due) or "none"}
            if "update" in due:
                out.update(backend.update(f"{reason}:interval", force=True))
            elif "embed" in due:
                out["embed"] = backend.embed()
    except QmdUnavailable as exc:
        return {"job": reason, "error": exc.reason, "kind": exc.kind,
                "seconds": round(time.time() - started, 3)}
    return out


class QmdJobRunner:
    """Runs :func:`run_due` on one background thread, one job at a time.

    :meth:`trigger` starts a job unless one is running (then one more runs after it, for the
    strongest reason asked meanwhile). A debounced update is run again at its ``dueAt``, so a
    change is never missed; :meth:`close` runs such a pending update at once (forced) instead
    of waiting, then waits for the thread.
    """

    def __init__(self, backend: QmdBackend) -> None:
        self.backend = backend
        self.last: dict[str, Any] | None = None
        self._cond = threading.Condition()
        self._wanted: str | None = None
        self._thread: threading.Thread | None = None
        self._closing = False

    @property
    def running(self) -> bool:
        """A job runs or waits."""
        with self._cond:
            return self._thread is not None

    def trigger(self, reason: str) -> None:
        """Ask for a job (``boot``, ``changed`` or ``due``) in the background."""
        if reason not in REASONS:
            raise ValueError(f"unknown QMD job reason {reason!r}; one of {', '.join(REASONS)}")
        with self._cond:
            if self._closing:
                return
            self._wanted = _stronger(self._wanted, reason)
            self._cond.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="memq-qmd-jobs",
                                                daemon=True)
                self._thread.start()

    def run_now(self, reason: str) -> dict[str, Any]:
        """Run a job on the caller's thread (``waitForBootSync``); the write lock keeps it
        from overlapping a background one."""
        self.last = run_due(self.backend, reason)
        return self.last

    def wait(self, timeout: float | None = None) -> None:
        """Wait until no job runs or waits (tests)."""
        with self._cond:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def close(self) -> None:
        """Finish: a debounced update still waiting runs now, forced; then the thread ends."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _loop(self) -> None:
        while True:
            with self._cond:
                reason, self._wanted = self._wanted, None
                if reason is None:
                    self._thread = None
                    return
            try:
                self.last = out = run_due(self.backend, reason)
            except Exception:  # a background job has no caller: log it, keep serving
                log.exception("QMD %s job failed", reason)
                continue
            due_at = out.get("dueAt") if out.get("skipped") == "debounced" else None
            if due_at is not None:
                self._rerun_at(float(due_at))

    def _rerun_at(self, due_at: float) -> None:
        """Wait for a debounced update's ``dueAt`` (or :meth:`close`), then run it."""
        with self._cond:
            while not self._closing and time.time() < due_at:
                self._cond.wait(timeout=max(0.01, due_at - time.time()))
            closing = self._closing
        if closing:
            try:
                self.last = {"job": "update", **self.backend.update("watch", force=True)}
            except QmdUnavailable as exc:
                self.last = {"job": "update", "error": exc.reason, "kind": exc.kind}
            return
        self.trigger("changed")


class QmdJobs:
    """Where one memory's QMD jobs go: ``send(reason)`` hands a job to the host that owns the
    memory (the fleet's ``control.<shard>`` queue) and says whether it took it; otherwise this
    process runs it on a :class:`QmdJobRunner` (also when sending fails: a broker that is down
    must not fail the search or index pass that asked). Jobs that would do nothing are not
    asked for, and ``due`` (the intervals) is looked at no more often than every ``check_s``
    seconds."""

    def __init__(self, backend: QmdBackend, send: Callable[[str], bool] | None = None, *,
                 check_s: float = 30.0) -> None:
        self.backend = backend
        self.send = send
        self.check_s = check_s
        self.runner = QmdJobRunner(backend)
        self._next_due_check = 0.0

    def ask(self, reason: str) -> bool:
        """Ask for a job for ``reason``; whether one was sent or started."""
        if reason == "due":
            now = time.monotonic()
            if now < self._next_due_check:
                return False
            self._next_due_check = now + self.check_s
        if not is_due(self.backend, reason):
            return False
        if self.send is not None:
            try:
                if self.send(reason):
                    return True
            except Exception as exc:  # a broker down must not fail the search or index
                log.warning("cannot queue the QMD %s job (%s: %s); running it here",
                            reason, type(exc).__name__, redact_for_errors(str(exc)))
        self.runner.trigger(reason)
        return True

    def close(self) -> None:
        """Finish this process's job, if any (see :meth:`QmdJobRunner.close`)."""
        self.runner.close()


def _stronger(current: str | None, new: str) -> str:
    """The reason that covers both: ``changed`` (an update for sure) over ``boot`` over
    ``due``."""
    order = {"due": 0, "boot": 1, "changed": 2}
    return new if current is None or order[new] > order[current] else current
