"""``provider: auto`` and ``fallback`` as a decision table, the secret-free spec that travels
in messages, and workers rebuilding (or refusing) the producer's provider."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.embeddings.registry import build_from_spec, choose_provider
from pipeline.errors import CredentialsNotConfigured, EmbeddingError, MissingApiKey
from pipeline.messages import ProviderSpec
from tests.secrets_scan import SENTINEL

KEY = SENTINEL


@pytest.fixture
def no_local(tmp_path: Path) -> dict:
    return {"local": {"modelCacheDir": str(tmp_path / "empty-cache")}}


def choose(make_settings, workspace, env, **keys):
    settings = make_settings(workspace, **keys)
    return choose_provider(settings, fetch_default_model=False, env=env), settings


@pytest.mark.parametrize(("env", "expected"), [
    ({"OPENAI_API_KEY": KEY, "GEMINI_API_KEY": "g"}, "openai"),
    ({"GEMINI_API_KEY": KEY, "VOYAGE_API_KEY": "v"}, "gemini"),
    ({"GOOGLE_API_KEY": KEY, "MISTRAL_API_KEY": "m"}, "gemini"),
    ({"VOYAGE_API_KEY": KEY, "MISTRAL_API_KEY": "m"}, "voyage"),
    ({"MISTRAL_API_KEY": KEY}, "mistral"),
    ({"OLLAMA_API_KEY": KEY}, None),  # ollama is never auto-selected
    ({}, None),
])
def test_auto_order_without_a_local_model(make_settings, workspace, no_local, env, expected):
    choice, _ = choose(make_settings, workspace, env, **no_local)
    if expected is None:
        assert choice.mode == "keyword-only" and choice.provider is None
        assert "no embedding provider available" in choice.reason
        for name in ("local", "OPENAI_API_KEY", "GEMINI_API_KEY", "VOYAGE_API_KEY",
                     "MISTRAL_API_KEY"):
            assert name in choice.reason
    else:
        assert choice.spec.name == expected and choice.provider.name == expected
        assert choice.reason.startswith(f"auto: {expected}")
        assert choice.spec.model == type(choice.provider).default_model
    assert KEY not in (choice.reason or "") and KEY not in json.dumps(
        choice.spec.to_dict() if choice.spec else {})


def test_auto_prefers_a_local_model(make_settings, workspace, tiny_model):
    choice, _ = choose(make_settings, workspace, {"OPENAI_API_KEY": KEY},
                       local={"modelPath": str(tiny_model)})
    assert choice.spec.name == "local" and choice.reason == "auto: local model"


def test_auto_reports_a_broken_provider_and_goes_on(make_settings, workspace, no_local):
    choice, _ = choose(make_settings, workspace, {"GEMINI_API_KEY": "g", "VOYAGE_API_KEY": "v"},
                       model="gemini-embedding-2-preview", outputDimensionality=4096,
                       **no_local)
    assert choice.spec.name == "voyage"
    assert "gemini: gemini: outputDimensionality must be a whole number from 128 to 3072" \
        in choice.reason
    assert "OPENAI_API_KEY" in choice.reason


def test_explicit_provider_takes_remote_settings_and_model(make_settings, workspace):
    choice, _ = choose(make_settings, workspace, {}, provider="openai",
                       model="openai/text-embedding-3-large",
                       remote={"baseUrl": "http://127.0.0.1:9/v1", "apiKey": KEY,
                               "headers": {"X-Team": "blue", "X-Api-Key": "hdr-SENTINEL"}})
    spec = choice.spec
    assert (spec.name, spec.model) == ("openai", "text-embedding-3-large")
    assert spec.options["base_url"] == "http://127.0.0.1:9/v1"
    assert spec.options["headers"] == {"X-Team": "blue"} and spec.options["role"] == "primary"
    text = json.dumps(spec.to_dict())
    assert KEY not in text and "hdr-SENTINEL" not in text


def test_fallback_uses_its_own_default_model(make_settings, workspace):
    """OpenClaw #142364 built the fallback with the primary's model name."""
    choice, _ = choose(make_settings, workspace, {"GEMINI_API_KEY": KEY}, provider="openai",
                       fallback="gemini", model="text-embedding-3-large")
    assert (choice.spec.name, choice.spec.model) == ("gemini", "gemini-embedding-001")
    assert choice.spec.options["role"] == "fallback"
    assert choice.reason.startswith(
        "fallback 'gemini' (gemini-embedding-001) used: openai: no API key")


def test_fallback_outcomes_when_both_fail(make_settings, workspace):
    both_missing, _ = choose(make_settings, workspace, {}, provider="openai", fallback="voyage")
    assert both_missing.mode == "keyword-only"
    assert "OPENAI_API_KEY" in both_missing.reason and "VOYAGE_API_KEY" in both_missing.reason
    with pytest.raises(MissingApiKey, match="OPENAI_API_KEY"):
        choose(make_settings, workspace, {}, provider="openai")
    with pytest.raises(EmbeddingError, match="outputDimensionality"):
        choose(make_settings, workspace, {"GEMINI_API_KEY": "g"}, provider="gemini",
               model="gemini-embedding-2-preview", outputDimensionality=5, fallback="mistral")


def test_worker_rebuilds_with_its_own_key(make_settings, workspace, monkeypatch):
    producer, _ = choose(make_settings, workspace, {}, provider="openai",
                                remote={"baseUrl": "http://127.0.0.1:9/v1", "apiKey": KEY})
    spec = ProviderSpec.from_dict(json.loads(json.dumps(producer.spec.to_dict())))
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    worker_settings = make_settings(workspace)  # no config: key from env, endpoint from spec
    provider = build_from_spec(spec, worker_settings)
    assert provider.base_url == "http://127.0.0.1:9/v1" and provider.model == spec.model
    assert provider.provider_key == spec.provider_key
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(CredentialsNotConfigured, match=r"127\.0\.0\.1:9/v1"):  # not the default
        build_from_spec(spec, worker_settings)
    odd = make_settings(workspace, provider="openai", remote={"apiKey": "x",
                                                              "headers": {"X-Team": "red"}})
    with pytest.raises(EmbeddingError, match="provider key mismatch"):
        build_from_spec(spec, odd)


def test_worker_takes_vector_options_from_the_spec(make_settings, workspace):
    producer, _ = choose(make_settings, workspace, {"GEMINI_API_KEY": "g"}, provider="gemini",
                         model="gemini-embedding-2-preview", outputDimensionality=768)
    spec = producer.spec
    assert spec.options["output_dimensionality"] == 768
    worker = build_from_spec(spec, make_settings(workspace, outputDimensionality=1536,
                                                 remote={"apiKey": "g"}))
    assert worker.output_dimensionality == 768 and worker.provider_key == spec.provider_key
    voyage, _ = choose(make_settings, workspace, {"VOYAGE_API_KEY": "v"}, provider="voyage",
                       queryInputType="search_query")
    rebuilt = build_from_spec(voyage.spec, make_settings(workspace, remote={"apiKey": "v"}))
    assert rebuilt.input_types == {"query": "search_query", "document": "document"}
