"""OpenClaw 2026.9.6's embedding provider ids: every one loads, the OpenAI-shaped ones are served,
the others fail their own memory only, and Gemini Embedding 2 is sent as OpenClaw sends it.

Real HTTP doubles on loopback answer the embeddings; OpenClaw's own adapters, run by Node on
the installed package (tests/openclaw_embeddings.mjs), are driven against the same doubles so
memq's requests are compared with theirs, not with what this file thinks they are.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline.batch.api import BatchRequest
from pipeline.batch.gemini import GeminiBatchApi
from pipeline.catalog import MemoryCatalog
from pipeline.config import ADAPTERS, ConfigError, Settings, load_settings
from pipeline.embeddings.base import MediaInput
from pipeline.embeddings.gemini import GeminiProvider
from pipeline.embeddings.registry import build_from_spec, choose_provider
from pipeline.errors import MissingApiKey, ProviderUnavailable
from tests.conftest import REPO
from tests.fakes.provider_doubles import ProviderDouble, Seen
from tests.test_fleet import memq_argv
from tests.tools import node_env, tool, tools_dir

SCRIPT = Path(__file__).with_name("openclaw_embeddings.mjs")
DOCS = ["the billing service runs on PostgreSQL 16", "deploys happen on Tuesdays"]
QUERY = "which database does billing use?"


def openclaw_json(tmp_path: Path, memory_search: dict[str, Any],
                  providers: dict[str, Any] | None = None) -> Path:
    """An openclaw.json with one agent, ``main``, whose memorySearch is ``memory_search``."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {"agents": {"list": [{"id": "main", "default": True,
                                                  "workspace": str(ws),
                                                  "memorySearch": memory_search}]}}
    if providers is not None:
        config["models"] = {"providers": providers}
    path = tmp_path / "openclaw.json"
    path.write_text(json.dumps(config))
    return path


def settings_of(tmp_path: Path, memory_search: dict[str, Any],
                providers: dict[str, Any] | None = None) -> Settings:
    return load_settings(config_file=openclaw_json(tmp_path, memory_search, providers),
                         env={"MEMQ_HOME": str(tmp_path / "home")})


def embed_both(settings: Settings, env: dict[str, str] | None = None) -> Any:
    """The provider chosen for ``settings``, after embedding DOCS and QUERY with it."""
    provider = choose_provider(settings, env=env or {}).provider
    assert provider is not None
    docs = provider.embed_documents(DOCS)
    query = provider.embed_query(QUERY)
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0) and np.isclose(np.linalg.norm(query), 1)
    return provider


def wire(requests: list[Seen]) -> list[tuple[str, Any, dict[str, str]]]:
    """What matters of each embedding request: path, body, and the auth and user headers."""
    return [(r.path, r.body, {k: v for k, v in r.headers.items()
                              if k in ("authorization", "x-team", "x-goog-api-key")})
            for r in requests]


# -- every id loads ---------------------------------------------------------------------------

@pytest.mark.parametrize("ident", ADAPTERS)
def test_every_openclaw_adapter_id_loads_as_provider_and_fallback(tmp_path: Path,
                                                                   ident: str) -> None:
    settings = settings_of(tmp_path, {"provider": ident, "fallback": ident.upper()})
    assert (settings.provider, settings.fallback) == (ident, ident)


@pytest.mark.parametrize(("ident", "says"), [
    ("bedrock", 'No API key found for provider "bedrock"'),
    ("github-copilot", "github-copilot: No GitHub token available")])
def test_an_id_memq_cannot_serve_fails_when_used_and_names_itself(tmp_path: Path, ident: str,
                                                                  says: str) -> None:
    settings = settings_of(tmp_path, {"provider": ident})
    with pytest.raises(ProviderUnavailable) as caught:  # no credentials in this environment
        choose_provider(settings, env={})
    assert says in str(caught.value)


def test_an_unserved_provider_hands_over_to_its_fallback(tmp_path: Path) -> None:
    with ProviderDouble("lmstudio", api_key=None) as double:
        settings = settings_of(tmp_path, {"provider": "bedrock", "fallback": "lmstudio"},
                               {"lmstudio": {"baseUrl": double.url}})
        choice = choose_provider(settings, env={})
        assert choice.spec is not None and choice.spec.name == "lmstudio"
        assert choice.fallback_from == "bedrock"
        assert 'No API key found for provider "bedrock"' in (choice.reason or "")


@pytest.mark.parametrize(("entry", "adapter", "name"), [
    ({"api": "openai-completions", "baseUrl": "URL"}, "OpenAICompatibleProvider", "mycorp"),
    ({"api": "openai-responses", "baseUrl": "URL"}, "OpenAICompatibleProvider", "mycorp"),
    ({"baseUrl": "URL"}, "OpenAICompatibleProvider", "mycorp"),
    ({"api": " Ollama ", "baseUrl": "URL"}, "OllamaProvider", "mycorp"),
    ({"api": "lmstudio", "baseUrl": "URL"}, "LmStudioProvider", "mycorp"),
    ({"api": "openai", "baseUrl": "URL", "apiKey": "sk-entry"}, "OpenAIProvider", "mycorp"),
    ({"api": "gemini"}, "GeminiProvider", "gemini"),
])
def test_a_custom_entry_is_served_by_the_adapter_its_api_names(
        tmp_path: Path, entry: dict[str, str], adapter: str, name: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "g-key")  # (a worker reads its own environment)
    url = "http://127.0.0.1:9/v1"
    entry = {k: (url if v == "URL" else v) for k, v in entry.items()}
    settings = settings_of(tmp_path, {"provider": "MyCorp", "model": "embed-1"},
                           {"MyCorp": entry})
    assert settings.provider == "mycorp"
    choice = choose_provider(settings)
    assert type(choice.provider).__name__ == adapter
    assert choice.spec is not None and choice.spec.name == name
    if name == "mycorp":
        assert choice.provider.base_url.startswith("http://127.0.0.1:9")  # the entry's endpoint
    rebuilt = build_from_spec(choice.spec, settings)  # what a worker builds from the message
    assert rebuilt.provider_key == choice.spec.provider_key


@pytest.mark.parametrize(("entry", "says"), [
    ({"api": "anthropic-messages"}, 'names no embedding adapter (its api "anthropic-messages"'),
    ({"apiKey": "sk-x"}, "names no embedding adapter (it has neither api nor baseUrl"),
    ({"api": "bedrock"}, 'No API key found for provider "bedrock"'),
])
def test_a_custom_entry_memq_cannot_serve_fails_when_used(tmp_path: Path, entry: dict[str, str],
                                                          says: str) -> None:
    settings = settings_of(tmp_path, {"provider": "mycorp"}, {"mycorp": entry})
    with pytest.raises(ProviderUnavailable) as caught:
        choose_provider(settings, env={})
    assert says in str(caught.value)


def test_an_id_that_is_neither_an_adapter_nor_an_entry_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_of(tmp_path, {"provider": "lmstuido"}, {"mycorp": {"baseUrl": "http://x/v1"}})
    text = str(caught.value)
    assert text.startswith("agents.list[0].memorySearch.provider: must be one of")
    assert "the id of one of an openclaw.json's models.providers entries" in text
    assert 'did you mean "lmstudio"?' in text and "lmstuido" in text
    with pytest.raises(ConfigError, match="fallback: must be one of"):
        settings_of(tmp_path, {"provider": "openai", "fallback": "mycrop"},
                    {"mycorp": {"baseUrl": "http://x/v1"}})


def test_memq_toml_takes_the_new_ids(tmp_path: Path, make_settings, workspace: Path) -> None:
    with ProviderDouble("openai", api_key="sk-server") as double:
        settings = make_settings(workspace, provider="openai-compatible", model="embed-1",
                                 remote={"baseUrl": double.url, "apiKey": "sk-server"})
        embed_both(settings)
        assert len(double.embed_requests()) == 2


def test_one_unserved_agent_leaves_the_file_and_the_other_agents_alone(tmp_path: Path) -> None:
    """The file's default (memory.search) names bedrock; its agents load all the same, and so
    does every command's view of the file, the catalog."""
    agents = []
    for name in ("main", "alpha", "beta"):
        (tmp_path / name).mkdir()
        agents.append({"id": name, "workspace": str(tmp_path / name)})
    agents[1]["memorySearch"] = {"provider": "mycorp", "model": "embed-1"}
    config = tmp_path / "openclaw.json"
    config.write_text(json.dumps({
        "memory": {"search": {"provider": "bedrock"}}, "agents": {"list": agents},
        "models": {"providers": {"mycorp": {"api": "openai-completions",
                                            "baseUrl": "http://127.0.0.1:9/v1"},
                                 "amazon-bedrock": {"auth": "aws-sdk",
                                                    "apiKey": {"source": "keychain"}}}}}))
    catalog = MemoryCatalog(config_file=config, env={"MEMQ_HOME": str(tmp_path / "home")})
    assert [i.name for i in catalog.describe()] == ["main", "alpha", "beta"]
    providers = {name: catalog.settings(name).provider for name in catalog.names()}
    assert providers == {"main": "bedrock", "alpha": "mycorp", "beta": "bedrock"}
    assert choose_provider(catalog.settings("alpha"), env={}).spec.name == "mycorp"
    with pytest.raises(ProviderUnavailable, match="AWS credentials are not available"):
        choose_provider(catalog.settings("beta"), env={})


# -- the OpenAI-shaped servers, on the wire ---------------------------------------------------

def test_lmstudio_on_the_wire(tmp_path: Path) -> None:
    """LM Studio's server root plus /v1 (an /api/v1 base is the same server), its default
    model, LM_API_TOKEN as Bearer, OpenClaw's body: {model, input}."""
    with ProviderDouble("lmstudio", api_key="lm-token") as double:
        settings = settings_of(tmp_path, {"provider": "lmstudio",
                                          "remote": {"baseUrl": double.root + "/api/v1/"}})
        provider = embed_both(settings, env={"LM_API_TOKEN": "lm-token"})
        assert provider.embed_query("x").shape == (768,)
        bodies = [r.body for r in double.embed_requests()]
        assert bodies[0] == {"model": "text-embedding-nomic-embed-text-v1.5", "input": DOCS}
        assert bodies[1] == {"model": "text-embedding-nomic-embed-text-v1.5", "input": [QUERY]}
        assert {r.path for r in double.embed_requests()} == {"/v1/embeddings"}
    with ProviderDouble("lmstudio", api_key=None) as double:  # no key, a placeholder key
        settings = settings_of(tmp_path, {"provider": "lmstudio", "model": "lmstudio/bge-small"},
                               {"lmstudio": {"baseUrl": double.url, "apiKey": "lmstudio-local"}})
        embed_both(settings)
        assert all("authorization" not in r.headers for r in double.embed_requests())
        assert double.embed_requests()[0].body["model"] == "bge-small"


def test_deepinfra_on_the_wire(tmp_path: Path) -> None:
    with ProviderDouble("deepinfra", api_key="di-key") as double:
        settings = settings_of(tmp_path, {"provider": "deepinfra"},
                               {"deepinfra": {"baseUrl": double.url}})
        provider = embed_both(settings, env={"DEEPINFRA_API_KEY": "di-key"})
        assert provider.embed_query("x").shape == (1024,)
        seen = double.embed_requests()
        assert {r.path for r in seen} == {"/v1/openai/embeddings"}
        assert seen[0].body["model"] == "BAAI/bge-m3"
        assert seen[0].headers["authorization"] == "Bearer di-key"
    with pytest.raises(MissingApiKey, match="DEEPINFRA_API_KEY"):  # api.deepinfra.com needs one
        choose_provider(settings_of(tmp_path, {"provider": "deepinfra"}), env={})


def test_openai_compatible_on_the_wire(tmp_path: Path) -> None:
    """remote.baseUrl and remote.apiKey; OPENAI_API_KEY is never inherited; dimensions and
    input types as configured; model prefixes dropped."""
    with ProviderDouble("openai", api_key=None) as double:
        settings = settings_of(tmp_path, {
            "provider": "openai-compatible", "model": "openai-compatible/embed-1",
            "remote": {"baseUrl": double.url}, "outputDimensionality": 96,
            "inputType": "text", "documentInputType": "passage"})
        provider = embed_both(settings, env={"OPENAI_API_KEY": "sk-openai-not-for-you"})
        assert provider.embed_query("x").shape == (96,)
        docs, query = double.embed_requests()[:2]
        assert docs.body == {"model": "embed-1", "input": DOCS, "dimensions": 96,
                             "input_type": "passage"}
        assert query.body == {"model": "embed-1", "input": [QUERY], "dimensions": 96,
                              "input_type": "text"}
        assert all("authorization" not in r.headers for r in double.embed_requests())
    for keys, says in (({"model": "m"}, "no endpoint: set remote.baseUrl"),
                       ({"remote": {"baseUrl": "http://127.0.0.1:9/v1"}}, "no model")):
        with pytest.raises(ProviderUnavailable, match=says):
            choose_provider(settings_of(tmp_path, {"provider": "openai-compatible", **keys}),
                            env={})


def test_a_custom_provider_uses_its_own_entry_and_only_at_its_own_endpoint(
        tmp_path: Path) -> None:
    with ProviderDouble("openai", api_key="sk-mycorp") as double:
        entry = {"api": "openai-completions", "baseUrl": double.url,
                 "apiKey": "${MYCORP_KEY}", "headers": {"X-Team": "blue"}}
        settings = settings_of(tmp_path, {"provider": "mycorp", "model": "mycorp/embed-1"},
                               {"mycorp": entry})
        provider = embed_both(settings, env={"MYCORP_KEY": "sk-mycorp"})
        assert provider.name == "mycorp" and provider.model == "embed-1"
        assert wire(double.embed_requests())[0] == (
            "/v1/embeddings", {"model": "embed-1", "input": DOCS},
            {"authorization": "Bearer sk-mycorp", "x-team": "blue"})
    with ProviderDouble("openai", api_key=None) as elsewhere:  # a proxy: no entry key, headers
        settings = settings_of(tmp_path, {"provider": "mycorp", "model": "embed-1",
                                          "remote": {"baseUrl": elsewhere.url}},
                               {"mycorp": entry})
        embed_both(settings, env={"MYCORP_KEY": "sk-mycorp"})
        assert all(set(r.headers) & {"authorization", "x-team"} == set()
                   for r in elsewhere.embed_requests())


# -- Gemini Embedding 2 -----------------------------------------------------------------------

def test_gemini_embedding_2_puts_the_task_in_front_of_the_text() -> None:
    stable = GeminiProvider("gemini-embedding-2", api_key="g")
    assert stable.request("hi", "query") == {
        "content": {"parts": [{"text": "task: search result | query: hi"}]},
        "outputDimensionality": 3072}
    assert stable.request("hi", "document")["content"]["parts"][0]["text"] == \
        "title: none | text: hi"
    media = stable.request(MediaInput("Image file: a.png", "image/png", "aGk="), "document")
    assert media["content"]["parts"][0] == {"text": "Image file: a.png"}
    assert "taskType" not in media and stable.accepts_media
    preview = GeminiProvider("gemini-embedding-2-preview", api_key="g")
    assert preview.request("hi", "query")["taskType"] == "RETRIEVAL_QUERY"
    assert preview.request("hi", "query")["content"]["parts"][0]["text"] == "hi"
    code = GeminiProvider("gemini-embedding-2", api_key="g", query_task_type="code_retrieval_query")
    assert code.request("hi", "query")["content"]["parts"][0]["text"] == "hi"


def test_a_gemini_batch_line_is_the_sync_request() -> None:
    stable = GeminiProvider("gemini-embedding-2", api_key="g", output_dimensionality=512)
    line = GeminiBatchApi(stable)._line(BatchRequest("c1", "hi"))
    assert line == {"key": "c1", "request": {
        "content": {"parts": [{"text": "title: none | text: hi"}]}, "outputDimensionality": 512}}


def test_multimodal_takes_the_stable_gemini_embedding_2(tmp_path: Path) -> None:
    for model in ("gemini-embedding-2", "models/gemini-embedding-2-preview"):
        settings = settings_of(tmp_path, {"provider": "gemini", "model": model, "multimodal": {
            "enabled": True, "modalities": ["image"]}})
        assert settings.multimodal.active
    with pytest.raises(ConfigError, match='needs provider "gemini" and model '
                                          '"gemini-embedding-2"'):
        settings_of(tmp_path, {"provider": "gemini", "model": "gemini-embedding-001",
                               "multimodal": {"enabled": True}})


# -- against OpenClaw's own adapters ----------------------------------------------------------

def run_openclaw(cases: list[dict[str, Any]], home: Path) -> list[dict[str, Any]]:
    tool("openclaw")
    done = subprocess.run(
        [str(tool("node")), str(SCRIPT), str(tools_dir() / "openclaw/node_modules/openclaw")],
        input=json.dumps({"cases": cases}), capture_output=True, text=True, timeout=180,
        env=node_env({"HOME": str(home), "OPENCLAW_STATE_DIR": str(home / ".openclaw"),
                      "PATH": "/usr/bin:/bin"}), check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


#: (adapter, double style, the double's key, memorySearch keys, models.providers entries).
#: "URL" stands for the double's base URL.
GOLDEN: list[tuple[str, str, str | None, dict[str, Any], dict[str, Any]]] = [
    ("openai-compatible", "openai", "sk-entry",
     {"provider": "mycorp", "model": "mycorp/embed-1", "outputDimensionality": 64,
      "queryInputType": "query", "documentInputType": "passage"},
     {"mycorp": {"api": "openai-completions", "baseUrl": "URL", "apiKey": "sk-entry",
                 "headers": {"X-Team": "blue"}}}),
    ("openai-compatible", "openai", "sk-remote",
     {"provider": "openai-compatible", "model": "embed-2", "inputType": "search",
      "remote": {"baseUrl": "URL", "apiKey": "sk-remote", "headers": {"X-Team": "red"}}}, {}),
    ("openai-compatible", "openai", None,
     {"provider": "edge", "model": "edge/small"}, {"edge": {"baseUrl": "URL"}}),
    ("lmstudio", "lmstudio", "sk-lm",
     {"provider": "lmstudio", "model": "lmstudio/text-embedding-bge-m3"},
     {"lmstudio": {"baseUrl": "URL", "apiKey": "sk-lm", "params": {"preload": False}}}),
    ("gemini", "gemini", "g-key",
     {"provider": "gemini", "model": "gemini-embedding-2", "remote": {"baseUrl": "URL",
                                                                      "apiKey": "g-key"}}, {}),
    ("gemini", "gemini", "g-key",
     {"provider": "gemini", "model": "gemini-embedding-2", "outputDimensionality": 768,
      "remote": {"baseUrl": "URL", "apiKey": "g-key"}}, {}),
    ("gemini", "gemini", "g-key",
     {"provider": "gemini", "model": "gemini-embedding-2-preview", "outputDimensionality": 1536,
      "remote": {"baseUrl": "URL", "apiKey": "g-key"}}, {}),
    ("gemini", "gemini", "g-key",
     {"provider": "gemini", "outputDimensionality": 256,
      "remote": {"baseUrl": "URL", "apiKey": "g-key"}}, {}),
    ("gemini", "gemini", "g-key",
     {"provider": "gemini", "remote": {"baseUrl": "URL", "apiKey": "g-key"}}, {}),
]


def _filled(value: Any, url: str) -> Any:
    if isinstance(value, dict):
        return {k: _filled(v, url) for k, v in value.items()}
    return url if value == "URL" else value


def test_memq_sends_what_openclaws_own_adapters_send(tmp_path: Path) -> None:
    """Each case's double serves OpenClaw's adapter (one Node run for all), then memq with the
    same settings: every embedding request is the same (path, body, auth and user headers)."""
    with contextlib.ExitStack() as stack:
        doubles = [stack.enter_context(ProviderDouble(style, api_key=key))
                   for _, style, key, _, _ in GOLDEN]
        cases = []
        for (adapter, _, _, search, entries), double in zip(GOLDEN, doubles, strict=True):
            keys = _filled(search, double.url)
            options = {"config": {"models": {"providers": _filled(entries, double.url)}},
                       "provider": keys["provider"], "model": keys.get("model", ""),
                       "remote": keys.get("remote"), "dimensions": keys.get("outputDimensionality"),
                       **{k: keys.get(k) for k in ("inputType", "queryInputType",
                                                   "documentInputType")}}
            cases.append({"adapter": adapter, "documents": DOCS, "query": QUERY,  # as memory-core
                          "options": {k: v for k, v in options.items() if v is not None}})
        reported = run_openclaw(cases, tmp_path)
        assert [r for r in reported if "error" in r] == []
        theirs = [wire(d.embed_requests()) for d in doubles]
        for i, ((_, _, _, search, entries), double) in enumerate(zip(GOLDEN, doubles,
                                                                     strict=True)):
            double.requests.clear()
            (tmp_path / f"case-{i}").mkdir()
            embed_both(settings_of(tmp_path / f"case-{i}", _filled(search, double.url),
                                   _filled(entries, double.url)))
        ours = [wire(d.embed_requests()) for d in doubles]
    for case, their, our in zip(GOLDEN, theirs, ours, strict=True):
        assert our == their, case
        assert len(our) == 2  # the documents in one request, then the query


def test_out_of_range_gemini_dimensions_are_refused_like_openclaw(tmp_path: Path) -> None:
    for dims in (127, 3073):
        options = {"config": {}, "provider": "gemini", "model": "gemini-embedding-2",
                   "remote": {"baseUrl": "http://127.0.0.1:9/v1beta", "apiKey": "g"},
                   "dimensions": dims}
        theirs = run_openclaw([{"adapter": "gemini", "documents": DOCS, "query": QUERY,
                                "options": options}], tmp_path)[0]
        assert "Use an integer between 128 and 3072" in theirs["error"]
        with pytest.raises(ProviderUnavailable, match="from 128 to 3072"):
            GeminiProvider("gemini-embedding-2", api_key="g", output_dimensionality=dims)


# -- many agents, one of them unserved --------------------------------------------------------

def test_many_agents_index_and_search_while_one_names_an_unserved_provider(
        tmp_path: Path) -> None:
    """``memq index --all`` over an openclaw.json of four agents: LM Studio, a custom
    OpenAI-compatible entry, DeepInfra, and Bedrock. The first three are embedded by real
    workers against loopback doubles and answer hybrid searches; Bedrock's agent alone fails,
    saying why."""
    with ProviderDouble("lmstudio", api_key=None) as lm, \
            ProviderDouble("openai", api_key="sk-mycorp") as mycorp, \
            ProviderDouble("deepinfra", api_key="di-key") as deepinfra:
        agents = {"alpha": {"provider": "lmstudio"},
                  "beta": {"provider": "bedrock"},
                  "gamma": {"provider": "mycorp", "model": "embed-1"},
                  "delta": {"provider": "deepinfra"}}
        listed = []
        for name, search in agents.items():
            ws = tmp_path / f"ws-{name}"
            (ws / "memory").mkdir(parents=True)
            (ws / "MEMORY.md").write_text(f"# {name}\n\nThe {name} vault is named "
                                          f"kestrel-{name}.\n\nLunch is at noon.\n")
            listed.append({"id": name, "workspace": str(ws), "memorySearch": search})
        listed[0]["default"] = True
        config = tmp_path / "openclaw.json"
        config.write_text(json.dumps({
            "agents": {"defaults": {"memorySearch": {
                "store": {"path": str(tmp_path / "stores" / "{agentId}.sqlite")}}},
                "list": listed},
            "models": {"providers": {
                "lmstudio": {"baseUrl": lm.url},
                "mycorp": {"api": "openai-completions", "baseUrl": mycorp.url,
                           "apiKey": "${MYCORP_KEY}"},
                "deepinfra": {"baseUrl": deepinfra.url}}}}))
        env = {"MEMQ_CONFIG": str(config), "MEMQ_HOME": str(tmp_path / "home"),
               "MYCORP_KEY": "sk-mycorp", "DEEPINFRA_API_KEY": "di-key"}

        def memq(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(memq_argv(*args), env={**node_env(), **env},
                                  capture_output=True, text=True, timeout=300, cwd=REPO)

        done = memq("index", "--all", "--json")
        assert done.returncode == 1, done.stderr
        out = {m["memory"]: m for m in json.loads(done.stdout)["memories"]}
        assert 'No API key found for provider "bedrock"' in out["beta"]["error"]
        for name in ("alpha", "gamma", "delta"):
            assert "error" not in out[name], out[name]
            found = memq("search", "--agent", name, "--json", f"kestrel-{name} vault")
            assert found.returncode == 0, found.stderr
            answer = json.loads(found.stdout)
            assert answer["mode"] == "hybrid", answer
            assert answer["provider"] == agents[name]["provider"]
            assert f"kestrel-{name}" in answer["results"][0]["snippet"]
        assert lm.embed_requests() and mycorp.embed_requests() and deepinfra.embed_requests()
