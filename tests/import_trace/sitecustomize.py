"""Test-only import trace (tests/test_worker_imports.py): a process started with this folder
first on ``PYTHONPATH`` and ``MEMQ_TEST_IMPORT_LOG`` set appends ``<pid> <module>`` to that
file for every module it loads (a finder first on ``sys.meta_path``, asked for every module
not yet loaded, by ``import`` and ``importlib.import_module`` alike), its forked children
too. Written straight to the file: a Celery worker's stderr goes through its logger, which
drops what is written while it logs."""

from __future__ import annotations

import os
import sys
from typing import Any

_LOG = os.environ.get("MEMQ_TEST_IMPORT_LOG")


class _Recorder:
    """Records the name it is asked for; finds nothing (the next finder loads it)."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> None:
        fd = os.open(_LOG or os.devnull, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{os.getpid()} {name}\n".encode())
        finally:
            os.close(fd)


if _LOG:
    sys.meta_path.insert(0, _Recorder)  # type: ignore[arg-type]
