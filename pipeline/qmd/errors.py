"""Why the QMD backend could not answer (the kinds of :class:`~pipeline.errors.QmdUnavailable`,
which lives with every other error in :mod:`pipeline.errors`)."""

from __future__ import annotations

#: Why QMD could not answer: the executable cannot run, it exited non-zero, was killed by a
#: signal, timed out, printed too much, printed no JSON array, has no collections yet, or has
#: no vectors for a ``vsearch``. A remembered outage keeps the kind of the failure that began it.
KINDS = ("missing", "exit", "killed", "timeout", "output", "json", "collections", "no-vectors")


