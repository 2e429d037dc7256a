"""A whole-suite secrets check (a pytest plugin loaded by conftest): every test that hands memq an
API key hands it :data:`SENTINEL`, and the session fails if the sentinel turns up where a
secret must never be.

Scanned: every test's captured output and logs and its failure text (exception messages
included), every worker log and SQLite store (with its WAL) left under pytest's temporary
folders, and every key left on a test's Redis database before it is flushed. The key itself
lives in test code, environments and config files, which are not scanned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

SENTINEL = "sk-memq-SENTINEL-7f3a9c2e5b1d"
#: Every provider key variable memq reads (AWS's secret key, session token and Bedrock API
#: key, and the GitHub token of Copilot, included).
PROVIDER_KEY_VARS = ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "VOYAGE_API_KEY",
                     "MISTRAL_API_KEY", "OLLAMA_API_KEY", "AWS_SECRET_ACCESS_KEY",
                     "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK", "COPILOT_GITHUB_TOKEN")
SCANNED_SUFFIXES = (".log", ".sqlite", ".sqlite-wal", ".sqlite-journal", ".db", ".db-wal")
#: A transcript line of every kind of secret OpenClaw 2026.9.6 masks in session transcripts
#: (``%s`` is the secret), each a made-up value marked ``memq`` where its format allows. A test
#: indexes them (tests/test_openclaw_sessions.py); the scan looks for every one as it does for
#: the sentinel.
TRANSCRIPT_SECRETS: tuple[tuple[str, str], ...] = (
    ("OPENAI_API_KEY=%s", "memq-env-0123456789abcdef"),
    ('DB_PASSWORD="%s"', "memq-quoted-0123456789abc"),
    ('{"apiKey": "%s"}', "memq-json-0123456789abcdef"),
    ('{"cardNumber": "%s"}', "4000056655665556"),
    ("'client_secret': '%s'", "memq-cs-0123456789abcdefg"),
    ("--api-key=%s", "memq-flag-0123456789abcde"),
    ("--password %s", "memq-pw-0123456789abcdefg"),
    ("Authorization: Bearer %s", "memqBearer0123456789abcdef"),
    ("Authorization: Basic %s", "bWVtcTpwYXNzd29yZC0wMTIzNDU2Nzg5"),
    ("Authorization: Bot %s", "MEMQ0123456789.abcdef.ghijklmnopqrstuv"),
    ("Proxy-Authorization: Digest %s", "memq-digest-0123456789abc"),
    ("x-api-token: %s", "memq-xapi-0123456789abcde"),
    ("X-OpenClaw-Token: %s", "memq-oc-0123456789abcdefg"),
    ("curl -H 'Bearer %s'", "memqStandalone0123456789ab"),
    ("https://alice:%s@example.com/x", "memq-url-0123456789abcdef"),
    ("mongodb+srv://bob:%s@cluster0.example.net", "memq-mongo-0123456789abcd"),
    ("token=%s&user=bob", "memq-form-0123456789abcdef"),
    ('password="%s"', "memq-pwq-0123456789abcdef"),
    ("passphrase: %s", "memq-pp-0123456789abcdefg"),
    ("db-password = %s", "memq-dbp-0123456789abcdef"),
    ("stripe.api_key = %s", "memq-sak-0123456789abcdef"),
    ("-----BEGIN PRIVATE KEY-----\n%s\n-----END PRIVATE KEY-----",
     "MIIEvQIBADANmemqSENTINELkqhkiG9w0BAQEFAASC"),
    ("aws_secret_access_key = %s", "memqSENTINELwJalrXUtnFEMI/K7MDENG/bPxRfi"),
    ("%s", "sk-memq-vendor-0123456789ab"),
    ("%s", "ghp_memq0123456789abcdefghijABCDEFGH"),
    ("%s", "github_pat_memq0123456789_abcdefghijklmnop"),
    ("%s", "gho_memq0123456789abcdef"),
    ("%s", "ghu_memq0123456789abcdef"),
    ("%s", "ghs_memq0123456789abcdef"),
    ("%s", "ghr_memq0123456789abcdef"),
    ("%s", "glpat-memq0123456789abcdefgh"),
    ("%s", "xoxb-memq-0123456789-abcdefgh"),
    ("%s", "xapp-memq-0123456789-abcdef"),
    ("%s", "https://hooks.slack.com/services/TMEMQ0123/BMEMQ0123/memq0123456789abcdefghij"),
    ("%s", "gsk_memq0123456789abcdefgh"),
    ("%s", "AIzaMEMQ0123456789abcdefghijklm"),
    ("%s", "ya29.memq0123456789abcdef"),
    ("%s", "eyJtZW1xIjoiMSJ9.eyJzdWIiOiJtZW1xIn0.memq0123456789ab"),
    ("%s", "pplx-memq0123456789abcdefgh"),
    ("%s", "fal_memq0123456789abcdefgh"),
    ("key %s", "fc-memq0123456789abcdefgh"),
    ("%s", "sk_live_memq0123456789abcdef"),
    ("%s", "rk_live_memq0123456789abcdef"),
    ("%s", "SG.memq0123456789ab.memq0123456789ab"),
    ("%s", "npm_memq0123456789abcdefghijklmnop"),
    ("%s", "pypi-memq0123456789abcdefgh"),
    ("%s", "dop_v1_memq0123456789abcdef"),
    ("%s", "hf_memq0123456789abcdefghij"),
    ("%s", "r8_memq0123456789abcdefghij"),
    ("key %s", "AKIAMEMQSENTINEL0001"),
    ("key %s", "ASIAMEMQSENTINEL0002"),
    ("%s", "xai-memq0123456789abcdefghijklmnopqrstu"),
    ("%s", "tvly-memq0123456789abcdefgh"),
    ("telegram bot%s", "123456789:AAmemq0123456789abcdefghij"),
    ("telegram %s", "987654321:AAmemq0123456789abcdefghij"),
)

_findings: list[str] = []


def leaks_in_files(root: Path) -> list[str]:
    """Logs and stores under ``root`` that hold the sentinel or a transcript secret."""
    needles = [SENTINEL.encode(), *(secret.encode() for _, secret in TRANSCRIPT_SECRETS)]
    found = []
    for path in root.rglob("*"):
        if path.name.endswith(SCANNED_SUFFIXES) and path.is_file():
            data = path.read_bytes()
            if any(needle in data for needle in needles):
                found.append(str(path))
    return found


def leaks_in_redis(client: Any) -> list[str]:
    """Keys of a Redis database whose name or value holds the sentinel (lists, hashes, sets,
    sorted sets and strings: every shape kombu and Celery leave behind)."""
    needle = SENTINEL.encode()
    found = []
    for key in client.scan_iter(count=500):
        if needle in key or any(needle in v for v in _values(client, key)):
            found.append(key.decode(errors="replace"))
    return found


def _values(client: Any, key: bytes) -> list[bytes]:
    kind = client.type(key).decode()
    if kind == "string":
        return [client.get(key) or b""]
    if kind == "list":
        return client.lrange(key, 0, -1)
    if kind == "hash":
        return [b"%b=%b" % item for item in client.hgetall(key).items()]
    if kind == "set":
        return list(client.smembers(key))
    if kind == "zset":
        return client.zrange(key, 0, -1)
    return []


def record_redis(client: Any, where: str) -> None:
    """Called by the broker fixture before it flushes a test's database."""
    _findings.extend(f"{where}: Redis key {k}" for k in leaks_in_redis(client))


def _found(finding: str) -> None:
    if finding not in _findings:  # a phase's report repeats the sections of earlier phases
        _findings.append(finding)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for section, text in report.sections:
        if SENTINEL in text:
            _found(f"{report.nodeid}: {section}")
    if report.failed and SENTINEL in report.longreprtext:
        _found(f"{report.nodeid}: failure text ({report.when})")


#: Where a pytest-xdist worker leaves what it found, in its own temporary folder, which lies
#: inside the controller's: the controller reads every such file at the end.
WORKER_FINDINGS = "secrets-findings.txt"


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = getattr(factory, "_basetemp", None)
    if hasattr(session.config, "workerinput"):  # an xdist worker: its controller reports
        if _findings and factory is not None:
            (factory.getbasetemp() / WORKER_FINDINGS).write_text("\n".join(_findings) + "\n")
        return
    if basetemp is not None:
        _findings.extend(f"file {p}" for p in leaks_in_files(Path(basetemp)))
        for found in sorted(Path(basetemp).rglob(WORKER_FINDINGS)):
            _findings.extend(line for line in found.read_text().splitlines() if line)
    if not _findings:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", "the sentinel API key leaked", red=True)
        for finding in _findings:
            reporter.write_line(f"  {finding}")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
