"""What ``memq index`` (and ``Memory.index``, ``memq index --all``) says happened is what
happened: vectors written, chunks still pending, chunks failed with the reason per provider,
read from the store after the run. A run that leaves chunks without a vector says so in one
line and exits 4; ``--no-wait`` says "queued"; a destination no credential applies to is
refused before any request, with OpenClaw 2026.9.6's advice.

Real parts: the loopback provider double (which answers 401 to a wrong key), the real CLI in a
subprocess with its embedded broker and real worker processes, real Redis for ``--no-wait``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from memq import Memory
from pipeline.config import load_settings
from pipeline.embeddings.registry import choose_provider
from pipeline.errors import CredentialsNotConfigured
from tests.conftest import run_memq
from tests.fakes.provider_doubles import ProviderDouble
from tests.secrets_scan import SENTINEL

WRONG = "sk-wrong-key-0123456789abcdef"
ADVICE = ("Set memory.search.remote.apiKey or an Authorization header for this destination.")
#: The exit status of a run that leaves chunks without a vector (README "Using it").
EXIT_NO_VECTOR = 4


def _openclaw(tmp_path: Path, workspace: Path, providers: dict | None = None,
              **memory_search: object) -> Path:
    path = tmp_path / "openclaw.json"
    memory_search.setdefault("provider", "openai")
    path.write_text(json.dumps({
        "agents": {"defaults": {"workspace": str(workspace), "memorySearch": memory_search}},
        "models": {"providers": providers or {}},
    }))
    return path


def _env(tmp_path: Path, config: Path) -> dict[str, str]:
    return {"MEMQ_CONFIG": str(config), "MEMQ_STORE_PATH": str(tmp_path / "m.sqlite"),
            "MEMQ_HOME": str(tmp_path / "home"), "OPENAI_API_KEY": "", "GEMINI_API_KEY": "",
            "GOOGLE_API_KEY": ""}


def test_a_refused_key_fails_the_run_with_the_reason_and_the_counts(
        tmp_path: Path, workspace: Path) -> None:
    """Every chunk refused (HTTP 401): exit 4, 0 embedded, all pending with the provider's
    reason, in one line; the same store indexed with the right key: N embedded, exit 0."""
    with ProviderDouble("openai", api_key=SENTINEL) as double:
        wrong = _openclaw(tmp_path, workspace, remote={"baseUrl": double.url, "apiKey": WRONG})
        env = _env(tmp_path, wrong)
        done = run_memq("index", "--json", env=env, timeout=300)
        assert done.returncode == EXIT_NO_VECTOR, done.stderr
        data = json.loads(done.stdout)
        queued = data["chunksQueued"]
        assert queued > 0 and double.embed_requests()
        assert {r.status for r in double.embed_requests()} == {401}
        assert data["vectorsWritten"] == 0
        assert data["pending"] == queued and data["failedChunks"] == 0
        (reason,) = data["withoutVector"]
        assert reason["provider"] == "openai" and reason["state"] == "pending"
        assert reason["chunks"] == queued and "HTTP 401" in reason["reason"]
        assert WRONG not in done.stdout + done.stderr

        text = run_memq("index", env=env, timeout=300)
        assert text.returncode == EXIT_NO_VECTOR, text.stderr
        lines = [line for line in text.stdout.splitlines() + text.stderr.splitlines()
                 if "no vector" in line]
        assert len(lines) == 1, text.stdout + text.stderr
        assert f"{queued} chunks have no vector" in lines[0]
        assert "openai" in lines[0] and "HTTP 401" in lines[0]
        assert f"chunks: 0 embedded of {queued}" in text.stdout
        assert "embedded through the queue" not in text.stdout
        assert WRONG not in text.stdout + text.stderr

        right = _openclaw(tmp_path, workspace,
                          remote={"baseUrl": double.url, "apiKey": SENTINEL})
        healthy = run_memq("index", "--json", env=_env(tmp_path, right), timeout=300)
        assert healthy.returncode == 0, healthy.stderr
        data = json.loads(healthy.stdout)
        assert data["chunksQueued"] == data["vectorsWritten"] == queued
        assert data["pending"] == data["failedChunks"] == 0 and data["withoutVector"] == []
        again = run_memq("index", env=_env(tmp_path, right), timeout=300)
        assert again.returncode == 0, again.stderr
        assert "no vector" not in again.stdout + again.stderr
        assert SENTINEL not in healthy.stdout + again.stdout + again.stderr


def test_a_healthy_run_reports_every_chunk_embedded(tmp_path: Path, workspace: Path) -> None:
    with ProviderDouble("openai", api_key=SENTINEL) as double:
        cfg = _openclaw(tmp_path, workspace, remote={"baseUrl": double.url, "apiKey": SENTINEL})
        done = run_memq("index", env=_env(tmp_path, cfg), timeout=300)
        assert done.returncode == 0, done.stderr
        texts = sum(len(r.body["input"]) for r in double.embed_requests() if r.status == 200)
        assert texts > 0
        assert f"chunks: {texts} embedded of {texts}, 0 from cache" in done.stdout


def test_a_run_that_changes_nothing_reports_what_the_store_holds(tmp_path: Path,
                                                                 workspace: Path) -> None:
    """README "Using it": a second run with nothing to do says what the store holds, not
    "0 embedded of 0"; ``--json`` gives the same counts."""
    with ProviderDouble("openai", api_key=SENTINEL) as double:
        cfg = _openclaw(tmp_path, workspace, remote={"baseUrl": double.url, "apiKey": SENTINEL})
        first = run_memq("index", "--json", env=_env(tmp_path, cfg), timeout=300)
        assert first.returncode == 0, first.stderr
        chunks = json.loads(first.stdout)["chunksQueued"]
        assert chunks > 0
        again = run_memq("index", env=_env(tmp_path, cfg), timeout=300)
        assert again.returncode == 0, again.stderr
        assert f"chunks: {chunks} in the store, all embedded; nothing changed" in again.stdout
        assert "embedded of 0" not in again.stdout
        data = json.loads(run_memq("index", "--json", env=_env(tmp_path, cfg),
                                   timeout=300).stdout)
        assert (data["chunksInStore"], data["vectorsInStore"]) == (chunks, chunks)
        assert (data["changed"], data["chunksQueued"]) == (0, 0)


def test_the_library_counts_what_the_store_holds(tmp_path: Path, workspace: Path) -> None:
    """``Memory.index`` (in-process embedding): the same counts on the run object."""
    with ProviderDouble("openai", api_key=SENTINEL) as double:
        cfg = _openclaw(tmp_path, workspace, remote={"baseUrl": double.url, "apiKey": WRONG})
        settings = load_settings(config_file=cfg, env=_env(tmp_path, cfg))
        with Memory(settings=settings) as memory:
            run = memory.index()
        assert run.report.chunks_queued > 0 and run.vectors_written == 0
        assert run.pending == run.report.chunks_queued and run.failed_chunks == 0
        assert [(m.provider, m.state, m.chunks) for m in run.without_vector] == [
            ("openai", "pending", run.report.chunks_queued)]
        assert "HTTP 401" in run.without_vector[0].reason
        assert WRONG not in run.without_vector[0].reason


@pytest.mark.integration
def test_no_wait_says_queued(tmp_path: Path, workspace: Path, broker_url: str) -> None:
    """With a broker and no worker yet, nothing is embedded: the summary says queued."""
    with ProviderDouble("openai", api_key=SENTINEL) as double:
        cfg = _openclaw(tmp_path, workspace, remote={"baseUrl": double.url, "apiKey": SENTINEL})
        env = {**_env(tmp_path, cfg), "MEMQ_BROKER_URL": broker_url}
        done = run_memq("index", "--no-wait", env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        data = json.loads(run_memq("index", "--no-wait", "--json", env=env,
                                   timeout=300).stdout)
        assert not double.embed_requests()
    first = [line for line in done.stdout.splitlines() if line.startswith("chunks:")]
    assert first and "queued for embedding" in first[0] and "embedded" not in first[0]
    assert data["vectorsWritten"] is None and data["waited"] is False


def test_index_all_fails_on_a_memory_with_chunks_without_vectors(
        tmp_path: Path, workspace: Path) -> None:
    other = tmp_path / "ws-bad"
    shutil.copytree(workspace, other)
    with ProviderDouble("openai", api_key=SENTINEL) as double:
        listed = [{"id": "good", "default": True, "workspace": str(workspace),
                   "memorySearch": {"provider": "none"}},
                  {"id": "bad", "workspace": str(other)}]
        cfg = tmp_path / "openclaw.json"
        cfg.write_text(json.dumps({"agents": {
            "defaults": {"memorySearch": {
                "provider": "openai", "remote": {"baseUrl": double.url, "apiKey": WRONG},
                "store": {"path": str(tmp_path / "stores" / "{agentId}.sqlite")}}},
            "list": listed}}))
        env = {"MEMQ_CONFIG": str(cfg), "MEMQ_HOME": str(tmp_path / "home")}
        done = run_memq("index", "--all", env=env, timeout=300)
        data = json.loads(run_memq("index", "--all", "--json", env=env, timeout=300).stdout)
    assert done.returncode == EXIT_NO_VECTOR, done.stderr
    bad = [line for line in done.stdout.splitlines() if line.startswith("bad:")]
    assert bad and "have no vector" in bad[0] and "HTTP 401" in bad[0]
    assert "1 of 2 memories left chunks without a vector" in done.stdout
    by_name = {m["memory"]: m for m in data["memories"]}
    assert by_name["bad"]["pending"] > 0 and by_name["bad"]["vectorsWritten"] == 0
    assert by_name["good"]["pending"] == 0 and "error" not in by_name["good"]


# -- a destination no credential applies to ------------------------------------------------


def test_a_key_for_another_destination_is_refused_before_any_request(
        tmp_path: Path, workspace: Path) -> None:
    """The models.providers key belongs to api.openai.com; remote.baseUrl points elsewhere and
    no other credential is set: refused with OpenClaw's message, no request sent, no key
    shown."""
    with ProviderDouble("openai", api_key=None) as double:
        cfg = _openclaw(tmp_path, workspace, {"openai": {"apiKey": SENTINEL}},
                        remote={"baseUrl": double.url})
        env = _env(tmp_path, cfg)  # OPENAI_API_KEY empty
        done = run_memq("index", env=env, timeout=300)
        assert done.returncode == 1, done.stdout
        expected = (f"openai embedding credentials are not configured for {double.url}. "
                    + ADVICE)
        assert expected in done.stderr
        assert SENTINEL not in done.stdout + done.stderr
        assert double.requests == []
        status = json.loads(run_memq("status", "--json", env=env, timeout=120).stdout)
        assert status["vectors"] == 0


def test_which_credentials_apply_to_a_destination(tmp_path: Path, workspace: Path) -> None:
    """OpenClaw's rule (resolveRemoteEmbeddingBearerClient): remote.apiKey applies anywhere,
    an Authorization header in remote.headers too; the models.providers entry only where the
    entry's endpoint (or the default) is the destination, compared as scheme://host:port/path
    (default ports, trailing slash and host case ignored). memq's one difference: the
    environment's key goes to a configured remote.baseUrl too (docs/providers.md)."""
    def choose(providers: dict, env: dict[str, str], **memory_search: object):
        cfg = _openclaw(tmp_path, workspace, providers, **memory_search)
        return choose_provider(load_settings(config_file=cfg, env={
            "MEMQ_STORE_PATH": str(tmp_path / "m.sqlite")}), env=env)

    with ProviderDouble("openai", api_key=SENTINEL) as double:
        refused = [
            ({"openai": {"apiKey": SENTINEL}}, {}, {"baseUrl": double.url}),
            ({"openai": {"apiKey": SENTINEL, "headers": {"Authorization": "Bearer x"}}}, {},
             {"baseUrl": double.url}),  # the entry's headers stay with its endpoint too
        ]
        for providers, env, remote in refused:
            with pytest.raises(CredentialsNotConfigured) as caught:
                choose(providers, env, remote=remote)
            assert str(caught.value) == (f"openai embedding credentials are not configured "
                                         f"for {double.url}. {ADVICE}")
            assert SENTINEL not in str(caught.value)
        same_place = double.url + "/"
        applies = [
            ({}, {}, {"baseUrl": double.url, "apiKey": SENTINEL}),
            ({}, {}, {"baseUrl": double.url, "headers": {"authorization": f"Bearer {SENTINEL}"}}),
            ({"openai": {"baseUrl": same_place, "apiKey": SENTINEL}}, {},
             {"baseUrl": double.url}),
            ({"openai": {"baseUrl": double.url}}, {"OPENAI_API_KEY": SENTINEL},
             {"baseUrl": double.url + "/"}),
            ({"openai": {"baseUrl": double.url, "apiKey": SENTINEL}}, {}, {}),
            ({}, {"OPENAI_API_KEY": SENTINEL}, {"baseUrl": double.url}),  # memq, not OpenClaw
        ]
        for providers, env, remote in applies:
            double.requests.clear()
            choice = choose(providers, env, remote=remote)
            choice.provider.embed_query("hello")
            assert [r.status for r in double.embed_requests()] == [200], (providers, remote)
    with ProviderDouble("gemini", api_key=SENTINEL) as double:
        with pytest.raises(CredentialsNotConfigured) as caught:
            choose({"google": {"apiKey": SENTINEL}}, {},
                   provider="gemini", remote={"baseUrl": double.url})
        assert str(caught.value) == (f"Google embedding credentials are not configured for "
                                     f"{double.url}. Set memory.search.remote.apiKey for this "
                                     "destination.")
        assert double.requests == []


def test_keyless_adapters_are_not_refused(tmp_path: Path, workspace: Path) -> None:
    """openai-compatible (and lmstudio, ollama) take a destination without a key, as
    OpenClaw's do."""
    with ProviderDouble("openai", api_key=None) as double:
        cfg = _openclaw(tmp_path, workspace, provider="openai-compatible", model="m",
                        remote={"baseUrl": double.url})
        choice = choose_provider(load_settings(config_file=cfg, env={
            "MEMQ_STORE_PATH": str(tmp_path / "m.sqlite")}), env={})
        choice.provider.embed_query("hello")
        assert [r.status for r in double.embed_requests()] == [200]
