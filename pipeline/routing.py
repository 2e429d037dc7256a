"""The fleet's queues and task names: the contract between whoever sends work and the workers.

Queues: ``embed.<provider>`` (sync embedding, any host, shared by every memory),
``batch.<provider>`` (provider batch jobs: upload, poll, download; any host), and per writer
shard ``store.<shard>`` (the shard's single writer: results into SQLite) and
``control.<shard>`` (index jobs and QMD update jobs, run by the host that owns the shard's
stores), and ``query.<shard>`` (searches, reads and status of the shard's memories, answered by
its readers on the host that holds the stores, for any host that asks). A memory maps
to one shard (:func:`shard_of`). Producers send by task name (:mod:`pipeline.fleet.broker`);
``workers`` registers the tasks under the same names.

Work travels in two lanes: :data:`INTERACTIVE` (a watcher event, an append, a search's sync)
goes ahead of :data:`BULK` (a full index, a rebuild, a backfill) on the same queue, as Redis
message priorities (kombu keeps one list per priority and always pops the most urgent first).
"""

from __future__ import annotations

import hashlib
import uuid
from enum import IntEnum
from typing import Any

STORE_PREFIX = "store"
CONTROL_PREFIX = "control"
QUERY_PREFIX = "query"
SHARD_PREFIXES = (STORE_PREFIX, CONTROL_PREFIX, QUERY_PREFIX)

EMBED_TASK = "memq.embed_chunks"
WRITE_TASK = "memq.write_vectors"
INDEX_TASK = "memq.index_memory"
REINDEX_STEP_TASK = "memq.reindex_step"
BATCH_SUBMIT_TASK = "memq.batch_submit"
BATCH_POLL_TASK = "memq.batch_poll"
BATCH_UPDATE_TASK = "memq.batch_update"
QMD_JOB_TASK = "memq.qmd_update"
QUERY_TASK = "memq.query"
APPLY_TASK = "memq.apply_changes"


def embed_queue(provider: str) -> str:
    """The queue of ``provider``'s sync embedding jobs."""
    return f"embed.{provider}"


def batch_queue(provider: str) -> str:
    """The queue of ``provider``'s batch-file jobs."""
    return f"batch.{provider}"


def store_queue(shard: int) -> str:
    """The queue of shard ``shard``'s single writer."""
    return f"{STORE_PREFIX}.{shard}"


def control_queue(shard: int) -> str:
    """The queue of shard ``shard``'s index jobs (run by the host that owns its stores)."""
    return f"{CONTROL_PREFIX}.{shard}"


def query_queue(shard: int) -> str:
    """The queue of shard ``shard``'s readers (searches, reads, status from any host)."""
    return f"{QUERY_PREFIX}.{shard}"


def shard_of_queue(queue: str) -> int | None:
    """The shard a ``store.<n>``/``control.<n>``/``query.<n>`` queue belongs to (None for
    other queues)."""
    prefix, _, number = queue.partition(".")
    if prefix in SHARD_PREFIXES and number.isdigit():
        return int(number)
    return None


def shard_of(memory: str, shards: int) -> int:
    """The shard of ``memory`` among ``shards``: rendezvous (highest random weight) hashing.

    Stable across processes and restarts (no per-process hash seed), and adding a shard moves
    only the memories that now map to the new one (each memory keeps its shard unless the new
    shard outbids it).
    """
    if shards <= 1:
        return 0

    def weight(shard: int) -> bytes:
        return hashlib.blake2b(f"{memory}\0{shard}".encode(), digest_size=8).digest()

    return max(range(shards), key=weight)


class Lane(IntEnum):
    """How urgent a message is: its Redis priority (kombu pops priority 0 first)."""

    INTERACTIVE = 0
    BULK = 9


def new_job_id(memory: str) -> str:
    """A fresh job id of ``memory``: ``<memory>:<32 hex digits>``. The memory is part of the
    id, so any host knows whose job it is, and one memory's jobs are one range of ids."""
    return f"{memory}:{uuid.uuid4().hex}"


def memory_of_job(job_id: str) -> str | None:
    """The memory a job id of :func:`new_job_id` names (None for another kind of id)."""
    memory, sep, rest = job_id.rpartition(":")
    return memory if sep and memory and len(rest) == 32 else None


def describe(message: dict[str, Any]) -> str:
    """A message in one short line, for Flower's and the worker log's args (Celery's default,
    a clipped repr of the whole message, costs more than the send and shows chunk text and
    vectors): the memory, job, part and reason it names, and how many items each of its lists
    holds."""
    parts = [f"{key}={message[key]}" for key in ("memory", "job", "part", "reason", "op")
             if key in message]
    parts += [f"{key}={len(value)}" for key, value in message.items()
              if isinstance(value, list)]
    return "[" + " ".join(parts) + "]"
