"""Benchmark: a one-shot ``memq search`` as a fresh process, beside ``memq --help``.

Not a test. A copy of the sample workspace (examples/workspace) is indexed twice into temp
stores with ``memq index``: once with the local model (memq's default all-MiniLM-L6-v2 from
the usual cache, or ``--model``), once keyword-only (``MEMQ_PROVIDER=none``). Then one run
takes turns, repetition by repetition, so load drift on a shared machine hits every row alike,
between fresh processes of:

  memq --help                  Python start-up and the CLI's imports: the floor of any command
  memq search, local model     what a user runs: settings, store, model load, query embedding,
                               hybrid search
  memq search, keyword-only    the same without a model
  model load (python -c)       ``LocalProvider(...).dims``: what an embed worker does before
                               its first job (imports and model load, no Celery)

``--baseline DIR`` adds the search and model-load rows again run from another checkout of
memq (``PYTHONPATH=DIR``, same interpreter and packages), e.g. main before a change:
``git archive main | tar -x -C /tmp/memq-main``. Every search row is checked once (``--json``)
to answer in the mode it claims (hybrid with the local model, or keyword-only).

    .venv/bin/python bench/oneshot_latency.py [--reps 9] [--model PATH] [--baseline DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from harness import add_common_args, header, scratch

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "examples" / "workspace"
MEMQ = Path(sys.executable).with_name("memq")
QUERY = "what time does Ana start school"
LOAD_MODEL = ("import sys; from pipeline.embeddings.local import LocalProvider; "
              "LocalProvider(sys.argv[1] or None).dims")


def run(argv: list[str], env: dict[str, str]) -> str:
    """Run one fresh process in a neutral folder (``python -c`` imports from its working
    directory first); its stdout, or exit with its stderr if it failed."""
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False,
                          cwd=env["MEMQ_BENCH_CWD"])
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return proc.stdout


def memq_env(store: Path, provider: str, model: str | None, pythonpath: str | None
             ) -> dict[str, str]:
    """The environment of one configuration: no config file, its own store and provider."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMQ_")}
    env.update(MEMQ_CONFIG="none", MEMQ_STORE_PATH=str(store), MEMQ_PROVIDER=provider,
               MEMQ_BENCH_CWD=str(store.parent))
    if model:
        env["MEMQ_LOCAL_MODEL_PATH"] = model
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def check_search(argv: list[str], env: dict[str, str], mode: str) -> str:
    """Run the search once with --json; make sure it answers in ``mode``; return its model."""
    out = json.loads(run([*argv, "--json"], env))
    if out["mode"] != mode or not out["results"]:
        sys.exit(f"{' '.join(argv)} answered in mode {out['mode']!r} with "
                 f"{len(out['results'])} results, expected {mode!r}: {out.get('warning', '')}")
    return f"{out['provider']}/{out['model']}" if out["provider"] else "none"


def checkout_of(env: dict[str, str]) -> Path:
    """The folder the ``pipeline`` package is imported from under ``env``."""
    code = "import pipeline, pathlib; print(pathlib.Path(pipeline.__file__).parent.parent)"
    return Path(run([sys.executable, "-c", code], env).strip())


def interleaved(rows: list[tuple[str, list[str], dict[str, str]]], reps: int
                ) -> dict[str, np.ndarray]:
    """Wall seconds of ``reps`` fresh runs of each row, taking turns; one untimed warm-up."""
    times: dict[str, list[float]] = {name: [] for name, _, _ in rows}
    for rep in range(reps + 1):
        for name, argv, env in rows:
            t0 = time.perf_counter()
            run(argv, env)
            if rep:
                times[name].append(time.perf_counter() - t0)
    return {name: np.array(t) for name, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9, help="timed runs per row (9)")
    ap.add_argument("--model", help="GGUF for the local rows (default: memq's default model)")
    ap.add_argument("--baseline", type=Path,
                    help="another memq checkout to time beside this one (PYTHONPATH=DIR)")
    ap.add_argument("--no-keyword", action="store_true", help="leave out the keyword-only row")
    add_common_args(ap)
    args = ap.parse_args()
    print(header("one-shot latency", reps=args.reps), flush=True)
    with scratch("memq-bench-oneshot-", args.keep) as tmp:
        workspace = tmp / "workspace"
        shutil.copytree(SAMPLE, workspace)
        search = [str(MEMQ), "search", QUERY, "--workspace", str(workspace)]
        local = memq_env(tmp / "local.sqlite", "local", args.model, None)
        keyword = memq_env(tmp / "keyword.sqlite", "none", None, None)
        for name, env in (("local model", local), ("keyword-only", keyword)):
            if name == "keyword-only" and args.no_keyword:
                continue
            t0 = time.perf_counter()
            run([str(MEMQ), "index", "--workspace", str(workspace)], env)
            print(f"  indexed {SAMPLE.relative_to(REPO)} ({name}) in "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
        model = check_search(search, local, "hybrid")
        print(f"  local rows use {model}")
        rows = [("memq --help", [str(MEMQ), "--help"], local),
                ("memq search, local model", search, local)]
        if not args.no_keyword:
            check_search(search, keyword, "keyword-only")
            rows.append(("memq search, keyword-only", search, keyword))
        load = [sys.executable, "-c", LOAD_MODEL, args.model or ""]
        rows.append(("model load (python -c)", load, local))
        if args.baseline is not None:
            base = args.baseline.resolve()
            base_env = memq_env(tmp / "local.sqlite", "local", args.model, str(base))
            if checkout_of(base_env) != base:
                sys.exit(f"{base} does not provide the pipeline package (no pipeline/ there?)")
            check_search(search, base_env, "hybrid")
            rows += [("memq search, local model [baseline]", search, base_env),
                     ("model load (python -c) [baseline]", load, base_env)]
            print(f"  baseline: {base}")
        times = interleaved(rows, args.reps)
    floor = float(np.median(times["memq --help"]))
    print(f"\n  {'fresh process':<38}{'median s':>9}{'min s':>8}{'max s':>8}{'/help':>8}")
    for name, t in times.items():
        med = float(np.median(t))
        print(f"  {name:<38}{med:>9.3f}{t.min():>8.3f}{t.max():>8.3f}{med / floor:>7.2f}x")


if __name__ == "__main__":
    main()
