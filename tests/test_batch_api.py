"""The batch clients against real loopback doubles of the providers' Files and Batches APIs:
submit, poll through the states on the test's clock, shuffled output, per-line errors, expiry
with partial output, failed validation, cancel, "not available", and no secret anywhere."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from pipeline.batch.api import (
    NOT_RUN,
    BatchRequest,
    BatchState,
    BatchUnsupported,
    RemoteBatch,
    batch_api_for,
)
from pipeline.batch.gemini import GeminiBatchApi
from pipeline.batch.openai import OpenAIBatchApi
from pipeline.batch.voyage import VoyageBatchApi
from pipeline.embeddings.gemini import GeminiProvider
from pipeline.embeddings.openai import OpenAIProvider
from pipeline.embeddings.registry import choose_provider
from pipeline.embeddings.voyage import VoyageProvider
from pipeline.errors import BatchUnavailable, EmbeddingError, ProviderRefused, ProviderRetryable
from pipeline.messages import ProviderSpec
from tests.fakes.batch_doubles import BatchPlan
from tests.fakes.provider_doubles import Fault, ProviderDouble

KEY = "sk-SENTINEL-batch-7d3e9a"
STYLES = ["openai", "voyage", "gemini"]
PROVIDERS = {"openai": OpenAIProvider, "voyage": VoyageProvider, "gemini": GeminiProvider}
CLIENTS = {"openai": OpenAIBatchApi, "voyage": VoyageBatchApi, "gemini": GeminiBatchApi}
#: Each API's word for a job that is queued / running (the first step after submission).
RUNNING = {"openai": "in_progress", "voyage": "in_progress", "gemini": "BATCH_STATE_RUNNING"}
STEPS_TO_DONE = {"openai": 3, "voyage": 3, "gemini": 2}


@pytest.fixture(params=STYLES)
def style(request) -> str:
    return request.param


def client_for(style: str, double: ProviderDouble, key: str | None = KEY):
    provider = PROVIDERS[style](base_url=double.url, api_key=key, key_required=key is not None)
    return CLIENTS[style](provider)


def requests_for(n: int, prefix: str = "text") -> list[BatchRequest]:
    return [BatchRequest(f"chunk-{i:03d}", f"{prefix} number {i}") for i in range(n)]


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def run_to_end(double: ProviderDouble, api, batch: RemoteBatch, style: str) -> RemoteBatch:
    double.batches.advance(STEPS_TO_DONE[style])
    return api.poll(batch)


def test_remote_batch_round_trips_through_json() -> None:
    batch = RemoteBatch("openai", "batch_1", BatchState.EXPIRED, "expired", input_file="file-a",
                        output_file="file-b", error_file=None, message="12 lines expired")
    again = RemoteBatch.from_dict(json.loads(json.dumps(batch.to_dict())))
    assert again == batch and again.state is BatchState.EXPIRED and again.terminal
    assert not RemoteBatch("gemini", "batches/x", BatchState.RUNNING, "RUNNING").terminal


@pytest.mark.parametrize("name", ["local", "mistral", "ollama"])
def test_only_three_providers_have_a_batch_api(name: str, make_settings, workspace) -> None:
    with pytest.raises(BatchUnsupported, match="no batch API"):
        batch_api_for(ProviderSpec(name, "m", "k"), make_settings(workspace))


def test_batch_api_for_builds_the_client_from_the_spec(make_settings, workspace,
                                                        monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ProviderDouble("openai", api_key=KEY) as double:
        settings = make_settings(workspace, provider="openai", remote={"baseUrl": double.url})
        choice = choose_provider(settings, fetch_default_model=False)
        api = batch_api_for(choice.spec, settings)
        try:
            batch = api.submit(requests_for(2), display_name="spec")
            assert batch.provider == "openai" and batch.state is BatchState.SUBMITTED
            assert double.requests[-1].headers["authorization"] == f"Bearer {KEY}"
        finally:
            api.close()


def test_round_trip_maps_shuffled_output_by_id(style: str) -> None:
    with ProviderDouble(style, api_key=KEY) as double:
        api = client_for(style, double)
        reqs = requests_for(40)
        batch = api.submit(reqs, display_name="memq-test")
        assert batch.state is BatchState.SUBMITTED and batch.input_file
        assert api.poll(batch).state is BatchState.SUBMITTED  # the clock has not moved
        double.batches.advance()
        running = api.poll(batch)
        assert running.state is BatchState.RUNNING and running.raw_state == RUNNING[style]
        done = run_to_end(double, api, batch, style)
        assert done.state is BatchState.COMPLETED and done.output_file
        out = api.results(done, [r.custom_id for r in reqs])
        # upload, create, 3 polls, 1 download: 40 texts, a handful of requests
        assert len(double.requests) == 6
        assert out.errors == {} and set(out.vectors) == {r.custom_id for r in reqs}
        sync = PROVIDERS[style](base_url=double.url, api_key=KEY)
        expected = sync.embed_documents([r.text for r in reqs])
        for i, r in enumerate(reqs):
            assert out.vectors[r.custom_id].dtype == np.float32
            np.testing.assert_allclose(out.vectors[r.custom_id], expected[i], atol=1e-6)
        order = [json.loads(line).get("custom_id") or json.loads(line).get("key") for line in
                 double.batches.files[_bare(done.output_file)].data.splitlines()]
        assert sorted(order) == [r.custom_id for r in reqs] != order  # shuffled, all there


def _bare(name: str | None) -> str:
    return (name or "").removeprefix("files/")


def test_a_failed_line_costs_only_its_own_chunk(style: str) -> None:
    with ProviderDouble(style, api_key=KEY) as double:
        double.batches.plan = BatchPlan(line_error=lambda text: text.endswith("7"))
        api = client_for(style, double)
        reqs = requests_for(30)
        batch = run_to_end(double, api, api.submit(reqs, display_name="x"), style)
        assert batch.state is BatchState.COMPLETED
        out = api.results(batch, [r.custom_id for r in reqs])
        failed = {r.custom_id for r in reqs if r.text.endswith("7")}
        assert set(out.errors) == failed == {"chunk-007", "chunk-017", "chunk-027"}
        assert all("told to fail this line" in reason for reason in out.errors.values())
        assert set(out.vectors) == {r.custom_id for r in reqs} - failed


def test_an_expired_job_gives_its_partial_output(style: str) -> None:
    with ProviderDouble(style, api_key=KEY) as double:
        double.batches.plan = BatchPlan(outcome="expire", partial=0.25)
        api = client_for(style, double)
        reqs = requests_for(20)
        batch = api.submit(reqs, display_name="x")
        double.batches.advance(5)  # past the end: the job stays expired
        expired = api.poll(batch)
        assert expired.state is BatchState.EXPIRED and expired.terminal
        out = api.results(expired, [r.custom_id for r in reqs])
        assert set(out.vectors) == {r.custom_id for r in reqs[:5]}
        assert set(out.errors) == {r.custom_id for r in reqs[5:]}
        if style == "gemini":  # requests never run are simply absent from the output
            assert set(out.errors.values()) == {NOT_RUN}
        else:  # OpenAI and Voyage list them in the error file
            assert all(reason.startswith("batch_expired") for reason in out.errors.values())


def test_failed_validation_reports_why_and_runs_nothing(style: str) -> None:
    with ProviderDouble(style, api_key=KEY) as double:
        double.batches.plan = BatchPlan(outcome="fail")
        api = client_for(style, double)
        reqs = requests_for(4)
        batch = api.submit(reqs, display_name="x")
        double.batches.advance()
        failed = api.poll(batch)
        assert failed.state is BatchState.FAILED and failed.output_file is None
        assert failed.message and "line 1" in failed.message.lower()
        out = api.results(failed, [r.custom_id for r in reqs])
        assert out.vectors == {} and set(out.errors.values()) == {NOT_RUN}
        assert set(out.errors) == {r.custom_id for r in reqs}


def test_cancel_stops_the_job_and_keeps_what_ran(style: str) -> None:
    with ProviderDouble(style, api_key=KEY) as double:
        double.batches.plan = BatchPlan(partial=0.5)
        api = client_for(style, double)
        reqs = requests_for(10)
        batch = api.submit(reqs, display_name="x")
        double.batches.advance()
        cancelling = api.cancel(batch)
        assert cancelling.state in (BatchState.RUNNING, BatchState.CANCELLED)
        double.batches.advance()
        cancelled = api.poll(batch)
        assert cancelled.state is BatchState.CANCELLED
        out = api.results(cancelled, [r.custom_id for r in reqs])
        assert set(out.vectors) == {r.custom_id for r in reqs[:5]}
        assert set(out.errors) == {r.custom_id for r in reqs[5:]}


def test_a_job_in_a_state_nobody_knows_is_unknown(style: str) -> None:
    with ProviderDouble(style, api_key=KEY) as double:
        double.batches.plan = BatchPlan(outcome="stuck")
        api = client_for(style, double)
        batch = api.submit(requests_for(2), display_name="x")
        double.batches.advance(3)
        stuck = api.poll(batch)
        assert stuck.state is BatchState.UNKNOWN and not stuck.terminal and stuck.raw_state
        with pytest.raises(EmbeddingError, match="results come once it stops") as info:
            api.results(stuck, ["chunk-000"])
        assert isinstance(info.value, ProviderRetryable)


def test_a_missing_batch_api_disables_batch_mode_and_cleans_up(style: str) -> None:
    with ProviderDouble(style, api_key=KEY) as double:
        double.batches.plan = BatchPlan(not_available=True)
        api = client_for(style, double)
        with pytest.raises(EmbeddingError) as info:
            api.submit(requests_for(3), display_name="x")
        assert isinstance(info.value, BatchUnavailable)
        assert not isinstance(info.value, ProviderRetryable)
        assert double.batches.files == {} and len(double.batches.deleted) == 1


def test_a_failed_create_deletes_the_upload_and_is_retryable(style: str) -> None:
    noop = Fault("stall", seconds=0)
    with ProviderDouble(style, api_key=KEY, script=[noop, Fault("503")]) as double:
        api = client_for(style, double)
        with pytest.raises(EmbeddingError) as info:
            api.submit(requests_for(3), display_name="x")
        assert isinstance(info.value, ProviderRetryable)
        assert not isinstance(info.value, BatchUnavailable)
        assert double.batches.files == {} and double.batches.jobs == {}


def test_a_rate_limited_poll_says_when_to_come_back(style: str) -> None:
    with ProviderDouble(style, api_key=KEY) as double:
        api = client_for(style, double)
        batch = api.submit(requests_for(2), display_name="x")
        double.script.append(Fault("429", retry_after=7))
        with pytest.raises(EmbeddingError) as info:
            api.poll(batch)
        assert isinstance(info.value, ProviderRetryable) and info.value.retry_after == 7
        assert api.poll(batch).state is BatchState.SUBMITTED


def test_auto_mode_finishes_jobs_with_no_test_thread(style: str) -> None:
    with ProviderDouble(style, api_key=KEY) as double:
        double.batches.polls_per_step = 2
        api = client_for(style, double)
        reqs = requests_for(3)
        batch = api.submit(reqs, display_name="x")
        states = [api.poll(batch).state for _ in range(2 * STEPS_TO_DONE[style])]
        assert states[-1] is BatchState.COMPLETED and states[0] is BatchState.SUBMITTED
        assert len(api.results(api.poll(batch), [r.custom_id for r in reqs]).vectors) == 3


def test_limits_are_checked_before_anything_is_sent(style: str) -> None:
    with ProviderDouble(style, api_key=KEY) as double:
        api = client_for(style, double)
        api.max_requests = 3
        with pytest.raises(EmbeddingError, match="exceed the batch limit of 3"):
            api.submit(requests_for(4), display_name="x")
        api.max_bytes = 100
        with pytest.raises(EmbeddingError, match="over the limit of 100"):
            api.submit(requests_for(3, prefix="x" * 80), display_name="x")
        with pytest.raises(EmbeddingError, match="duplicate"):
            api.submit([BatchRequest("a", "1"), BatchRequest("a", "2")], display_name="x")
        assert double.requests == []


def test_no_secret_in_errors_batches_or_reprs(style: str) -> None:
    with ProviderDouble(style, api_key=KEY) as double:
        wrong = client_for(style, double, key="sk-WRONG-secret-93ab1")
        with pytest.raises(EmbeddingError) as info:
            wrong.submit(requests_for(2), display_name="x")
        assert isinstance(info.value, ProviderRefused)
        assert "sk-WRONG-secret-93ab1" not in str(info.value)
        api = client_for(style, double)
        double.batches.plan = BatchPlan(outcome="fail")
        batch = api.submit(requests_for(2), display_name="x")
        double.batches.advance()
        failed = api.poll(batch)
        shown = json.dumps(failed.to_dict()) + repr(failed) + repr(api)
        assert KEY not in shown and "SENTINEL" not in shown


def test_every_call_carries_the_key_and_keyless_calls_are_refused(style: str) -> None:
    with ProviderDouble(style, api_key=KEY) as double:
        api = client_for(style, double)
        reqs = requests_for(3)
        batch = run_to_end(double, api, api.submit(reqs, display_name="x"), style)
        api.results(batch, [r.custom_id for r in reqs])
        header = "x-goog-api-key" if style == "gemini" else "authorization"
        want = KEY if style == "gemini" else f"Bearer {KEY}"
        assert len(double.requests) >= 4
        assert all(seen.headers.get(header) == want for seen in double.requests)
        keyless = httpx.get(double.root + double.requests[-1].path)
        assert keyless.status_code in (400, 401)  # Gemini says 400 API_KEY_INVALID
        assert double.requests[-1].status == keyless.status_code


def test_voyage_sends_model_and_input_type_once_per_job() -> None:
    with ProviderDouble("voyage", api_key=KEY) as double:
        provider = VoyageProvider(base_url=double.url, api_key=KEY,
                                  document_input_type="query")
        api = VoyageBatchApi(provider)
        batch = api.submit(requests_for(2), display_name="v")
        create = next(r for r in double.requests if r.path == "/v1/batches")
        assert create.body["request_params"] == {"model": "voyage-4-large",
                                                 "input_type": "query"}
        assert create.body["completion_window"] == "12h"
        lines = double.batches.files[batch.input_file].data.splitlines()
        assert json.loads(lines[0]) == {"custom_id": "chunk-000",
                                        "body": {"input": ["text number 0"]}}


def test_gemini_lines_ask_for_documents_at_the_configured_width() -> None:
    with ProviderDouble("gemini", api_key=KEY) as double:
        provider = GeminiProvider("gemini-embedding-2-preview", output_dimensionality=768,
                                  base_url=double.url, api_key=KEY)
        api = GeminiBatchApi(provider)
        reqs = requests_for(3)
        batch = api.submit(reqs, display_name="g")
        upload = next(r for r in double.requests if r.path.startswith("/upload/"))
        assert upload.headers["x-goog-upload-protocol"] == "multipart"
        line = json.loads(double.batches.files[_bare(batch.input_file)].data.splitlines()[0])
        assert line == {"key": "chunk-000", "request": {
            "content": {"parts": [{"text": "text number 0"}]},
            "taskType": "RETRIEVAL_DOCUMENT", "outputDimensionality": 768}}
        create = next(r for r in double.requests if r.path.endswith(":asyncBatchEmbedContent"))
        assert create.path == "/v1beta/models/gemini-embedding-2-preview:asyncBatchEmbedContent"
        assert batch.remote_id.startswith("batches/")
        out = api.results(run_to_end(double, api, batch, "gemini"), [r.custom_id for r in reqs])
        assert {v.shape for v in out.vectors.values()} == {(768,)}


def test_a_stored_name_that_is_not_a_batch_is_refused() -> None:
    with ProviderDouble("gemini", api_key=KEY) as double:
        api = client_for("gemini", double)
        forged = RemoteBatch("gemini", "batches/../../models/x", BatchState.RUNNING, "RUNNING")
        with pytest.raises(EmbeddingError, match="not a batch or file name"):
            api.poll(forged)
        assert double.requests == []


def test_a_seeded_error_rate_fails_the_lines_the_double_chose() -> None:
    with ProviderDouble("openai", api_key=KEY, seed=11) as double:
        double.batches.plan = BatchPlan(error_rate=0.3)
        api = client_for("openai", double)
        reqs = requests_for(50)
        batch = run_to_end(double, api, api.submit(reqs, display_name="x"), "openai")
        out = api.results(batch, [r.custom_id for r in reqs])
        chosen = double.batches.job(batch.remote_id).line_errors
        assert 5 < len(chosen) < 30 and set(out.errors) == chosen
        assert len(out.vectors) == 50 - len(chosen)
        assert batch.message == f"{50 - len(chosen)}/50 done, {len(chosen)} failed"


def test_line_size_is_what_the_input_file_holds(style: str) -> None:
    with ProviderDouble(style, api_key=KEY) as double:
        api = client_for(style, double)
        reqs = [BatchRequest("a", "plain"), BatchRequest("b", "ünïcödé ✓ " * 40)]
        batch = api.submit(reqs, display_name="x")
        data = double.batches.files[_bare(batch.input_file)].data
        assert sum(api.line_size(r) for r in reqs) == len(data)
        assert api.line_size(reqs[1]) > len(reqs[1].text.encode())


def test_gemini_saying_async_batch_is_not_available_disables_batch_mode() -> None:
    with ProviderDouble("gemini", api_key=KEY) as double:
        double.batches.plan = BatchPlan(not_available=True, not_available_status=400)
        api = client_for("gemini", double)
        with pytest.raises(EmbeddingError, match="asyncBatchEmbedContent not available") as info:
            api.submit(requests_for(2), display_name="x")
        assert isinstance(info.value, BatchUnavailable) and double.batches.files == {}
