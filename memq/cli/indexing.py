"""``memq index`` and ``memq reindex``: index passes, here, on the writer host (``--remote``)
or for every memory of the configuration (``--all``)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from memq.cli.common import (
    Args,
    ProgressBar,
    command,
    emit,
    existing,
    memories_of_config,
    memory_options,
    progress_option,
    settings_of,
    warn,
)
from memq.cli.exits import CommandFailed, ExitCode

if TYPE_CHECKING:
    from pipeline.config import Settings
    from pipeline.fleet.job_log import JobRecord

no_wait_option = click.option("--no-wait", is_flag=True, help="return once jobs are enqueued")


@command("index", "index the workspace through the queues")
@memory_options
@no_wait_option
@click.option("--retry-failed", is_flag=True, help="queue failed chunks again")
@progress_option
@click.option("--allow-deletions", is_flag=True,
              help="let this pass remove every file or most files of the memory from its "
                   "index (refused otherwise: an empty or unmounted folder looks the same)")
@click.option("--files-here", is_flag=True,
              help="on the store's host: make this host's folder the memory's files "
                   "(its store was fed by a producer on another host)")
@click.option("--remote", is_flag=True,
              help="enqueue the pass for the writer host (queue control); print the job id")
@click.option("--all", "all", is_flag=True,
              help="every memory of the configuration (agents.list, memories, "
                   "memoriesDir), one after the other; with --remote, a job per memory")
def index(args: Args) -> int:
    """``memq index``: one pass over the memory's files here, and what the store holds after."""
    if args.remote and (args.allow_deletions or args.files_here):
        raise CommandFailed("--allow-deletions and --files-here act on the files of the host "
                            "that runs the pass: run `memq index` with them there, not --remote")
    if args.all:
        return _index_all(args)
    if args.remote:
        return _enqueue_index(args)
    from workers.indexing import run_index

    settings = existing(settings_of(args))
    progress = ProgressBar(args)
    run = run_index(settings, wait=not args.no_wait, retry_failed=args.retry_failed,
                    on_progress=progress, warn=warn, allow_deletions=args.allow_deletions,
                    files_here=args.files_here)
    progress.close()
    r = run.report
    held = _store_held(settings)
    data = {"mode": run.mode, "provider": run.provider, "model": run.model, "reason": run.reason,
            "files": r.files, "changed": r.changed, "deleted": r.deleted,
            "fileErrors": r.errors, "chunksFromCache": r.chunks_cached,
            "chunksQueued": r.chunks_queued, "jobs": r.jobs, "waited": run.waited,
            **run.outcome.to_dict(), "seconds": round(run.seconds, 3),
            "job": run.job_id, "batchJobs": r.batch_jobs, "batchResumed": run.batch_resumed,
            **_held_json(held)}
    lines = [f"indexed {r.files} files ({r.changed} changed, {r.deleted} deleted) in "
             f"{run.seconds:.1f}s",
             f"mode: {run.mode}" + (f" ({run.provider}/{run.model})" if run.provider else "")
             + (f": {run.reason}" if run.mode in ("keyword-only", "remote") else ""),
             f"chunks: {_chunks_line(run, held)}"]
    if r.batch_jobs:
        lines.append(f"batch: {r.batch_jobs} provider batch job(s) submitted "
                     "(`memq batch list`)")
    lines += [f"skipped {e}" for e in r.errors]
    if not run.waited and (r.jobs or r.batch_jobs):
        lines.append(f"job {run.job_id}: embedding continues in the fleet (`memq status`)")
    emit(args, data, "\n".join(lines))
    problem = run.outcome.problem() if run.waited else None
    if problem:
        print(f"memq: error: {problem}", file=sys.stderr)
        return ExitCode.NO_VECTOR
    return ExitCode.OK


def _store_held(settings: Settings) -> dict[str, int] | None:
    """What the memory's store holds after a pass (``chunks``, ``vectors``, ``pending``,
    ``failed``), from the store or its shard's reader; None when it cannot be read."""
    from pipeline.errors import MemqError
    from pipeline.memory import Memory

    try:
        with Memory(settings=settings, in_memory=False) as memory:
            status = memory.status()
    except (MemqError, OSError) as exc:
        warn(f"what the store holds cannot be read: {exc}")
        return None
    return {k: int(status.get(k) or 0) for k in ("chunks", "vectors", "pending", "failed")}


def _held_json(held: dict[str, int] | None) -> dict[str, int | None]:
    """``memq index --json``'s counts of what the store holds (None: unknown)."""
    return {"chunksInStore": held["chunks"] if held else None,
            "vectorsInStore": held["vectors"] if held else None}


def _chunks_line(run: Any, held: dict[str, int] | None = None) -> str:
    """What became of the pass's chunks, as counted in the store (``chunks: …``); a pass
    that changed nothing says what the store ``held`` holds."""
    r, written = run.report, run.outcome.written
    cached = f"{r.chunks_cached} from cache"
    if held is not None and not (r.changed or r.deleted or r.chunks_queued):
        if run.mode == "keyword-only":
            vectors = "no vectors (keyword-only index)"
        elif held["vectors"] >= held["chunks"]:
            vectors = "all embedded"
        else:
            vectors = (f"{held['vectors']} embedded, {held['pending']} pending, "
                       f"{held['failed']} failed")
        return f"{held['chunks']} in the store, {vectors}; nothing changed"
    if run.mode == "keyword-only":
        return "no vectors (keyword-only index)"
    if not run.waited:
        return f"{r.chunks_queued} queued for embedding (none written yet), {cached}"
    if written is None:  # followed on another host: its store says what is missing
        return f"{r.chunks_queued} sent to the shard's writer, {cached}"
    return f"{written} embedded of {r.chunks_queued}, {cached}"


def _index_all(args: Args) -> int:
    """``memq index --all``: every memory of the configuration, one after the other (with
    ``--remote``: one index job per memory, queued on its shard's ``control`` queue, so each
    shard's writer runs its memories' passes beside the others'). A memory that cannot be
    indexed (workspace gone, turned off, no broker, a broken store) is reported and the rest go
    on; the exit code is 1 when any failed, else 4 when any left chunks without a vector."""
    from pipeline.errors import MemqError

    if args.agent:
        raise CommandFailed("--all indexes every memory of the configuration; drop "
                            "--agent/--memory")
    results = []
    with _RemoteIndexer(args.retry_failed) as remote:
        for name, settings in memories_of_config(args):
            if isinstance(settings, str):
                results.append({"memory": name, "error": settings})
                continue
            try:
                done = remote.queue(settings) if args.remote else _index_one(args, settings)
                results.append({"memory": name, **done})
            except (MemqError, OSError) as exc:  # JobError is a MemqError
                results.append({"memory": name, "error": str(exc)})
    lines = [f"{r['memory']}: " + (f"failed: {r['error']}" if "error" in r else r["summary"])
             for r in results]
    failed = sum("error" in r for r in results)
    incomplete = sum("problem" in r for r in results)
    lines.append(f"{len(results) - failed} of {len(results)} memories "
                 + ("queued" if args.remote else "indexed")
                 + (f", {failed} failed" if failed else "")
                 + (f"; {incomplete} of {len(results)} memories left chunks without a vector"
                    if incomplete else ""))
    emit(args, {"memories": [{k: v for k, v in r.items() if k != "summary"}
                             for r in results]}, "\n".join(lines))
    return ExitCode.FAILED if failed else ExitCode.NO_VECTOR if incomplete else ExitCode.OK


def _index_one(args: Args, settings: Settings) -> dict[str, Any]:
    """One memory's index pass, here (``memq index``); ``problem`` when it left chunks
    without a vector."""
    from workers.indexing import run_index

    run = run_index(settings, wait=not args.no_wait, retry_failed=args.retry_failed,
                    warn=warn, allow_deletions=args.allow_deletions,
                    files_here=args.files_here)
    r = run.report
    held = _store_held(settings)
    problem = run.outcome.problem() if run.waited else None
    summary = (f"{r.files} files ({r.changed} changed, {r.deleted} deleted), "
               f"chunks: {_chunks_line(run, held)}, {run.seconds:.1f}s")
    return {"job": run.job_id, "files": r.files, "changed": r.changed, "deleted": r.deleted,
            "chunksQueued": r.chunks_queued, **run.outcome.to_dict(), **_held_json(held),
            **({"problem": problem} if problem else {}),
            "summary": summary + (f"; {problem}" if problem else "")}


class _RemoteIndexer:
    """Queues index jobs on the memories' shards, one broker connection per broker URL."""

    def __init__(self, retry_failed: bool) -> None:
        self.retry_failed = retry_failed
        self._fleets: dict[str, Any] = {}

    def queue(self, settings: Settings) -> dict[str, Any]:
        """Queue ``settings``' memory's index job on its shard's control queue."""
        from pipeline.config.redact import redact_url
        from pipeline.fleet.broker import NETWORK_ERRORS, FleetDispatcher
        from pipeline.messages import IndexRequest
        from pipeline.routing import control_queue
        from workers.jobs_api import EnqueueFailed

        if not settings.broker_url:
            raise EnqueueFailed("index --remote needs the fleet's broker: set MEMQ_BROKER_URL "
                                "(or brokerUrl)")
        fleet = self._fleets.get(settings.broker_url)
        if fleet is None:
            fleet = self._fleets[settings.broker_url] = FleetDispatcher(settings.broker_url)
        shard = settings.fleet.shard_of(settings.agent_id)
        try:
            job = fleet.index(IndexRequest(settings.agent_id, self.retry_failed, shard))
        except NETWORK_ERRORS as exc:
            raise EnqueueFailed(f"broker {redact_url(settings.broker_url)} did not take the "
                                f"job: {exc}") from exc
        return {"job": job, "queue": control_queue(shard),
                "summary": f"job {job} queued on '{control_queue(shard)}'"}

    def __enter__(self) -> _RemoteIndexer:
        return self

    def __exit__(self, *exc: object) -> None:
        for fleet in self._fleets.values():
            fleet.close()


def _enqueue_index(args: Args) -> int:
    """``memq index --remote``: queue a producer pass for the writer host; print the job id."""
    from pipeline.errors import memory_disabled
    from pipeline.fleet.broker import BROKER_ERRORS, queue_consumers
    from pipeline.routing import control_queue
    from workers.jobs_api import EnqueueFailed, enqueue_index

    settings = settings_of(args)
    if not settings.enabled:
        raise memory_disabled(settings.config_file)
    queue = control_queue(settings.fleet.shard_of(settings.agent_id))
    try:
        job_id = enqueue_index(settings, retry_failed=args.retry_failed)
    except EnqueueFailed as exc:
        raise CommandFailed(str(exc)) from exc
    try:
        consumers = queue_consumers(settings.broker_url)
    except BROKER_ERRORS:  # queued already; whether anyone listens is only a hint
        consumers = None
    if consumers is not None and not any(queue in q for q in consumers.values()):
        warn(f"no worker consumes '{queue}' yet: the job waits there until the "
             "shard's writer starts (memq worker --role writer)")
    elif (job := _taken(settings, job_id)) is not None and job.state == "failed":
        emit(args, {"job": job_id, "queue": queue, "waited": False, "state": job.state,
                    "error": job.error}, f"{job_id}\nfailed: {job.error}")
        raise CommandFailed(f"job {job_id} failed: {job.error}", ExitCode.FAILED)
    emit(args, {"job": job_id, "queue": queue, "waited": False},
         f"{job_id}\nqueued on '{queue}' for the writer host; follow it from any host with "
         f"`memq jobs --follow {job_id}`, or in Flower")
    return ExitCode.OK


#: How long ``memq index --remote`` waits for a listening writer to take the job (to learn
#: of a refusal) before it reports the job as queued.
TAKEN_WAIT_S = 10.0


def _taken(settings: Settings, job_id: str) -> JobRecord | None:
    """Job ``job_id`` once the writer took it (started it, or refused it: a memory its
    configuration does not give), read where ``memq jobs --follow`` reads it; None when it
    is still waiting after :data:`TAKEN_WAIT_S` (a busy writer) or cannot be read."""
    import time

    from pipeline.errors import MemqError
    from pipeline.memory import Memory
    from pipeline.polling import Poll

    deadline = time.monotonic() + TAKEN_WAIT_S
    poll = Poll()
    with Memory(settings=settings, in_memory=False) as memory:
        find = memory.job
        while time.monotonic() < deadline:
            try:
                job = find(job_id)
            except MemqError:  # the shard's reader refuses or is away: this host's log only
                find = memory.jobs.get
                continue
            if job is not None and job.state != "queued":
                return job
            poll.wait()
    return None


@command("reindex", "rebuild the index beside the live one, then swap it in")
@memory_options
@click.option("--no-wait", is_flag=True, help="return once the rebuild is queued")
def reindex(args: Args) -> int:
    """``memq reindex``: a new index built beside the live one, swapped in when complete."""
    from workers.indexing import run_index

    run = run_index(existing(settings_of(args)), wait=not args.no_wait, rebuild="memq reindex",
                    warn=warn)
    progress = run.rebuild.as_dict() if run.rebuild else None
    data = {"mode": run.mode, "provider": run.provider, "model": run.model,
            "reindex": progress, "waited": run.waited, "seconds": round(run.seconds, 3)}
    if run.waited:
        human = (f"reindexed: new index swapped in ({progress['chunks'] if progress else 0} "
                 f"chunks) in {run.seconds:.1f}s")
    else:
        human = ("reindex queued: a new index is being built beside the live one; "
                 "`memq status` shows its progress")
    emit(args, data, human)
    return ExitCode.OK
