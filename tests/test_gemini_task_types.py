"""Gemini's task types come from OpenClaw's input-type keys (``inputType``,
``queryInputType``, ``documentInputType``), reach the wire, travel in the job spec, and are
part of the index fingerprint; the defaults leave older indexes' fingerprints alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.batch.api import BatchRequest
from pipeline.batch.gemini import GeminiBatchApi
from pipeline.embeddings.registry import build_from_spec, choose_provider
from pipeline.errors import EmbeddingError
from pipeline.ingest.producer import index_fingerprint, index_identity
from tests.fakes.provider_doubles import ProviderDouble
from tests.secrets_scan import SENTINEL


@pytest.fixture
def gemini():
    with ProviderDouble("gemini", api_key=SENTINEL) as double:
        yield double


def _settings(make_settings, workspace: Path, double: ProviderDouble, **keys: object):
    return make_settings(workspace, provider="gemini",
                         remote={"baseUrl": double.url, "apiKey": SENTINEL}, **keys)


def _task_types(double: ProviderDouble) -> list[tuple[str, str]]:
    out = []
    for seen in double.embed_requests():
        if seen.path.endswith(":embedContent"):
            out.append(("query", seen.body["taskType"]))
        else:
            out.extend(("document", r["taskType"]) for r in seen.body["requests"])
    return out


def test_query_and_document_task_types_reach_the_wire(gemini, workspace, make_settings) -> None:
    settings = _settings(make_settings, workspace, gemini, queryInputType="question_answering",
                         documentInputType="RETRIEVAL_DOCUMENT")
    provider = choose_provider(settings, env={}).provider
    provider.embed_documents(["a note", "another note"])
    provider.embed_query("what did I note?")
    assert _task_types(gemini) == [("document", "RETRIEVAL_DOCUMENT"),
                                   ("document", "RETRIEVAL_DOCUMENT"),
                                   ("query", "QUESTION_ANSWERING")]


def test_input_type_sets_both_and_the_specific_keys_win(gemini, workspace, make_settings) -> None:
    settings = _settings(make_settings, workspace, gemini, inputType="SEMANTIC_SIMILARITY",
                         queryInputType="FACT_VERIFICATION")
    provider = choose_provider(settings, env={}).provider
    provider.embed_documents(["a note"])
    provider.embed_query("a claim")
    assert _task_types(gemini) == [("document", "SEMANTIC_SIMILARITY"),
                                   ("query", "FACT_VERIFICATION")]


def test_the_defaults_are_openclaws(gemini, workspace, make_settings) -> None:
    provider = choose_provider(_settings(make_settings, workspace, gemini), env={}).provider
    provider.embed_documents(["a note"])
    provider.embed_query("a question")
    assert _task_types(gemini) == [("document", "RETRIEVAL_DOCUMENT"),
                                   ("query", "RETRIEVAL_QUERY")]


def test_a_worker_uses_the_task_types_of_the_job_spec(gemini, workspace, make_settings) -> None:
    """The spec (secret-free) carries the task types, so a worker whose own config has none
    embeds with the producer's; and the batch file uses the document task type too."""
    producer = _settings(make_settings, workspace, gemini, documentInputType="CLUSTERING")
    spec = choose_provider(producer, env={}).spec
    assert spec.options["document_task_type"] == "CLUSTERING"
    worker = build_from_spec(spec, _settings(make_settings, workspace, gemini))
    worker.embed_documents(["a note"])
    assert _task_types(gemini) == [("document", "CLUSTERING")]
    line = GeminiBatchApi(worker)._line(BatchRequest("c1", "a note"))
    assert line["request"]["taskType"] == "CLUSTERING"


def test_task_types_are_in_the_fingerprint_and_the_provider_key(gemini, workspace,
                                                                make_settings) -> None:
    def identity(**keys: object):
        spec = choose_provider(_settings(make_settings, workspace, gemini, **keys), env={}).spec
        return spec, index_fingerprint(index_identity(spec, make_settings(workspace)))

    base_spec, base = identity()
    explicit_spec, explicit = identity(queryInputType="RETRIEVAL_QUERY",
                                       documentInputType="RETRIEVAL_DOCUMENT")
    assert explicit == base and explicit_spec.provider_key == base_spec.provider_key
    assert "query_task_type" not in base_spec.options  # older stores keep their fingerprint
    query_spec, query = identity(queryInputType="QUESTION_ANSWERING")
    doc_spec, doc = identity(documentInputType="CLUSTERING")
    assert query != base and doc != base and query != doc
    # Cached document vectors depend on the document task type only.
    assert doc_spec.provider_key != base_spec.provider_key
    assert query_spec.provider_key == base_spec.provider_key


def test_an_unknown_task_type_is_a_clear_error(gemini, workspace, make_settings) -> None:
    settings = _settings(make_settings, workspace, gemini, documentInputType="passage")
    with pytest.raises(EmbeddingError) as err:
        choose_provider(settings, env={})
    text = str(err.value)
    assert "documentInputType" in text and "'passage'" in text and "RETRIEVAL_DOCUMENT" in text
