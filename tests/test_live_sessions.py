"""Live session transcripts in OpenClaw 2026.9's agent database, written by OpenClaw itself.

OpenClaw's CLI writes the database offline: ``openclaw doctor --session-sqlite import`` moves a
legacy ``sessions/<id>.jsonl`` (and ``sessions.json``) into ``agent/openclaw-agent.sqlite``
with its own schema and writer (records of 1 KiB or more zstd-compressed), and run again with a
longer file it appends the missing records to the live transcript. The tests read what it
wrote, follow it as it grows, and read it while another process writes (Node's ``node:sqlite``,
the driver OpenClaw uses) without failing it or holding a lock.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.embeddings.registry import choose_provider
from pipeline.errors import MemoryPathError
from pipeline.ingest.live_sessions import (
    agent_database,
    indexable,
    is_agent_folder_noise,
    live_sessions,
)
from pipeline.ingest.producer import index_once
from pipeline.ingest.session_text import wrap
from pipeline.ingest.transcripts import transcript
from pipeline.ingest.watcher import Watcher, watch_targets
from pipeline.query import memory_get, memory_search
from pipeline.search.decay import note_time
from pipeline.store import reads
from pipeline.store.engine import choose_driver, connect
from pipeline.store.openclaw_agent import LiveTranscript
from tests.conftest import REPO, run_memq
from tests.tools import node_env, tool

#: A SQLite as recent as OpenClaw's (its schema's triggers call ``octet_length``, 3.43+).
sqlite3 = choose_driver()[1]
MAIN = "11111111-2222-4333-8444-555555555555"
CRON = "33333333-2222-4333-8444-555555555555"
SECRET = "sk-livesessiontest0123456789"
LONG = " ".join(["the billing service keeps its invoices in PostgreSQL tables"] * 40)


def message(n: int, role: str, text: str) -> dict:
    return {"type": "message", "id": f"m{n}", "parentId": f"m{n - 1}" if n > 1 else None,
            "timestamp": f"2026-09-20T10:00:{n:02d}.000Z",
            "message": {"role": role, "content": [{"type": "text", "text": text}],
                        "timestamp": 1789898400000 + n * 1000}}


def header(session_id: str) -> dict:
    return {"type": "session", "version": 3, "id": session_id,
            "timestamp": "2026-09-20T10:00:00.000Z", "cwd": "/tmp"}


MAIN_RECORDS = [
    header(MAIN),
    message(1, "user", "Which database did we pick for billing?"),
    message(2, "assistant", LONG),  # stored zstd-compressed by OpenClaw
    message(3, "user", f"The deploy token is {SECRET} keep it safe"),
    message(4, "assistant", "Understood, the gate code is 4471."),
]
CRON_RECORDS = [header(CRON), message(1, "user", "nightly cron report: all green")]


@dataclass
class OpenClawHome:
    """An OpenClaw state folder (``OPENCLAW_STATE_DIR``) with one agent, ``main``."""

    root: Path

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def sessions(self) -> Path:
        return self.state / "agents" / "main" / "sessions"

    @property
    def database(self) -> Path:
        return self.state / "agents" / "main" / "agent" / "openclaw-agent.sqlite"

    def doctor_import(self, transcripts: dict[str, list[dict]],
                      keys: dict[str, str] | None = None) -> None:
        """Have OpenClaw import legacy JSONL transcripts into its database (a longer copy of
        a live transcript appends the records it lacks)."""
        self.sessions.mkdir(parents=True, exist_ok=True)
        for session_id, records in transcripts.items():
            (self.sessions / f"{session_id}.jsonl").write_text(
                "\n".join(json.dumps(r) for r in records) + "\n")
        if keys:
            (self.sessions / "sessions.json").write_text(json.dumps(
                {key: {"sessionId": sid, "updatedAt": 1789898400000}
                 for key, sid in keys.items()}))
        config = self.state / "openclaw.json"
        if not config.exists():
            config.write_text("{}")
        env = node_env({"PATH": os.environ.get("PATH", ""), "HOME": str(self.root),
                        "OPENCLAW_STATE_DIR": str(self.state),
                        "OPENCLAW_CONFIG_PATH": str(config)})
        done = subprocess.run([str(tool("openclaw")), "doctor", "--session-sqlite", "import",
                               "--non-interactive"], env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "0 issue(s)" in done.stdout, done.stdout


@pytest.fixture(scope="module")
def openclaw_made(tmp_path_factory: pytest.TempPathFactory) -> OpenClawHome:
    """A database OpenClaw wrote: the main conversation and a cron run, both live."""
    home = OpenClawHome(tmp_path_factory.mktemp("openclaw"))
    home.doctor_import({MAIN: MAIN_RECORDS, CRON: CRON_RECORDS},
                       keys={"agent:main:main": MAIN, "agent:main:cron:nightly:run:r1": CRON})
    return home


@pytest.fixture
def home(openclaw_made: OpenClawHome, tmp_path: Path) -> OpenClawHome:
    """A copy of :func:`openclaw_made` of this test's own."""
    copy = OpenClawHome(tmp_path / "openclaw")
    shutil.copytree(openclaw_made.root, copy.root, symlinks=True)
    return copy


@pytest.fixture
def live_settings(home: OpenClawHome, workspace: Path, make_settings) -> Callable[..., object]:
    def make(**keys: object):
        keys.setdefault("provider", "none")
        return make_settings(workspace, sources=["memory", "sessions"],
                             experimental={"sessionMemory": True},
                             sessionsDir=str(home.sessions), **keys)

    return make


def session_rows(db) -> list[tuple[str, int, int, str]]:
    return db.conn.execute("SELECT path, start_line, end_line, text FROM chunks WHERE "
                           "source = 'sessions' ORDER BY path, start_line").fetchall()


def checkpoint_and_close(database: Path) -> None:
    """What OpenClaw's last connection does on close: fold the WAL in and remove it."""
    conn = sqlite3.connect(database)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    assert not Path(f"{database}-wal").exists()


def test_openclaw_writes_compressed_records(openclaw_made: OpenClawHome) -> None:
    """The fixture is what the tests claim: OpenClaw's schema, a zstd record among plain ones."""
    conn = sqlite3.connect(f"file:{openclaw_made.database}?mode=ro&immutable=1", uri=True)
    try:
        version = conn.execute("SELECT schema_version, app_version FROM schema_meta").fetchone()
        stored = conn.execute("SELECT seq, event_json IS NULL, event_zstd IS NOT NULL FROM "
                              "transcript_events WHERE session_id = ? ORDER BY seq",
                              (MAIN,)).fetchall()
    finally:
        conn.close()
    assert version == (23, "2026.9.6")
    assert stored == [(0, 0, 0), (1, 0, 0), (2, 1, 1), (3, 0, 0), (4, 0, 0)]


def test_live_transcripts_indexed_under_openclaws_paths(home: OpenClawHome,
                                                        live_settings) -> None:
    settings = live_settings()
    checkpoint_and_close(home.database)  # OpenClaw is not running: no -wal, no -shm
    before = sorted(os.listdir(home.database.parent))
    db = connect(settings.store.path)
    try:
        report = index_once(db, settings, choose_provider(settings), None)
        rows = session_rows(db)
        known = reads.known_files(db)
    finally:
        db.close()
    assert report.errors == []
    assert sorted(os.listdir(home.database.parent)) == before  # nothing created beside it
    path = f"sessions/main/{MAIN}.jsonl"
    # It ages (temporal decay) from its last change in the database, as a file from its mtime.
    conn = sqlite3.connect(f"file:{home.database}?mode=ro&immutable=1", uri=True)
    changed_ms = conn.execute("SELECT transcript_updated_at FROM session_windows WHERE "
                              "session_id = ?", (MAIN,)).fetchone()[0]
    conn.close()
    assert known[path][1] == changed_ms * 1_000_000
    assert note_time(path, known[path][1]) == pytest.approx(changed_ms / 1000)
    assert {r[0] for r in rows} == {path}  # the cron run is left out, as OpenClaw does
    text = "\n".join(r[3] for r in rows)
    assert "User: Which database did we pick for billing?" in text
    assert "keeps its invoices in PostgreSQL" in text  # the compressed record, decoded
    # redacted as OpenClaw 2026.9.6 does: a long token keeps its head and tail
    assert SECRET not in text and "The deploy token is sk-liv…6789" in text
    assert (rows[0][1], rows[-1][2]) == (2, 5)  # record lines: the header is line 1
    hit = memory_search("gate code 4471", settings=settings)["results"][0]
    assert (hit["path"], hit["source"]) == (path, "sessions")
    assert "Assistant: Understood, the gate code is 4471." in text
    # A turn longer than 800 characters is wrapped, as OpenClaw does (test_openclaw_sessions.py)
    wrapped = wrap(LONG)
    assert len(wrapped) == 3 and " ".join(wrapped) == LONG
    lines = text.split("\n")
    assert all(f"Assistant: {segment}" in lines for segment in wrapped)
    # memory_get refuses session paths, as OpenClaw 2026.9.6 does (tests/test_openclaw_get.py)
    for refused in (path, f"sessions/main/{CRON}.jsonl", "sessions/main/nope.jsonl"):
        with pytest.raises(MemoryPathError):
            memory_get(refused, settings=settings)
    assert sorted(os.listdir(home.database.parent)) == before


def test_a_legacy_copy_of_a_live_session_is_not_indexed_twice(home: OpenClawHome,
                                                              live_settings) -> None:
    settings = live_settings()
    legacy = home.sessions / f"{MAIN}.jsonl"
    legacy.write_text("\n".join(json.dumps(r) for r in MAIN_RECORDS[:2]) + "\n")
    (home.sessions / "older.jsonl").write_text(json.dumps(message(1, "user", "old talk")))
    db = connect(settings.store.path)
    try:
        index_once(db, settings, choose_provider(settings), None)
        assert {r[0] for r in session_rows(db)} == {f"sessions/main/{MAIN}.jsonl",
                                                    "sessions/main/older.jsonl"}
        # A watcher batch naming only the legacy file does not bring it in either.
        index_once(db, settings, choose_provider(settings), None, paths=[legacy])
        assert {r[0] for r in session_rows(db)} == {f"sessions/main/{MAIN}.jsonl",
                                                    "sessions/main/older.jsonl"}
    finally:
        db.close()


def append_record(database: Path, session_id: str, event: dict) -> None:
    """Append one record as OpenClaw's transcript writer does (one immediate transaction,
    ``transcript_updated_at`` moved strictly forward)."""
    text = json.dumps(event)
    now = int(time.time() * 1000)
    conn = sqlite3.connect(database, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        seq = conn.execute("SELECT max(seq) + 1 FROM transcript_events WHERE session_id = ?",
                           (session_id,)).fetchone()[0]
        conn.execute("INSERT INTO transcript_events (session_id, seq, event_json, created_at, "
                     "event_utf8_bytes) VALUES (?, ?, ?, ?, ?)",
                     (session_id, seq, text, now, len(text.encode())))
        conn.execute("UPDATE session_windows SET transcript_updated_at = max(?, coalesce("
                     "transcript_updated_at, -1) + 1) WHERE session_id = ?", (now, session_id))
        conn.execute("COMMIT")
    finally:
        conn.close()


def test_delta_thresholds_and_compaction_apply_to_live_transcripts(home: OpenClawHome,
                                                                   live_settings) -> None:
    settings = live_settings(sync={"sessions": {"deltaMessages": 3}})
    db = connect(settings.store.path)
    choice = choose_provider(settings)

    def texts() -> str:
        index_once(db, settings, choice, None)
        return "\n".join(r[3] for r in session_rows(db))

    try:
        assert "gate code is 4471" in texts()
        append_record(home.database, MAIN, message(5, "user", "first small turn"))
        append_record(home.database, MAIN, message(6, "assistant", "second small turn"))
        assert "small turn" not in texts()  # 2 new records: under deltaMessages
        append_record(home.database, MAIN, message(7, "user", "third small turn"))
        assert "third small turn" in texts()
        append_record(home.database, MAIN, message(8, "user", "after the summary"))
        assert "after the summary" not in texts()
        append_record(home.database, MAIN, {"type": "compaction", "id": "c1", "summary": "s",
                                            "firstKeptEntryId": "m8", "tokensBefore": 10})
        assert "after the summary" in texts()  # postCompactionForce
    finally:
        db.close()


def test_without_a_recorded_last_change_the_records_tell(home: OpenClawHome,
                                                         live_settings) -> None:
    """A transcript whose ``transcript_updated_at`` is not recorded (older rows) is sized from
    its records on every pass, and its newest record's time stands for its last change."""
    settings = live_settings(sync={"sessions": {"deltaMessages": 1}})
    conn = sqlite3.connect(home.database)
    conn.execute("UPDATE session_windows SET transcript_updated_at = NULL")
    conn.commit()
    conn.close()
    db = connect(settings.store.path)
    choice = choose_provider(settings)
    try:
        index_once(db, settings, choice, None)
        text = json.dumps(message(5, "user", "no clock on this one"))
        conn = sqlite3.connect(home.database)
        conn.execute("INSERT INTO transcript_events (session_id, seq, event_json, created_at, "
                     "event_utf8_bytes) VALUES (?, 5, ?, 1799999999000, ?)",
                     (MAIN, text, len(text)))
        conn.commit()
        conn.close()
        index_once(db, settings, choice, None)
        assert "no clock on this one" in "\n".join(r[3] for r in session_rows(db))
        assert reads.known_files(db)[f"sessions/main/{MAIN}.jsonl"][1] == 1799999999000 * 10**6
    finally:
        db.close()


def test_a_busy_or_foreign_database_keeps_what_was_indexed(home: OpenClawHome,
                                                           live_settings) -> None:
    settings = live_settings()
    db = connect(settings.store.path)
    choice = choose_provider(settings)
    try:
        index_once(db, settings, choice, None)
        indexed = session_rows(db)
        # A writer holding the database in rollback mode locks readers out.
        conn = sqlite3.connect(home.database, isolation_level=None)
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("BEGIN EXCLUSIVE")
        try:
            started = time.monotonic()
            report = index_once(db, settings, choice, None)
            waited = time.monotonic() - started
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        assert session_rows(db) == indexed
        assert any("locked" in e and "kept" in e for e in report.errors), report.errors
        assert waited < 5  # it did not wait on the lock for long
        # Not an OpenClaw database at all: said so, nothing deleted.
        for suffix in ("", "-wal", "-shm"):
            Path(f"{home.database}{suffix}").unlink(missing_ok=True)
        sqlite3.connect(home.database).execute("CREATE TABLE other (x)").connection.close()
        report = index_once(db, settings, choice, None)
        assert session_rows(db) == indexed
        assert any("not an OpenClaw 2026.9 agent database" in e for e in report.errors)
        # No database any more: its live transcripts are gone.
        home.database.unlink()
        index_once(db, settings, choice, None)
        assert session_rows(db) == []
    finally:
        db.close()


def test_forgotten_sessions_leave_the_index(home: OpenClawHome, live_settings) -> None:
    settings = live_settings()
    db = connect(settings.store.path)
    try:
        index_once(db, settings, choose_provider(settings), None)
        assert session_rows(db)
        conn = sqlite3.connect(home.database)
        conn.execute("INSERT INTO memory_session_tombstones VALUES (?, 'main', 'forget', 0)",
                     (MAIN,))
        conn.commit()
        conn.close()
        index_once(db, settings, choose_provider(settings), None)
        assert session_rows(db) == []
    finally:
        db.close()
    with pytest.raises(MemoryPathError):  # and memory_get never reads a session path
        memory_get(f"sessions/main/{MAIN}.jsonl", settings=settings)


def _live(key: str, entry: dict | None = None, **kw: object) -> LiveTranscript:
    values = {"updated_ms": 1, "cold": False, "forgotten": False, **kw}
    return LiveTranscript(key.rsplit(":", 1)[-1], key, json.dumps(entry or {}), **values)


def test_which_live_sessions_openclaw_indexes() -> None:
    kept = indexable([
        _live("agent:main:main"),
        _live("agent:main:telegram:direct:42"),
        _live("agent:main:cron:nightly:run:r1"),
        _live("agent:main:subagent:s1", {"spawnedBy": "agent:main:cron:nightly:run:r1"}),
        _live("agent:main:dreaming-narrative-7"),
        _live("agent:main:hb", {"heartbeatIsolatedBaseSessionKey": "agent:main:main"}),
        _live("agent:main:gone", forgotten=True),
        _live("agent:main:cron:nightly"),  # the job's own key, not a run
    ])
    assert [t.session_key for t in kept] == ["agent:main:main", "agent:main:telegram:direct:42",
                                             "agent:main:cron:nightly"]


def test_transcript_text_is_redacted() -> None:
    raw = json.dumps(message(1, "user", f"OPENAI_API_KEY={SECRET} and Bearer {'x' * 30}"))
    # OpenClaw 2026.9.6's masking (tests/test_openclaw_sessions.py): head and tail of long tokens
    assert transcript(raw).text == "User: OPENAI_API_KEY=sk-liv…6789 and Bearer xxxxxx…xxxx"


def test_the_watcher_follows_the_database_folder(home: OpenClawHome, live_settings) -> None:
    settings = live_settings()
    folder = agent_database(settings).parent
    assert (folder, False) in watch_targets(settings)
    for name, noise in (("openclaw-agent.sqlite", False), ("openclaw-agent.sqlite-wal", False),
                        ("openclaw-agent.sqlite-shm", True), ("auth.json", True)):
        assert is_agent_folder_noise(settings, folder / name) is noise, name


@pytest.mark.parametrize("polling", [False, True], ids=["inotify", "polling"])
def test_watch_picks_up_a_message_openclaw_appends(home: OpenClawHome, live_settings,
                                                   polling: bool) -> None:
    settings = live_settings(sync={"sessions": {"deltaMessages": 1}})
    choice = choose_provider(settings)
    db = connect(settings.store.path)
    index_once(db, settings, choice, None)
    batches: list[set[Path]] = []

    def on_batch(paths: set[Path]) -> None:
        batches.append(paths)
        index_once(db, settings, choice, None, paths=paths)

    watcher = Watcher(settings, on_batch, debounce_s=0.3, polling=polling, poll_interval_s=0.2)
    thread = threading.Thread(target=watcher.run)
    thread.start()
    try:
        time.sleep(0.5)
        home.doctor_import({MAIN: [*MAIN_RECORDS, message(5, "user", "we moved to Valkey")]})
        deadline = time.monotonic() + 60
        found = ""
        while time.monotonic() < deadline and "Valkey" not in found:
            time.sleep(0.2)
            reader = connect(settings.store.path)
            try:
                found = "\n".join(r[3] for r in session_rows(reader))
            finally:
                reader.close()
    finally:
        watcher.stop()
        thread.join(10)
        db.close()
    assert "User: we moved to Valkey" in found, batches
    assert any(home.database.parent in {p.parent for p in b} for b in batches)


WRITER = """
import { DatabaseSync } from "node:sqlite";
const [path, sessionId, count] = process.argv.slice(2);
const db = new DatabaseSync(path);
// Opening: OpenClaw's own busy timeout (OPENCLAW_SQLITE_BUSY_TIMEOUT_MS). The first read of a
// WAL database builds its shared index, and whichever connection opens at the same moment
// (memq's, or a second OpenClaw one) waits for that recovery: SQLITE_BUSY_RECOVERY.
db.exec("PRAGMA busy_timeout = 5000");
const next = db.prepare("SELECT max(seq) + 1 AS seq FROM transcript_events WHERE session_id = ?");
const insert = db.prepare("INSERT INTO transcript_events (session_id, seq, event_json, " +
  "created_at, event_utf8_bytes) VALUES (?, ?, ?, ?, ?)");
// OpenClaw moves transcript_updated_at strictly forward on every change.
const touch = db.prepare("UPDATE session_windows SET transcript_updated_at = " +
  "max(?, coalesce(transcript_updated_at, -1) + 1) WHERE session_id = ?");
db.exec("PRAGMA busy_timeout = 0");  // from here any lock memq held would fail a write at once
const pause = new Int32Array(new SharedArrayBuffer(4));
for (let i = 0; i < Number(count); i++) {
  const now = Date.now();
  const event = JSON.stringify({type: "message", id: `w${i}`, parentId: null,
    timestamp: new Date(now).toISOString(),
    message: {role: "user", content: [{type: "text", text: `writer turn ${i}`}],
              timestamp: now}});
  db.exec("BEGIN IMMEDIATE");
  insert.run(sessionId, next.get(sessionId).seq, event, now, Buffer.byteLength(event));
  touch.run(now, sessionId);
  db.exec("COMMIT");
  Atomics.wait(pause, 0, 0, 3);
}
db.close();
"""


def test_reading_while_a_writer_appends(home: OpenClawHome, live_settings,
                                        tmp_path: Path) -> None:
    settings = live_settings(sync={"sessions": {"deltaMessages": 1}})
    script = tmp_path / "writer.mjs"
    script.write_text(WRITER)
    writer = subprocess.Popen([str(tool("node")), "--no-warnings", str(script),
                               str(home.database), MAIN, "400"],
                              env=node_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    db = connect(settings.store.path)
    choice = choose_provider(settings)
    passes, errors = 0, []
    try:
        while writer.poll() is None:
            errors += index_once(db, settings, choice, None).errors
            passes += 1
        _, err = writer.communicate(timeout=60)
        assert writer.returncode == 0, err  # never refused a write, never waited on memq
        errors += index_once(db, settings, choice, None).errors
        text = "\n".join(r[3] for r in session_rows(db))
    finally:
        if writer.poll() is None:
            writer.kill()
        db.close()
    assert errors == []
    assert passes >= 3, passes  # memq read while the writer wrote
    assert "User: writer turn 399" in text and "writer turn 0\n" in text + "\n"
    # memq holds no read mark between passes: a full checkpoint goes through at once.
    conn = sqlite3.connect(home.database, timeout=0)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.close()
    assert busy == 0


def test_no_database_no_live_sessions(live_settings, home: OpenClawHome) -> None:
    shutil.rmtree(home.database.parent)
    scan = live_sessions(live_settings())
    assert scan is not None and scan.sessions == [] and scan.error is None


ZSTD = """
import { zstdCompressSync } from "node:zlib";
import { readFileSync, writeFileSync } from "node:fs";
writeFileSync(process.argv[3], zstdCompressSync(readFileSync(process.argv[2])));
"""


def test_archives_beside_the_live_transcripts(home: OpenClawHome, live_settings,
                                              tmp_path: Path) -> None:
    """OpenClaw 2026.9's archives of reset and deleted sessions (zstd-compressed by its Node)
    are indexed beside the live transcripts; its other .jsonl artifacts are not transcripts."""
    settings = live_settings()
    old = "44444444-2222-4333-8444-555555555555"
    plain = tmp_path / "old.jsonl"
    plain.write_text("\n".join(json.dumps(r) for r in [
        header(old), message(1, "user", "the old conversation chose Redis streams")]) + "\n")
    script = tmp_path / "zstd.mjs"
    script.write_text(ZSTD)
    archive = home.sessions / f"{old}.jsonl.reset.2026-09-19T08-30-00.123Z.zst"
    subprocess.run([str(tool("node")), str(script), str(plain), str(archive)], env=node_env(),
                   check=True, timeout=60)
    deleted = home.sessions / f"{old}.jsonl.deleted.2026-09-19T09-00-00Z"
    shutil.copy(plain, deleted)
    for other in (f"{MAIN}.trajectory.jsonl", f"{old}.jsonl.bak.2026-09-19T08-30-00Z"):
        shutil.copy(plain, home.sessions / other)
    db = connect(settings.store.path)
    try:
        report = index_once(db, settings, choose_provider(settings), None)
        rows = session_rows(db)
        paths = {r[0] for r in rows}
    finally:
        db.close()
    assert report.errors == []
    # OpenClaw 2026.9.6's path of a file in the agent's folder (sessionPathForFile)
    assert paths == {f"sessions/main/{MAIN}.jsonl", f"sessions/main/{archive.name}",
                     f"sessions/main/{deleted.name}"}
    texts = {r[0]: r[3] for r in rows}
    assert texts[f"sessions/main/{archive.name}"] == (
        "User: the old conversation chose Redis streams")


def test_memq_watch_search_and_get_on_a_live_session(home: OpenClawHome, live_settings,
                                                     workspace: Path, tmp_path: Path) -> None:
    """The real ``memq watch`` follows OpenClaw appending to a live transcript; ``memq
    search`` finds the new turn under OpenClaw's path and ``memq get`` opens it."""
    settings = live_settings(sync={"sessions": {"deltaMessages": 1}})
    args = ["--workspace", str(workspace), "--config", str(settings.config_file)]
    env = {"MEMQ_HOME": str(tmp_path / "home"), "MEMQ_BROKER_URL": "", "REDIS_URL": ""}
    path = f"sessions/main/{MAIN}.jsonl"

    def search(query: str) -> list[dict]:
        done = run_memq("search", *args, "--json", query, env=env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["results"]

    log_path = tmp_path / "watch.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "memq.cli", "watch", *args,
                                 "--debounce-ms", "300"], cwd=REPO,
                                env={**os.environ, **env}, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not search("gate code 4471"):
                time.sleep(0.5)
            assert search("gate code 4471")[0]["path"] == path, log_path.read_text()
            home.doctor_import({MAIN: [*MAIN_RECORDS,
                                       message(5, "user", "the zeppelin hangar opens on Fridays")]})
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not search("zeppelin hangar"):
                time.sleep(0.5)
            hits = search("zeppelin hangar")
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(30)
    assert hits and hits[0]["path"] == path, log_path.read_text()
    assert (hits[0]["endLine"], hits[0]["source"]) == (6, "sessions")
    # memq get refuses the session path, as OpenClaw's memory_get does
    got = run_memq("get", *args, path, "--from", "6", "--lines", "1", "--json", env=env)
    assert got.returncode == 2
    assert json.loads(got.stdout)["code"] == "MEMORY_PATH_NOT_ALLOWED", got.stderr


def test_a_pass_over_the_database_keeps_the_folders_archives(home: OpenClawHome,
                                                             live_settings) -> None:
    """The archives and the live transcripts share ``sessions/main/``: a watcher pass that
    saw only the agent database change keeps what the folder holds."""
    settings = live_settings()
    archive = home.sessions / f"{MAIN}.jsonl.reset.2026-09-19T08-30-00.123Z"
    archive.write_text(json.dumps(message(1, "user", "an archived talk about otters")) + "\n")
    (home.sessions / "older.jsonl").write_text(json.dumps(message(1, "user", "old talk")))
    want = {f"sessions/main/{MAIN}.jsonl", f"sessions/main/{archive.name}",
            "sessions/main/older.jsonl"}
    db = connect(settings.store.path)
    try:
        index_once(db, settings, choose_provider(settings), None)
        assert {r[0] for r in session_rows(db)} == want
        report = index_once(db, settings, choose_provider(settings), None,
                            paths=[home.database])
        assert report.deleted == 0 and {r[0] for r in session_rows(db)} == want
        archive.unlink()  # gone from the folder: the same pass sees it go
        index_once(db, settings, choose_provider(settings), None, paths=[home.database])
        assert {r[0] for r in session_rows(db)} == want - {f"sessions/main/{archive.name}"}
    finally:
        db.close()
