"""The batch doubles are faithful: the official SDKs' Files and Batches calls, pointed at the
doubles, send their usual requests and parse the answers (openai-python for OpenAI and, as
Voyage documents, for Voyage too; google-genai for Gemini)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.fakes.batch_doubles import BatchPlan
from tests.fakes.provider_doubles import ProviderDouble

KEY = "sk-sdk-batch-key"


def openai_lines(texts: list[str]) -> bytes:
    return b"".join(json.dumps({
        "custom_id": f"id-{i}", "method": "POST", "url": "/v1/embeddings",
        "body": {"model": "text-embedding-3-small", "input": text}}).encode() + b"\n"
        for i, text in enumerate(texts))


def test_openai_sdk_runs_a_batch_through_the_double() -> None:
    openai = pytest.importorskip("openai")
    texts = ["alpha", "beta", "gamma", "delta"]
    with ProviderDouble("openai", api_key=KEY) as double:
        double.batches.plan = BatchPlan(line_error=lambda t: t == "gamma")
        client = openai.OpenAI(base_url=double.url, api_key=KEY, max_retries=0)
        uploaded = client.files.create(file=("in.jsonl", openai_lines(texts)), purpose="batch")
        assert uploaded.id.startswith("file-") and uploaded.purpose == "batch"
        assert uploaded.bytes == len(openai_lines(texts))
        batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings",
                                      completion_window="24h", metadata={"name": "sdk"})
        assert batch.id.startswith("batch_") and batch.status == "validating"
        double.batches.advance()
        assert client.batches.retrieve(batch.id).status == "in_progress"
        double.batches.advance(2)
        done = client.batches.retrieve(batch.id)
        assert done.status == "completed" and done.request_counts.total == 4
        assert (done.request_counts.completed, done.request_counts.failed) == (3, 1)
        output = [json.loads(line) for line in
                  client.files.content(done.output_file_id).content.splitlines()]
        vectors = {line["custom_id"]: line["response"]["body"]["data"][0]["embedding"]
                   for line in output}
        assert set(vectors) == {"id-0", "id-1", "id-3"}
        np.testing.assert_allclose(vectors["id-3"], double.vector("delta"), rtol=1e-6)
        errors = [json.loads(line) for line in
                  client.files.content(done.error_file_id).content.splitlines()]
        assert [e["custom_id"] for e in errors] == ["id-2"] and errors[0]["error"]["message"]
        sent = next(r for r in double.requests if r.path == "/v1/files")
        assert sent.headers["content-type"].startswith("multipart/form-data")
        assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in double.requests)


def test_openai_sdk_cancel_failure_and_delete() -> None:
    openai = pytest.importorskip("openai")
    with ProviderDouble("openai", api_key=KEY) as double:
        client = openai.OpenAI(base_url=double.url, api_key=KEY, max_retries=0)
        uploaded = client.files.create(file=("in.jsonl", openai_lines(["a", "b"])),
                                       purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings",
                                      completion_window="24h")
        assert client.batches.cancel(batch.id).status == "cancelling"
        double.batches.advance()
        assert client.batches.retrieve(batch.id).status == "cancelled"
        double.batches.plan = BatchPlan(outcome="fail")
        failing = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings",
                                        completion_window="24h")
        double.batches.advance()
        failed = client.batches.retrieve(failing.id)
        assert failed.status == "failed" and failed.errors.data[0].line == 1
        assert client.files.delete(uploaded.id).deleted is True
        with pytest.raises(openai.NotFoundError):
            client.files.content(uploaded.id)
        double.batches.plan = BatchPlan(not_available=True)
        with pytest.raises(openai.NotFoundError):
            client.batches.create(input_file_id="file-x", endpoint="/v1/embeddings",
                                  completion_window="24h")


def test_voyage_batches_through_the_openai_sdk() -> None:
    """Voyage documents its Batch API as usable with the OpenAI SDK: model and input_type go
    in ``request_params`` (``extra_body``), lines hold only ``{custom_id, body: {input}}``."""
    openai = pytest.importorskip("openai")
    lines = b"".join(json.dumps({"custom_id": f"v-{i}", "body": {"input": [t]}}).encode()
                     + b"\n" for i, t in enumerate(["alpha", "beta"]))
    with ProviderDouble("voyage", api_key=KEY) as double:
        client = openai.OpenAI(base_url=double.url, api_key=KEY, max_retries=0)
        uploaded = client.files.create(file=("in.jsonl", lines), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="12h",
            extra_body={"request_params": {"model": "voyage-4-large",
                                           "input_type": "document"}})
        assert batch.status == "validating"
        assert isinstance(batch.created_at, str)  # Voyage stamps ISO-8601 strings
        double.batches.advance(3)
        done = client.batches.retrieve(batch.id)
        assert done.status == "completed"
        output = {json.loads(line)["custom_id"]: json.loads(line) for line in
                  client.files.content(done.output_file_id).content.splitlines()}
        np.testing.assert_allclose(output["v-1"]["response"]["body"]["data"][0]["embedding"],
                                   double.vector("beta"), rtol=1e-6)
        with pytest.raises(openai.BadRequestError):  # Voyage's window is 12 h, not 24 h
            client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings",
                                  completion_window="24h")


def gemini_client(double: ProviderDouble, key: str = KEY):
    from google import genai
    from google.genai import types

    return genai.Client(api_key=key, http_options=types.HttpOptions(
        base_url=double.root, api_version="v1beta",
        retry_options=types.HttpRetryOptions(attempts=1)))


def test_gemini_sdk_uploads_creates_polls_and_downloads() -> None:
    pytest.importorskip("google.genai")
    import io

    from google.genai import types

    lines = b"".join(json.dumps({"key": f"g-{i}", "request": {
        "content": {"parts": [{"text": t}]}, "taskType": "RETRIEVAL_DOCUMENT"}}).encode()
        + b"\n" for i, t in enumerate(["alpha", "beta", "gamma"]))
    with ProviderDouble("gemini", api_key=KEY) as double:
        client = gemini_client(double)
        uploaded = client.files.upload(file=io.BytesIO(lines), config=types.UploadFileConfig(
            mime_type="application/jsonl", display_name="in"))
        assert uploaded.name.startswith("files/") and uploaded.size_bytes == len(lines)
        with pytest.warns(Warning):  # create_embeddings is marked experimental
            job = client.batches.create_embeddings(
                model="gemini-embedding-001",
                src=types.EmbeddingsBatchJobSource(file_name=uploaded.name),
                config=types.CreateEmbeddingsBatchJobConfig(display_name="sdk"))
        assert job.name.startswith("batches/") and job.state == "JOB_STATE_PENDING"
        assert job.display_name == "sdk"
        create = next(r for r in double.requests if r.path.endswith("asyncBatchEmbedContent"))
        assert create.body["batch"]["inputConfig"] == {"file_name": uploaded.name}
        double.batches.advance()
        assert client.batches.get(name=job.name).state == "JOB_STATE_RUNNING"
        double.batches.advance()
        done = client.batches.get(name=job.name)
        assert done.state == "JOB_STATE_SUCCEEDED" and done.dest.file_name
        output = {json.loads(line)["key"]: json.loads(line) for line in
                  client.files.download(file=done.dest.file_name).splitlines()}
        assert set(output) == {"g-0", "g-1", "g-2"}
        np.testing.assert_allclose(output["g-2"]["response"]["embedding"]["values"],
                                   double.vector("gamma"), rtol=1e-6)
        keyed = [r for r in double.requests if "upload_id=" not in r.path]
        assert all(r.headers.get("x-goog-api-key") == KEY for r in keyed)


def test_gemini_sdk_cancel_and_not_available() -> None:
    pytest.importorskip("google.genai")
    from google.genai import errors, types

    with ProviderDouble("gemini", api_key=KEY) as double:
        client = gemini_client(double)
        name = double.batches.add_file(b'{"key": "k", "request": {}}\n', "in").name
        src = types.EmbeddingsBatchJobSource(file_name=f"files/{name}")
        with pytest.warns(Warning):
            job = client.batches.create_embeddings(model="gemini-embedding-001", src=src)
        client.batches.cancel(name=job.name)
        assert client.batches.get(name=job.name).state == "JOB_STATE_CANCELLED"
        double.batches.plan = BatchPlan(not_available=True)
        with pytest.raises(errors.ClientError) as info, pytest.warns(Warning):
            client.batches.create_embeddings(model="gemini-embedding-001", src=src)
        assert info.value.code == 404 and "asyncBatchEmbedContent" in info.value.message
        stranger = gemini_client(double, key="wrong-key")
        with pytest.raises(errors.ClientError) as info:
            stranger.batches.get(name=job.name)
        assert info.value.status == "INVALID_ARGUMENT"
