"""The sentinel key through a representative mix of everything that can print, log, store or
send an error: a rejected key, retries and a provider failure through real workers, ``memq
status`` and ``memq jobs``, and MCP searches. Every output, worker log, the store's bytes and
Redis are scanned for it. The scanner itself (tests/secrets_scan.py, which also checks the
whole suite at session end) is first shown to find a planted key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import REPO, redis_client, run_memq, write_config
from tests.fakes.bedrock_double import BedrockDouble, TemporaryKey
from tests.fakes.copilot_double import CopilotDouble
from tests.fakes.provider_doubles import Fault, ProviderDouble
from tests.secrets_scan import (
    PROVIDER_KEY_VARS,
    SENTINEL,
    WORKER_FINDINGS,
    leaks_in_files,
    leaks_in_redis,
)

pytestmark = pytest.mark.integration


def test_the_scanner_finds_a_planted_key(tmp_path: Path, broker_url: str) -> None:
    planted = [tmp_path / "worker.log", tmp_path / "memq.sqlite-wal"]
    planted[0].write_text(f"oops {SENTINEL}\n")
    planted[1].write_bytes(b"\0" * 64 + SENTINEL.encode())
    (tmp_path / "clean.log").write_text("nothing here\n")
    try:
        assert sorted(Path(p).name for p in leaks_in_files(tmp_path)) == ["memq.sqlite-wal",
                                                                          "worker.log"]
    finally:
        for path in planted:  # not a leak of memq's: the session-end scan must not see them
            path.unlink()
    client = redis_client(broker_url)
    try:
        client.lpush("embed.openai", json.dumps({"args": [SENTINEL]}))
        client.hset("unacked", "t1", f"Bearer {SENTINEL}")
        client.set("clean", "x")
        assert sorted(leaks_in_redis(client)) == ["embed.openai", "unacked"]
    finally:
        client.delete("embed.openai", "unacked")  # not a leak of memq's: don't fail the session
        client.close()


def _mcp_search(env: dict[str, str], workspace: Path, cfg: Path) -> str:
    params = StdioServerParameters(
        command=sys.executable, cwd=str(REPO), env=env,
        args=["-m", "memq.cli", "mcp", "--workspace", str(workspace), "--config", str(cfg)])

    async def run() -> str:
        with anyio.fail_after(60):
            async with Client(params, read_timeout_seconds=60) as client:
                found = await client.call_tool("memory_search", {"query": "Zigbee antenna"})
                got = await client.call_tool("memory_get", {"path": "../../etc/passwd"})
                return "\n".join(c.text for r in (found, got) for c in r.content)

    return anyio.run(run)


def test_sentinel_key_never_leaks_anywhere(workspace: Path, tmp_path: Path, broker_url: str,
                                           fleet) -> None:
    keys = dict.fromkeys(PROVIDER_KEY_VARS, SENTINEL)
    fleet.env.update(keys)
    fleet.start(["store.0"], "writer")
    fleet.start(["embed.openai"], "embed")
    outputs: list[str] = []
    env = {**os.environ, **keys, "MEMQ_BROKER_URL": broker_url}

    def memq(*args: str, cfg: Path) -> str:
        done = run_memq(*args, "--workspace", str(workspace), "--config", str(cfg), env=env,
                        timeout=120)
        outputs.append(done.stdout + done.stderr)
        return done.stdout + done.stderr

    # 1. The key is rejected: the double echoes it in its 401 body, as OpenAI does.
    with ProviderDouble("openai", api_key="sk-the-right-key") as rejecting:
        rejected_cfg = write_config(tmp_path / "rejected.json", provider="openai",
                                    remote={"baseUrl": rejecting.url},
                                    store={"path": str(tmp_path / "rejected.sqlite")})
        memq("index", cfg=rejected_cfg)
        status = memq("status", "--json", cfg=rejected_cfg)
        assert "HTTP 401" in status  # the refusal is reported (scrubbed)
        outputs.append(_mcp_search(env, workspace, rejected_cfg))
        assert {r.status for r in rejecting.embed_requests()} == {401}
    # 2. Retries, then a provider failure that marks chunks failed with its reason.
    script = [Fault("429", retry_after=0.2), Fault("500"), Fault("503"), Fault("quota")]
    with ProviderDouble("openai", api_key=SENTINEL, script=script) as flaky:
        cfg = write_config(tmp_path / "flaky.json", provider="openai",
                           remote={"baseUrl": flaky.url},
                           store={"path": str(tmp_path / "flaky.sqlite")})
        memq("index", cfg=cfg)
        status = memq("status", "--json", cfg=cfg)
        assert "quota exhausted" in status, status
        memq("jobs", cfg=cfg)
        outputs.append(_mcp_search(env, workspace, cfg))
        assert {r.status for r in flaky.embed_requests()} >= {429, 500, 503, 200}
    fleet.stop()
    places = {"command output": "\n".join(outputs), "worker logs": fleet.logs(None)}
    leaks = leaks_everywhere(places, tmp_path, broker_url)
    assert "memq.embed_chunks" in places["worker logs"]  # the logs were really read
    assert leaks == []


def test_aws_and_copilot_secrets_never_leak(workspace: Path, tmp_path: Path, broker_url: str,
                                            fleet) -> None:
    """Bedrock and GitHub Copilot through real workers: a refused signature, a refused GitHub
    token, then a Bedrock index that goes through after a 500. The AWS secret key, session
    token and Bedrock API key and the GitHub token are all the sentinel (set in every
    process's environment); no output, worker log, store or Redis key holds it."""
    key_id = "AKIAIOSFODNN7EXAMPLE"
    with BedrockDouble(keys={key_id: TemporaryKey(SENTINEL, SENTINEL)},
                       script=[Fault("500")]) as bedrock, \
            BedrockDouble(keys={key_id: "another-secret"}) as refusing, \
            CopilotDouble(tokens=("ghu_someone_else",)) as copilot:
        env_keys = {**dict.fromkeys(PROVIDER_KEY_VARS, SENTINEL), "AWS_ACCESS_KEY_ID": key_id}
        env_keys.pop("AWS_BEARER_TOKEN_BEDROCK")  # (it would be preferred to the keys)
        fleet.env.update({**env_keys, "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": bedrock.url})
        fleet.start(["store.0"], "writer")
        fleet.start(["embed.bedrock", "embed.github-copilot"], "embed")
        env = {**os.environ, **env_keys, "MEMQ_BROKER_URL": broker_url}
        outputs: list[str] = []

        def memq(*args: str, cfg: Path, endpoint: str) -> str:
            done = run_memq(*args, "--workspace", str(workspace), "--config", str(cfg),
                            env={**env, "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": endpoint},
                            timeout=120)
            outputs.append(done.stdout + done.stderr)
            return done.stdout + done.stderr

        refused_cfg = write_config(tmp_path / "refused.json", provider="bedrock",
                                   store={"path": str(tmp_path / "refused.sqlite")})
        memq("index", cfg=refused_cfg, endpoint=refusing.url)
        copilot_cfg = write_config(tmp_path / "copilot.json", provider="github-copilot",
                                   remote={"baseUrl": copilot.root + "/capi",
                                           "apiKey": "${COPILOT_GITHUB_TOKEN}"},
                                   store={"path": str(tmp_path / "copilot.sqlite")})
        memq("index", cfg=copilot_cfg, endpoint=bedrock.url)
        assert "HTTP 401" in memq("status", "--json", cfg=copilot_cfg, endpoint=bedrock.url)
        cfg = write_config(tmp_path / "bedrock.json", provider="bedrock",
                           store={"path": str(tmp_path / "bedrock.sqlite")})
        memq("index", cfg=cfg, endpoint=bedrock.url)
        memq("status", "--json", cfg=cfg, endpoint=bedrock.url)
        outputs.append(_mcp_search({**env, "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": bedrock.url},
                                   workspace, cfg))
        assert {r.status for r in bedrock.invocations()} >= {500, 200}
        assert {r.status for r in refusing.invocations()} == {403}
    fleet.stop()
    places = {"command output": "\n".join(outputs), "worker logs": fleet.logs(None)}
    leaks = leaks_everywhere(places, tmp_path, broker_url)
    assert leaks == []


def leaks_everywhere(places: dict[str, str], root: Path, broker_url: str) -> list[str]:
    """Where the sentinel shows: the texts of ``places``, the files under ``root``, Redis."""
    leaks = [where for where, text in places.items() if SENTINEL in text]
    leaks += leaks_in_files(root)
    client = redis_client(broker_url)
    try:
        leaks += leaks_in_redis(client)
    finally:
        client.close()
    return leaks


def test_the_session_scan_sees_what_parallel_workers_found(tmp_path: Path) -> None:
    """Under pytest-xdist each worker's Redis findings and files reach the controller, which
    fails the session: a finding is never left behind in a worker process."""
    (tmp_path / "test_leaky.py").write_text(
        "from tests.secrets_scan import SENTINEL, record_redis\n\n"
        "class OneKeyRedis:\n"
        "    def scan_iter(self, count):\n"
        "        return [b'unacked']\n"
        "    def type(self, key):\n"
        "        return b'string'\n"
        "    def get(self, key):\n"
        "        return SENTINEL.encode()\n\n"
        "def test_leaves_a_log(tmp_path):\n"
        "    (tmp_path / 'worker.log').write_text(SENTINEL)\n\n"
        "def test_leaves_a_redis_key():\n"
        "    record_redis(OneKeyRedis(), 'test_leaky')\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
             "tests.secrets_scan", "-n", "2", "--basetemp", str(tmp_path / "inner"),
             "test_leaky.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=120)
    finally:  # planted, not memq's: this session's own scan must not find them
        for name in ("worker.log", WORKER_FINDINGS):
            for planted in (tmp_path / "inner").rglob(name):
                planted.unlink()
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout + done.stderr
    assert "2 passed" in done.stdout and "the sentinel API key leaked" in done.stdout
    assert "test_leaky: Redis key unacked" in done.stdout
    assert "worker.log" in done.stdout
