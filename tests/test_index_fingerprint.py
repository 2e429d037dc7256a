"""The index fingerprint holds what changes vectors and chunks, nothing else.

Changing the fleet's rate limit, the extra headers or the API key must not rebuild an index
(nor re-embed a chunk); changing the model, the endpoint, the dimensions, the task types or the
chunking must. Stores written before the chunking version existed are rebuilt once, not on
every run."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.embeddings.default_model import DEFAULT_MODEL_ID, default_model_path
from pipeline.embeddings.gemini import EMBEDDING_2_MODELS
from pipeline.embeddings.registry import choose_provider, provider_key
from pipeline.errors import ProviderUnavailable
from pipeline.ingest.chunking import CHUNKING_VERSION
from pipeline.ingest.producer import index_fingerprint, index_identity
from pipeline.query import memory_search
from pipeline.status import index_status
from pipeline.store import schema
from pipeline.store.engine import connect
from tests.conftest import run_memq
from tests.fakes.provider_doubles import ProviderDouble
from tests.secrets_scan import SENTINEL
from workers.indexing import run_index

BASE_URL = "http://127.0.0.1:9/v1"


def _fingerprint(make_settings, workspace: Path, provider: str = "openai", **keys: object):
    settings = make_settings(workspace, provider=provider, **keys)
    return index_fingerprint(index_identity(choose_provider(settings).spec, settings))


@pytest.mark.parametrize("provider", ["openai", "gemini", "voyage"])
def test_rate_limit_headers_and_key_are_not_in_the_fingerprint(provider: str, workspace: Path,
                                                               make_settings, monkeypatch) -> None:
    for var in ("OPENAI_API_KEY", "GEMINI_API_KEY", "VOYAGE_API_KEY"):
        monkeypatch.setenv(var, "sk-env-key-1234")
    base = _fingerprint(make_settings, workspace, provider, remote={"baseUrl": BASE_URL})
    same = [
        {"baseUrl": BASE_URL, "rateLimit": {"requestsPerMinute": 60, "tokensPerMinute": 9000}},
        {"baseUrl": BASE_URL, "headers": {"X-Team": "blue"}},
        {"baseUrl": BASE_URL, "apiKey": "sk-config-key-5678"},
        {"baseUrl": BASE_URL, "headers": {"Authorization": "Bearer sk-other-9999"}},
    ]
    for remote in same:
        assert _fingerprint(make_settings, workspace, provider, remote=remote) == base, remote


def test_what_changes_vectors_is_in_the_fingerprint(workspace: Path, make_settings,
                                                    monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-key-1234")
    monkeypatch.setenv("GEMINI_API_KEY", "sk-env-key-1234")
    monkeypatch.setenv("VOYAGE_API_KEY", "sk-env-key-1234")
    base = _fingerprint(make_settings, workspace, remote={"baseUrl": BASE_URL})
    changed = [
        _fingerprint(make_settings, workspace, remote={"baseUrl": BASE_URL},
                     model="text-embedding-3-large"),
        _fingerprint(make_settings, workspace, remote={"baseUrl": "http://127.0.0.1:10/v1"}),
        _fingerprint(make_settings, workspace, remote={"baseUrl": BASE_URL},
                     chunking={"tokens": 200, "overlap": 20}),
        _fingerprint(make_settings, workspace, "gemini", remote={"baseUrl": BASE_URL}),
    ]
    assert all(fp != base for fp in changed)
    for model in EMBEDDING_2_MODELS:  # 3072 when unset; another width is another index
        gemini = _fingerprint(make_settings, workspace, "gemini", model=model)
        assert _fingerprint(make_settings, workspace, "gemini", model=model,
                            outputDimensionality=3072) == gemini
        assert _fingerprint(make_settings, workspace, "gemini", model=model,
                            outputDimensionality=768) != gemini
    assert _fingerprint(make_settings, workspace, "gemini", model=EMBEDDING_2_MODELS[0]) != \
        _fingerprint(make_settings, workspace, "gemini", model=EMBEDDING_2_MODELS[1])
    plain = _fingerprint(make_settings, workspace, "gemini")  # gemini-embedding-001
    assert plain["options"]["output_dimensionality"] is None  # unset: as before 2026.9
    assert _fingerprint(make_settings, workspace, "gemini", outputDimensionality=256) != plain
    compatible = _fingerprint(make_settings, workspace, "openai-compatible", model="embed-1",
                              remote={"baseUrl": BASE_URL})
    for keys in ({"outputDimensionality": 256}, {"documentInputType": "passage"},
                 {"queryInputType": "query"}, {"inputType": "text"}):
        assert _fingerprint(make_settings, workspace, "openai-compatible", model="embed-1",
                            remote={"baseUrl": BASE_URL}, **keys) != compatible, keys
    voyage = _fingerprint(make_settings, workspace, "voyage")
    assert _fingerprint(make_settings, workspace, "voyage", inputType="query") != voyage
    assert base["chunking_version"] == CHUNKING_VERSION


def _indexed_with_chunking_version(settings, version: int | None) -> None:
    """Index, then make the store's fingerprint say it was chunked by ``version`` (None: by a
    memq from before chunking had a version)."""
    run_index(settings, wait=True)
    db = connect(settings.store.path)
    try:
        old = schema.get_meta(db, "index")
        if version is None:
            del old["chunking_version"]
        else:
            old["chunking_version"] = version
        with schema.transaction(db):
            schema.set_meta(db, "index", old)
    finally:
        db.close()


def test_a_store_from_before_the_chunking_version_is_rebuilt_once(workspace: Path,
                                                                  make_settings) -> None:
    settings = make_settings(workspace, provider="none")
    _indexed_with_chunking_version(settings, None)  # before chunking had a version
    first = run_index(settings, wait=True)
    assert first.report.rebuild_needed and first.rebuild is not None and first.rebuild.done
    for _ in range(2):
        again = run_index(settings, wait=True)
        assert not again.report.rebuild_needed and again.rebuild is None
    assert index_status(settings)["reindex"] is None


def test_a_version_2_store_is_rechunked_per_entry_by_version_5(workspace: Path,
                                                              make_settings) -> None:
    """Upgrading from memq's chunking version 2 rebuilds the index once, and the rebuilt
    index holds MEMORY.md one entry per chunk (OpenClaw's chunking version 5)."""
    settings = make_settings(workspace, provider="none")
    _indexed_with_chunking_version(settings, 2)  # version 2 wrote MEMORY.md as one chunk
    first = run_index(settings, wait=True)
    assert first.report.rebuild_needed and first.rebuild is not None and first.rebuild.done
    assert not run_index(settings, wait=True).report.rebuild_needed
    db = connect(settings.store.path)
    try:
        assert schema.get_meta(db, "index")["chunking_version"] == CHUNKING_VERSION == 5
        starts = [r[0] for r in db.conn.execute(
            "SELECT start_line FROM chunks WHERE path = 'MEMORY.md' ORDER BY start_line")]
    finally:
        db.close()
    lines = (workspace / "MEMORY.md").read_text().split("\n")
    entries = [i + 1 for i, line in enumerate(lines)
               if i == 0 or line.startswith(("- ", "# ", "## "))]
    assert starts == entries and len(starts) > 5


def test_local_window_tokens_rebuilds_once_and_the_old_index_answers_meanwhile(
        workspace: Path, make_settings) -> None:
    """``local.windowTokens`` changes how the local model reads a chunk, so turning it on
    rebuilds the index once, with the window recorded in its options and its own provider key
    (the embedding cache never serves a whole-chunk vector for a windowed one); until then the
    old index keeps answering with vectors (its queries embedded as its chunks were)."""
    try:
        default_model_path()
    except ProviderUnavailable as exc:
        pytest.skip(f"all-MiniLM-L6-v2 weights not found: {exc}")
    whole = make_settings(workspace, provider="local", local={"threads": 1})
    windowed = make_settings(workspace, provider="local",
                             local={"threads": 1, "windowTokens": 256})
    run_index(whole, wait=True)
    assert _spec(whole).options.get("window_tokens") is None
    assert _spec(whole).provider_key == provider_key("local", DEFAULT_MODEL_ID)  # OpenClaw's
    out = memory_search("Zigbee coordinator", settings=windowed, sync=False)
    assert out["mode"] == "hybrid" and not out.get("warning"), out.get("warning")
    assert out["results"] and out["results"][0]["vectorScore"] > 0
    first = run_index(windowed, wait=True)
    assert first.report.rebuild_needed and first.rebuild is not None and first.rebuild.done
    assert not run_index(windowed, wait=True).report.rebuild_needed
    spec = _spec(windowed)
    assert spec.options["window_tokens"] == 256
    assert spec.provider_key != provider_key("local", DEFAULT_MODEL_ID)
    assert index_status(windowed)["windowTokens"] == 256
    shown = run_memq("status", "--workspace", str(workspace), "--config",
                     str(windowed.config_file), env={"MEMQ_BROKER_URL": "", "REDIS_URL": ""})
    assert "384 dims, windows of 256 tokens)" in shown.stdout, shown.stdout + shown.stderr
    assert run_index(whole, wait=True).report.rebuild_needed  # and back, once
    assert "windowTokens" not in index_status(whole)


def _spec(settings):
    db = connect(settings.store.path)
    try:
        spec = schema.index_spec(db)
    finally:
        db.close()
    assert spec is not None
    return spec


@pytest.mark.integration
def test_rate_limit_headers_or_key_change_embeds_nothing_model_change_rebuilds(
        workspace: Path, make_settings, broker_url, fleet, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    with ProviderDouble("openai", api_key=SENTINEL) as double:
        def settings(**remote: object):
            return make_settings(workspace, provider="openai", brokerUrl=broker_url,
                                 remote={"baseUrl": double.url, **remote},
                                 query={"minScore": 0.0})

        first = settings(rateLimit={"requestsPerMinute": 6000}, headers={"X-Team": "blue"})
        fleet.start(["store.0"], "writer")
        fleet.start(["embed.openai"], "embed")
        run_index(first, wait=True)
        embedded = double.stats()["texts_embedded"]
        status = index_status(first)
        assert embedded == status["chunks"] == status["vectors"] > 0

        for remote in ({"rateLimit": {"requestsPerMinute": 600, "tokensPerMinute": 50000}},
                       {"headers": {"X-Team": "green"}},
                       {"apiKey": "sk-config-key-5678"}):
            changed = settings(**remote)
            run = run_index(changed, wait=True)
            assert not run.report.rebuild_needed and run.rebuild is None, remote
            assert run.report.chunks_queued == 0, remote
            assert double.stats()["texts_embedded"] == embedded, remote
            status = index_status(changed)
            assert status["vectors"] == status["chunks"] and status["reindex"] is None
        # The store follows the new headers: a search builds the query provider from it.
        out = memory_search("Zigbee coordinator", settings=settings(headers={"X-Team": "green"}))
        assert out["results"] and out["model"] == "text-embedding-3-small"

        other = make_settings(workspace, provider="openai", brokerUrl=broker_url,
                              model="text-embedding-3-large", remote={"baseUrl": double.url})
        run = run_index(other, wait=True)
        assert run.report.rebuild_needed and run.rebuild is not None and run.rebuild.done
        assert index_status(other)["model"] == "text-embedding-3-large"
        assert double.stats()["texts_embedded"] > embedded
