"""A Celery app with one task, for a real ``celery worker`` that tests/test_broker_fixes.py
stops (SIGSTOP) while its request for work is on the wire and kills (SIGKILL) once the broker
has answered it.

Environment: ``POP_KILL_BROKER`` (the broker URL), ``POP_KILL_NOTES`` (the file the task
appends to), ``POP_KILL_HARDEN=1`` to apply memq's repairs to kombu first (as every memq
process does, through pipeline.fleet.broker), ``POP_KILL_VISIBILITY`` the visibility timeout
in seconds (2 unless set).
"""

from __future__ import annotations

import os
import time

from celery import Celery

if os.environ.get("POP_KILL_HARDEN") == "1":
    import pipeline.fleet.broker  # noqa: F401 - applies pipeline.fleet.kombu_repairs

QUEUE = "work"
VISIBILITY_S = int(os.environ.get("POP_KILL_VISIBILITY") or 2)

app = Celery("pop-kill", broker=os.environ["POP_KILL_BROKER"], set_as_current=True)
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_default_queue=QUEUE,
    broker_transport_options={"visibility_timeout": VISIBILITY_S,
                              "unacked_restore_interval": 1, "unacked_restore_throttle": 1},
    worker_hijack_root_logger=False,
)


@app.task(name="note", bind=True)
def note(self, text: str, seconds: float = 0.0) -> None:
    """Append ``text`` and whether this delivery was a redelivery to the notes file, after
    ``seconds`` of work."""
    redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
    time.sleep(seconds)
    with open(os.environ["POP_KILL_NOTES"], "a") as notes:
        notes.write(f"{text} redelivered={redelivered}\n")
