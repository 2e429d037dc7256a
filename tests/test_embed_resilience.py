"""How the embedding job survives a provider: the backoff schedule, Retry-After, and a
context-length error split down to the one chunk that is too long (plain functions; the real
queue is exercised in test_remote_pipeline.py)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.embeddings import retries as policy
from pipeline.embeddings import runner
from pipeline.embeddings.ollama import OllamaProvider
from pipeline.errors import EmbeddingError, InputTooLong, ProviderRetryable
from pipeline.messages import ChunkText, EmbedJob, ProviderSpec
from tests.fakes.provider_doubles import Fault, ProviderDouble


def test_backoff_schedule() -> None:
    for retries, low in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)]:
        delays = [policy.retry_delay(retries) for _ in range(200)]
        assert low <= min(delays) and max(delays) <= low * 1.2
        assert max(delays) > min(delays)  # jitter
    assert policy.retry_delay(0, retry_after=20) == 20
    assert policy.retry_delay(4, retry_after=0.1) >= 8.0  # never sooner than the schedule
    assert policy.retry_delay(0, retry_after=86400) == policy.MAX_RETRY_AFTER_S
    assert policy.MAX_RETRIES >= 3
    assert policy.max_retries({}) == 8 and policy.max_retries({"MEMQ_EMBED_MAX_RETRIES": "0"}) == 0
    with pytest.raises(ValueError, match="MEMQ_EMBED_MAX_RETRIES"):
        policy.max_retries({"MEMQ_EMBED_MAX_RETRIES": "-1"})


def test_context_length_splits_down_to_the_long_chunk() -> None:
    texts = ["alpha", "beta", "gamma", "x" * 300, "delta"]
    with ProviderDouble("ollama", api_key=None, max_input_bytes=200) as double:
        provider = OllamaProvider(base_url=double.url)
        out = runner.embed_splitting(provider, texts)
        assert [isinstance(o, EmbeddingError) for o in out] == [False] * 3 + [True, False]
        assert isinstance(out[3], InputTooLong)
        for text, vec in zip(texts, out, strict=True):
            if not isinstance(vec, EmbeddingError):
                want = double.vector(text)
                np.testing.assert_allclose(vec, want / np.linalg.norm(want), atol=1e-6)
        sent = [r.body["input"] for r in double.embed_requests()]
        # all five; halves [a, b] ok and [c, long, d] fails; [c] ok, [long, d] fails; each alone
        assert sent == [texts, texts[:2], texts[2:], texts[2:3], texts[3:], texts[3:4],
                        texts[4:]]


def test_embed_job_marks_only_the_long_chunk_failed(tmp_path) -> None:
    with ProviderDouble("ollama", api_key=None, max_input_bytes=200) as double:
        provider = OllamaProvider(base_url=double.url)
        spec = ProviderSpec("ollama", provider.model, provider.provider_key, {"role": "primary"})
        job = EmbedJob("main", spec, str(tmp_path / "s.sqlite"),
                       (ChunkText("c1", "h1", "short"), ChunkText("c2", "h2", "y" * 500)))
        result = runner.embed_job(job, provider)
        assert [v.id for v in result.vectors] == ["c1"]
        assert result.failed[0][0] == "c2"
        assert "input too long" in result.failed[0][1] and "context length" in result.failed[0][1]


def test_other_errors_are_raised_for_the_retry_policy() -> None:
    with ProviderDouble("ollama", api_key=None, script=[Fault("503", retry_after=3)]) as double:
        with pytest.raises(EmbeddingError) as info:
            runner.embed_splitting(OllamaProvider(base_url=double.url), ["a", "b"])
        assert isinstance(info.value, ProviderRetryable) and info.value.retry_after == 3
