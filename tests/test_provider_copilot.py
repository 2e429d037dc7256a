"""GitHub Copilot embeddings as OpenClaw 2026.9.6's github-copilot plugin makes them, against a
real HTTP double of GitHub's and Copilot's APIs (tests/fakes/copilot_double.py): the GitHub
token is checked at ``/copilot_internal/user``, whose ``endpoints.api`` names the Copilot API;
models are discovered there, then ``/embeddings`` is called with OpenClaw's headers. The
double refuses a token that did not pass the check, or was revoked since.

2026.9.6 sends the checked GitHub token itself to the Copilot API (``resolveCopilotRuntimeAuth``
returns ``apiKey: githubToken``); the older ``/copilot_internal/v2/token`` exchange survives
only as a deprecated SDK export nothing calls. The token is the suite's sentinel
(tests/secrets_scan.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline.embeddings.copilot import CopilotProvider, copilot_domain
from pipeline.embeddings.registry import build_from_spec, choose_provider
from pipeline.errors import (
    MissingApiKey,
    ProviderRefused,
    ProviderRetryable,
    ProviderThrottled,
    ProviderUnavailable,
)
from tests.conftest import REPO
from tests.fakes.copilot_double import CopilotDouble, Fault
from tests.secrets_scan import SENTINEL
from tests.test_fleet import memq_argv
from tests.test_provider_ids import settings_of

TOKEN = f"ghu_{SENTINEL}"
DOCS = ["the billing service runs on PostgreSQL 16", "deploys happen on Tuesdays"]
IDE_HEADERS = {"editor-version": "vscode/1.107.0", "editor-plugin-version": "copilot-chat/0.35.0",
               "user-agent": "GitHubCopilotChat/0.35.0", "accept-encoding": "identity",
               "openai-organization": "github-copilot", "content-type": "application/json",
               "copilot-integration-id": "copilot-developer-cli"}


def provider(double: CopilotDouble, model: str | None = None, **kwargs: Any) -> CopilotProvider:
    kwargs.setdefault("github_token", TOKEN)
    return CopilotProvider(model, github_api=double.root, **kwargs)


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def test_token_check_then_discovery_then_embeddings_with_openclaw_headers() -> None:
    with CopilotDouble(tokens=(TOKEN,)) as double:
        p = provider(double)
        docs = p.embed_documents(DOCS)
        query = p.embed_query("which database?")
        assert double.paths() == [("GET", "/copilot_internal/user", 200),
                                  ("GET", "/capi/models", 200),
                                  ("POST", "/capi/embeddings", 200),
                                  ("POST", "/capi/embeddings", 200)]
        user, models, first, second = double.requests
        assert user.headers["authorization"] == f"Bearer {TOKEN}"
        assert user.headers["accept"] == "application/json"
        for seen in (models, first):
            assert seen.headers["authorization"] == f"Bearer {TOKEN}"
            assert {k: seen.headers.get(k) for k in IDE_HEADERS} == IDE_HEADERS
        assert first.body == {"model": "text-embedding-3-small", "input": DOCS}
        assert second.body == {"model": "text-embedding-3-small", "input": ["which database?"]}
        for got, text in zip(docs, DOCS, strict=True):  # (the double answers in reverse order)
            np.testing.assert_allclose(got, unit(double.vector("text-embedding-3-small", text)),
                                       atol=1e-6)
        assert query.shape == (1536,)


def test_the_checked_session_is_kept_and_a_revoked_token_is_refused_then_checked_again() -> None:
    with CopilotDouble(tokens=(TOKEN,)) as double:
        p = provider(double)
        p.embed_query("one")
        p.embed_query("two")
        assert [path for _, path, _ in double.paths()].count("/copilot_internal/user") == 1
        double.revoke(TOKEN)
        with pytest.raises(ProviderRefused, match="token expired") as caught:
            p.embed_query("three")
        assert double.paths()[-1] == ("POST", "/capi/embeddings", 401)
        assert p.embed_query("four").shape == (1536,)  # checked again, then served
        assert [path for _, path, _ in double.paths()].count("/copilot_internal/user") == 2
    assert SENTINEL not in str(caught.value)


def test_the_copilot_api_refuses_a_token_that_was_never_checked() -> None:
    """The double is strict: the embeddings endpoint alone, with an unchecked token, is 401."""
    with CopilotDouble(tokens=(TOKEN,)) as double:
        p = provider(double, base_url=double.root + "/capi", explicit_token=True)
        with pytest.raises(ProviderRefused, match="HTTP 401"):
            p.embed_query("x")  # remote.baseUrl skips the check, as in OpenClaw
        assert double.paths() == [("GET", "/capi/models", 401)]


@pytest.mark.parametrize(("token", "status", "says"), [
    ("ghu_wrong", 401, "Copilot authentication failed: HTTP 401"),
    (f"ghu_nocopilot{SENTINEL}", 403, "Copilot authentication failed: HTTP 403. Run `openclaw "
                                      "models auth login-github-copilot`"),
])
def test_a_refused_github_token_is_provider_refused(token: str, status: int, says: str) -> None:
    with CopilotDouble(tokens=(TOKEN,), no_copilot=(f"ghu_nocopilot{SENTINEL}",)) as double:
        p = provider(double, github_token=token)
        with pytest.raises(ProviderRefused) as caught:
            p.embed_documents(DOCS)
        assert says in str(caught.value)
        assert double.paths() == [("GET", "/copilot_internal/user", status)]
    assert SENTINEL not in str(caught.value) and SENTINEL not in repr(p)


def test_an_untrusted_api_endpoint_is_refused() -> None:
    with CopilotDouble(tokens=(TOKEN,), api_url="https://evil.example.com/capi") as double:
        p = provider(double)
        with pytest.raises(ProviderRefused, match=re.escape("untrusted endpoints.api")):
            p.embed_query("x")
        assert double.paths() == [("GET", "/copilot_internal/user", 200)]  # nothing sent there


def test_model_discovery_decides_what_may_be_used() -> None:
    with CopilotDouble(tokens=(TOKEN,)) as double:
        large = provider(double, "github-copilot/text-embedding-3-large")
        assert large.model == "text-embedding-3-large"
        assert large.embed_query("x").shape == (3072,)
        missing = provider(double, "text-embedding-ada-002")
        with pytest.raises(ProviderRefused, match=re.escape(
                'GitHub Copilot embedding model "text-embedding-ada-002" is not available. '
                "Available: text-embedding-3-small, text-embedding-3-large")):
            missing.embed_query("x")
    with CopilotDouble(tokens=(TOKEN,), models=()) as double, \
            pytest.raises(ProviderRefused, match="No embedding models available"):
        provider(double).embed_query("x")


@pytest.mark.parametrize(("fault", "error"), [("429", ProviderThrottled),
                                              ("500", ProviderRetryable)])
def test_throttling_and_server_errors_are_retryable(fault: str, error: type) -> None:
    with CopilotDouble(tokens=(TOKEN,), script=[Fault(fault)]) as double:
        p = provider(double)
        with pytest.raises(error):
            p.embed_query("x")
        assert p.embed_query("x").shape == (1536,)


def test_no_github_token_is_missing_api_key() -> None:
    with pytest.raises(MissingApiKey, match="No GitHub token available for Copilot embedding"):
        CopilotProvider(None, github_token=None)


def test_a_custom_base_url_needs_an_explicit_key() -> None:
    with pytest.raises(ProviderUnavailable, match=re.escape(
            "custom baseUrl requires an explicit memory.search.remote.apiKey")):
        CopilotProvider(None, github_token=TOKEN, base_url="https://proxy.example.com")


def test_the_domain_is_github_com_or_a_ghe_tenant() -> None:
    assert copilot_domain({}) == "github.com"
    assert copilot_domain({"COPILOT_GITHUB_DOMAIN": " Acme.GHE.com "}) == "acme.ghe.com"
    assert copilot_domain({"COPILOT_GITHUB_DOMAIN": "evil.com"}) == "github.com"
    tenant = CopilotProvider(None, github_token=TOKEN, domain="acme.ghe.com")
    assert tenant.github_api == "https://api.acme.ghe.com"
    assert tenant.base_url == "https://copilot-api.acme.ghe.com"


# -- the registry -----------------------------------------------------------------------------

def test_the_configured_provider_is_built_from_the_environment_and_rebuilt_by_a_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with CopilotDouble(tokens=(TOKEN,)) as double:
        settings = settings_of(tmp_path, {"provider": "github-copilot",
                                           "remote": {"headers": {"X-Team": "memq"}}})
        choice = choose_provider(settings, env={"COPILOT_GITHUB_TOKEN": TOKEN})
        assert isinstance(choice.provider, CopilotProvider) and choice.spec is not None
        assert choice.spec.name == "github-copilot"
        assert choice.spec.model == "text-embedding-3-small"
        assert SENTINEL not in json.dumps(choice.spec.to_dict())
        choice.provider.github_api = double.root
        assert choice.provider.embed_query("x").shape == (1536,)
        assert double.requests[-1].headers["x-team"] == "memq"
        monkeypatch.setenv("COPILOT_GITHUB_TOKEN", TOKEN)  # a worker reads its own environment
        rebuilt = build_from_spec(choice.spec, settings)
        assert rebuilt.provider_key == choice.spec.provider_key


def test_remote_api_key_and_base_url_are_used_as_openclaw_uses_them(tmp_path: Path) -> None:
    with CopilotDouble(tokens=(TOKEN,)) as double:
        settings = settings_of(tmp_path, {"provider": "github-copilot",
                                           "remote": {"apiKey": TOKEN,
                                                      "baseUrl": double.root + "/capi"}})
        choice = choose_provider(settings, env={})
        assert choice.provider is not None
        double.vouch(TOKEN)
        assert choice.provider.embed_query("x").shape == (1536,)
        assert [p for _, p, _ in double.paths()] == ["/capi/models", "/capi/embeddings"]
        assert choice.spec is not None and choice.spec.options["base_url"] == \
            double.root + "/capi"


def test_no_token_hands_over_to_the_fallback(tmp_path: Path) -> None:
    settings = settings_of(tmp_path, {"provider": "github-copilot", "fallback": "none"})
    with pytest.raises(MissingApiKey, match="No GitHub token"):
        choose_provider(settings, env={})


def test_memq_index_and_search_with_copilot_through_the_cli(tmp_path: Path) -> None:
    """The first embedding no longer fails: ``memq index`` then a hybrid ``memq search``
    through a ``remote.baseUrl`` Copilot endpoint, the token never in their output or the
    store (the session-end scan checks the files)."""
    with CopilotDouble(tokens=(TOKEN,)) as double:
        double.vouch(TOKEN)
        ws = tmp_path / "ws"
        (ws / "memory").mkdir(parents=True)
        (ws / "MEMORY.md").write_text("# Vault\n\nThe vault is named kestrel-copilot.\n\n"
                                      "Lunch is at noon.\n")
        config = tmp_path / "openclaw.json"
        config.write_text(json.dumps({"agents": {"list": [{
            "id": "main", "workspace": str(ws),
            "memorySearch": {"provider": "github-copilot",
                             "remote": {"baseUrl": double.root + "/capi",
                                        "apiKey": "${MEMQ_TEST_COPILOT}"},
                             "store": {"path": str(tmp_path / "store.sqlite")}}}]}}))
        env = {**os.environ, "MEMQ_TEST_COPILOT": TOKEN, "MEMQ_CONFIG": str(config),
               "MEMQ_HOME": str(tmp_path / "home")}

        def memq(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(memq_argv(*args), env=env, capture_output=True, text=True,
                                  timeout=300, cwd=REPO)

        done = memq("index", "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        found = memq("search", "--json", "kestrel-copilot vault")
        assert found.returncode == 0, found.stderr
        answer = json.loads(found.stdout)
        assert answer["mode"] == "hybrid" and answer["provider"] == "github-copilot", answer
        assert "kestrel-copilot" in answer["results"][0]["snippet"]
        assert {status for _, _, status in double.paths()} == {200}
        for text in (done.stdout, done.stderr, found.stdout, found.stderr):
            assert SENTINEL not in text


# -- against OpenClaw's own adapter ------------------------------------------------------------

#: Headers only one HTTP client adds (Node's fetch, httpx), or that depend on the server.
CLIENT_HEADERS = {"host", "connection", "content-length", "accept-language", "sec-fetch-mode"}


def run_openclaw(case: dict[str, Any], home: Path) -> dict[str, Any]:
    from tests.tools import node_env, tool, tools_dir

    done = subprocess.run(
        [str(tool("node")), str(Path(__file__).with_name("openclaw_copilot.mjs")),
         str(tools_dir() / "openclaw/node_modules/openclaw")],
        input=json.dumps(case), capture_output=True, text=True, timeout=180,
        env=node_env({"HOME": str(home), "OPENCLAW_STATE_DIR": str(home / ".openclaw"),
                      "PATH": "/usr/bin:/bin"}), check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def on_the_wire(double: CopilotDouble) -> list[Any]:
    """Each request's method, path, body and headers as JSON data, the double's address and
    the token written as placeholders (a failing comparison prints no secret)."""
    seen = [[r.method, r.path, r.body,
             {k: v for k, v in r.headers.items() if k not in CLIENT_HEADERS}]
            for r in double.requests]
    return json.loads(json.dumps(seen).replace(double.root, "ROOT").replace(TOKEN, "TOKEN"))


@pytest.mark.parametrize(("model", "headers"), [
    ("", {"X-Team": "memq"}),
    ("github-copilot/text-embedding-3-large", {"Copilot-Integration-Id": "vscode-chat"}),
    ("text-embedding-ada-002", {}),
])
def test_requests_match_openclaw_2026_9_6_adapter(tmp_path: Path, model: str,
                                                  headers: dict[str, str]) -> None:
    """OpenClaw's github-copilot adapter (run by Node on the installed package) and memq, each
    against its own double with the same remote.baseUrl, remote.apiKey and headers: the same
    requests (method, path, body, headers), widths, and model error. (OpenClaw checks the
    GitHub token at a fixed https://api.github.com, which no test can stand in for, so the
    custom-endpoint path is compared.)"""
    docs, query = DOCS, "which database?"
    with CopilotDouble(tokens=(TOKEN,)) as theirs, CopilotDouble(tokens=(TOKEN,)) as ours:
        theirs.vouch(TOKEN)
        ours.vouch(TOKEN)
        got = run_openclaw({"options": {"model": model, "remote": {
            "baseUrl": theirs.root + "/capi", "apiKey": TOKEN, "headers": headers}},
            "documents": docs, "query": query}, tmp_path)
        mine = CopilotProvider(model or None, github_token=TOKEN, explicit_token=True,
                               base_url=ours.root + "/capi", headers=headers)
        try:
            vectors = [*mine.embed_documents(docs), mine.embed_query(query)]
        except ProviderRefused as exc:
            assert "error" in got, got
            assert got["error"] in str(exc)
            assert on_the_wire(ours) == on_the_wire(theirs)
            return
        assert "error" not in got, got
        assert got["model"] == mine.model
        assert got["widths"] == [len(v) for v in vectors]
        assert on_the_wire(ours) == on_the_wire(theirs)
