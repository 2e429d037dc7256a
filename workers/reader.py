"""What a reader answers a read from any host with (:class:`Reader`), and the threads it
owns to answer it.

Imported with the first read a worker serves (:meth:`workers.runtime.WorkerRuntime.reader`):
:mod:`workers.reading`, which every worker imports at start, holds the task; this module holds
what answers it (the memory's search, the store's manifest, a shard's export: NumPy and
pydantic among them).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pipeline.errors import (
    AppendError,
    MemoryDisabled,
    MemoryPathError,
    MessageRefused,
    WorkspaceMissing,
)
from pipeline.fleet.shard_copy import export_step
from pipeline.memory import Memory
from pipeline.messages import QueryReply, QueryRequest
from workers.shard_side import FilesDigests, manifest

log = logging.getLogger(__name__)

#: The errors a reply carries by kind (the asking side raises the same error again).
_KINDS: tuple[tuple[type[Exception], str], ...] = (
    (MemoryPathError, "path"), (AppendError, "append"), (MemoryDisabled, "disabled"),
    (WorkspaceMissing, "workspace"))


class Reader:
    """What a reader answers the reads of a shard's memories with (:meth:`reply_to`), and what
    it owns to answer them: the store digests it keeps per store version
    (:class:`~workers.shard_side.FilesDigests`: a store read of every file's stats and a hash,
    ~12 ms for 10,000 files, computed again only after the store changed) and the threads that
    compute a search's digest while the search runs (on the search's path when done after
    it), shared by the reader's threads (a digest waits for a free one). The threads are
    started by the first search that asks for a digest, so a process that never serves one
    has none; :meth:`close` (the worker's stop: :func:`workers.reading.close_reader`) stops
    them and closes the digests' connections. A worker process has one,
    :meth:`WorkerRuntime.reader() <workers.runtime.WorkerRuntime.reader>`."""

    def __init__(self, digest_threads: int = 4) -> None:
        self.digest_threads = digest_threads
        self.digests = FilesDigests()
        self._digests: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def _digest_pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._digests is None:
                self._digests = ThreadPoolExecutor(max_workers=self.digest_threads,
                                                   thread_name_prefix="memq-digest")
            return self._digests

    def search_answer(self, memory: Memory, args: dict[str, Any]) -> dict[str, Any]:
        """The reply to a search: the hits, ``dirty`` when asked (``stale``) and the files
        are here, the store's files digest (``filesDigest``) when asked (``storeDigest``: the
        asking host has the files and compares it with theirs, which it computes while this
        search runs), and ``filesMatch`` when the asking host sent the digest of its files
        (``filesDigest``: a caller that computed it before asking). The digest is computed
        beside the search, never after it; both are done before this returns (the warm
        memory is held until then)."""
        digest: Future[str] | None = None
        if args.get("filesDigest") is not None or args.get("storeDigest"):
            digest = self._digest_pool().submit(self.digests.of, memory.local)
        try:
            results = memory.search(args["query"], max_results=args.get("maxResults"),
                                    min_score=args.get("minScore"),
                                    citations=args.get("citations"), corpus=args.get("corpus"),
                                    projects=args.get("projects"),
                                    sync=False)  # never write in a read: a sync is a job
            if args.get("stale") and memory.workspace.is_dir():  # files elsewhere: not known
                results.dirty = len(memory.stale_files())
            reply = results.to_dict()
            if digest is not None:
                if args.get("storeDigest"):
                    reply["filesDigest"] = digest.result()
                if args.get("filesDigest") is not None:
                    reply["filesMatch"] = digest.result() == args["filesDigest"]
            return reply
        finally:
            if digest is not None and not digest.done():  # the search failed: wait, then drop
                digest.cancel() or digest.exception()

    def answer(self, memory: Memory, request: QueryRequest) -> Any:
        """What ``memory`` (local to this host) answers to ``request``, in the JSON shape the
        asking host rebuilds its result from."""
        args = request.args
        if request.op == "search":
            return self.search_answer(memory, args)
        if request.op == "get":
            return memory.get(args["path"], args.get("from"), args.get("lines")).to_dict()
        if request.op == "status":
            return memory.status()
        if request.op == "stale":  # none known here when the files are not here
            return memory.stale_files() if memory.workspace.is_dir() else []
        if request.op == "manifest":
            return {path: list(row) for path, row in manifest(memory.local).items()}
        if request.op == "export":
            return export_step(memory.settings, dict(args))
        if request.op == "append":
            return memory.append(args["text"], args.get("target", "daily")).to_dict()
        if request.op == "jobs":
            if args.get("id"):
                job = memory.jobs.get(args["id"])
                return [job.to_dict()] if job is not None and job.memory == memory.name else []
            return [job.to_dict() for job in memory.recent_jobs(args.get("limit") or 20)]
        raise MessageRefused(f"query: unknown operation {request.op!r}")  # from_json checked

    def reply_to(self, memory: Memory, request: QueryRequest, node: str | None) -> QueryReply:
        """:meth:`answer` as a reply: a refusal a local call would raise travels as its kind."""
        try:
            return QueryReply(answer=self.answer(memory, request), node=node)
        except MessageRefused as exc:
            return QueryReply(error=str(exc), kind="refused", node=node)
        except Exception as exc:
            for error, kind in _KINDS:
                if isinstance(exc, error):
                    return QueryReply(error=str(exc), kind=kind, node=node)
            log.exception("query %s of memory %s failed", request.op, request.memory)
            return QueryReply(error=f"{type(exc).__name__}: {exc}", kind="failed", node=node)

    def close(self) -> None:
        """Stop the digest threads (a digest under way is finished first) and close the
        digests' store connections."""
        with self._lock:
            pool, self._digests = self._digests, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self.digests.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
