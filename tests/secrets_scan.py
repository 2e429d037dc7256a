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

_findings: list[str] = []


def leaks_in_files(root: Path) -> list[str]:
    """Logs and stores under ``root`` that hold the sentinel."""
    needle = SENTINEL.encode()
    return [str(p) for p in root.rglob("*")
            if p.name.endswith(SCANNED_SUFFIXES) and p.is_file() and needle in p.read_bytes()]


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


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = getattr(factory, "_basetemp", None)
    if basetemp is not None:
        _findings.extend(f"file {p}" for p in leaks_in_files(Path(basetemp)))
    if not _findings:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", "the sentinel API key leaked", red=True)
        for finding in _findings:
            reporter.write_line(f"  {finding}")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
