"""Benchmark: keyword-only indexing of many files, and a no-op re-sync, against simple floors.

Not a test. One run, on one generated workspace of ``--files`` small notes (default 10,000):

full index (empty store):
  (a) memq: ``run_index`` with ``provider: none`` (what ``memq index`` does without a provider):
      list, stat, read, hash, chunk, write chunk + FTS rows, in the store;
  (b) floor: the same files read, chunked and inserted into the same schema in ONE transaction,
      with no diffing and no bookkeeping (as fast as this schema can be filled from Python).
no-op re-sync (nothing changed on disk):
  (c) memq: ``run_index`` again on the same store;
  (d) floor: walk the folder with ``os.scandir`` and stat every file (what any change detector
      that trusts mtime+size must do at least);
  (e) naive: read and sha256 every file (a re-sync that trusts only content hashes).

    .venv/bin/python bench/keyword_index.py [--files 10000] [--repeat 3] [--seed 7] [--keep]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from harness import add_common_args, add_quick_arg, header, scratch
from notes import bullet

from pipeline.config import Settings, load_settings
from pipeline.ingest.chunking import chunk_markdown
from pipeline.store import schema
from pipeline.store.engine import connect
from pipeline.store.writer import chunk_id
from workers.indexing import run_index

FOLDERS = 100


def make_workspace(root: Path, files: int, seed: int) -> int:
    """``files`` notes of 3-12 lines in ``FOLDERS`` sub-folders; returns the bytes written."""
    rng = random.Random(seed)
    total = 0
    for i in range(files):
        folder = root / "memory" / f"topic-{i % FOLDERS:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        lines = [f"# Note {i}", ""] + ["- " + bullet(rng) for _ in range(rng.randint(3, 12))]
        data = ("\n".join(lines) + "\n").encode("utf-8")
        (folder / f"note-{i:05d}.md").write_bytes(data)
        total += len(data)
    return total


def make_settings(tmp: Path, workspace: Path, store: Path) -> Settings:
    cfg = tmp / f"memq-{store.stem}.json"
    cfg.write_text(json.dumps({"provider": "none", "store": {"path": str(store)}}),
                   encoding="utf-8")
    return load_settings(config_file=cfg, workspace=workspace, env={})


def all_files(root: Path) -> list[str]:
    out: list[str] = []
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.name.endswith(".md"):
                    out.append(entry.path)
    return out


def floor_full(workspace: Path, store: Path, settings: Settings) -> int:
    """Read, chunk and insert every file in one transaction; returns the chunk count."""
    db = connect(store, want_vectors=False)
    schema.ensure_schema(db)
    now = time.time()
    rows = []
    for path in sorted(all_files(workspace / "memory")):
        rel = os.path.relpath(path, workspace)
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8")
        for c in chunk_markdown(text, settings.chunking.tokens, settings.chunking.overlap):
            rows.append((chunk_id("memory", rel, c), rel, "memory", c.start_line, c.end_line,
                         c.hash, c.text, now))
    with schema.transaction(db) as conn:
        conn.executemany(
            "INSERT INTO chunks(id, path, source, start_line, end_line, hash, text, state, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?)", rows)
    db.close()
    return len(rows)


def floor_stat(workspace: Path) -> int:
    paths = all_files(workspace / "memory")
    for path in paths:
        os.stat(path)
    return len(paths)


def naive_hash(workspace: Path) -> int:
    paths = all_files(workspace / "memory")
    for path in paths:
        with open(path, "rb") as fh:
            hashlib.sha256(fh.read()).hexdigest()
    return len(paths)


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=10_000, help="notes to generate (10000)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="no-op re-sync rounds; the median is reported (3)")
    add_common_args(ap)
    add_quick_arg(ap, files=200, repeat=1)
    args = ap.parse_args()

    with scratch("memq-bench-kw-", args.keep) as tmp:
        workspace = tmp / "workspace"
        size = make_workspace(workspace, args.files, args.seed)
        settings = make_settings(tmp, workspace, tmp / "memq.sqlite")
        floor_settings = make_settings(tmp, workspace, tmp / "floor.sqlite")
        naive_hash(workspace)  # warm the page cache: every run below reads from memory

        t_floor, floor_chunks = timed(lambda: floor_full(workspace, tmp / "floor.sqlite",
                                                         floor_settings))
        t_full, run = timed(lambda: run_index(settings, wait=True))
        if run.report.changed != args.files or run.report.failed:
            raise SystemExit(f"full index did not index every file: {run.report}")
        db = connect(settings.store.path, want_vectors=False)
        chunks = db.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        db.close()
        if chunks != floor_chunks:
            raise SystemExit(f"memq stored {chunks} chunks, the floor {floor_chunks}")

        noop, stat, naive = [], [], []
        for _ in range(args.repeat):
            t, again = timed(lambda: run_index(settings, wait=True))
            if again.report.changed or again.report.deleted:
                raise SystemExit(f"no-op re-sync changed something: {again.report}")
            noop.append(t)
            stat.append(timed(lambda: floor_stat(workspace))[0])
            naive.append(timed(lambda: naive_hash(workspace))[0])
        report(args, size, chunks, t_full, t_floor, statistics.median(noop),
               statistics.median(stat), statistics.median(naive))


def report(args: argparse.Namespace, size: int, chunks: int, t_full: float, t_floor: float,
           t_noop: float, t_stat: float, t_naive: float) -> None:
    print(header("keyword-only index", files=args.files))
    print(f"workspace: {args.files} files, {size / 1e6:.1f} MB, {chunks} chunks")
    print()
    print(f"{'run':<48}{'seconds':>9}{'files/s':>10}{'ratio':>8}")
    rows = [
        ("full index", None, None),
        ("(a) memq run_index, provider none", t_full, t_full / t_floor),
        ("(b) floor: read+chunk+insert, 1 transaction", t_floor, 1.0),
        (f"no-op re-sync (median of {args.repeat})", None, None),
        ("(c) memq run_index, nothing changed", t_noop, t_noop / t_stat),
        ("(d) floor: scandir + stat every file", t_stat, 1.0),
        ("(e) naive: read + sha256 every file", t_naive, t_naive / t_stat),
    ]
    for name, secs, ratio in rows:
        if secs is None:
            print(name)
            continue
        print(f"  {name:<46}{secs:>9.3f}{args.files / secs:>10.0f}{ratio:>7.2f}x")
    print()
    verdict = "OK" if t_noop < 1.0 else "ABOVE TARGET"
    print(f"no-op re-sync of {args.files} files: {t_noop:.3f} s (target < 1 s: {verdict}); "
          f"memq/naive-hash {t_noop / t_naive:.2f}x")
    print(f"full index: memq/floor {t_full / t_floor:.2f}x")


if __name__ == "__main__":
    main()
