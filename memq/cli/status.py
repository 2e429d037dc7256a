"""``memq status``, ``memq jobs``, ``memq memories`` and ``memq batch``: what is indexed,
pending and running, and where."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from memq.cli.common import (
    Args,
    Choice,
    ProgressBar,
    command,
    emit,
    memory_options,
    progress_option,
    settings_of,
    size,
    timeout_option,
    warn,
    with_workspace,
)
from memq.cli.exits import CommandFailed, ExitCode

if TYPE_CHECKING:
    from pipeline.batch.api import RemoteBatch

limit_option = click.option("--limit", type=int, default=20)


def _fleet_lines(fleet: dict[str, Any]) -> list[str]:
    if not fleet["reachable"]:
        return [f"fleet:     unknown ({fleet['error']})"]
    queues = ", ".join(f"{name} {depth}" for name, depth in fleet["queues"].items())
    if fleet["nodes"] is None:
        workers = f"unknown ({fleet['error']})"
    else:
        nodes = "; ".join(f"{n} [{', '.join(q)}]" for n, q in sorted(fleet["nodes"].items()))
        workers = f"{fleet['workers']}" + (f" ({nodes})" if nodes else "")
    return [f"broker:    {fleet['url']}",
            f"queues:    {queues} (waiting); {fleet['unacked']} in flight",
            f"workers:   {workers}"]


def _job_line(job: dict[str, Any]) -> str:
    began = job["startedAt"] or job["finishedAt"]
    when = datetime.fromtimestamp(began).isoformat(timespec="seconds") if began else "?"
    took = (f" in {job['finishedAt'] - job['startedAt']:.1f}s"
            if job["finishedAt"] and job["startedAt"] else "")
    what = (f": {job['changed']} files changed, {job['deleted'] or 0} deleted, "
            f"{job['chunksQueued']} chunks queued, {job['chunksFromCache']} from cache"
            if job["state"] == "done" else "")
    error = f": {job['error']}" if job["error"] else ""
    return f"{job['id']}  {job['kind'] or '-':<6} {job['state']:<7} {when}{took}{what}{error}"


def _batch_job_line(job: dict[str, Any]) -> str:
    when = datetime.fromtimestamp(job["createdAt"]).isoformat(timespec="seconds")
    state = job["state"] + (f" ({job['rawState']})" if job["rawState"] else "")
    done = (f", {job['embedded']} embedded, {job['toSync']} to sync"
            if job["finishedAt"] else "")
    error = f": {job['lastError']}" if job["lastError"] else ""
    return (f"{job['id']}  {job['provider']:<7} {state:<24} {when} {job['chunks']} chunks"
            f"{done} {job['remoteId'] or ''}{error}")


#: ``memq batch cancel --json``'s camelCase keys for :meth:`RemoteBatch.to_dict`'s stored names.
_CANCEL_KEYS = {"remote_id": "remoteId", "raw_state": "rawState", "input_file": "inputFile",
                "output_file": "outputFile", "error_file": "errorFile"}


def _cancel_json(remote: RemoteBatch) -> dict[str, Any]:
    """A cancelled job's remote record with the camelCase keys of memq's JSON (``docs/json.md``)."""
    return {_CANCEL_KEYS.get(key, key): value for key, value in remote.to_dict().items()}


def _batch_lines(batch: dict[str, Any]) -> list[str]:
    lines = []
    for provider, p in sorted(batch["providers"].items()):
        if p["disabled"]:
            lines.append(f"batch:     {provider} DISABLED ({p['reason']}); re-enable with "
                         f"`memq batch enable {provider}`")
        elif p["failures"]:
            lines.append(f"batch:     {provider} on, {p['failures']} failure point(s) of 2")
    if batch["live"] or batch["jobs"]:
        resumed = batch.get("resumed")
        lines.append(f"batch:     {batch['live']} job(s) running"
                     + (f", polling of {resumed} resumed" if resumed else ""))
        lines += [f"  {_batch_job_line(job)}" for job in batch["jobs"]]
    return lines


def _qmd_lines(status: dict[str, Any]) -> list[str]:
    """The QMD backend's part of ``memq status`` (nothing for the builtin backend)."""
    q = status.get("qmd")
    if status.get("backend") != "qmd" or q is None:
        return []
    when = (datetime.fromtimestamp(q["lastUpdateAt"]).isoformat(timespec="seconds")
            if q["lastUpdateAt"] else "never")
    health = "available" if q["available"] else (
        f"DOWN ({q['down']['kind']}: {q['down']['reason']}); searches answer from memq's index")
    collections = ", ".join(f"{c['name']} {c['documents']}" for c in q["collections"])
    return [f"backend:   qmd ({q['command']} {q['searchMode']}), {health}",
            f"qmd:       {q['documents']} documents ({collections}); last update {when}"]


def _mode_detail(s: dict[str, Any]) -> str:
    """What follows the mode: the provider, model, dimensions (and the local model's window),
    or why the index is keyword-only."""
    if not s["provider"]:
        return f": {s['reason']}"
    window = f", windows of {s['windowTokens']} tokens" if s.get("windowTokens") else ""
    return f" ({s['provider']}/{s['model']}, {s['dims']} dims{window})"


@command("status", "what is indexed, pending and why; queues, workers, recent jobs")
@memory_options
@timeout_option
@click.option("--fleet", is_flag=True,
              help="every memory of the config, the writer of each shard, queue depths "
                   "per lane, pending chunks per memory")
def status(args: Args) -> int:
    """``memq status``: the memory's index, its fleet and its batch jobs (``--fleet``: every
    memory's)."""
    from workers.monitor import fleet_status, resume_batches

    settings = with_workspace(settings_of(args))  # a disabled memory still has a status
    if args.fleet:
        from workers.fleet_view import fleet_lines, fleet_view

        view = fleet_view(settings, timeout=args.timeout)
        emit(args, view, "\n".join(fleet_lines(view)))
        if view["problems"]:  # blind somewhere: say the first thing, in one line
            more = len(view["problems"]) - 1
            warn(f"the fleet view is incomplete: {view['problems'][0]}"
                 + (f" (and {more} more)" if more else ""))
            return ExitCode.UNREACHABLE
        return ExitCode.OK
    s = fleet_status(settings, timeout=args.timeout)
    if s["fleet"]["reachable"] and s["batch"]["live"]:
        # Status is one of the places that notices a batch job whose polling died.
        s["batch"]["resumed"] = resume_batches(settings)
    if not s["indexed"]:
        emit(args, s, "\n".join([f"workspace {s['workspace']}: {s['reason']}",
                                  f"store: {s['store']}", *_qmd_lines(s),
                                  *_fleet_lines(s["fleet"])]))
        return ExitCode.OK
    if not s["enabled"]:  # indexed before it was turned off
        warn("memory is disabled (enabled = false): search and indexing are off; the index "
              "below is as it was left")
    when = (datetime.fromtimestamp(s["lastIndexAt"]).isoformat(timespec="seconds")
            if s["lastIndexAt"] else "never")
    lines = [
        f"workspace: {s['workspace']}",
        f"store:     {s['store']} (sqlite {s['sqliteDriver']}, vectors via "
        f"{s['vectorBackend']})",
        f"mode:      {s['mode']}{_mode_detail(s)}",
        f"files:     {s['files']} indexed, {s['filesWithErrors']} skipped",
        f"chunks:    {s['chunks']} ({s['vectors']} with vectors, {s['pending']} pending, "
        f"{s['failed']} failed)",
        f"last index: {when}",
    ]
    if s["reindex"]:
        r = s["reindex"]
        lines.append(f"reindex:   building ({r['reason']}): {r['ready']}/{r['chunks']} chunks "
                     f"with vectors, {r['pending']} pending; searches use the live index")
    if s["watch"]:
        w = s["watch"]
        lines.append(f"watch:     {'file events' if w['mode'] == 'events' else 'polling'}"
                     + (f" ({w['reason']})" if w.get("reason") else ""))
    if s["vectorBackendReason"]:
        lines.append(f"note: {s['vectorBackendReason']}")
    if s.get("keywordSearch") == "unavailable":
        lines.append(f"keyword search: unavailable ({s['keywordSearchReason']})")
    lines += [f"skipped {e['path']}: {e['error']}" for e in s["fileErrors"]]
    lines += [f"{e['state']} chunks ({e['chunks']}): {e['error']}" for e in s["chunkErrors"]]
    lines += _qmd_lines(s)
    lines += _fleet_lines(s["fleet"])
    lines += _batch_lines(s["batch"])
    for provider, p in s["pendingByProvider"].items():
        lines.append(f"pending:   {provider}: {p['chunks']} chunks, "
                     f"{'unknown' if p['queuedJobs'] is None else p['queuedJobs']} jobs queued")
    if s["jobs"]:
        lines.append("recent jobs:")
        lines += [f"  {_job_line(job)}" for job in s["jobs"]]
    if s.get("jobsError"):
        lines.append(f"recent jobs: unknown ({s['jobsError']})")
    if s.get("servedBy"):
        lines.append(f"served by: {s['servedBy']} (shard {s['shard']}; the store is on that "
                     "host)")
    emit(args, s, "\n".join(lines))
    return ExitCode.OK


@command("memories", "every memory of the config: workspace, store, size, state, last "
                     "index; orphaned stores")
@memory_options
@click.option("--prune", is_flag=True,
              help="delete the stores memq made whose workspace is gone")
def memories(args: Args) -> int:
    """``memq memories``: every memory of the configuration, and stores nothing owns."""
    from pipeline.catalog import MemoryCatalog
    from pipeline.errors import ShardUnreachable

    catalog = MemoryCatalog(config_file=args.config, workspace=args.workspace)
    names = [catalog.settings(args.agent).agent_id] if args.agent else catalog.names()
    if args.prune:
        try:
            pruned = catalog.prune()
        except ShardUnreachable as exc:
            raise ShardUnreachable(f"memq memories --prune refused, nothing was removed: "
                                   f"whether a live writer or reader serves a store cannot "
                                   f"be known ({exc})") from None
    else:
        pruned = []
    infos = catalog.describe(names)
    try:
        orphans: list[Any] | None = catalog.orphans()
    except ShardUnreachable:
        orphans = None  # cannot be told without the fleet; fleetErrors says why
    data = {"config": str(catalog.config_file) if catalog.config_file else None,
            "default": catalog.default, "memories": [i.to_dict() for i in infos],
            "orphanedStores": None if orphans is None else [o.to_dict() for o in orphans],
            "pruned": [o.to_dict() for o in pruned], "fleetErrors": catalog.fleet_errors}
    lines = []
    for i in infos:
        when = (datetime.fromtimestamp(i.last_index_at).isoformat(timespec="seconds")
                if i.last_index_at else "never")
        stored = size(i.size) if i.size is not None else "-"
        lines.append(f"{'*' if i.default else ' '} {i.name:<20} {i.state:<12} {when:<19} "
                     f"{stored:>9}  {i.workspace}")
        lines.append(f"  {'':<20} {_store_where(i)}"
                     + (f" (owned by {i.owner['memory']}, {i.owner['workspace']})"
                        if i.state == "foreign" and i.owner else ""))
    lines += [f"removed {o.store} ({size(o.size)}): memory {o.memory}, workspace "
              f"{o.workspace} is gone" for o in pruned]
    if orphans:
        lines.append("orphaned stores (their workspace is gone and nothing serves them; "
                     "`memq memories --prune` removes them):")
        lines += [f"  {o.store} ({size(o.size)}): memory {o.memory}, workspace {o.workspace}"
                  for o in orphans]
    elif args.prune and not pruned:
        lines.append("no orphaned stores to remove")
    for error in catalog.fleet_errors:
        warn(f"the fleet cannot be asked, this host's view only: {error}")
    emit(args, data, "\n".join(lines))
    return ExitCode.OK


def _store_where(info: Any) -> str:
    """Where a memory's store is, and which node serves it (``memq memories``)."""
    shard = f"shard {info.shard}, " if info.shard is not None else ""
    served = f"served by {info.served_by}" if info.served_by else "served by no live worker"
    if not info.here:
        return f"store: on another host ({shard}{served})"
    if info.shard is None:
        return f"store: {info.store}"
    return f"store: {info.store} ({shard}{served})"


def _follow_job(args: Args) -> int:
    """``memq jobs --follow ID``: the job's memory is named by its id (``<memory>:<hex>``)."""
    from pipeline.memory import Memory
    from pipeline.routing import memory_of_job

    named = memory_of_job(args.follow)
    settings = settings_of(args, agent=named)
    progress = ProgressBar(args)
    try:
        with Memory(settings=settings, in_memory=False) as memory:
            job = memory.follow_job(args.follow, on_progress=progress, warn=warn).to_dict()
    finally:
        progress.close()
    emit(args, job, _job_line(job))
    return ExitCode.OK if job["state"] == "done" else ExitCode.FAILED


@command("jobs", "recent index jobs and their outcome")
@memory_options
@limit_option
@click.option("--follow", metavar="JOB_ID",
              help="wait (on the store host) until the job ran and its vectors are written")
@progress_option
@timeout_option
def jobs(args: Args) -> int:
    """``memq jobs``: the memory's recent jobs and its control queue (``--follow``: one job)."""
    from pipeline.memory import Memory
    from pipeline.routing import control_queue, memory_of_job

    if args.follow:
        return _follow_job(args)
    settings = settings_of(args)
    with Memory(settings=settings, in_memory=False) as memory:
        recent = [job.to_dict() for job in memory.recent_jobs(args.limit)]
    queued = waiting = None
    queue = control_queue(settings.fleet.shard_of(settings.agent_id))
    if settings.broker_url:
        from workers.monitor import broker_status

        fleet = broker_status(settings.broker_url, timeout=args.timeout,
                              shards=settings.fleet.shards)
        if fleet["reachable"]:
            queued = fleet["queues"][queue]
            if fleet["waitingJobs"] is not None:  # Redis only: AMQP cannot peek
                # only this memory's: another memory's jobs are not this memory's business
                waiting = [w for w in fleet["waitingJobs"]
                           if memory_of_job(w["id"]) == settings.agent_id]
    data = {"jobs": recent, "queue": queue, "queued": queued, "waiting": waiting}
    lines = [_job_line(job) for job in recent] or [
        f"no jobs of memory {settings.agent_id} in the job log yet"]
    lines.append(f"waiting on '{queue}': {'unknown' if queued is None else queued}")
    lines += [f"  {w['id']}  {w['task']}" for w in waiting or []]
    emit(args, data, "\n".join(lines))
    return ExitCode.OK


@command("batch", "provider batch jobs (remote.batch)",
         details="ACTION: list jobs; cancel JOB_ID; enable PROVIDER (after the policy disabled "
                 "it). TARGET: job id (cancel) or provider (enable).")
@memory_options
@click.argument("action", type=Choice(["list", "cancel", "enable"]))
@click.argument("target", required=False)
@limit_option
def batch(args: Args) -> int:
    """``memq batch list|cancel JOB_ID|enable PROVIDER``."""
    from pipeline.batch import admin

    if args.action != "list" and not args.target:
        what = "JOB_ID" if args.action == "cancel" else "PROVIDER"
        raise CommandFailed(f"memq batch {args.action} needs {what}")
    settings = settings_of(args)
    try:
        if args.action == "list":
            jobs = admin.list_jobs(settings, args.limit)
            emit(args, {"jobs": jobs}, "\n".join(_batch_job_line(j) for j in jobs)
                  or "no batch jobs in this store")
        elif args.action == "cancel":
            remote = admin.cancel_job(settings, args.target)
            emit(args, _cancel_json(remote), f"cancel requested: {remote.remote_id} is "
                  f"{remote.raw_state}; finished lines are kept, the rest goes the sync path")
        else:
            policy = admin.enable_provider(settings, args.target)
            emit(args, policy, f"batch mode for {args.target} is on again")
    except admin.BatchCommandError as exc:  # a refusal: exit 2, not a failure's 1
        raise CommandFailed(str(exc)) from exc
    return ExitCode.OK


