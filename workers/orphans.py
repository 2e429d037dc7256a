"""An embedded worker must not outlive the ``memq`` command that started it.

If that command is killed outright (SIGKILL, OOM killer, a closed terminal), nothing runs its
clean-up, and its worker and private redis-server would live on forever. The worker watches its
parent instead: when the parent is gone it stops the private broker, removes its folder, and
ends its own process group (itself and its pool processes).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading

PARENT_ENV = "MEMQ_EMBEDDED_PARENT"
BROKER_PID_ENV = "MEMQ_EMBEDDED_BROKER_PID"
BROKER_DIR_ENV = "MEMQ_EMBEDDED_BROKER_DIR"
POLL_S = 1.0


def _tear_down() -> None:
    broker_pid = int(os.environ.get(BROKER_PID_ENV) or 0)
    if broker_pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(broker_pid, signal.SIGKILL)
    broker_dir = os.environ.get(BROKER_DIR_ENV)
    if broker_dir:
        shutil.rmtree(broker_dir, ignore_errors=True)
    os.killpg(os.getpgrp(), signal.SIGKILL)


def guard_embedded_worker() -> None:
    """Start the watch when this worker was spawned by an embedded fleet (a no-op otherwise)."""
    parent = int(os.environ.get(PARENT_ENV) or 0)
    if not parent:
        return
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(POLL_S):
            if os.getppid() != parent:
                _tear_down()

    threading.Thread(target=watch, name="memq-orphan-guard", daemon=True).start()
