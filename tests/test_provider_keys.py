"""API keys, endpoints and headers from an openclaw.json's ``models.providers.<id>``, resolved as
OpenClaw 2026.9.6 resolves them for memory embeddings: literal keys, ``${VAR}``, variable
names and env SecretRefs; ``remote.apiKey`` first, then the environment, then the entry (the
entry first with ``auth: "api-key"``); the entry's key and headers only for its own endpoint.
Checked on the loopback provider doubles, which refuse any other key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memq import Memory
from pipeline.config import ConfigError, load_settings, settings_to_dict
from pipeline.embeddings.registry import build_from_spec, choose_provider
from pipeline.errors import CredentialsNotConfigured, MissingApiKey
from pipeline.status import index_status
from tests.fakes.provider_doubles import ProviderDouble
from tests.secrets_scan import SENTINEL

OTHER = "sk-other-key-0000000000"
IDS = {"openai": "openai", "gemini": "google", "voyage": "voyage", "mistral": "mistral"}


def _openclaw(tmp_path: Path, workspace: Path, providers: dict, **memory_search: object) -> Path:
    path = tmp_path / "openclaw.json"
    memory_search.setdefault("provider", "openai")
    path.write_text(json.dumps({
        "agents": {"defaults": {"workspace": str(workspace), "memorySearch": memory_search}},
        "models": {"providers": providers},
        "channels": {"telegram": {"botToken": "not-memq's"}},
    }))
    return path


def _load(path: Path, tmp_path: Path, **env: str):
    return load_settings(config_file=path, env={"HOME": str(tmp_path),
                                                 "MEMQ_STORE_PATH": str(tmp_path / "m.sqlite"),
                                                 **env})


def _auth(double: ProviderDouble) -> set[str]:
    key = "x-goog-api-key" if double.style == "gemini" else "authorization"
    return {r.headers.get(key, "").removeprefix("Bearer ") for r in double.embed_requests()}


@pytest.mark.parametrize("provider", list(IDS))
def test_a_literal_key_and_base_url_from_models_providers(provider: str, tmp_path: Path,
                                                          workspace: Path) -> None:
    with ProviderDouble(provider, api_key=SENTINEL) as double:
        cfg = _openclaw(tmp_path, workspace, {IDS[provider]: {"baseUrl": double.url,
                                                              "apiKey": SENTINEL}},
                        provider=provider)
        choice = choose_provider(_load(cfg, tmp_path), env={})
        assert choice.provider is not None, choice.reason
        choice.provider.embed_query("hello")
        assert _auth(double) == {SENTINEL}
        assert SENTINEL not in json.dumps(choice.spec.to_dict())


@pytest.mark.parametrize("form", ["template", "name", "secretref"])
def test_env_forms_of_the_key(form: str, tmp_path: Path, workspace: Path) -> None:
    key = {"template": "${MY_EMBED_KEY}", "name": "MY_EMBED_KEY",
           "secretref": {"source": "env", "provider": "default", "id": "MY_EMBED_KEY"}}[form]
    with ProviderDouble("openai", api_key=SENTINEL) as double:
        cfg = _openclaw(tmp_path, workspace, {"openai": {"baseUrl": double.url, "apiKey": key}})
        settings = _load(cfg, tmp_path)
        choose_provider(settings, env={"MY_EMBED_KEY": SENTINEL}).provider.embed_query("hi")
        assert _auth(double) == {SENTINEL}
        with pytest.raises(MissingApiKey) as unset:
            choose_provider(settings, env={})
        assert "MY_EMBED_KEY" in str(unset.value)
        assert "models.providers.openai.apiKey" in str(unset.value)


def test_precedence_remote_then_environment_then_entry(tmp_path: Path, workspace: Path) -> None:
    with ProviderDouble("openai", api_key=None) as double:  # accepts any key, records it
        def key_sent(providers: dict, env: dict, **memory_search: object) -> str:
            double.requests.clear()
            cfg = _openclaw(tmp_path, workspace, providers, **memory_search)
            choose_provider(_load(cfg, tmp_path), env=env).provider.embed_query("q")
            (sent,) = _auth(double)
            return sent

        entry = {"openai": {"baseUrl": double.url, "apiKey": SENTINEL}}
        assert key_sent(entry, {}) == SENTINEL
        assert key_sent(entry, {"OPENAI_API_KEY": OTHER}) == OTHER  # environment beats entry
        forced = {"openai": {**entry["openai"], "auth": "api-key"}}
        assert key_sent(forced, {"OPENAI_API_KEY": OTHER}) == SENTINEL
        assert key_sent(forced, {}, remote={"apiKey": "sk-remote-key-111111"}) == (
            "sk-remote-key-111111")  # memorySearch.remote.apiKey beats everything


def test_entry_key_and_headers_stay_with_their_endpoint(tmp_path: Path, workspace: Path) -> None:
    """remote.baseUrl pointing elsewhere gets neither the entry's key nor its headers: with
    no credential of its own it is refused before any request (OpenClaw 2026.9.6), with
    remote.apiKey it gets that key and not the entry's headers."""
    with ProviderDouble("openai", api_key=None) as proxy:
        providers = {"openai": {"apiKey": SENTINEL, "headers": {"X-Team": "blue"}}}
        cfg = _openclaw(tmp_path, workspace, providers, remote={"baseUrl": proxy.url})
        with pytest.raises(CredentialsNotConfigured, match="not configured for"):
            choose_provider(_load(cfg, tmp_path), env={})
        assert proxy.requests == []
        cfg = _openclaw(tmp_path, workspace, providers,
                        remote={"baseUrl": proxy.url, "apiKey": OTHER})
        choose_provider(_load(cfg, tmp_path), env={}).provider.embed_query("q")
        (seen,) = proxy.embed_requests()
        assert seen.headers["authorization"] == f"Bearer {OTHER}"
        assert "x-team" not in seen.headers
    with ProviderDouble("openai", api_key=SENTINEL) as double:
        providers = {"openai": {"apiKey": SENTINEL, "baseUrl": double.url + "/",
                                "headers": {"X-Team": "blue"}}}
        cfg = _openclaw(tmp_path, workspace, providers, remote={"baseUrl": double.url})
        choose_provider(_load(cfg, tmp_path), env={}).provider.embed_query("q")
        (seen,) = double.embed_requests()
        assert seen.headers["x-team"] == "blue" and _auth(double) == {SENTINEL}


def test_the_fallback_uses_its_own_entry(tmp_path: Path, workspace: Path) -> None:
    with ProviderDouble("gemini", api_key=SENTINEL) as double:
        cfg = _openclaw(tmp_path, workspace, {"google": {"baseUrl": double.url,
                                                         "apiKey": SENTINEL}},
                        provider="openai", fallback="gemini")
        choice = choose_provider(_load(cfg, tmp_path), env={})
        assert choice.spec.name == "gemini", choice.reason
        choice.provider.embed_query("q")
        assert _auth(double) == {SENTINEL}


def test_workers_resolve_the_key_from_their_own_config(tmp_path: Path, workspace: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The job spec carries no key; a worker with the same openclaw.json resolves ${VAR} from
    its own environment, and one without the variable refuses to embed without a key."""
    with ProviderDouble("openai", api_key=SENTINEL) as double:
        cfg = _openclaw(tmp_path, workspace, {"openai": {"baseUrl": double.url,
                                                         "apiKey": "${WORKER_KEY}"}})
        settings = _load(cfg, tmp_path)
        spec = choose_provider(settings, env={"WORKER_KEY": SENTINEL}).spec
        sent = json.dumps(spec.to_dict())
        assert SENTINEL not in sent and "WORKER_KEY" not in sent
        monkeypatch.setenv("WORKER_KEY", SENTINEL)
        build_from_spec(spec, settings).embed_documents(["a chunk"])
        assert _auth(double) == {SENTINEL}
        monkeypatch.delenv("WORKER_KEY")
        with pytest.raises(Exception, match="WORKER_KEY"):
            build_from_spec(spec, settings)


def test_index_and_search_end_to_end_keep_the_key_out(tmp_path: Path, workspace: Path) -> None:
    with ProviderDouble("openai", api_key=SENTINEL) as double:
        cfg = _openclaw(tmp_path, workspace, {"openai": {"baseUrl": double.url,
                                                         "apiKey": SENTINEL}})
        settings = _load(cfg, tmp_path)
        with Memory(settings=settings) as memory:
            memory.index()
            found = memory.search("project", min_score=0)
        assert found.mode == "hybrid" and found.provider == "openai"
        assert _auth(double) == {SENTINEL}
    shown = json.dumps([settings_to_dict(settings), index_status(settings)], default=str)
    assert SENTINEL not in shown and SENTINEL not in repr(settings)
    assert settings_to_dict(settings)["models"]["providers"]["openai"]["apiKey"] == "***"
    for path in tmp_path.glob("m.sqlite*"):
        assert SENTINEL.encode() not in path.read_bytes()


def test_bad_entries_are_clear_errors_without_the_key(tmp_path: Path, workspace: Path) -> None:
    cfg = _openclaw(tmp_path, workspace, {"openai": {"apiKey": 12345}})
    with pytest.raises(ConfigError, match=r"models\.providers\.openai\.apiKey: must be a string"):
        _load(cfg, tmp_path)
    cfg = _openclaw(tmp_path, workspace, {"openai": {"baseUrl": "ftp://x"}})
    with pytest.raises(ConfigError, match=r"models\.providers\.openai\.baseUrl: must be a URL"):
        _load(cfg, tmp_path)
    cfg = _openclaw(tmp_path, workspace, {"openai": {"apiKey": {"source": "file",
                                                                "id": "/secrets/openai"}}})
    with pytest.raises(MissingApiKey, match="'file' SecretRef"):
        choose_provider(_load(cfg, tmp_path), env={})
    # Entries of providers memq does not embed with are not its business.
    cfg = _openclaw(tmp_path, workspace, {"anthropic": {"apiKey": 5}, "openai": {}})
    assert _load(cfg, tmp_path).provider_entry("openai") is not None


def test_memq_index_through_workers_with_an_env_template_key(tmp_path: Path,
                                                            workspace: Path) -> None:
    """The real CLI: its embed workers (other processes) resolve ``${VAR}`` from their own
    environment; the key is in no output."""
    from tests.conftest import run_memq

    with ProviderDouble("openai", api_key=SENTINEL) as double:
        cfg = _openclaw(tmp_path, workspace, {"openai": {"baseUrl": double.url,
                                                         "apiKey": "${MEMQ_TEST_OPENAI}"}})
        env = {"MEMQ_CONFIG": str(cfg), "MEMQ_STORE_PATH": str(tmp_path / "m.sqlite"),
               "MEMQ_TEST_OPENAI": SENTINEL}
        done = run_memq("index", env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        assert "mode: hybrid (openai/" in done.stdout
        assert double.embed_requests() and _auth(double) == {SENTINEL}
        status = run_memq("status", "--json", env=env, timeout=120)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["vectors"] > 0
        for out in (done.stdout, done.stderr, status.stdout, status.stderr):
            assert SENTINEL not in out


def test_remote_api_key_takes_an_env_template_too(tmp_path: Path, workspace: Path) -> None:
    with ProviderDouble("openai", api_key=SENTINEL) as double:
        cfg = _openclaw(tmp_path, workspace, {}, remote={"baseUrl": double.url,
                                                         "apiKey": "${MEMQ_REMOTE_KEY}"})
        settings = _load(cfg, tmp_path)
        choose_provider(settings, env={"MEMQ_REMOTE_KEY": SENTINEL}).provider.embed_query("q")
        assert _auth(double) == {SENTINEL}
        unset = r"openai: remote\.apiKey uses \$\{MEMQ_REMOTE_KEY\}"
        with pytest.raises(MissingApiKey, match=unset):
            choose_provider(settings, env={})
