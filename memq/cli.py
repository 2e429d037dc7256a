"""``memq``: index a memory workspace, search it, read it, and run the worker fleet."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.config import ConfigError, Settings, load_settings
from pipeline.errors import (
    EmbeddingError,
    MemoryDisabled,
    MemqError,
    ShardUnreachable,
    StoreError,
    UnknownMemory,
    WorkspaceMissing,
    memory_disabled,
)

if TYPE_CHECKING:
    from pipeline.catalog import MemoryCatalog
    from pipeline.embeddings.providers import ProviderPool
    from pipeline.fleet.job_log import JobRecord
    from workers.watching import Reading

ROLES = ("writer", "reader", "embed", "batch")
#: memory_search's corpus values (pipeline.search.corpus.CORPORA, not imported by `--help`).
SEARCH_CORPORA = ("memory", "wiki", "all", "sessions")
#: Characters of a snippet ``memq search`` shows (``--json`` gives the whole snippet).
SNIPPET_SHOWN = 200
#: Exit status when the memory's shard did not answer (its reader or the broker is down).
EXIT_UNREACHABLE = 3


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(config_file=args.config, workspace=args.workspace,
                         agent=getattr(args, "agent", None))


def _existing(settings: Settings, *, files_here: bool = False) -> Settings:
    """``settings``, or :class:`WorkspaceMissing` when its workspace folder does not exist, or
    :class:`MemoryDisabled` when the memory is turned off (``enabled = false``).
    ``files_here``: the command needs the files on this host even when the store is not."""
    if not settings.enabled:
        raise memory_disabled(settings.config_file)
    return _with_workspace(settings, files_here=files_here)


def _with_workspace(settings: Settings, *, files_here: bool = False) -> Settings:
    """``settings``, or :class:`WorkspaceMissing` when its workspace folder does not exist
    (on the host that holds the memory's store, or ``files_here``: elsewhere its shard's host
    reads its own copy)."""
    from pipeline.fleet.placement import store_is_here

    if not settings.workspace.is_dir() and (files_here or store_is_here(settings)):
        raise WorkspaceMissing(f"workspace {settings.workspace} does not exist (check "
                               "--workspace, the config's workspace or the agent's; create the "
                               "folder first to start a new memory)")
    return settings


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memq")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def _emit(args: argparse.Namespace, data: dict[str, Any], human: str) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False) if args.json else human)


class ProgressBar:
    """Chunks embedded of total, with rate and ETA (tqdm), on stderr when it is a terminal
    (or with ``--progress``); never with ``--json``."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.enabled = not args.json and (sys.stderr.isatty() or args.progress)
        self._bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total == 0:
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="chunk", desc="embedding", file=sys.stderr)
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _warn(message: str) -> None:
    print(f"memq: {message}", file=sys.stderr)


def cmd_index(args: argparse.Namespace) -> int:
    if args.remote and (args.allow_deletions or args.files_here):
        print("memq: --allow-deletions and --files-here act on the files of the host that runs "
              "the pass: run `memq index` with them there, not --remote", file=sys.stderr)
        return 2
    if args.all:
        return _index_all(args)
    if args.remote:
        return _enqueue_index(args)
    from pipeline.outcome import EXIT_NO_VECTOR
    from workers.indexing import run_index

    settings = _existing(_settings(args))
    progress = ProgressBar(args)
    run = run_index(settings, wait=not args.no_wait, retry_failed=args.retry_failed,
                    on_progress=progress, warn=_warn, allow_deletions=args.allow_deletions,
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
    _emit(args, data, "\n".join(lines))
    problem = run.outcome.problem() if run.waited else None
    if problem:
        print(f"memq: error: {problem}", file=sys.stderr)
        return EXIT_NO_VECTOR
    return 0


def _store_held(settings: Settings) -> dict[str, int] | None:
    """What the memory's store holds after a pass (``chunks``, ``vectors``, ``pending``,
    ``failed``), from the store or its shard's reader; None when it cannot be read."""
    from pipeline.memory import Memory

    try:
        with Memory(settings=settings, in_memory=False) as memory:
            status = memory.status()
    except (MemqError, OSError) as exc:
        _warn(f"what the store holds cannot be read: {exc}")
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


def _index_all(args: argparse.Namespace) -> int:
    """``memq index --all``: every memory of the configuration, one after the other (with
    ``--remote``: one index job per memory, queued on its shard's ``control`` queue, so each
    shard's writer runs its memories' passes beside the others'). A memory that cannot be
    indexed (workspace gone, turned off, no broker, a broken store) is reported and the rest go
    on; the exit code is 1 when any failed, else 4 when any left chunks without a vector."""
    from pipeline.outcome import EXIT_NO_VECTOR
    from workers.jobs_api import JobError

    if args.agent:
        print("memq: --all indexes every memory of the configuration; drop --agent/--memory",
              file=sys.stderr)
        return 2
    results = []
    with _RemoteIndexer(args.retry_failed) as remote:
        for name, settings in _memories_of_config(args):
            if isinstance(settings, str):
                results.append({"memory": name, "error": settings})
                continue
            try:
                done = remote.queue(settings) if args.remote else _index_one(args, settings)
                results.append({"memory": name, **done})
            except (MemqError, JobError, OSError) as exc:
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
    _emit(args, {"memories": [{k: v for k, v in r.items() if k != "summary"}
                              for r in results]}, "\n".join(lines))
    return 1 if failed else EXIT_NO_VECTOR if incomplete else 0


def _index_one(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    """One memory's index pass, here (``memq index``); ``problem`` when it left chunks
    without a vector."""
    from workers.indexing import run_index

    run = run_index(settings, wait=not args.no_wait, retry_failed=args.retry_failed,
                    warn=_warn, allow_deletions=args.allow_deletions,
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
        from kombu.exceptions import OperationalError

        from pipeline.config.redact import redact_url
        from pipeline.fleet.broker import FleetDispatcher
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
        except OperationalError as exc:
            raise EnqueueFailed(f"broker {redact_url(settings.broker_url)} did not take the "
                                f"job: {exc}") from exc
        return {"job": job, "queue": control_queue(shard),
                "summary": f"job {job} queued on '{control_queue(shard)}'"}

    def __enter__(self) -> _RemoteIndexer:
        return self

    def __exit__(self, *exc: object) -> None:
        for fleet in self._fleets.values():
            fleet.close()


def _enqueue_index(args: argparse.Namespace) -> int:
    """``memq index --remote``: queue a producer pass for the writer host; print the job id."""
    from kombu.exceptions import OperationalError

    from pipeline.fleet.broker import queue_consumers
    from pipeline.routing import control_queue
    from workers.jobs_api import EnqueueFailed, enqueue_index

    settings = _settings(args)
    if not settings.enabled:
        raise memory_disabled(settings.config_file)
    queue = control_queue(settings.fleet.shard_of(settings.agent_id))
    try:
        job_id = enqueue_index(settings, retry_failed=args.retry_failed)
    except EnqueueFailed as exc:
        print(f"memq: {exc}", file=sys.stderr)
        return 2
    try:
        consumers = queue_consumers(settings.broker_url)
    except OperationalError:  # queued already; whether anyone listens is only a hint
        consumers = None
    if consumers is not None and not any(queue in q for q in consumers.values()):
        print(f"memq: no worker consumes '{queue}' yet: the job waits there until the "
              "shard's writer starts (memq worker --role writer)", file=sys.stderr)
    elif (job := _taken(settings, job_id)) is not None and job.state == "failed":
        _emit(args, {"job": job_id, "queue": queue, "waited": False, "state": job.state,
                     "error": job.error}, f"{job_id}\nfailed: {job.error}")
        print(f"memq: job {job_id} failed: {job.error}", file=sys.stderr)
        return 1
    _emit(args, {"job": job_id, "queue": queue, "waited": False},
          f"{job_id}\nqueued on '{queue}' for the writer host; follow it from any host with "
          f"`memq jobs --follow {job_id}`, or in Flower")
    return 0


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


def _preloading(settings: Settings) -> ProviderPool:
    """Providers for one search whose local model (when the search embeds with one here) is
    already loading on another thread: llama.cpp reads it while this process imports the
    pipeline and opens the store, instead of after."""
    from pipeline.embeddings.providers import ProviderPool
    from pipeline.fleet.placement import store_is_here

    providers = ProviderPool()
    if settings.backend == "builtin" and store_is_here(settings):
        providers.preload(settings)
    return providers


def cmd_search(args: argparse.Namespace) -> int:
    settings = _existing(_settings(args))
    providers = _preloading(settings)
    from pipeline.memory import Memory

    # One query per process: vec0 and FTS5 answer faster than loading the store into memory.
    with contextlib.closing(providers), Memory(settings=settings, in_memory=False,
                                               providers=providers) as memory:
        out = memory.search(args.query, max_results=args.max_results, min_score=args.min_score,
                            citations=args.citations, corpus=args.corpus,
                            projects=args.project).to_dict()
    lines = []
    for hit in out["results"]:
        snippet = " ".join(hit["snippet"].split())
        lines.append(f"{hit['score']:.3f}  {hit['path']}:{hit['startLine']}-{hit['endLine']}\n"
                     f"       {_cut(snippet, SNIPPET_SHOWN)}")
    if not out["results"]:
        lines.append("no results")
    footer = f"[{out['mode']}" + (f", {out['provider']}/{out['model']}" if out["provider"] else "")
    notes = ("reason", "synced", "pending", "warning", "rebuilding")
    footer += "]" + "".join(f" {k}: {out[k]}" for k in notes if k in out)
    fallback = out.get("fallback")
    if "backend" in out:
        qmd_down = fallback if fallback and fallback.get("from") == "qmd" else None
        footer += f" backend: {out['backend']}" + (
            f" (qmd {qmd_down['kind']}: {qmd_down['reason']})" if qmd_down else "")
    if fallback and fallback.get("from") != "qmd":
        footer += f" fallback from {fallback['from']}: {fallback['reason']}"
    footer += _rerank_footer(out.get("rerank"))
    if out["mode"] == "unavailable":
        _warn(f"search unavailable: {out['error']}" + (f" ({out['action']})"
                                                        if out.get("action") else ""))
        if args.json:
            _emit(args, out, "")
        from pipeline.search.corpus import SESSIONS_DISABLED

        return 2 if out["error"] == SESSIONS_DISABLED else EXIT_UNREACHABLE
    lines.append(footer)
    _emit(args, out, "\n".join(lines))
    return 0


def _cut(text: str, limit: int) -> str:
    """``text`` up to ``limit`` characters, ending with "…" when it was cut there."""
    return text if len(text) <= limit else text[:limit] + "…"


def _rerank_footer(note: dict[str, Any] | None) -> str:
    """What the reranker did, for the search footer ("" when none is configured)."""
    if not note:
        return ""
    who = note.get("model") or note.get("provider")
    if note.get("fallback"):
        return f" rerank {who}: not applied ({note.get('kind')}: {note.get('reason')})"
    return f" rerank {who}: {note.get('reranked', 0)} reranked"


#: What ``memq get`` reads (MemoryPathError's "path required" is OpenClaw's wording, kept by
#: the library and MCP; the CLI names the rule instead).
_GET_RULE = ("memq get reads only MEMORY.md, USER.md, .md files under memory/ and the "
             "configured extra paths, never a symlink")
_PATH_REQUIRED = "path required"
#: ``memq get --json``'s ``status`` for a memory file that does not exist (OpenClaw's word).
NOT_FOUND = "not_found"


def cmd_get(args: argparse.Namespace) -> int:
    from pipeline.errors import MemoryPathError
    from pipeline.memory import Memory

    try:
        with Memory(settings=_existing(_settings(args)), in_memory=False) as memory:
            got = memory.get(args.path, args.from_line, args.lines)
    except MemoryPathError as exc:
        why = str(exc)
        if why.startswith(_PATH_REQUIRED):
            detail = why[len(_PATH_REQUIRED):].lstrip(": ")
            why = f"outside the memory files; {_GET_RULE}" + (
                f"; expected {detail}" if detail and "memory .md file" not in detail else "")
        print(f"memq: refused {args.path}: {why}", file=sys.stderr)
        return 2
    out = got.to_dict()
    if got.from_line is None:  # the library's empty text for a file that could exist
        if args.json:
            _emit(args, {**out, "status": NOT_FOUND}, "")
        _warn(f"{got.path} does not exist (no such memory file; `memq search` finds the "
              "ones that do)")
        return 1
    _emit(args, out, out["text"])
    return 0


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
    began = job["started_at"] or job["finished_at"]
    when = datetime.fromtimestamp(began).isoformat(timespec="seconds") if began else "?"
    took = (f" in {job['finished_at'] - job['started_at']:.1f}s"
            if job["finished_at"] and job["started_at"] else "")
    what = (f": {job['changed']} files changed, {job['deleted'] or 0} deleted, "
            f"{job['chunks_queued']} chunks queued, {job['chunks_cached']} from cache"
            if job["state"] == "done" else "")
    error = f": {job['error']}" if job["error"] else ""
    return f"{job['id']}  {job['kind'] or '-':<6} {job['state']:<7} {when}{took}{what}{error}"


def _batch_job_line(job: dict[str, Any]) -> str:
    when = datetime.fromtimestamp(job["created_at"]).isoformat(timespec="seconds")
    state = job["state"] + (f" ({job['raw_state']})" if job["raw_state"] else "")
    done = (f", {job['embedded']} embedded, {job['to_sync']} to sync"
            if job["finished_at"] else "")
    error = f": {job['last_error']}" if job["last_error"] else ""
    return (f"{job['id']}  {job['provider']:<7} {state:<24} {when} {job['chunks']} chunks"
            f"{done} {job['remote_id'] or ''}{error}")


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


def cmd_batch(args: argparse.Namespace) -> int:
    from pipeline.batch import admin

    if args.action != "list" and not args.target:
        what = "JOB_ID" if args.action == "cancel" else "PROVIDER"
        print(f"memq: memq batch {args.action} needs {what}", file=sys.stderr)
        return 2
    settings = _settings(args)
    try:
        if args.action == "list":
            jobs = admin.list_jobs(settings, args.limit)
            _emit(args, {"jobs": jobs}, "\n".join(_batch_job_line(j) for j in jobs)
                  or "no batch jobs in this store")
        elif args.action == "cancel":
            remote = admin.cancel_job(settings, args.target)
            _emit(args, remote.to_dict(), f"cancel requested: {remote.remote_id} is "
                  f"{remote.raw_state}; finished lines are kept, the rest goes the sync path")
        else:
            policy = admin.enable_provider(settings, args.target)
            _emit(args, policy, f"batch mode for {args.target} is on again")
    except admin.BatchCommandError as exc:
        print(f"memq: {exc}", file=sys.stderr)
        return 2
    return 0


def _qmd_lines(status: dict[str, Any]) -> list[str]:
    """The QMD backend's part of ``memq status`` (nothing for the builtin backend)."""
    q = status.get("qmd")
    if status.get("backend") != "qmd" or q is None:
        return []
    when = (datetime.fromtimestamp(q["last_update_at"]).isoformat(timespec="seconds")
            if q["last_update_at"] else "never")
    health = "available" if q["available"] else (
        f"DOWN ({q['down']['kind']}: {q['down']['reason']}); searches answer from memq's index")
    collections = ", ".join(f"{c['name']} {c['documents']}" for c in q["collections"])
    return [f"backend:   qmd ({q['command']} {q['search_mode']}), {health}",
            f"qmd:       {q['documents']} documents ({collections}); last update {when}"]


def cmd_status(args: argparse.Namespace) -> int:
    from workers.monitor import fleet_status, resume_batches

    settings = _with_workspace(_settings(args))  # a disabled memory still has a status
    if args.fleet:
        from workers.fleet_view import fleet_lines, fleet_view

        view = fleet_view(settings, timeout=args.timeout)
        _emit(args, view, "\n".join(fleet_lines(view)))
        if view["problems"]:  # blind somewhere: say the first thing, in one line
            more = len(view["problems"]) - 1
            print(f"memq: the fleet view is incomplete: {view['problems'][0]}"
                  + (f" (and {more} more)" if more else ""), file=sys.stderr)
            return EXIT_UNREACHABLE
        return 0
    s = fleet_status(settings, timeout=args.timeout)
    if s["fleet"]["reachable"] and s["batch"]["live"]:
        # Status is one of the places that notices a batch job whose polling died.
        s["batch"]["resumed"] = resume_batches(settings)
    if not s["indexed"]:
        _emit(args, s, "\n".join([f"workspace {s['workspace']}: {s['reason']}",
                                  f"store: {s['store']}", *_qmd_lines(s),
                                  *_fleet_lines(s["fleet"])]))
        return 0
    if not s["enabled"]:  # indexed before it was turned off
        _warn("memory is disabled (enabled = false): search and indexing are off; the index "
              "below is as it was left")
    when = (datetime.fromtimestamp(s["last_index_at"]).isoformat(timespec="seconds")
            if s["last_index_at"] else "never")
    lines = [
        f"workspace: {s['workspace']}",
        f"store:     {s['store']} (sqlite {s['sqlite_driver']}, vectors via "
        f"{s['vector_backend']})",
        f"mode:      {s['mode']}" + (f" ({s['provider']}/{s['model']}, {s['dims']} dims)"
                                      if s["provider"] else f": {s['reason']}"),
        f"files:     {s['files']} indexed, {s['files_with_errors']} skipped",
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
    if s["vector_backend_reason"]:
        lines.append(f"note: {s['vector_backend_reason']}")
    if s.get("keyword_search") == "unavailable":
        lines.append(f"keyword search: unavailable ({s['keyword_search_reason']})")
    lines += [f"skipped {e['path']}: {e['error']}" for e in s["file_errors"]]
    lines += [f"{e['state']} chunks ({e['chunks']}): {e['error']}" for e in s["chunk_errors"]]
    lines += _qmd_lines(s)
    lines += _fleet_lines(s["fleet"])
    lines += _batch_lines(s["batch"])
    for provider, p in s["pending_by_provider"].items():
        lines.append(f"pending:   {provider}: {p['chunks']} chunks, "
                     f"{'unknown' if p['queued_jobs'] is None else p['queued_jobs']} jobs queued")
    if s["jobs"]:
        lines.append("recent jobs:")
        lines += [f"  {_job_line(job)}" for job in s["jobs"]]
    if s.get("jobs_error"):
        lines.append(f"recent jobs: unknown ({s['jobs_error']})")
    if s.get("servedBy"):
        lines.append(f"served by: {s['servedBy']} (shard {s['shard']}; the store is on that "
                     "host)")
    _emit(args, s, "\n".join(lines))
    return 0


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # not reached


def cmd_memories(args: argparse.Namespace) -> int:
    from pipeline.catalog import MemoryCatalog

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
        size = _size(i.size) if i.size is not None else "-"
        lines.append(f"{'*' if i.default else ' '} {i.name:<20} {i.state:<12} {when:<19} "
                     f"{size:>9}  {i.workspace}")
        lines.append(f"  {'':<20} {_store_where(i)}"
                     + (f" (owned by {i.owner['memory']}, {i.owner['workspace']})"
                        if i.state == "foreign" and i.owner else ""))
    lines += [f"removed {o.store} ({_size(o.size)}): memory {o.memory}, workspace "
              f"{o.workspace} is gone" for o in pruned]
    if orphans:
        lines.append("orphaned stores (their workspace is gone and nothing serves them; "
                     "`memq memories --prune` removes them):")
        lines += [f"  {o.store} ({_size(o.size)}): memory {o.memory}, workspace {o.workspace}"
                  for o in orphans]
    elif args.prune and not pruned:
        lines.append("no orphaned stores to remove")
    for error in catalog.fleet_errors:
        _warn(f"the fleet cannot be asked, this host's view only: {error}")
    _emit(args, data, "\n".join(lines))
    return 0


def _store_where(info: Any) -> str:
    """Where a memory's store is, and which node serves it (``memq memories``)."""
    shard = f"shard {info.shard}, " if info.shard is not None else ""
    served = f"served by {info.served_by}" if info.served_by else "served by no live worker"
    if not info.here:
        return f"store: on another host ({shard}{served})"
    if info.shard is None:
        return f"store: {info.store}"
    return f"store: {info.store} ({shard}{served})"


def cmd_watch(args: argparse.Namespace) -> int:
    import logging

    from workers.watching import LiveRoster, run_watch

    logging.basicConfig(level=logging.WARNING, format="memq watch: %(message)s")
    if args.all and args.agent:
        print("memq: --all watches every memory of the configuration; drop --agent/--memory",
              file=sys.stderr)
        return 2
    roster: LiveRoster | None = None
    if args.all:
        roster = LiveRoster(lambda: _watch_reading(args))
        for name, why in roster.current.unwatchable.items():
            print(f"memq: not watching {name}: {why}", file=sys.stderr)
        watched = roster.current.watchable
        if not watched:
            print("memq: no memory of the configuration can be watched", file=sys.stderr)
            return 2
        print(f"memq: watching {len(watched)} memories: "
              f"{', '.join(s.agent_id for s in watched)} (Ctrl-C to stop; memories added to "
              "or removed from the configuration are followed)", file=sys.stderr)
    else:
        watched = [_existing(_settings(args), files_here=True)]
        print(f"memq: watching {watched[0].workspace} (Ctrl-C to stop)", file=sys.stderr)
    debounce = args.debounce_ms / 1000 if args.debounce_ms is not None else None
    run_watch(watched, polling=args.polling, debounce_s=debounce,
              reconcile_minutes=args.interval_minutes, heartbeat=args.heartbeat, roster=roster,
              on_pass=_print_pass)
    return 0


def _print_pass(memory: str, report: Any) -> None:
    """``memq watch``'s line for a pass that changed something (counts only, on stdout)."""
    files = "file" if report.changed == 1 else "files"
    print(f"{datetime.now().isoformat(sep=' ', timespec='seconds')} {memory}: "
          f"{report.changed} {files} changed, {report.deleted} deleted, "
          f"{report.chunks_queued} chunks queued", flush=True)


def _watch_reading(args: argparse.Namespace) -> Reading:
    """``memq watch --all``: every memory of the configuration, each with its settings or why
    it cannot be watched; read again when the config file or its ``memoriesDir`` changes, or
    when the missing workspace of one of them appears."""
    from pipeline.catalog import MemoryCatalog
    from workers.watching import Reading

    catalog = MemoryCatalog(config_file=args.config, workspace=args.workspace)
    memories = _memories_of_config(args, catalog, files_here=True)
    absent = []
    for name, settings in memories:
        if isinstance(settings, str):
            with contextlib.suppress(MemqError, ConfigError):
                wanted = catalog.settings(name)
                if wanted.enabled and not wanted.workspace.is_dir():
                    absent.append(wanted.workspace)
    return Reading(tuple(memories),
                   lambda: catalog.changed() or any(path.is_dir() for path in absent))


def _memories_of_config(args: argparse.Namespace, catalog: MemoryCatalog | None = None,
                        *, files_here: bool = False) -> list[tuple[str, Settings | str]]:
    """Every memory of the configuration (``--all``; its ``catalog`` when read already), in
    its order: its settings, or why it cannot be used (workspace gone, turned off, bad keys)."""
    from pipeline.catalog import MemoryCatalog

    catalog = catalog or MemoryCatalog(config_file=args.config, workspace=args.workspace)
    out: list[tuple[str, Settings | str]] = []
    for name in catalog.names():
        try:
            out.append((name, _existing(catalog.settings(name), files_here=files_here)))
        except (MemqError, ConfigError) as exc:
            out.append((name, str(exc)))
    return out


def cmd_reindex(args: argparse.Namespace) -> int:
    from workers.indexing import run_index

    def warn(message: str) -> None:
        print(f"memq: {message}", file=sys.stderr)

    run = run_index(_existing(_settings(args)), wait=not args.no_wait, rebuild="memq reindex",
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
    _emit(args, data, human)
    return 0


def _follow_job(args: argparse.Namespace) -> int:
    """``memq jobs --follow ID``: the job's memory is named by its id (``<memory>:<hex>``)."""
    from pipeline.errors import UnknownJob
    from pipeline.memory import Memory
    from pipeline.routing import memory_of_job

    named = memory_of_job(args.follow)
    settings = load_settings(config_file=args.config, workspace=args.workspace,
                             agent=args.agent or named)
    progress = ProgressBar(args)
    try:
        with Memory(settings=settings, in_memory=False) as memory:
            job = memory.follow_job(args.follow, on_progress=progress, warn=_warn).to_dict()
    except UnknownJob as exc:
        print(f"memq: {exc}", file=sys.stderr)
        return 2
    finally:
        progress.close()
    _emit(args, job, _job_line(job))
    return 0 if job["state"] == "done" else 1


def cmd_jobs(args: argparse.Namespace) -> int:
    from pipeline.memory import Memory
    from pipeline.routing import control_queue, memory_of_job

    if args.follow:
        return _follow_job(args)
    settings = _settings(args)
    with Memory(settings=settings, in_memory=False) as memory:
        jobs = [job.to_dict() for job in memory.recent_jobs(args.limit)]
    queued = waiting = None
    queue = control_queue(settings.fleet.shard_of(settings.agent_id))
    if settings.broker_url:
        from workers.monitor import broker_status

        fleet = broker_status(settings.broker_url, timeout=args.timeout,
                              shards=settings.fleet.shards)
        if fleet["reachable"]:
            queued = fleet["queues"][queue]
            if fleet["waiting_jobs"] is not None:  # Redis only: AMQP cannot peek
                # only this memory's: another memory's jobs are not this memory's business
                waiting = [w for w in fleet["waiting_jobs"]
                           if memory_of_job(w["id"]) == settings.agent_id]
    data = {"jobs": jobs, "queue": queue, "queued": queued, "waiting": waiting}
    lines = [_job_line(job) for job in jobs] or [
        f"no jobs of memory {settings.agent_id} in the job log yet"]
    lines.append(f"waiting on '{queue}': {'unknown' if queued is None else queued}")
    lines += [f"  {w['id']}  {w['task']}" for w in waiting or []]
    _emit(args, data, "\n".join(lines))
    return 0


def worker_command(role: str, provider: str | None, concurrency: int | None,
                   loglevel: str, name: str | None = None, shards: Sequence[int] = (0,)
                   ) -> list[str]:
    """The plain ``celery worker`` command a role stands for (what ``memq worker`` runs); a
    writer consumes the queues of ``shards``."""
    from pipeline.routing import batch_queue, control_queue, embed_queue, query_queue, store_queue
    from workers.embedded import worker_argv

    if role == "writer":
        # A shard's owner also runs its index jobs (they write chunk rows to the same files).
        queues = [q for shard in shards for q in (store_queue(shard), control_queue(shard))]
        return worker_argv(queues, name or "writer@%h", concurrency=1, loglevel=loglevel)
    if role == "reader":
        # Threads: reads wait on SQLite, NumPy and the model (the GIL is released) and share
        # the warm memories; any number of readers may serve a shard.
        return worker_argv([query_queue(shard) for shard in shards],
                           name or own_node_name("reader"), concurrency=concurrency or 8,
                           loglevel=loglevel, pool="threads")
    if not provider:
        raise SystemExit(f"memq worker --role {role} needs --provider NAME (e.g. local)")
    if role == "batch":
        from pipeline.batch.api import BATCH_PROVIDERS

        if provider not in BATCH_PROVIDERS:
            raise SystemExit(f"memq: {provider} has no batch API (only "
                             f"{', '.join(BATCH_PROVIDERS)})")
        # Batch tasks are short HTTP calls (a poll never sleeps): a few at once is plenty.
        return worker_argv([batch_queue(provider)], name or own_node_name(f"batch-{provider}"),
                           concurrency=concurrency or 2, loglevel=loglevel)
    return worker_argv([embed_queue(provider)], name or own_node_name(f"embed-{provider}"),
                       concurrency=concurrency or 1, loglevel=loglevel)


def own_node_name(prefix: str) -> str:
    """A node name no other process on this host has: ``<prefix>-<pid>@<host>``.

    Embed and batch workers scale by starting more of them; on RabbitMQ two nodes of one name
    cannot both hold the node's control queue (the second dies with RESOURCE_LOCKED), and on
    Redis Flower and ``memq status`` would count them as one.
    """
    return f"{prefix}-{os.getpid()}@%h"


def cmd_worker(args: argparse.Namespace) -> int:
    settings = _settings(args)
    shards = args.shard or list(range(settings.fleet.shards))
    if args.shard and args.role not in ("writer", "reader"):
        print("memq: --shard is for writers and readers (embed and batch workers serve every "
              "shard)", file=sys.stderr)
        return 2
    if bad := [s for s in shards if not 0 <= s < settings.fleet.shards]:
        print(f"memq: shard {bad[0]} does not exist: fleet.shards is {settings.fleet.shards} "
              f"(shards 0 to {settings.fleet.shards - 1})", file=sys.stderr)
        return 2
    argv = worker_command(args.role, args.provider, args.concurrency, args.loglevel, args.name,
                          shards)
    # The worker reads the same memory and config as this command: the flags travel as the
    # environment variables the worker's own settings read.
    for flag, variable in (("workspace", "MEMQ_WORKSPACE"), ("config", "MEMQ_CONFIG")):
        if getattr(args, flag, None):
            os.environ[variable] = str(Path(getattr(args, flag)).resolve())
    os.environ["MEMQ_FLEET_SHARDS"] = str(settings.fleet.shards)
    os.environ["MEMQ_RESULT_BACKEND"] = settings.result_backend
    if settings.broker_url:
        os.environ["MEMQ_BROKER_URL"] = settings.broker_url
    elif "MEMQ_BROKER_URL" not in os.environ and "REDIS_URL" not in os.environ:
        print("memq: no broker configured; using redis://127.0.0.1:6379/0", file=sys.stderr)
    os.execv(argv[0], argv)
    return 0  # not reached


def cmd_shard(args: argparse.Namespace) -> int:
    """``memq shard copy|forget --shard N``: move a shard's stores to this host through the
    broker, or say this host holds them no more."""
    from pipeline.fleet.placement import claims_of, unclaim_in

    if args.action == "forget":  # the claims of the settings' data dir (not the process's)
        dropped = unclaim_in(claims_of(_settings(args)), [args.shard])
        _emit(args, {"shard": args.shard, "forgotten": bool(dropped)},
              f"this host no longer claims shard {args.shard}" if dropped else
              f"this host did not claim shard {args.shard}")
        return 0
    return _shard_copy(args)


def _shard_copy(args: argparse.Namespace) -> int:
    from pipeline.catalog import MemoryCatalog
    from pipeline.fleet.broker import require_broker
    from pipeline.fleet.shard_copy import pull_store
    from pipeline.remote import ShardReader
    from pipeline.routing import shard_of

    catalog = MemoryCatalog(config_file=args.config, workspace=args.workspace)
    names = [catalog.settings(args.agent).agent_id] if args.agent else catalog.names()
    results, readers = [], {}
    try:
        for name in names:
            settings = catalog.settings(name)
            if settings.fleet.shard_of(name) != args.shard:
                continue
            # The shard that serves the memory now: the same shard (a move to another host),
            # or, growing from --from-shards, its shard among those (a pin never moves).
            source = (shard_of(name, args.from_shards)
                      if args.from_shards and settings.fleet.shard is None else args.shard)
            row: dict[str, Any] = {"memory": name, "from_shard": source,
                                   "store": str(settings.store.path)}
            if settings.store.path.exists() and not args.replace:
                results.append({**row, "error": "a store is here already (--replace to "
                                                "overwrite it)"})
                continue
            url = require_broker(settings.broker_url, "memq shard copy")
            reader = readers.get(url) or readers.setdefault(url, ShardReader(url, args.timeout))
            try:
                results.append({**row, **pull_store(reader, name, source,
                                                    settings.store.path)})
            except MemqError as exc:
                results.append({**row, "error": str(exc)})
    finally:
        for reader in readers.values():
            reader.close()
    lines = [f"{r['memory']}: " + (f"failed: {r['error']}" if "error" in r else
                                   f"copied {_size(r['bytes'])} ({r['chunks']} chunks, "
                                   f"{r['vectors']} vectors) from shard {r['from_shard']} in "
                                   f"{r['seconds']:.1f}s" if r["bytes"] else "nothing indexed")
             for r in results] or [f"no memory of the configuration is in shard {args.shard}"]
    failed = sum("error" in r for r in results)
    _emit(args, {"shard": args.shard, "memories": results}, "\n".join(lines))
    return 1 if failed else 0


def cmd_flower(args: argparse.Namespace) -> int:
    auth = os.environ.get("FLOWER_BASIC_AUTH")
    if not auth and not args.unauthenticated:
        print("memq: set FLOWER_BASIC_AUTH=user:password (or pass --unauthenticated on a "
              "trusted machine)", file=sys.stderr)
        return 2
    settings = _settings(args)
    if settings.broker_url:
        os.environ["MEMQ_BROKER_URL"] = settings.broker_url
    os.environ["MEMQ_RESULT_BACKEND"] = settings.result_backend  # each job's outcome
    # Flower reads FLOWER_BASIC_AUTH from the environment itself: the password never appears
    # on a command line (where ps and /proc would show it).
    argv = [sys.executable, "-m", "celery", "-A", "workers", "flower", f"--port={args.port}",
            f"--address={args.address}"]
    os.execv(argv[0], argv)
    return 0  # not reached


def cmd_mcp(args: argparse.Namespace) -> int:
    from memq import mcp_server

    settings = _settings(args)
    if args.http is None:
        mcp_server.run_stdio(settings)
        return 0
    token = args.token or os.environ.get("MEMQ_MCP_TOKEN") or None
    try:
        host, port = mcp_server.parse_bind(args.http)
        mcp_server.run_http(settings, host, port, token)
    except ValueError as exc:
        print(f"memq: {exc}", file=sys.stderr)
        return 2
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    from memq.evaluation.command import evaluate, fused_keys, read_base

    try:
        out = evaluate(Path(args.collection), split=args.split, limit=args.limit,
                       modes=args.modes.split(",") if args.modes else None,
                       work_dir=Path(args.work_dir) if args.work_dir else None,
                       base=read_base(args.config),
                       fused=fused_keys(args.vector_weight, args.rrf_k))
    except (OSError, ValueError, RuntimeError) as exc:  # RuntimeError: indexing failed
        print(f"memq: eval: {exc}", file=sys.stderr)
        return 2
    text = out.pop("text")
    _emit(args, out, text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--workspace", help="memory workspace (default: configured, else cwd)")
    common.add_argument("--config", help="config file (memq.toml/.json or openclaw.json)")
    common.add_argument("--agent", "--memory", dest="agent", metavar="ID",
                        help="the memory to use: an agent of openclaw.json, or a memory of "
                             "memq.toml's memories/memoriesDir; any spelling of its id "
                             "(default: the default agent; `memq memories` lists them)")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    parser = argparse.ArgumentParser(prog="memq", description=__doc__)
    parser.add_argument("--version", action="version", version=f"memq {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("index", parents=[common], help="index the workspace through the queues")
    p.add_argument("--no-wait", action="store_true", help="return once jobs are enqueued")
    p.add_argument("--retry-failed", action="store_true", help="queue failed chunks again")
    p.add_argument("--progress", action="store_true", help="progress bar even when not a tty")
    p.add_argument("--allow-deletions", action="store_true",
                   help="let this pass remove every file or most files of the memory from its "
                        "index (refused otherwise: an empty or unmounted folder looks the same)")
    p.add_argument("--files-here", action="store_true",
                   help="on the store's host: make this host's folder the memory's files "
                        "(its store was fed by a producer on another host)")
    p.add_argument("--remote", action="store_true",
                   help="enqueue the pass for the writer host (queue control); print the job id")
    p.add_argument("--all", action="store_true",
                   help="every memory of the configuration (agents.list, memories, "
                        "memoriesDir), one after the other; with --remote, a job per memory")
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("search", parents=[common], help="hybrid search of the memory")
    p.add_argument("query")
    p.add_argument("--max-results", type=int)
    p.add_argument("--min-score", type=float)
    p.add_argument("--citations", choices=["auto", "on", "off"], default="auto",
                   help="add a Source: path#Ls-Le line to each snippet (default auto = on)")
    p.add_argument("--corpus", choices=SEARCH_CORPORA,
                   help="memory: notes only; sessions: transcripts only; all (default): "
                        "every configured source; wiki: none (memq has no wiki)")
    p.add_argument("--project", action="append", metavar="KEY",
                   help="an active project key (repeatable, e.g. github.com/org/repo): "
                        "entries annotated <!-- project: ... --> with only active keys rank "
                        "higher (x1.15), other annotated entries lower (x0.9)")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("get", parents=[common], help="read lines of a memory file")
    p.add_argument("path")
    p.add_argument("--from", dest="from_line", type=int)
    p.add_argument("--lines", type=int)
    p.set_defaults(func=cmd_get)

    p = sub.add_parser("status", parents=[common],
                       help="what is indexed, pending and why; queues, workers, recent jobs")
    p.add_argument("--timeout", type=float, default=1.0, help="seconds to wait for the broker")
    p.add_argument("--fleet", action="store_true",
                   help="every memory of the config, the writer of each shard, queue depths "
                        "per lane, pending chunks per memory")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("memories", parents=[common],
                       help="every memory of the config: workspace, store, size, state, last "
                            "index; orphaned stores")
    p.add_argument("--prune", action="store_true",
                   help="delete the stores memq made whose workspace is gone")
    p.set_defaults(func=cmd_memories)

    p = sub.add_parser("watch", parents=[common], help="index memory files as they change")
    p.add_argument("--polling", action=argparse.BooleanOptionalAction, default=None,
                   help="poll the files (file systems without change events) or never poll; "
                        "default: watch.polling (auto)")
    p.add_argument("--heartbeat", type=Path, metavar="FILE",
                   help="touch FILE every few seconds while the loop runs (health checks)")
    p.add_argument("--debounce-ms", type=int, help="quiet time before a batch is indexed")
    p.add_argument("--interval-minutes", type=float,
                   help="full reconcile period (default: sync.intervalMinutes, else 10)")
    p.add_argument("--all", action="store_true",
                   help="every memory of the configuration (agents, memories, memoriesDir) "
                        "in this one process")
    p.set_defaults(func=cmd_watch)

    p = sub.add_parser("reindex", parents=[common],
                       help="rebuild the index beside the live one, then swap it in")
    p.add_argument("--no-wait", action="store_true", help="return once the rebuild is queued")
    p.set_defaults(func=cmd_reindex)

    p = sub.add_parser("jobs", parents=[common], help="recent index jobs and their outcome")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--follow", metavar="JOB_ID",
                   help="wait (on the store host) until the job ran and its vectors are written")
    p.add_argument("--progress", action="store_true", help="progress bar even when not a tty")
    p.add_argument("--timeout", type=float, default=1.0, help="seconds to wait for the broker")
    p.set_defaults(func=cmd_jobs)

    p = sub.add_parser("batch", parents=[common], help="provider batch jobs (remote.batch)")
    p.add_argument("action", choices=["list", "cancel", "enable"],
                   help="list jobs; cancel JOB_ID; enable PROVIDER (after the policy disabled it)")
    p.add_argument("target", nargs="?", help="job id (cancel) or provider (enable)")
    p.add_argument("--limit", type=int, default=20)
    p.set_defaults(func=cmd_batch)

    p = sub.add_parser("worker", parents=[common], help="run a Celery worker of the fleet")
    p.add_argument("--role", choices=ROLES, required=True)
    p.add_argument("--provider", help="embedding provider of an embed worker (local, openai, "
                   "gemini, voyage, mistral, ollama) or a batch worker (openai, gemini, voyage)")
    p.add_argument("--concurrency", type=int)
    p.add_argument("--loglevel", default="INFO")
    p.add_argument("--name", help="Celery node name (default writer@%%h, reader-PID@%%h, "
                                  "embed-PROVIDER-PID@%%h, batch-PROVIDER-PID@%%h)")
    p.add_argument("--shard", type=int, action="append", metavar="N",
                   help="a shard this writer owns, or whose reads this reader answers (repeat "
                        "for several; default: all fleet.shards)")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("shard", parents=[common],
                       help="move a shard's stores to this host (copy), or release them "
                            "(forget)")
    p.add_argument("action", choices=["copy", "forget"],
                   help="copy: pull the shard's stores from the readers that serve them now; "
                        "forget: this host no longer holds the shard")
    p.add_argument("--shard", type=int, required=True, metavar="N")
    p.add_argument("--from-shards", type=int, metavar="M",
                   help="the shard count before a growth (the memories now in shard N are "
                        "copied from their shard among M)")
    p.add_argument("--replace", action="store_true", help="overwrite a store already here")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds to wait for each answer of the old host's reader (120)")
    p.set_defaults(func=cmd_shard)

    p = sub.add_parser("flower", parents=[common], help="Flower monitoring for the fleet")
    p.add_argument("--port", type=int, default=5555)
    p.add_argument("--address", default="127.0.0.1")
    p.add_argument("--unauthenticated", action="store_true")
    p.set_defaults(func=cmd_flower)

    p = sub.add_parser("mcp", parents=[common],
                       help="serve memory_search/memory_get/memory_append over MCP")
    p.add_argument("--http", metavar="HOST:PORT",
                   help="streamable HTTP at /mcp instead of stdio (loopback unless a token is set)")
    p.add_argument("--token", help="bearer token for --http (prefer env MEMQ_MCP_TOKEN)")
    p.set_defaults(func=cmd_mcp)

    p = sub.add_parser("eval", help="retrieval quality on a BEIR collection or LoCoMo, every "
                                    "mode side by side (indexes through the normal pipeline)")
    p.add_argument("--collection", required=True,
                   help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/) or LoCoMo .json")
    p.add_argument("--split", default="test", help="qrels split of a BEIR folder (test)")
    p.add_argument("--limit", type=int, default=0,
                   help="only the first N queries (LoCoMo: N questions per conversation)")
    p.add_argument("--modes", help="comma-separated subset of keyword,vector,hybrid,rrf,"
                                   "hybrid+mmr")
    p.add_argument("--vector-weight", type=float,
                   help="vectorWeight of the fused modes (textWeight = 1 - it); default 0.7")
    p.add_argument("--rrf-k", type=int, help="rrfK of the rrf mode (default 60)")
    p.add_argument("--work-dir", help="where the generated workspace and its store are kept "
                                      "(default: memq's cache, one per collection)")
    p.add_argument("--config", help="memq.json/.toml with the provider keys to evaluate "
                                    "(default: the local model)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_eval)
    return parser


@contextlib.contextmanager
def _answering_once(exiting: bool) -> Iterator[None]:
    """Run a command that answers once (``search``, ``get``) without cyclic garbage
    collection, and with ``exiting`` (the process ends right after: the ``memq`` command
    line) keep the objects that exist then out of the collections at exit too.

    Its imports (NumPy, llama-cpp-python, the pipeline) leave hundreds of thousands of
    objects that every full collection walks, for no garbage: about 40 ms of a 0.37 s
    one-shot ``memq search`` (bench/oneshot_latency.py). Reference counting still frees
    everything that is not in a cycle.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if exiting:
            gc.freeze()
        if enabled:
            gc.enable()


def main(argv: Sequence[str] | None = None) -> int:
    """The ``memq`` command line (``argv``: its arguments, default this process's)."""
    args = build_parser().parse_args(argv)
    once = args.func in (cmd_search, cmd_get)
    try:
        with _answering_once(exiting=argv is None) if once else contextlib.nullcontext():
            return args.func(args)
    except UnknownMemory as exc:
        print(f"memq: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(f"memq: configuration error: {exc}", file=sys.stderr)
    except EmbeddingError as exc:
        print(f"memq: embedding provider error: {exc}", file=sys.stderr)
    except StoreError as exc:
        print(f"memq: store error: {exc}", file=sys.stderr)
    except (WorkspaceMissing, MemoryDisabled) as exc:
        print(f"memq: {exc}", file=sys.stderr)
        return 2
    except ShardUnreachable as exc:
        print(f"memq: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except MemqError as exc:
        print(f"memq: {exc}", file=sys.stderr)
    except BrokenPipeError:  # `memq search … | head`: the reader left, nothing is wrong
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("memq: interrupted; queued work stays queued and is picked up again",
              file=sys.stderr)
        return 130
    except Exception as exc:
        failure = _broker_failure(args, exc)
        if failure is None:
            raise
        print(f"memq: {failure}", file=sys.stderr)  # one line, no traceback
        return EXIT_UNREACHABLE
    return 1


def _broker_failure(args: argparse.Namespace, exc: Exception) -> Exception | None:
    """``exc`` as one line naming the broker when the broker failed it (cannot be reached,
    refused the login), else None."""
    from pipeline.fleet.broker import NETWORK_ERRORS, broker_failure

    if not isinstance(exc, NETWORK_ERRORS):
        return None
    try:
        url = _settings(args).broker_url
    except Exception:  # the settings failed too: the environment's broker, if any
        url = os.environ.get("MEMQ_BROKER_URL") or os.environ.get("REDIS_URL")
    return broker_failure(url or "", exc) if url else exc


if __name__ == "__main__":
    sys.exit(main())
