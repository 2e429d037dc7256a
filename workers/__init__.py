"""memq's Celery side: ``celery -A workers worker -Q embed.local`` finds the app here.

The app (:mod:`workers.app`) is built when ``workers.app`` is first asked for, not when a
module of this package is imported: ``memq index`` with no broker runs
:mod:`workers.indexing` and never needs Celery's app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workers.app import app

__all__ = ["app"]


def __getattr__(name: str) -> Any:
    """``workers.app``, the Celery application, imported on first use (PEP 562). Also as
    ``workers.celery``, Celery's second guess: once the submodule :mod:`workers.app` has been
    imported, the package's ``app`` attribute is that module, and ``celery -A workers`` then
    looks for ``celery``."""
    if name in ("app", "celery"):
        from workers.app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
