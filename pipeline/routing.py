"""The fleet's queues and task names: the contract between whoever sends work and the workers.

Queues: ``embed.<provider>`` (sync embedding, any host), ``batch.<provider>`` (provider batch
jobs: upload, poll, download; any host), ``store`` (the single writer: results into SQLite) and
``control`` (index jobs, run by the host that owns the store). Producers send by task name
(:mod:`pipeline.fleet`); ``workers`` registers the tasks under the same names.
"""

from __future__ import annotations

STORE_QUEUE = "store"
CONTROL_QUEUE = "control"

EMBED_TASK = "memq.embed_chunks"
WRITE_TASK = "memq.write_vectors"
INDEX_TASK = "memq.index_memory"
REINDEX_STEP_TASK = "memq.reindex_step"
BATCH_SUBMIT_TASK = "memq.batch_submit"
BATCH_POLL_TASK = "memq.batch_poll"
BATCH_UPDATE_TASK = "memq.batch_update"


def embed_queue(provider: str) -> str:
    """The queue of ``provider``'s sync embedding jobs."""
    return f"embed.{provider}"


def batch_queue(provider: str) -> str:
    """The queue of ``provider``'s batch-file jobs."""
    return f"batch.{provider}"
