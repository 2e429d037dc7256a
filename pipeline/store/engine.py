"""Open the SQLite store with FTS5 and, when it can be loaded, sqlite-vec.

Python's own ``sqlite3`` often cannot load extensions (pyenv and python.org builds), so the
driver falls back from the stdlib to ``pysqlite3`` (pysqlite3-binary) to ``sqlean``. If no
driver can load sqlite-vec, the store still works: vectors go to a plain table and are searched
in-process, and :class:`Database` says why in ``vector_error``.

FTS5 is probed on a process's first connection (``CREATE VIRTUAL TABLE temp.… USING fts5``;
it is a property of the SQLite library). A SQLite built without it still opens the store: it
is created without the keyword index, search is vector-only (OpenClaw: "fall back to pure
vector"), and ``fts_error`` says why. Setting
``MEMQ_SQLITE_WITHOUT_FTS5=1`` makes every connection refuse FTS5 tables (an SQLite
authorizer), as such a build would: an internal switch for tests of that path.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from pipeline.errors import StoreBusy, StoreError
from pipeline.store.tokens import index_text

BUSY_TIMEOUT_MS = 5000
_DRIVERS = ("sqlite3", "pysqlite3.dbapi2", "sqlean")


REBUILD_HINT = ("The store is derived from your Markdown files: move it aside and run "
                "`memq index` to rebuild it.")


@dataclass
class Database:
    """An open connection plus what it can do. ``vector_ok`` is False when sqlite-vec is absent."""

    conn: Any
    path: Path
    driver: str
    vector_ok: bool
    vector_error: str | None = None
    _module: ModuleType | None = field(default=None, repr=False)
    #: The library vectors were loaded from (``connect``'s ``want_vectors`` when it loaded).
    vector_library: bool | str = False
    #: Whether this SQLite has FTS5 (keyword search); when not, why.
    fts_ok: bool = True
    fts_error: str | None = None

    @functools.cached_property
    def key(self) -> str:
        """The store file's resolved path, which names the copies a process holds of it
        (:mod:`pipeline.store.snapshots`); resolved once, as the connection stays on the file
        it opened."""
        return str(self.path.resolve())

    @property
    def operational_error(self) -> type[Exception]:
        return self._module.OperationalError  # type: ignore[union-attr]

    @property
    def database_error(self) -> type[Exception]:
        return self._module.DatabaseError  # type: ignore[union-attr]

    def open_memory(self) -> Any:
        """A private in-memory connection of this store's SQLite library (scratch work that
        needs its FTS5, never the store)."""
        return self._module.connect(":memory:", isolation_level=None,  # type: ignore[union-attr]
                                    check_same_thread=False)

    def close(self) -> None:
        self.conn.close()


def sqlite_vec_library() -> str:
    """The ``sqlite_vec`` package's own library, as its ``loadable_path()`` names it, found
    without importing the package: its ``__init__`` imports ``numpy.typing`` (0.1-0.3 s),
    which a store opened by a keyword-only index pass has no use for. Raises
    ModuleNotFoundError, as the import would, when the package is not installed."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("No module named 'sqlite_vec'", name="sqlite_vec")
    return os.path.normpath(os.path.join(spec.submodule_search_locations[0], "vec0"))


def _load_vec(conn: Any, path: str | None = None) -> None:
    """Load sqlite-vec into ``conn``: from ``path`` when given, else the ``sqlite_vec``
    package's own library (:func:`sqlite_vec_library`)."""
    if path is None:
        path = sqlite_vec_library()
    conn.enable_load_extension(True)
    try:
        conn.load_extension(path)
    finally:
        conn.enable_load_extension(False)


def _load_configured_vec(conn: Any, path: str) -> str | None:
    """Load sqlite-vec from ``store.vector.extensionPath``; None when it loaded, else why not
    (the store then keeps its vectors in a plain table, searched in-process, as OpenClaw falls
    back to in-process cosine similarity when sqlite-vec is unavailable)."""
    try:
        if not hasattr(conn, "enable_load_extension"):
            raise RuntimeError("this SQLite driver cannot load extensions")
        _load_vec(conn, path)
        return None
    except Exception as exc:  # a missing file, a wrong architecture, not sqlite-vec
        return (f"sqlite-vec from store.vector.extensionPath {path} did not load ({exc}); "
                "vectors are searched in-process")


#: The internal switch that makes connections behave as a SQLite built without FTS5.
WITHOUT_FTS5_ENV = "MEMQ_SQLITE_WITHOUT_FTS5"
_SQLITE_CREATE_VTABLE, _SQLITE_DENY, _SQLITE_OK = 29, 1, 0


def _refuse_fts5(action: int, arg1: Any, arg2: Any, *_: Any) -> int:
    """An authorizer that refuses FTS5 virtual tables (``MEMQ_SQLITE_WITHOUT_FTS5``)."""
    if action == _SQLITE_CREATE_VTABLE and str(arg2).lower() == "fts5":
        return _SQLITE_DENY
    return _SQLITE_OK


#: What :func:`_probe_fts5` found, per (driver, ``MEMQ_SQLITE_WITHOUT_FTS5`` setting).
_fts_probes: dict[tuple[str, str], str | None] = {}


def _fts5_reason(conn: Any, driver: str) -> str | None:
    """Whether this process's SQLite has FTS5 (None) or why not, probed on the first
    connection only: it is a property of the library, and a process indexing many memories
    would otherwise pay a probe for every store and job log it opens."""
    key = (driver, os.environ.get(WITHOUT_FTS5_ENV, "").strip())
    if key not in _fts_probes:
        _fts_probes[key] = _probe_fts5(conn)
    return _fts_probes[key]


def _probe_fts5(conn: Any) -> str | None:
    """None when FTS5 tables can be created on ``conn``, else why not."""
    try:
        conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.memq_fts5_probe USING fts5(x)")
        conn.execute("DROP TABLE temp.memq_fts5_probe")
        return None
    except Exception as exc:  # "no such module: fts5" on a build without it
        return f"this SQLite has no FTS5 ({exc}): keyword search unavailable, vector-only"


def _probe_driver(name: str) -> tuple[ModuleType | None, str | None]:
    """Import a driver and check it can load sqlite-vec; return (module, why-not)."""
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        return None, f"{name}: not installed ({exc})"
    probe = module.connect(":memory:")
    try:
        if not hasattr(probe, "enable_load_extension"):
            return module, f"{name}: built without extension loading"
        _load_vec(probe)
        return module, None
    except Exception as exc:  # the extension itself failed to load
        return module, f"{name}: sqlite-vec did not load ({exc})"
    finally:
        probe.close()


_chosen: tuple[str, ModuleType, str | None] | None = None


def choose_driver() -> tuple[str, ModuleType, str | None]:
    """Pick the first driver that loads sqlite-vec, else the first that works at all.

    Returns (driver name, module, reason vectors are unavailable or None). Cached per process.
    """
    global _chosen
    if _chosen is None:
        reasons: list[str] = []
        fallback: tuple[str, ModuleType] | None = None
        for name in _DRIVERS:
            module, why = _probe_driver(name)
            if module is not None and why is None:
                _chosen = (name, module, None)
                break
            reasons.append(why or name)
            if module is not None and fallback is None:
                fallback = (name, module)
        else:
            if fallback is None:
                raise RuntimeError("no usable SQLite driver: " + "; ".join(reasons))
            _chosen = (*fallback, "sqlite-vec unavailable: " + "; ".join(reasons))
    return _chosen


def connect(path: Path | str, *, want_vectors: bool | str = True) -> Database:
    """Open (creating if needed) the store at ``path`` in WAL mode with a busy timeout.

    ``want_vectors`` is False for no sqlite-vec (``store.vector.enabled = false``), True for
    the ``sqlite_vec`` package's library, or the path of the library to load
    (``store.vector.extensionPath``; see :attr:`StoreSettings.want_vectors`). A library that
    does not load leaves ``vector_ok`` False, with the reason in ``vector_error``.
    """
    path = Path(path)
    name, module, vec_reason = choose_driver()
    try:
        if str(path) != ":memory:":
            path.parent.mkdir(parents=True, exist_ok=True)
        conn = module.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                              check_same_thread=False)
    except (OSError, module.OperationalError) as exc:
        raise StoreError(f"cannot open the store {path}: {_open_failure(path, exc)}") from exc
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    try:
        conn.execute("PRAGMA schema_version").fetchone()
    except module.DatabaseError as exc:
        conn.close()
        if is_busy(exc):
            raise StoreBusy(f"{path} is locked by another process ({exc})") from exc
        raise StoreError(f"{path} is not a usable SQLite store ({exc}). {REBUILD_HINT}") from exc
    # The FTS triggers index this function's output (see pipeline.store.schema).
    conn.create_function("memq_fts_text", 1, _fts_text, deterministic=True)
    if os.environ.get(WITHOUT_FTS5_ENV, "").strip() not in ("", "0"):
        conn.set_authorizer(_refuse_fts5)
    fts_reason = _fts5_reason(conn, name)
    vector_ok = False
    if not want_vectors:
        vec_reason = "vector search disabled by store.vector.enabled=false"
    elif isinstance(want_vectors, str):
        vec_reason = _load_configured_vec(conn, want_vectors)
        vector_ok = vec_reason is None
    elif vec_reason is None:
        _load_vec(conn)
        vector_ok = True
    # NORMAL before the switch: a new file's switch to WAL then skips a sync it does not need.
    conn.execute("PRAGMA synchronous=NORMAL")
    enable_wal(conn)
    conn.execute("PRAGMA foreign_keys=ON")
    return Database(conn, path, name, vector_ok, vec_reason, module,
                    want_vectors if vector_ok else False, fts_reason is None, fts_reason)


def _open_failure(path: Path, exc: Exception) -> str:
    """Why a store file could not be opened or created, in the user's terms."""
    folder = next((p for p in path.parents if p.exists()), path.parent)
    if not os.access(folder, os.W_OK | os.X_OK):
        return (f"permission denied: {folder} is not writable by this user (set store.path to "
                "a folder it may write)")
    return str(exc)


def _fts_text(text: Any) -> Any:
    return index_text(text) if isinstance(text, str) else text


def enable_wal(conn: Any, busy_ms: int = BUSY_TIMEOUT_MS) -> None:
    """Put the file in WAL (nothing to do when it is already). Switching takes a read lock and
    then a write lock, and SQLite refuses that upgrade at once, past its busy timeout, while
    another connection holds the write lock (a new file's first writer, or another process
    switching it too), so a busy switch is tried again until ``busy_ms`` have passed."""
    deadline = time.monotonic() + busy_ms / 1000
    cursor = conn.cursor()
    try:
        while True:
            try:
                if str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                    cursor.execute("PRAGMA journal_mode = WAL")
                return
            except Exception as exc:  # the driver's OperationalError, whichever driver
                if not is_busy(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)
    finally:
        cursor.close()


def tune_connection(conn: Any, busy_ms: int = BUSY_TIMEOUT_MS) -> None:
    """The settings every memq SQLite file gets, on a connection another library opened (the
    job log's, through SQLAlchemy): WAL, a busy timeout, fsync at checkpoints only."""
    cursor = conn.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
        cursor.execute("PRAGMA synchronous = NORMAL")
    finally:
        cursor.close()
    enable_wal(conn, busy_ms)


def is_busy(exc: BaseException) -> bool:
    """Is this SQLite error the lock being held by someone else (worth retrying)?"""
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def is_full(exc: BaseException) -> bool:
    """Is this SQLite error a full disk (SQLITE_FULL)?"""
    return "disk is full" in str(exc).lower() or "disk full" in str(exc).lower()


def as_store_error(exc: BaseException, path: Path) -> StoreError | None:
    """Turn a driver error into a :class:`StoreError` a user can act on, if it is one."""
    if is_busy(exc):
        return StoreBusy(f"{path} stayed locked by another process ({exc}); try again")
    if is_full(exc):
        return StoreBusy(f"the disk holding {path} is full ({exc}); free some space and run "
                         "`memq index` again: nothing is lost, the files are the truth")
    return None
