"""A reader whose answers go to the database result backend instead of ``rpc://``.

Only for ``bench/remote_reads.py``, which compares the two reply paths:
``celery -A bench.apps.db_reply_reader worker -Q query.0 -P threads``.
"""

from __future__ import annotations

from workers.app import app
from workers.reading import answer_query

answer_query.backend = app.backend  # the job log's database: the caller polls it

__all__ = ["app"]
