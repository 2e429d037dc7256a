"""Session transcripts are indexed as OpenClaw 2026.9.6 cleans them: memq's
:func:`pipeline.ingest.transcripts.transcript` is compared with OpenClaw's own
``buildSessionEntryInProcess`` (the text and line map its memory indexer reads from a
transcript), and :func:`pipeline.ingest.redaction.redact_secrets` with its
``redactSensitiveText`` in "tools" mode, run by Node on the installed package
(tests/openclaw_sessions.mjs) on the same JSONL files and texts."""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from pipeline.ingest.redaction import redact_secrets
from pipeline.ingest.redaction_patterns import DEFAULT_REDACT_PATTERNS
from pipeline.ingest.session_text import HEARTBEAT_PROMPT
from pipeline.ingest.transcripts import transcript
from tests.secrets_scan import TRANSCRIPT_SECRETS, leaks_in_files
from tests.tools import node_env, tool, tools_dir

SCRIPT = Path(__file__).with_name("openclaw_sessions.mjs")
CTX = "⟦openclaw:ctx⟧"


def msg(role: str, content: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "message", "message": {"role": role, "content": content, **extra}}


def user(content: Any, **extra: Any) -> dict[str, Any]:
    return msg("user", content, **extra)


def bot(content: Any, **extra: Any) -> dict[str, Any]:
    return msg("assistant", content, **extra)


HEARTBEAT = {"kind": "internal_system", "sourceTool": "heartbeat"}
RECALL = {"kind": "internal_system", "sourceTool": "memory_search"}
LONG = " ".join(f"word{i}" for i in range(300))  # 2,289 characters: three lines

#: (name, records): every rule of OpenClaw's session cleaning, and lines it keeps.
TRANSCRIPTS: list[tuple[str, list[Any]]] = [
    ("issue_35_thirteen_lines", [
        {"type": "session", "id": "s1", "timestamp": "2026-01-05T09:00:00Z"},
        user("[Mon 2026-01-05 09:00 UTC] Plan the PostgreSQL upgrade for Friday"),
        bot("Noted: PostgreSQL 16 upgrade on Friday."),
        user(HEARTBEAT_PROMPT, provenance=HEARTBEAT),
        bot("HEARTBEAT_OK"),
        user("System: [2026-01-05 10:00] Cron job finished"),
        user("[cron:daily-digest] Summarise yesterday"),
        bot("NO_REPLY"),
        user("what did we decide about postgres?", provenance=RECALL),
        bot("You decided to upgrade PostgreSQL on Friday (memory/2026-01-05.md)."),
        user(f"Conversation info {CTX}\n```json\n{{\"sender\": \"ann\"}}\n```\n\nThanks!"),
        bot(LONG),
        "not json {",
    ]),
    ("heartbeat_turns", [
        user("hello"), bot("hi"),
        user("[OpenClaw heartbeat poll]", provenance=HEARTBEAT),
        bot("All quiet, nothing to report."), bot([{"type": "text", "text": "still quiet"}]),
        user("back again"), bot("HEARTBEAT_OK"), bot("welcome back"),
        user(HEARTBEAT_PROMPT), user("[OpenClaw heartbeat poll]"), user("[OpenClaw cron wake]"),
        user("Run the following periodic tasks (only those due based on their intervals):\n"
             "- check mail\nAfter completing all due tasks, reply HEARTBEAT_OK."),
        bot("heartbeat_ok"), user("HEARTBEAT_OK"),
    ]),
    ("silent_replies", [
        user("ping"), bot("NO_REPLY"), bot("  no_reply  "), bot("NO_REPLY NO_REPLY"),
        bot("**NO_REPLY**"), bot("\"NO_REPLY\""), bot("{\"action\": \"NO_REPLY\"}"),
        bot("<thinking>nothing to add</thinking> NO_REPLY"),
        bot("Thinking:\nI will stay quiet.\nNO_REPLY"), bot("I'll stay quiet. NO_REPLY"),
        bot("Here is the answer. NO_REPLY"), bot("NO_REPLY is the token I use"),
        bot("{\"action\": \"NO_REPLY\", \"x\": 1}"), user("NO_REPLY"),
    ]),
    ("system_cron_exec", [
        user("System: [2026-01-05 10:00] Exec finished"),
        user("System (untrusted): [x] hello"), user("System: no brackets"),
        bot("System: [x] assistant keeps it"), user("[cron:abc 123] run it"),
        user("[cron:] empty"), user("exec completed (abc, code 0) :: done"),
        user("Exec finished: ok"), user("exec failed (job-1, signal SIGTERM)"),
        bot("exec finished (3)"), user("an exec completed (abc, code 0)"),
    ]),
    ("recall_and_inter_session", [
        user("what is my dentist's name?", provenance=RECALL), bot("Dr. Smith."),
        bot("anything else from memory"),
        user("real question", provenance={"kind": "external_user"}), bot("real answer"),
        user("from another session", provenance={"kind": "inter_session"}),
        bot("answer to the routed message"),
        user("memory_get turn", provenance={"kind": "internal_system", "sourceTool": "memory_get"}),
        bot("hidden"),
        user("not internal", provenance={"kind": "other", "sourceTool": "heartbeat"}),
        bot("kept"),
    ]),
    ("inbound_metadata_and_runtime_context", [
        user(f"Sender: {CTX}\n```json\n{{\"label\": \"Ann\"}}\n```\n\nWhat time is it?"),
        user(f"Thread {CTX}\nline a\nline b\n\nActual text here"),
        user("Delivery: to send a message, use the `message` tool.\nShip it"),
        user(f"Question first\n\nContext: {CTX}\nchannel details\nmore"),
        user("Context:\n<active_memory_plugin>\nremembered stuff\n</active_memory_plugin>\n\nHi"),
        user("[Tue 2026-02-03 14:05 GMT+1] timestamped"), user("[Tue 2026-02-03] not a stamp"),
        bot("[Mon 2026-01-05 09:00 UTC] assistant stamps stay"),
        user("before\n<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>\nsecret ctx\n"
             "<<<END_OPENCLAW_INTERNAL_CONTEXT>>>\nafter"),
        bot("<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>\nonly context"),
        user("OpenClaw runtime event. This context is runtime-generated, not user-authored. "
             "Keep internal details private.\nthe event text"),
    ]),
    ("content_shapes_and_wrapping", [
        user([{"type": "text", "text": "first block"}, {"type": "image", "data": "x"},
              {"type": "text", "text": "second\n\n  block"}]),
        bot([{"type": "thinking", "thinking": "hmm"}, {"type": "toolCall", "name": "x"}]),
        bot([]), bot(None), bot(42), msg("toolResult", "tool output"), msg("system", "sys"),
        {"type": "custom", "message": {"role": "user", "content": "custom record"}},
        user("   "), bot("x" * 1700), bot("😀" * 500), bot(("a" * 799) + " " + ("b" * 900)),
        bot(" ".join(["é" * 50] * 40)), user("tab\tand\u00a0nbsp\u2003em space\ufeffbom"),
        user("line\u2028separator"), "", "   ", "[1, 2]", "null",
    ]),
    ("dreaming_narrative", [
        user("before the marker"), bot("kept until the marker"),
        {"type": "custom", "customType": "openclaw:bootstrap-context:full",
         "data": {"runId": "dreaming-narrative-42"}},
        user("after the marker"), bot("also dropped"),
    ]),
    ("edge_cases", [
        user("  HEARTBEAT_OK  "), bot(" HEARTBEAT_OK "), bot("HEARTBEAT_OK."),
        bot("NO_REPLY."), bot("…NO_REPLY…"), bot("<think>x</think>"),
        bot("thinking\nNO_REPLY"), bot("analysis:\nWe have nothing to add. NO_REPLY"),
        user(f"Conversation info {CTX}\n```json\n{{\"a\": 1}}\n"),
        user(f"{CTX}"), user(f"short {CTX}\nkept?"),
        user("Delivery: to send a message, use the `message` tool.\n[OpenClaw heartbeat poll]"),
        user("[Wed 2026-02-04 08:00] [Wed 2026-02-04 08:01] double stamp"),
        user("System: [a]"), user("System: [a] [cron:x] b"),
        bot("exec completed (abc, code 0)"), bot("Exec Finished (42)"),
        user({"type": "text", "text": "a dict is not content"}),
        user([{"type": "text", "text": 5}, {"type": "text"}, "str"]),
        {"type": "message", "message": "not an object"}, {"type": "message"},
        {"type": "message", "message": {"role": "user"}},
        {"type": "message", "message": {"role": "User", "content": "capital role"}},
        user("emoji 😀 " * 120),
    ]),
    ("crlf_and_separators", [
        json.dumps(user("crlf line one")) + "\r", json.dumps(bot("crlf reply")) + "\r",
        "\r", json.dumps(user("after a bare CR")) + "\u2028",
        "  " + json.dumps(bot("indented record")) + "\t",
    ]),
    ("secrets_in_turns", [
        user("my AWS key is AKIAIOSFODNN7EXAMPLE and secret sk-abcdefghijklmnop1234"),
        bot("export OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz123456"),
        user("token ghp_" + "A1b2" * 9 + " and xoxb-1234567890-abcdefghij"),
        bot("Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123456789"),
        user("db postgres://app:hunter2hunter2@db.internal:5432/app"),
        bot("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nabc\n"
            "-----END RSA PRIVATE KEY-----"),
    ]),
]

#: A line of every kind of secret OpenClaw 2026.9.6 masks (its default patterns: assignments
#: and headers, then vendor tokens), from the suite-wide secrets scan.
SECRET_KINDS: list[str] = [line % secret for line, secret in TRANSCRIPT_SECRETS]

TEXTS = [
    *SECRET_KINDS,
    "GITHUB_TOKEN=$GITHUB_TOKEN stays a reference", "API_KEY=${API_KEY:-default}",
    "short sk-abcdefgh1 and OPENAI_API_KEY=abc123xyz", "no secrets here at all",
    "data:image/png;base64,iVBORw0KGgoAKIAIOSFODNN7EXAMPLE", "keys in general are fine",
    "x;BASE64,abc+AKIAIOSFODNN7EXAMPLE", "x;base64, AKIAIOSFODNN7EXAMPLE",
    "data:;base64,AKIAIOSFODNN7EXAMPLE;ASIAIOSFODNN7EXAMPLE",
    ("User: my key is sk-memq-SENTINEL-7f3a9c2e5b1d and OPENAI_API_KEY=abc123xyz, "
     f"Authorization: Bearer abcdefghijklmnopqrstuvwxyz and ghp_{'a' * 24} but keys in general "
     "are fine"),
    "-----BEGIN RSA PRIVATE KEY-----\nMIIsecret\n-----END RSA PRIVATE KEY-----",
    # the texts of other tests' redaction expectations (test_live_sessions, test_qmd_backend)
    f"OPENAI_API_KEY=sk-livesessiontest0123456789 and Bearer {'x' * 30}",
    "The deploy token is sk-livesessiontest0123456789 keep it safe",
    "Remember my espresso order, and my key sk-memq-SENTINEL-7f3a9c2e5b1d",
    "openai() home(/x) args: search what is sk-memq-SENTINEL-7f3a9c2e5b1d",
    "sk-abc " * 3 + "sk-abcdefghijklmnopq",
    ("padding " * 5000) + "ghp_0123456789abcdefghijABCDEFGHIJ012345" + (" tail" * 10),
]


#: Masked by OpenClaw as a form body / URL query parameter (redactFormBody,
#: redactAssignmentValues), which memq does not port: memq masks it through its pattern instead.
FORM_BODIES = ["x-api-key=abc0123456789abcdefghij&next=1"]


@cache
def openclaw(folder: str) -> dict[str, Any]:
    files = [str(Path(folder) / f"{name}.jsonl") for name, _ in TRANSCRIPTS]
    dist = tools_dir() / "openclaw/node_modules/openclaw/dist"
    tool("openclaw")
    home = Path(folder) / "home"
    env = node_env({**node_env(), "HOME": str(home), "OPENCLAW_HOME": str(home),
                    "OPENCLAW_STATE_DIR": str(home / ".openclaw"),
                    "OPENCLAW_CONFIG_PATH": str(home / ".openclaw" / "openclaw.json")})
    done = subprocess.run([str(tool("node")), str(SCRIPT), str(dist)],
                          input=json.dumps({"files": files, "texts": TEXTS + FORM_BODIES}),
                          capture_output=True, text=True, env=env, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def jsonl(records: list[Any]) -> str:
    return "\n".join(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)
                     for r in records) + "\n"


@pytest.fixture(scope="module")
def theirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("transcripts")
    for name, records in TRANSCRIPTS:
        (folder / f"{name}.jsonl").write_text(jsonl(records), encoding="utf-8")
    return openclaw(str(folder))


def test_the_secret_patterns_are_openclaws(theirs: dict[str, Any]) -> None:
    assert list(DEFAULT_REDACT_PATTERNS) == theirs["patterns"]


@pytest.mark.parametrize("index", range(len(TEXTS)))
def test_secrets_are_masked_as_openclaw_masks_them(theirs: dict[str, Any], index: int) -> None:
    assert redact_secrets(TEXTS[index]) == theirs["redacted"][index]


@pytest.mark.parametrize(("index", "name"), list(enumerate(n for n, _ in TRANSCRIPTS)))
def test_transcripts_are_indexed_as_openclaw_indexes_them(theirs: dict[str, Any], index: int,
                                                          name: str) -> None:
    ours = transcript(jsonl(TRANSCRIPTS[index][1]))
    entry = theirs["sessions"][index]
    assert entry is not None
    assert ours.text.split("\n") == entry["content"].split("\n")
    assert list(ours.line_map) == entry["lineMap"]


def test_what_the_thirteen_line_transcript_keeps(theirs: dict[str, Any]) -> None:
    """The example of issue 35: six lines, the recalled memory and the noise gone."""
    text = transcript(jsonl(TRANSCRIPTS[0][1])).text
    assert text.split("\n")[:3] == ["User: Plan the PostgreSQL upgrade for Friday",
                                    "Assistant: Noted: PostgreSQL 16 upgrade on Friday.",
                                    "User: Thanks!"]
    assert len(text.split("\n")) == 6 and "memory/2026-01-05.md" not in text
    assert all(len(line) <= len("Assistant: ") + 800 for line in text.split("\n"))


def test_every_kind_of_secret_is_masked() -> None:
    for line, secret in TRANSCRIPT_SECRETS:
        assert secret not in redact_secrets(line % secret), line
    assert redact_secrets("AKIAIOSFODNN7EXAMPLE") == "AKIAIO…MPLE"
    assert redact_secrets("sk-abcdefghijklmnop1234") == "sk-abc…1234"


def test_form_bodies_are_masked_though_not_as_openclaw_masks_them(theirs: dict[str, Any]) -> None:
    for index, text in enumerate(FORM_BODIES, start=len(TEXTS)):
        assert theirs["redacted"][index] == "x-api-key=***&next=1"
        assert redact_secrets(text) == "x-api-key=abc012…ghij&next=1"  # the secret is gone too


def test_a_transcript_of_every_secret_kind_is_indexed_masked(tmp_path: Path, workspace: Path,
                                                            make_settings) -> None:
    """The suite-wide secrets scan's transcript: indexed, its store holds none of the secrets
    (and the scan at the end of the session looks again)."""
    from pipeline.embeddings.registry import choose_provider
    from pipeline.ingest.producer import index_once
    from pipeline.store.engine import connect

    folder = tmp_path / "sessions"
    folder.mkdir()
    records = [user(line % secret) if i % 2 == 0 else bot(line % secret)
               for i, (line, secret) in enumerate(TRANSCRIPT_SECRETS)]
    (folder / "secrets.jsonl").write_text(jsonl(records), encoding="utf-8")
    settings = make_settings(workspace, sources=["memory", "sessions"], provider="none",
                             experimental={"sessionMemory": True}, sessionsDir=str(folder),
                             store={"path": str(tmp_path / "store" / "memq.sqlite")})
    db = connect(settings.store.path)
    try:
        index_once(db, settings, choose_provider(settings), None)
        text = "\n".join(row[0] for row in db.conn.execute(
            "SELECT text FROM chunks WHERE source = 'sessions'"))
    finally:
        db.close()
    assert "AKIAME…0001" in text and "sk-mem…89ab" in text  # indexed, masked
    assert [secret for _, secret in TRANSCRIPT_SECRETS if secret in text] == []
    assert settings.store.path.parent == tmp_path / "store"
    assert leaks_in_files(tmp_path / "store") == []
    planted = tmp_path / "planted.log"  # the scan knows these secrets
    planted.write_text(f"oops {TRANSCRIPT_SECRETS[-1][1]}\n")
    try:
        assert leaks_in_files(tmp_path) == [str(planted)]
    finally:
        planted.unlink()  # not a leak of memq's: the session-end scan must not see it


def test_a_store_of_uncleaned_transcripts_is_rebuilt_once(tmp_path: Path, workspace: Path,
                                                         make_settings) -> None:
    """A store whose session chunks were made before transcripts had a version (uncleaned, whole
    masks) is rebuilt once, as after a chunking version change; one without sessions is not."""
    from pipeline.ingest.producer import index_fingerprint, index_identity
    from pipeline.ingest.transcripts import TRANSCRIPT_VERSION
    from pipeline.store import schema
    from pipeline.store.engine import connect
    from workers.indexing import run_index

    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "s.jsonl").write_text(jsonl(TRANSCRIPTS[0][1]), encoding="utf-8")
    settings = make_settings(workspace, sources=["memory", "sessions"], provider="none",
                             experimental={"sessionMemory": True}, sessionsDir=str(folder))
    run_index(settings, wait=True)
    db = connect(settings.store.path)
    try:
        old = schema.get_meta(db, "index")
        assert old["transcript_version"] == TRANSCRIPT_VERSION == 2
        del old["transcript_version"]  # as a memq from before the version wrote it
        with schema.transaction(db):
            schema.set_meta(db, "index", old)
    finally:
        db.close()
    first = run_index(settings, wait=True)
    assert first.report.rebuild_needed and first.rebuild is not None and first.rebuild.done
    assert not run_index(settings, wait=True).report.rebuild_needed
    db = connect(settings.store.path)
    try:
        text = "\n".join(r[0] for r in db.conn.execute(
            "SELECT text FROM chunks WHERE source = 'sessions'"))
    finally:
        db.close()
    assert "HEARTBEAT_OK" not in text and "memory/2026-01-05.md" not in text
    memory_only = make_settings(workspace, provider="none")
    identity = index_identity(None, memory_only)
    assert "transcript_version" not in index_fingerprint(identity)  # memory stores keep theirs
