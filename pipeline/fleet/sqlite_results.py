"""A job log in a SQLite file, kept without Celery or SQLAlchemy: Celery's database result
backend's rows, written as that backend writes them.

A single-host ``memq index`` with no broker records its job in the host's SQLite job log
(:mod:`pipeline.fleet.job_log`). Building Celery's ``DatabaseBackend`` for that costs more
than the pass (Celery's app and SQLAlchemy: about a second of imports); :class:`SqliteResults`
writes the same row with ``sqlite3`` (:mod:`pipeline.store.result_tables`), so Celery,
Flower and ``memq jobs`` read it as any result Celery stored, and Celery's backend goes on
writing rows this class wrote. What it does as Celery's backend does, with the job log's
settings (``result_serializer="json"``, ``result_extended=True``, no compression):

- the result (or an exception's ``exc_type``/``exc_message``/``exc_module``) encoded as
  kombu's ``json`` serializer encodes it (:func:`encode`), as UTF-8 bytes;
- the request's extended fields: ``name``, ``args``/``kwargs`` (encoded), ``worker``,
  ``retries``, ``queue`` (its delivery routing key), ``children`` and ``stamps``;
- ``date_done`` the UTC time for a finished state (``SUCCESS``, ``FAILURE``, ``REVOKED``),
  none for another; a row that is ``SUCCESS`` already is never written again;
- :meth:`SqliteResults.cleanup` deletes rows finished before the expiry.

The job log uses it when its database is a SQLite file and no broker is in use
(:class:`~pipeline.fleet.job_log.JobLog`'s ``lean``); on PostgreSQL, or beside a fleet,
rows go through Celery's own backend.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from pipeline.store import result_tables
from pipeline.store.engine import tune_connection
from pipeline.store.result_tables import ResultRow

#: Celery's states of a finished task (``celery.states.READY_STATES``).
READY_STATES = frozenset({"SUCCESS", "FAILURE", "REVOKED"})
FAILURE = "FAILURE"


def _kombu_default(o: Any) -> Any:
    """kombu's ``JSONEncoder.default`` (``kombu.utils.json``) for the types it knows."""
    reducer = getattr(o, "__json__", None)
    if reducer is not None:
        return reducer()
    if isinstance(o, datetime):
        return {"__type__": "datetime", "__value__": o.isoformat()}
    if isinstance(o, date):
        return {"__type__": "date", "__value__": o.isoformat()}
    if isinstance(o, time):
        return {"__type__": "time", "__value__": o.isoformat()}
    if isinstance(o, Decimal):
        return {"__type__": "decimal", "__value__": str(o)}
    if isinstance(o, uuid.UUID):
        return {"__type__": "uuid", "__value__": {"hex": o.hex}}
    if isinstance(o, bytes):
        try:
            return {"__type__": "bytes", "__value__": o.decode("utf-8")}
        except UnicodeDecodeError:
            return {"__type__": "base64", "__value__": base64.b64encode(o).decode("utf-8")}
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def encode(data: Any) -> bytes:
    """``data`` as Celery's backend stores it with the ``json`` result serializer: kombu's
    JSON (the standard library's, with kombu's types), UTF-8 bytes."""
    return json.dumps(data, default=_kombu_default).encode("utf-8")


def exception_result(exc: BaseException) -> dict[str, Any]:
    """An exception as Celery's ``prepare_exception`` keeps it for a JSON serializer: its
    type's qualified name, its arguments (each one that cannot be encoded as its repr), its
    module."""
    kind = type(exc)
    args = []
    for arg in exc.args:
        try:
            encode(arg)
            args.append(arg)
        except (TypeError, ValueError):
            args.append(repr(arg))
    return {"exc_type": getattr(kind, "__qualname__", kind.__name__),
            "exc_message": tuple(args), "exc_module": kind.__module__}


def request_columns(request: Any) -> dict[str, Any]:
    """The extended result's columns of a Celery task request (Celery's ``_get_result_meta``
    with ``result_extended``): all None without a request."""
    if request is None:
        return {"name": None, "args": None, "kwargs": None, "worker": None, "retries": None,
                "queue": None, "children": None, "stamps": None}
    delivery = getattr(request, "delivery_info", None)
    children = [child.as_tuple() for child in getattr(request, "children", None) or []]
    stamps = None
    if getattr(request, "stamps", None):
        headers = request.stamped_headers
        given = {k: v for k, v in request.stamps.items() if k in (headers or ())}
        if headers:
            stamps = encode({"stamped_headers": headers,
                             "stamps": {h: given[h] for h in headers if h in given}})
    return {"name": getattr(request, "task", None),
            "args": encode(getattr(request, "args", None)),
            "kwargs": encode(getattr(request, "kwargs", None)),
            "worker": getattr(request, "hostname", None),
            "retries": getattr(request, "retries", None),
            "queue": delivery.get("routing_key") if delivery else None,
            "children": encode(children) if children else None,
            "stamps": stamps}


class SqliteResults:
    """Celery's database result backend's rows in the SQLite file ``path`` (tables
    ``task_table`` and ``group_table``), written and read with ``sqlite3``. Thread-safe; one
    connection per process (a forked child opens its own), released by :meth:`close`."""

    def __init__(self, path: str | os.PathLike[str], *, task_table: str, group_table: str,
                 keep_days: int, busy_ms: int) -> None:
        self.path = Path(path)
        self.task_table, self.group_table = task_table, group_table
        self.expires = timedelta(days=keep_days)
        self.busy_ms = busy_ms
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._columns: set[str] | None = None  # the task table's, once it is known to exist

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._conn is None or self._pid != os.getpid():
                # a parent's connection is never used (nor closed) in a forked child
                self._conn = sqlite3.connect(self.path, isolation_level=None,
                                             check_same_thread=False)
                self._pid, self._columns = os.getpid(), None
                tune_connection(self._conn, self.busy_ms)
            yield self._conn

    def _task_columns(self, conn: sqlite3.Connection) -> set[str]:
        if self._columns is None:
            result_tables.ensure_tables(conn, self.task_table, self.group_table)
            self._columns = result_tables.columns_of(conn, self.task_table)
        return self._columns

    def store_result(self, task_id: str, result: Any, state: str, *, request: Any = None,
                     traceback: str | None = None) -> None:
        """Store ``result`` (the task's meta; an exception for ``FAILURE``) in state
        ``state``, as Celery's ``store_result`` does; a row already ``SUCCESS`` stays."""
        if state == FAILURE and isinstance(result, BaseException):
            result = exception_result(result)
        done = datetime.now(UTC) if state in READY_STATES else None
        values = {"status": state, "result": encode(result), "traceback": traceback,
                  "date_done": result_tables.date_text(done) if done else None,
                  **request_columns(request)}
        self.path.parent.mkdir(parents=True, exist_ok=True)  # SQLite makes the file only
        with self._connection() as conn:
            result_tables.store_state(conn, self.task_table, task_id, values,
                                      self._task_columns(conn), keep_if_none=("stamps",))

    def mark_as_failure(self, task_id: str, exc: BaseException, *,
                        request: Any = None) -> None:
        """Store ``exc`` as the task's failure."""
        self.store_result(task_id, exc, FAILURE, request=request)

    def cleanup(self) -> None:
        """Delete the rows finished more than ``keep_days`` ago (Celery's ``cleanup``)."""
        if not self.path.exists():
            return
        with self._connection() as conn:
            self._task_columns(conn)
            result_tables.delete_done_before(conn, (self.task_table, self.group_table),
                                             datetime.now(UTC) - self.expires)

    def rows(self, **filters: Any) -> list[ResultRow]:
        """The task table's rows matching ``filters``
        (:func:`pipeline.store.result_tables.select_rows`); none when nothing was ever
        recorded here (reading never makes the file)."""
        if not self.path.exists():
            return []
        with self._connection() as conn:
            try:
                return result_tables.select_rows(conn, self.task_table, **filters)
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return []
                raise

    def close(self) -> None:
        """Close this process's connection (it opens again when next used)."""
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None and self._pid == os.getpid():
                conn.close()
