"""Celery's database result tables in a SQLite file, read and written with ``sqlite3``.

Celery's ``DatabaseBackend`` keeps task results in two tables (``TaskExtended`` and
``TaskSet`` of ``celery/backends/database/models.py``); memq's job log
(:mod:`pipeline.fleet.job_log`) names them ``memq_jobs`` and ``memq_job_groups``. This module
holds the same tables with the standard library only: the tables made exactly as SQLAlchemy
makes them for Celery (:data:`TASK_TABLE`, :data:`GROUP_TABLE`: the same text in
``sqlite_master``), a row stored as Celery's ``_store_result`` stores it (inserted, or
updated unless it is already ``SUCCESS``), old rows deleted as Celery's ``cleanup`` deletes
them, and rows read as the job log reads them. A date is kept as SQLAlchemy's SQLite
``DATETIME`` keeps it: UTC text ``YYYY-MM-DD HH:MM:SS.ffffff``.

What goes into each column (the encoded result, the request's fields) is the job log's
business (:mod:`pipeline.fleet.sqlite_results`); this module only moves rows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

#: ``CREATE TABLE`` of Celery's ``TaskExtended`` as SQLAlchemy emits it on SQLite ({table}).
TASK_TABLE = (
    "CREATE TABLE IF NOT EXISTS {table} (\n\tid INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, "
    "\n\ttask_id VARCHAR(155), \n\tstatus VARCHAR(50), \n\tresult BLOB, \n\tdate_done DATETIME, "
    "\n\ttraceback TEXT, \n\tchildren BLOB, \n\tname VARCHAR(155), \n\targs BLOB, "
    "\n\tkwargs BLOB, \n\tworker VARCHAR(155), \n\tretries INTEGER, \n\tqueue VARCHAR(155), "
    "\n\tstamps BLOB, \n\tUNIQUE (task_id)\n)")
#: Its index on ``date_done`` (named after Celery's default table, as SQLAlchemy names it).
TASK_INDEX = "CREATE INDEX IF NOT EXISTS ix_celery_taskmeta_date_done ON {table} (date_done)"
#: ``CREATE TABLE`` of Celery's ``TaskSet`` (groups; memq records none, Celery makes it).
GROUP_TABLE = (
    "CREATE TABLE IF NOT EXISTS {table} (\n\tid INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, "
    "\n\ttaskset_id VARCHAR(155), \n\tresult BLOB, \n\tdate_done DATETIME, "
    "\n\tUNIQUE (taskset_id)\n)")
GROUP_INDEX = ("CREATE INDEX IF NOT EXISTS ix_celery_tasksetmeta_date_done "
               "ON {table} (date_done)")
#: The columns a row's state sets (every one but ``id`` and ``task_id``), in table order.
STATE_COLUMNS = ("status", "result", "date_done", "traceback", "children", "name", "args",
                 "kwargs", "worker", "retries", "queue", "stamps")
#: The columns the job log reads.
READ_COLUMNS = ("id", "task_id", "status", "result", "date_done", "traceback", "name",
                "worker", "queue")
#: SQLAlchemy's ``DATETIME`` text on SQLite.
DATE_FORMAT = "%Y-%m-%d %H:%M:%S.%f"
SUCCESS = "SUCCESS"


@dataclass(frozen=True)
class ResultRow:
    """One row of the task table, as the job log reads it (``date_done`` naive UTC)."""

    id: int
    task_id: str
    status: str | None
    result: bytes | None
    date_done: datetime | None
    traceback: str | None
    name: str | None
    worker: str | None
    queue: str | None


def _quoted(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise ValueError(f"not a table name: {name!r}")
    return name


def date_text(when: datetime) -> str:
    """``when`` as SQLAlchemy's SQLite ``DATETIME`` stores it (its zone dropped: give UTC)."""
    return when.strftime(DATE_FORMAT)


def parse_date(text: Any) -> datetime | None:
    """A stored ``DATETIME`` back as a naive datetime (None stays None)."""
    if text is None:
        return None
    return datetime.fromisoformat(str(text))


def ensure_tables(conn: sqlite3.Connection, task_table: str, group_table: str) -> None:
    """Make Celery's two result tables and their indexes unless they exist (in a transaction
    of its own: call it outside one)."""
    task, group = _quoted(task_table), _quoted(group_table)
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in (TASK_TABLE.format(table=task), TASK_INDEX.format(table=task),
                          GROUP_TABLE.format(table=group), GROUP_INDEX.format(table=group)):
            conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def columns_of(conn: sqlite3.Connection, table: str) -> set[str]:
    """The columns ``table`` has (an older Celery's has no ``children`` nor ``stamps``)."""
    return {row[1] for row in conn.execute(f"PRAGMA table_info({_quoted(table)})")}


def store_state(conn: sqlite3.Connection, table: str, task_id: str,
                values: Mapping[str, Any], columns: Iterable[str],
                *, keep_if_none: Iterable[str] = ()) -> bool:
    """Celery's ``_store_result`` of one state: insert the task's row, or update it unless it
    is ``SUCCESS`` already (a later write after a success is ignored, as Celery ignores it).
    ``values`` names :data:`STATE_COLUMNS`; only those in ``columns`` (the table's) are
    written; an update leaves a column of ``keep_if_none`` as it is when its value is None.
    Whether the state was written."""
    table = _quoted(table)
    names = [c for c in STATE_COLUMNS if c in set(columns)]
    conn.execute("BEGIN IMMEDIATE")
    try:
        found = conn.execute(f"SELECT status FROM {table} WHERE task_id = ?",
                             (task_id,)).fetchone()
        if found is None:
            marks = ", ".join("?" for _ in names)
            conn.execute(f"INSERT INTO {table} (task_id, {', '.join(names)}) "
                         f"VALUES (?, {marks})", (task_id, *(values.get(c) for c in names)))
        elif found[0] == SUCCESS:
            conn.execute("COMMIT")
            return False
        else:
            kept = set(keep_if_none)
            names = [c for c in names if c not in kept or values.get(c) is not None]
            assignments = ", ".join(f"{c} = ?" for c in names)
            conn.execute(f"UPDATE {table} SET {assignments} WHERE task_id = ?",
                         (*(values.get(c) for c in names), task_id))
        conn.execute("COMMIT")
        return True
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def delete_done_before(conn: sqlite3.Connection, tables: Iterable[str],
                       before: datetime) -> None:
    """Celery's ``cleanup``: delete the rows of ``tables`` whose ``date_done`` is before
    ``before`` (UTC)."""
    cut = date_text(before)
    conn.execute("BEGIN IMMEDIATE")
    try:
        for table in tables:
            conn.execute(f"DELETE FROM {_quoted(table)} WHERE date_done < ?", (cut,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _like_prefix(prefix: str) -> str:
    """``prefix`` as a ``LIKE … ESCAPE '/'`` pattern (SQLAlchemy's ``startswith`` with
    ``autoescape``, so the same rows match)."""
    escaped = prefix.replace("/", "//").replace("%", "/%").replace("_", "/_")
    return f"{escaped}%"


def _blob(value: Any) -> bytes | None:
    return value.encode() if isinstance(value, str) else (None if value is None else bytes(value))


def select_rows(conn: sqlite3.Connection, table: str, *, task_id: str | None = None,
                prefix: str | None = None, statuses: Iterable[str] | None = None,
                queue: str | None = None, before_id: int | None = None,
                limit: int | None = None, newest_first: bool = False) -> list[ResultRow]:
    """The rows of ``table`` matching every filter given: ``task_id``, a ``task_id``
    ``prefix``, a status of ``statuses``, ``queue``, an ``id`` below ``before_id``; newest
    first (by ``id``) with ``newest_first``, at most ``limit``."""
    where: list[str] = []
    params: list[Any] = []
    if task_id is not None:
        where.append("task_id = ?")
        params.append(task_id)
    if prefix is not None:
        where.append("task_id LIKE ? ESCAPE '/'")
        params.append(_like_prefix(prefix))
    if statuses is not None:
        wanted = list(statuses)
        where.append(f"status IN ({', '.join('?' for _ in wanted)})")
        params += wanted
    if queue is not None:
        where.append("queue = ?")
        params.append(queue)
    if before_id is not None:
        where.append("id < ?")
        params.append(before_id)
    sql = f"SELECT {', '.join(READ_COLUMNS)} FROM {_quoted(table)}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    if newest_first:
        sql += " ORDER BY id DESC"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(int(limit))
    rows = conn.execute(sql, params).fetchall()
    return [ResultRow(id=r[0], task_id=r[1], status=r[2],
                      result=_blob(r[3]),
                      date_done=parse_date(r[4]), traceback=r[5], name=r[6], worker=r[7],
                      queue=r[8]) for r in rows]
