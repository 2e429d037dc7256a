"""The reader role, and what every shard host does when its workers start.

``memq worker --role reader --shard N`` consumes ``query.<N>`` on the host that holds shard
N's stores and answers any host's searches, reads, status and job questions about the
shard's memories (:class:`~pipeline.messages.QueryRequest`), from warm
:class:`~memq.Memory` objects (:class:`~workers.runtime.WarmMemories`), by the worker's
:class:`~workers.reader.Reader` (built, with what it imports, when the worker starts:
:func:`load_reader`; no other role imports it). It runs Celery's thread pool: a read waits on
SQLite, NumPy or the model, which release the GIL, and the warm memories are shared by the
threads. Answers go back on Celery's ``rpc://`` result backend, straight to the asking
client's reply queue; the app's own result backend (the job log) is for jobs.

A reader answers only for memories its configuration lists and that belong to the shard the
message came in on (:meth:`~workers.runtime.WorkerRuntime.readable`); paths are checked as
for a local read. Nothing a message says can make it read another memory's store.

At start, a worker that serves a shard's stores (a writer: ``store.<N>``, a reader:
``query.<N>``) first checks that the shard's stores are here (:func:`refuse_wrong_host`): it
refuses to start when this host's data dir holds none of them while workers that did not
claim the shard here serve it (another host's), since it would answer the shard's searches
from empty stores. A new or replacement host, with no stores yet and nobody else serving the
shard, starts. It then claims the shard in this host's data dir
(:func:`pipeline.fleet.placement.claim_in`), and a writer ends the jobs its previous run left
running on ``control.<N>``: they were cut off (a kill, a crash) and their rows would
otherwise say "running" forever; a job whose message comes back runs again and ends in its
own final state.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from celery import Task, states
from celery.backends.rpc import RPCBackend
from celery.signals import worker_init, worker_shutdown

from pipeline.config.paths import data_dir
from pipeline.errors import MessageRefused
from pipeline.fleet.broker import queue_consumers
from pipeline.fleet.placement import CLAIMS_FOLDER, claim_in, claim_nodes, unclaim_in
from pipeline.routing import (
    QUERY_PREFIX,
    QUERY_TASK,
    STORE_PREFIX,
    control_queue,
    query_queue,
    shard_of_queue,
    store_queue,
)
from workers.app import app
from workers.orphans import BROKER_DIR_ENV
from workers.runtime import arrival_shard, in_child_process, runtime

if TYPE_CHECKING:
    from pipeline.messages import QueryReply

log = logging.getLogger(__name__)


@worker_init.connect
def load_reader(sender: Any = None, **_: Any) -> None:
    """A worker that serves a shard's reads builds its :class:`~workers.reader.Reader` at
    start, importing what answers a read (the memory's search, NumPy, pydantic: 1.5-2 s on a
    loaded machine) before its first read rather than during it; no other role does."""
    if sender is not None and served_shards(list(sender.app.amqp.queues.consume_from))["reader"]:
        runtime.reader()


@worker_shutdown.connect
def close_reader(**_: Any) -> None:
    """The worker stops: its reader's digest threads stop with it."""
    runtime.close_reader()


@app.task(name=QUERY_TASK, bind=True, ignore_result=True, acks_late=False,
          store_errors_even_if_ignored=True)
def answer_query(self: Task, message: dict[str, Any]) -> dict[str, Any]:
    """A read from any host (``query.<shard>``): checked, answered from a warm memory.

    The reply (memory text: snippets, a file's lines) is sent here, on Celery's ``rpc://``
    result backend, to the asking client's reply queue only; what the task returns is
    :func:`reply_summary` (counts and ids), all that Celery logs ("succeeded in …") and puts
    in the task-succeeded event Flower shows.
    """
    from pipeline.messages import QueryReply, QueryRequest

    node = self.request.hostname
    try:
        request = QueryRequest.from_json(message)
        settings = runtime.readable(request.memory, arrival_shard(self))
    except MessageRefused as exc:
        log.error("refused a query: %s", exc)
        reply = QueryReply(error=str(exc), kind="refused", node=node)
        op = None
    else:
        op = request.op
        with runtime.warm(request.memory, settings) as memory:
            reply = runtime.reader().reply_to(memory, request, node)
    self.backend.store_result(self.request.id, reply.to_json(), states.SUCCESS,
                              request=self.request)
    return reply_summary(op, reply)


def reply_summary(op: str | None, reply: QueryReply) -> dict[str, Any]:
    """What a reply is, without its text: the operation, the error's kind, and how many items
    (search hits, jobs, files) the answer holds."""
    answer = reply.answer
    items = answer.get("results") if isinstance(answer, dict) else answer
    return {"op": op, "error_kind": reply.kind,
            "items": len(items) if isinstance(items, list | dict) else None}


# Answers go straight back to the asking client (its reply queue), not to the job log.
answer_query.backend = RPCBackend(app=app)


def served_shards(queues: list[str]) -> dict[str, list[int]]:
    """The shards whose stores a worker consuming ``queues`` serves, by role."""
    out: dict[str, list[int]] = {"writer": [], "reader": []}
    for queue in queues:
        shard = shard_of_queue(queue)
        if shard is None:
            continue
        if queue.startswith(STORE_PREFIX + "."):
            out["writer"].append(shard)
        elif queue.startswith(QUERY_PREFIX + "."):
            out["reader"].append(shard)
    return out


def claim_served(home: Path, queues: list[str], node: str) -> list[Path]:
    """Claim the shards a worker ``node`` consuming ``queues`` serves (:func:`served_shards`)
    in the data dir ``home`` (its settings' ``data_dir``); the claim files written."""
    return [path for role, shards in served_shards(queues).items() if shards
            for path in claim_in(home / CLAIMS_FOLDER, shards, node, role)]


def _own_data_dir() -> Path:
    """The data dir of this worker's own settings; the process's environment's when they
    cannot be loaded (the same folder: a worker's settings come from its environment; a
    broken config is reported with the first message)."""
    try:
        return runtime.settings_for(runtime.default_memory()).data_dir
    except Exception as exc:
        log.warning("claiming in the environment's data dir: no settings: %s", exc)
        return data_dir()


class WrongHost(SystemExit):
    """Raised at worker startup: this host does not hold the stores of a shard the worker
    would serve (propagates through Celery's signal dispatch and exits)."""


def _stores_here(shard: int) -> tuple[int, int]:
    """How many of ``shard``'s memories (of this worker's configuration) have their store in
    this host's data dir, and how many memories the shard has."""
    here = total = 0
    for name in runtime.memories():
        settings = runtime.settings_for(name)
        if settings.fleet.shard_of(name) == shard:
            total += 1
            here += settings.store.path.exists()
    return here, total


def refuse_wrong_host(home: Path, queues: list[str], node: str) -> None:
    """Refuse to start (:class:`WrongHost`) a worker ``node`` of a shard whose stores this
    host's data dir ``home`` does not hold: none of the shard's memories has a store here,
    and live workers serve the shard that never claimed it in ``home`` (another host's). Such a
    worker would answer the shard's searches from empty stores (``keyword-only []``). A stale
    claim of the shard in ``home`` (of no live worker) is dropped too: it would make this
    host's own searches read empty stores. ``fleet.localShards`` set to shard numbers or
    ``"none"`` is this host's word: a shard it leaves out is refused; ``"all"`` is not checked.
    A shard nobody else serves starts (a new host, a lost host's replacement); so does every
    worker of settings without a broker (nothing to ask)."""
    served = served_shards(queues)
    shards = sorted({*served["writer"], *served["reader"]})
    if not shards:
        return
    try:
        own = runtime.settings_for(runtime.default_memory())
        local, broker_url = own.fleet.local_shards, own.broker_url
        bare = {s: _stores_here(s) for s in shards}
    except Exception as exc:  # a broken config is reported with the first message
        log.warning("could not check that this host holds its shards' stores: %s", exc)
        return
    if local == "all":
        return
    if local == "none" or isinstance(local, tuple):
        listed = () if local == "none" else local
        if outside := [s for s in shards if s not in listed]:
            raise WrongHost(f"memq: refusing to start {node}: fleet.localShards "
                            f"(MEMQ_LOCAL_SHARDS) says this host does not hold shard "
                            f"{outside[0]}'s stores ({local!r})")
        return
    bare = {s: counts for s, counts in bare.items() if counts[0] == 0}
    if not bare or not broker_url:
        return
    try:
        nodes = queue_consumers(broker_url)
    except Exception as exc:  # the broker is down: the worker itself will wait for it
        log.warning("could not check who serves shard(s) %s (%s: %s)", sorted(bare),
                    type(exc).__name__, exc)
        return
    folder = home / CLAIMS_FOLDER
    for shard, (_, total) in bare.items():
        others = sorted(n for n, q in nodes.items() if n != node
                        and (query_queue(shard) in q or store_queue(shard) in q))
        if not others or set(others) & set(claim_nodes(folder, shard)):
            continue  # nobody serves it, or a worker of this very data dir does
        stale = " (its stale claim of the shard here was dropped)" if unclaim_in(
            folder, [shard]) else ""
        raise WrongHost(
            f"memq: refusing to start {node}: shard {shard} is served by {', '.join(others)} "
            f"from another host, and this host's data dir {home} holds none of the shard's "
            f"{total} stores{stale}: it would answer the shard's searches from empty stores. "
            f"Start the shard's workers where its stores are; to move the shard here, stop "
            f"its writer there and run `memq shard copy --shard {shard}` here first.")


@worker_init.connect
def claim_and_recover(sender: Any = None, **_: Any) -> None:
    """Claim this worker's shards in its settings' data dir, unless they are served from
    another host's (:func:`refuse_wrong_host`); a writer ends its predecessor's cut-off jobs
    (runs after :mod:`workers.single_writer` took the shards' leases)."""
    if os.environ.get(BROKER_DIR_ENV):  # the embedded fleet of one run: nothing to claim
        return
    queues = list(sender.app.amqp.queues.consume_from)
    node = str(sender.hostname)
    home = _own_data_dir()
    refuse_wrong_host(home, queues, node)
    claim_served(home, queues, node)
    writers = served_shards(queues)["writer"]
    if writers:  # in a child process: the job log's SQLAlchemy stays out of an idle writer
        in_child_process(end_cut_off_jobs, writers, node)


def end_cut_off_jobs(shards: list[int], node: str) -> int:
    """Mark failed the jobs of ``shards``' control queues that a previous run of the writer
    left running (it was killed or crashed mid-job; only one writer holds a shard, so no
    live worker runs them). How many."""
    try:
        own = runtime.settings_for(runtime.default_memory())
        jobs = runtime.jobs(own, scoped=False)
    except Exception as exc:  # a broken config is reported with the first message
        log.warning("could not look for cut-off jobs: %s", exc)
        return 0
    ended = 0
    for shard in shards:
        for job in jobs.running_on(control_queue(shard)):
            jobs.failed(job.id, f"cut off: the writer of shard {shard} stopped while it ran "
                                f"(killed or crashed); {node} started afterwards. Its "
                                "message, if the broker kept it, runs it again.",
                        {"memory": job.memory, "origin": job.origin, "host": job.host,
                         "store": job.store, "startedAt": job.started_at})
            ended += 1
    if ended:
        log.warning("ended %d job(s) a previous writer left running", ended)
    return ended
