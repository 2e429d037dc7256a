"""The provider doubles are faithful: each provider's official Python SDK, pointed at its
double, sends its usual request and parses the double's answer (vectors, errors, retries);
and the doubles' own rate limit behaves as a provider's."""

from __future__ import annotations

import time

import numpy as np
import pytest

from pipeline.embeddings.openai import OpenAIProvider
from pipeline.errors import EmbeddingError, ProviderRetryable
from tests.fakes.provider_doubles import Fault, ProviderDouble

KEY = "sk-sdk-test-key"


def test_openai_sdk_parses_float_and_base64_answers() -> None:
    openai = pytest.importorskip("openai")
    with ProviderDouble("openai", api_key=KEY) as double:
        client = openai.OpenAI(base_url=double.url, api_key=KEY, max_retries=0)
        texts = ["alpha", "beta", "gamma"]
        default = client.embeddings.create(model="text-embedding-3-small", input=texts)
        floats = client.embeddings.create(model="text-embedding-3-small", input=texts,
                                          encoding_format="float")
        assert double.embed_requests()[0].body["encoding_format"] == "base64"  # SDK default
        assert double.embed_requests()[0].headers["authorization"] == f"Bearer {KEY}"
        for answer in (default, floats):
            got = {d.index: np.asarray(d.embedding, dtype=np.float32) for d in answer.data}
            for i, text in enumerate(texts):
                np.testing.assert_allclose(got[i], double.vector(text), rtol=1e-6)
            assert answer.usage.total_tokens > 0 and answer.model == "text-embedding-3-small"


def test_openai_sdk_reads_error_bodies_and_honours_retry_after() -> None:
    openai = pytest.importorskip("openai")
    with ProviderDouble("openai", api_key=KEY,
                        script=[Fault("429", retry_after=0.1), Fault("quota")]) as double:
        client = openai.OpenAI(base_url=double.url, api_key=KEY, max_retries=1)
        with pytest.raises(openai.RateLimitError) as info:
            client.embeddings.create(model="text-embedding-3-small", input="x")
        assert info.value.code == "insufficient_quota"  # the retry hit the quota fault
        assert len(double.embed_requests()) == 2
    with ProviderDouble("openai", api_key=KEY) as double:
        bad = openai.OpenAI(base_url=double.url, api_key="sk-wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as info:
            bad.embeddings.create(model="text-embedding-3-small", input="x")
        assert info.value.code == "invalid_api_key"


def test_voyage_sdk() -> None:
    voyageai = pytest.importorskip("voyageai")
    with ProviderDouble("voyage", api_key=KEY) as double:
        client = voyageai.Client(api_key=KEY, base_url=double.url, max_retries=0)
        answer = client.embed(["alpha", "beta"], model="voyage-4-large", input_type="document")
        sent = double.embed_requests()[0]
        assert sent.body["input_type"] == "document" and sent.body["model"] == "voyage-4-large"
        assert sent.headers["authorization"] == f"Bearer {KEY}"
        np.testing.assert_allclose(answer.embeddings[1], double.vector("beta"), rtol=1e-6)
        assert answer.total_tokens > 0


def test_gemini_sdk_batch_embed() -> None:
    genai = pytest.importorskip("google.genai")
    from google.genai import types

    with ProviderDouble("gemini", api_key=KEY) as double:
        client = genai.Client(api_key=KEY, http_options=types.HttpOptions(
            base_url=double.root, api_version="v1beta"))
        answer = client.models.embed_content(
            model="gemini-embedding-001", contents=["alpha", "beta"],
            config=types.EmbedContentConfig(task_type="RETRIEVAL_DOCUMENT"))
        sent = double.embed_requests()[0]
        assert sent.path.endswith("/models/gemini-embedding-001:batchEmbedContents")
        assert sent.headers["x-goog-api-key"] == KEY
        assert {r["taskType"] for r in sent.body["requests"]} == {"RETRIEVAL_DOCUMENT"}
        assert len(answer.embeddings) == 2
        np.testing.assert_allclose(answer.embeddings[0].values, double.vector("alpha"),
                                   rtol=1e-6)


def test_gemini_sdk_sees_resource_exhausted() -> None:
    pytest.importorskip("google.genai")
    from google import genai
    from google.genai import errors, types

    with ProviderDouble("gemini", api_key=KEY, script=[Fault("429", retry_after=7)]) as double:
        client = genai.Client(api_key=KEY, http_options=types.HttpOptions(
            base_url=double.root, api_version="v1beta",
            retry_options=types.HttpRetryOptions(attempts=1)))
        with pytest.raises(errors.ClientError) as info:
            client.models.embed_content(model="gemini-embedding-001", contents=["x"])
        assert info.value.code == 429 and info.value.status == "RESOURCE_EXHAUSTED"
        retry = [d for d in info.value.details["error"]["details"]
                 if d["@type"].endswith("RetryInfo")]
        assert retry[0]["retryDelay"] == "7s"


def test_mistral_sdk() -> None:
    mistralai = pytest.importorskip("mistralai")
    Mistral = getattr(mistralai, "Mistral", None)
    if Mistral is None:
        from mistralai.client import Mistral
    with ProviderDouble("mistral", api_key=KEY) as double:
        client = Mistral(api_key=KEY, server_url=double.root)
        answer = client.embeddings.create(model="mistral-embed", inputs=["alpha", "beta"])
        sent = double.embed_requests()[0]
        assert sent.path == "/v1/embeddings" and sent.body["input"] == ["alpha", "beta"]
        assert sent.headers["authorization"] == f"Bearer {KEY}"
        np.testing.assert_allclose(answer.data[1].embedding, double.vector("beta"), rtol=1e-6)


def test_ollama_sdk_new_and_legacy_endpoints() -> None:
    ollama = pytest.importorskip("ollama")
    with ProviderDouble("ollama", api_key=None) as double:
        client = ollama.Client(host=double.root)
        answer = client.embed(model="nomic-embed-text", input=["alpha", "beta"])
        np.testing.assert_allclose(answer.embeddings[1], double.vector("beta"), rtol=1e-6)
        legacy = client.embeddings(model="nomic-embed-text", prompt="alpha")
        np.testing.assert_allclose(legacy.embedding, double.vector("alpha"), rtol=1e-6)
        assert [r.path for r in double.embed_requests()] == ["/api/embed", "/api/embeddings"]
    with ProviderDouble("ollama", api_key=None, legacy_ollama=True) as old:
        with pytest.raises(ollama.ResponseError) as info:
            ollama.Client(host=old.root).embed(model="nomic-embed-text", input="x")
        assert info.value.status_code == 404


def test_rate_limited_double_refuses_beyond_its_rate_and_says_when_to_return() -> None:
    """``rate_limit_rps``: what bench/remote_throughput.py measures memq's fleet against."""
    with ProviderDouble("openai", api_key=KEY, rate_limit_rps=3) as double:
        provider = OpenAIProvider(base_url=double.url, api_key=KEY)
        outcomes = []
        for _ in range(5):
            try:
                provider.embed_documents(["x"])
                outcomes.append(0.0)
            except EmbeddingError as exc:
                assert isinstance(exc, ProviderRetryable) and "429" in str(exc)
                outcomes.append(exc.retry_after)
        assert outcomes[:3] == [0.0] * 3 and all(0 < w <= 1.0 for w in outcomes[3:])
        time.sleep(outcomes[-1] + 0.05)
        provider.embed_documents(["x"])  # the window has room again
        served = [r.at for r in double.embed_requests() if r.status == 200]
        assert len(served) == 4 and served[3] - served[0] >= 1.0
