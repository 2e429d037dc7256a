"""Every remote provider against its double: request shape, auth, task types, dims,
normalisation, request packing, error mapping (what is retried and after how long), and the
API key kept out of every error, repr and provider key."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from pipeline.embeddings.gemini import GeminiProvider
from pipeline.embeddings.mistral import MistralProvider
from pipeline.embeddings.ollama import OllamaProvider
from pipeline.embeddings.openai import OpenAIProvider
from pipeline.embeddings.remote import pack_requests, remote_provider_key, resolve_api_key
from pipeline.embeddings.voyage import VoyageProvider
from pipeline.errors import (
    EmbeddingError,
    InputTooLong,
    MissingApiKey,
    ProviderRetryable,
    ProviderUnavailable,
)
from tests.fakes.provider_doubles import Fault, ProviderDouble
from tests.secrets_scan import SENTINEL

KEY = SENTINEL
CLASSES = {"openai": OpenAIProvider, "gemini": GeminiProvider, "voyage": VoyageProvider,
           "mistral": MistralProvider, "ollama": OllamaProvider}
DIMS = {"openai": 1536, "gemini": 3072, "voyage": 1024, "mistral": 1024, "ollama": 768}


def make(style: str, double: ProviderDouble, **kw):
    kw.setdefault("api_key", KEY)
    return CLASSES[style](base_url=double.url, **kw)


@pytest.fixture(params=list(CLASSES))
def style(request) -> str:
    return request.param


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def test_documents_and_query_round_trip(style: str) -> None:
    with ProviderDouble(style, api_key=KEY) as double:
        provider = make(style, double)
        texts = ["the cat sat", "on the mat", "ünïcödé ✓"]
        docs = provider.embed_documents(texts)
        query = provider.embed_query("the cat sat")
        assert docs.shape == (3, DIMS[style]) and docs.dtype == np.float32
        assert provider.dims == DIMS[style]
        np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, rtol=1e-5)
        for text, row in zip(texts, docs, strict=True):  # raw answers have length 3.5
            np.testing.assert_allclose(row, unit(double.vector(text)), atol=1e-6)
        np.testing.assert_allclose(query, docs[0], atol=1e-6)
        sent = double.embed_requests()
        assert len(sent) == 2
        if style == "gemini":
            assert sent[0].headers["x-goog-api-key"] == KEY
            assert "authorization" not in sent[0].headers and "key=" not in sent[0].path
        else:
            assert sent[0].headers["authorization"] == f"Bearer {KEY}"


def test_query_and_document_task_types() -> None:
    with ProviderDouble("gemini", api_key=KEY) as double:
        provider = make("gemini", double)
        provider.embed_documents(["a", "b"])
        provider.embed_query("a")
        batch, single = double.embed_requests()
        assert batch.path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
        assert [r["taskType"] for r in batch.body["requests"]] == ["RETRIEVAL_DOCUMENT"] * 2
        assert batch.body["requests"][0]["model"] == "models/gemini-embedding-001"
        assert batch.body["requests"][1]["content"] == {"parts": [{"text": "b"}]}
        assert single.path == "/v1beta/models/gemini-embedding-001:embedContent"
        assert single.body["taskType"] == "RETRIEVAL_QUERY"
        assert "outputDimensionality" not in single.body  # only for gemini-embedding-2-preview
    with ProviderDouble("voyage", api_key=KEY) as double:
        provider = make("voyage", double)
        provider.embed_documents(["a"])
        provider.embed_query("a")
        assert [r.body["input_type"] for r in double.embed_requests()] == ["document", "query"]
        assert double.embed_requests()[0].body["model"] == "voyage-4-large"


def test_voyage_input_type_overrides_change_the_provider_key() -> None:
    with ProviderDouble("voyage", api_key=KEY) as double:
        default = make("voyage", double)
        custom = make("voyage", double, query_input_type="search_query")
        assert default.provider_key == make("voyage", double, query_input_type="query"
                                            ).provider_key
        assert custom.provider_key != default.provider_key
        custom.embed_query("a")
        assert double.embed_requests()[0].body["input_type"] == "search_query"


@pytest.mark.parametrize("style", ["openai", "mistral"])
def test_openai_shaped_body(style: str) -> None:
    with ProviderDouble(style, api_key=KEY) as double:
        make(style, double, model=f"{style}/" + ("text-embedding-3-large" if style == "openai"
                                                  else "mistral-embed")).embed_documents(["a"])
        body = double.embed_requests()[0].body
        assert body == {"model": "text-embedding-3-large" if style == "openai"
                        else "mistral-embed", "input": ["a"], "encoding_format": "float"}


def test_openai_base64_answers_are_decoded() -> None:
    with ProviderDouble("openai", api_key=KEY) as double:
        provider = make("openai", double)
        provider._body = lambda texts, kind: {"model": provider.model, "input": list(texts),
                                              "encoding_format": "base64"}
        out = provider.embed_documents(["x", "y"])
        np.testing.assert_allclose(out[1], unit(double.vector("y")), atol=1e-6)


def test_gemini_output_dimensionality_as_openclaw_2026_9() -> None:
    """128 to 3072 on Gemini Embedding 2 (3072 when unset) and on gemini-embedding-001 (sent
    only when set); another model never sends it. It is in the provider key."""
    with ProviderDouble("gemini", api_key=KEY) as double:
        for model in ("gemini-embedding-2", "gemini-embedding-2-preview"):
            provider = make("gemini", double, model=model, output_dimensionality=768)
            assert provider.embed_documents(["a"]).shape == (1, 768)
            assert double.embed_requests()[-1].body["requests"][0]["outputDimensionality"] == 768
            unset = make("gemini", double, model=model)
            assert unset.embed_query("a").shape == (3072,)
            assert double.embed_requests()[-1].body["outputDimensionality"] == 3072
            assert provider.provider_key != unset.provider_key
        plain = make("gemini", double)  # gemini-embedding-001
        assert plain.embed_query("a").shape == (3072,)
        assert "outputDimensionality" not in double.embed_requests()[-1].body
        narrow = make("gemini", double, output_dimensionality=128)
        assert narrow.embed_query("a").shape == (128,)
        assert double.embed_requests()[-1].body["outputDimensionality"] == 128
        assert narrow.provider_key != plain.provider_key
        old = make("gemini", double, model="text-embedding-004", output_dimensionality=256)
        assert old.embed_query("a").shape == (768,)
        assert "outputDimensionality" not in double.embed_requests()[-1].body
    for model, dims in (("gemini-embedding-2", 127), ("gemini-embedding-2-preview", 3073),
                        ("gemini-embedding-001", 0)):
        with pytest.raises(ProviderUnavailable, match="from 128 to 3072"):
            GeminiProvider(model, api_key=KEY, output_dimensionality=dims)
    assert GeminiProvider("gemini-embedding-2", api_key=KEY,
                          output_dimensionality=1000).output_dimensionality == 1000


def test_requests_are_packed_under_8000_bytes(style: str) -> None:
    texts = [f"{i:03d} " + "x" * 1496 for i in range(12)] + ["big " + "y" * 9000, "tail"]
    with ProviderDouble(style, api_key=KEY) as double:
        out = make(style, double).embed_documents(texts)
        assert out.shape[0] == len(texts)
        np.testing.assert_allclose(out[-2], unit(double.vector(texts[-2])), atol=1e-6)
        sizes = []
        for r in double.embed_requests():
            if style == "gemini":
                batch = [q["content"]["parts"][0]["text"] for q in r.body["requests"]]
            else:
                batch = r.body["input"]
            sizes.append(sum(len(t.encode()) for t in batch))
        assert sizes == [7500, 7500, 3000, 9004, 4]  # <= 8000 bytes each; the big one alone


def test_pack_requests_item_cap() -> None:
    assert pack_requests(["a"] * 250, max_items=100) == [(0, 100), (100, 200), (200, 250)]
    assert pack_requests([]) == []


def test_ollama_falls_back_to_legacy_endpoint_once() -> None:
    with ProviderDouble("ollama", api_key=None, legacy_ollama=True) as double:
        provider = make("ollama", double, api_key=None)
        out = provider.embed_documents(["a", "b"])
        provider.embed_query("c")
        paths = [r.path for r in double.embed_requests()]
        assert paths == ["/api/embed", "/api/embeddings", "/api/embeddings", "/api/embeddings"]
        assert [r.body.get("prompt") for r in double.embed_requests()[1:]] == ["a", "b", "c"]
        np.testing.assert_allclose(out[1], unit(double.vector("b")), atol=1e-6)
        assert "authorization" not in double.embed_requests()[0].headers


# -- errors -------------------------------------------------------------------------------------


def failure(style: str, fault: Fault, **kw) -> tuple[EmbeddingError, ProviderDouble]:
    with ProviderDouble(style, api_key=KEY, script=[fault]) as double:
        with pytest.raises(EmbeddingError) as info:
            make(style, double, **kw).embed_documents(["hello"])
        return info.value, double


def test_rate_limit_is_retryable_with_retry_after(style: str) -> None:
    err, _ = failure(style, Fault("429", retry_after=2.5))
    assert isinstance(err, ProviderRetryable) and err.retry_after == 2.5 and "429" in str(err)
    err, _ = failure(style, Fault("429"))
    assert isinstance(err, ProviderRetryable)
    if style != "openai":  # OpenAI's message says "try again in ..." only sometimes
        assert err.retry_after is None


def test_openai_try_again_text_and_http_date() -> None:
    from email.utils import formatdate

    import httpx

    from pipeline.embeddings.http import Scrubber, error_for_response

    text = {"error": {"message": "Rate limit reached ... Please try again in 41.7s.",
                      "type": "tokens", "code": "rate_limit_exceeded"}}
    err = error_for_response("openai", httpx.Response(429, json=text), Scrubber([]))
    assert isinstance(err, ProviderRetryable) and err.retry_after == pytest.approx(41.7)
    import time

    dated = httpx.Response(503, headers={"Retry-After": formatdate(time.time() + 30,
                                                                   usegmt=True)})
    assert 25 < error_for_response("x", dated, Scrubber([])).retry_after <= 30
    ms = httpx.Response(429, headers={"retry-after-ms": "250"}, json={})
    assert error_for_response("x", ms, Scrubber([])).retry_after == 0.25


@pytest.mark.parametrize(("period", "retryable"), [("PerMinute", True), ("PerDay", False)])
def test_gemini_quota_period_decides(period: str, retryable: bool) -> None:
    """Gemini says "You exceeded your current quota" for per-minute limits too."""
    import httpx

    from pipeline.embeddings.http import Scrubber, error_for_response

    body = {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED",
                      "message": "You exceeded your current quota, please check your plan and "
                                 "billing details.",
                      "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                                   "violations": [{"quotaId": f"EmbedContentRequests{period}"
                                                              "PerProjectPerModel-FreeTier"}]},
                                  {"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                   "retryDelay": "12s"}]}}
    err = error_for_response("gemini", httpx.Response(429, json=body), Scrubber([]))
    assert isinstance(err, ProviderRetryable) is retryable
    if retryable:
        assert err.retry_after == 12


@pytest.mark.parametrize("style", ["openai", "gemini"])
def test_quota_exhaustion_is_not_retried(style: str) -> None:
    err, _ = failure(style, Fault("quota"))
    assert not isinstance(err, ProviderRetryable) and "quota" in str(err)


@pytest.mark.parametrize("kind", ["500", "503"])
def test_server_errors_are_retryable(style: str, kind: str) -> None:
    err, _ = failure(style, Fault(kind))
    assert isinstance(err, ProviderRetryable) and kind in str(err)


def test_stall_times_out_as_retryable(style: str) -> None:
    err, _ = failure(style, Fault("stall", seconds=1.5), timeout=0.3)
    assert isinstance(err, ProviderRetryable) and "timed out" in str(err)


def test_malformed_json_and_wrong_dims(style: str) -> None:
    err, _ = failure(style, Fault("malformed"))
    assert isinstance(err, ProviderRetryable) and "not valid JSON" in str(err)
    err, _ = failure(style, Fault("wrong_dims"))
    assert not isinstance(err, ProviderRetryable) and f"{DIMS[style] + 1}-dimensional" in str(err)


def test_context_length_is_flagged(style: str) -> None:
    with ProviderDouble(style, api_key=KEY, max_input_bytes=100) as double:
        with pytest.raises(EmbeddingError) as info:
            make(style, double).embed_documents(["short", "z" * 200])
        assert isinstance(info.value, InputTooLong)
        assert not isinstance(info.value, ProviderRetryable)


def test_connection_refused_is_retryable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    provider = OpenAIProvider(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY)
    with pytest.raises(EmbeddingError) as info:
        provider.embed_query("x")
    assert isinstance(info.value, ProviderRetryable) and "connection error" in str(info.value)


def test_bad_key_fails_fast_and_the_key_never_shows(style: str) -> None:
    with ProviderDouble(style, api_key="sk-the-right-one") as double:
        provider = make(style, double, headers={"X-Custom-Token": "tok-SENTINEL-99",
                                                "X-Team": "blue"})
        with pytest.raises(EmbeddingError) as info:
            provider.embed_documents(["x"])
        err = info.value
        assert not isinstance(err, ProviderRetryable)
        sent = double.embed_requests()[0]
        assert sent.headers["x-custom-token"] == "tok-SENTINEL-99"  # it was really sent...
        for shown in (str(err), repr(err), repr(provider), repr(provider.http),
                      provider.provider_key, str(err.__cause__), str(err.__context__)):
            assert KEY not in shown and "SENTINEL" not in shown  # ...and never shown
        assert err.__cause__ is None


def test_credentials_in_the_base_url_never_show(make_settings, workspace) -> None:
    from pipeline.embeddings.registry import choose_provider

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://user:pw-SENTINEL@127.0.0.1:{port}/v1?key=q-SENTINEL"
    # Without a key of its own the destination is refused up front (OpenClaw 2026.9.6)...
    with pytest.raises(EmbeddingError) as refused:
        choose_provider(make_settings(workspace, provider="openai", remote={
            "baseUrl": url}), env={})
    assert "credentials are not configured" in str(refused.value)
    assert "SENTINEL" not in str(refused.value)
    # ... and with one, what a failed request says hides the URL's credentials too.
    choice = choose_provider(make_settings(workspace, provider="openai", remote={
        "baseUrl": url, "apiKey": "sk-remote-0000000000"}), env={})
    with pytest.raises(EmbeddingError) as info:
        choice.provider.embed_query("x")
    assert "base_url" not in choice.spec.options  # workers take it from their own config
    for shown in (str(info.value), repr(choice.provider), repr(choice.spec), choice.reason or ""):
        assert "SENTINEL" not in shown
    clean = OpenAIProvider(base_url=f"http://user:other@127.0.0.1:{port}/v1?key=zzz")
    assert clean.provider_key == choice.provider.provider_key


def test_provider_key_is_endpoint_model_and_public_headers() -> None:
    a = remote_provider_key("openai", "http://h/v1", "m", {"Authorization": "Bearer k1"})
    b = remote_provider_key("openai", "http://h/v1", "m", {"Authorization": "Bearer k2"})
    assert a == b
    assert a != remote_provider_key("openai", "http://other/v1", "m", {})
    assert a != remote_provider_key("openai", "http://h/v1", "m2", {})
    assert a != remote_provider_key("openai", "http://h/v1", "m", {"X-Team": "blue"})
    one = OpenAIProvider(api_key="sk-one")
    assert one.provider_key == OpenAIProvider(api_key="sk-two").provider_key
    assert "sk-one" not in repr(one)


def test_missing_key_and_key_resolution(monkeypatch) -> None:
    for name in ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(MissingApiKey, match="OPENAI_API_KEY"):
        OpenAIProvider()
    OpenAIProvider(base_url="http://127.0.0.1:9/v1")  # a custom endpoint may need no key
    env = {"GOOGLE_API_KEY": "g-2", "MY_KEY": "m-1", "GEMINI_API_KEY": ""}
    keys = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    assert resolve_api_key(keys, env=env) == "g-2"
    assert resolve_api_key(keys, configured="literal", env=env) == "literal"
    assert resolve_api_key(keys, configured="MY_KEY", env=env) == "m-1"
    assert resolve_api_key(keys, configured_env="MY_KEY", env=env) == "m-1"
    assert resolve_api_key(keys, configured_env="NOPE", env=env) is None
    assert resolve_api_key(("X",), env={}) is None
