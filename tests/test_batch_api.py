"""The batch clients against real loopback doubles of the providers' Files and Batches APIs:
submit, poll through the states on the test's clock, shuffled output, per-line errors, expiry
with partial output, failed validation, cancel, "not available", and no secret anywhere."""

from __future__ import annotations

import json

import pytest

from pipeline.batch.api import BatchState, BatchUnsupported, RemoteBatch, batch_api_for
from pipeline.embeddings.registry import ProviderSpec


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
