"""What every benchmark script shares: the scratch folder, the common flags, the header line."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def add_common_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--seed", type=int, default=7, help="seed for the generated data (7)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")


class _Quick(argparse.Action):
    """``--quick``: sets the sizes it was made with (flags given after it still apply)."""

    def __init__(self, option_strings: list[str], dest: str, sizes: dict[str, object],
                 **kwargs: object) -> None:
        self.sizes = sizes
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, True)
        for name, value in self.sizes.items():
            setattr(namespace, name, value)


def add_quick_arg(ap: argparse.ArgumentParser, **sizes: object) -> None:
    """``--quick``: a smoke run of every row at the tiny ``sizes`` (argument dests and values),
    for the test suite (tests/test_bench_scripts.py); its figures mean nothing."""
    shown = " ".join(f"--{name.replace('_', '-')} {value}" for name, value in sizes.items())
    ap.add_argument("--quick", action=_Quick, sizes=sizes,
                    help=f"a smoke run of every row: {shown} (flags after it still apply)")


def add_fleet_args(ap: argparse.ArgumentParser) -> None:
    """The flags of the benchmarks that start a fleet of ``memq worker`` processes."""
    ap.add_argument("--embed", type=int, default=2, help="embed workers (2)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds to wait at most (600)")


@contextmanager
def scratch(prefix: str, keep: bool) -> Iterator[Path]:
    """A temporary folder for stores and workspaces, removed at the end unless ``keep``."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield tmp
    finally:
        if keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def header(title: str, **fields: object) -> str:
    """The first line of a report: what, when, and how busy the machine was (figures from a
    loaded machine are only comparable as ratios)."""
    extra = "  ".join(f"{k}={v}" for k, v in fields.items())
    return (f"memq {title} benchmark  {dt.datetime.now().isoformat(timespec='seconds')}  "
            f"commit={code_commit()}  nproc={os.cpu_count()}  "
            f"load(1 min)={os.getloadavg()[0]:.2f}  {extra}")


def code_commit() -> str:
    """The commit of the code measured (short hash, ``+changes`` when the checkout has
    uncommitted changes to tracked files; ``unknown`` outside a git checkout)."""
    repo = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def paired_runs(sides: tuple[str, str], counts: dict[str, tuple[int, int]],
                times: dict[str, list[float]], loads: dict[str, list[float]], *,
                width: int, ready: str) -> tuple[float, list[float]]:
    """Print one row per side of runs that alternated in pairs (its chunks, ``ready``: what
    was made of them, best and median seconds, every run with the load it ran at); the
    ratio of the two sides' medians and each pair's ratio, first side over second."""
    print(f"{'run':<{width}}{'chunks':>7}{ready:>8}{'best s':>8}{'median s':>9}  "
          "runs (s @ load)")
    for side in sides:
        runs = "  ".join(f"{t:.1f}@{lo:.1f}" for t, lo in zip(times[side], loads[side],
                                                               strict=True))
        print(f"{side:<{width}}{counts[side][0]:>7}{counts[side][1]:>8}"
              f"{min(times[side]):>8.1f}{float(statistics.median(times[side])):>9.1f}  {runs}")
    first, second = (statistics.median(times[side]) for side in sides)
    pairs = [x / y for x, y in zip(*(times[side] for side in sides), strict=True)]
    return first / second, pairs


def parse_docs_pairs(ap: argparse.ArgumentParser) -> argparse.Namespace:
    """The arguments of a bench that times ``--docs`` documents in ``--pairs`` alternating
    pairs (both already added): the common ones and ``--quick`` (12 documents, one pair)
    added, parsed, the counts checked."""
    add_common_args(ap)
    add_quick_arg(ap, docs=12, pairs=1)
    args = ap.parse_args()
    if args.docs < 1 or args.pairs < 1:
        ap.error("--docs and --pairs must be >= 1")
    return args
