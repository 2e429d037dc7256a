"""A bulk embedding job gives way to interactive work: between slices of its chunks it looks
at the interactive lane of its queue (real Redis) and, when a message waits there, hands back
what it has embedded and the rest of its chunks as a new bulk job."""

from __future__ import annotations

from pathlib import Path

from pipeline.embeddings.local import LocalProvider
from pipeline.embeddings.runner import YIELD_SLICE_BYTES, embed_yielding
from pipeline.messages import ChunkText, EmbedJob, ProviderSpec, Route
from pipeline.routing import embed_queue
from tests.conftest import redis_client


def make_job(chunks: int, *, interactive: bool = False) -> EmbedJob:
    texts = [f"note {i}: " + "the billing service moved to Postgres " * 40 for i in range(chunks)]
    return EmbedJob("alpha", ProviderSpec("local", "tiny-bert", "k"), "/stores/alpha.sqlite",
                    tuple(ChunkText(f"c{i}", f"h{i}", t) for i, t in enumerate(texts)),
                    route=Route(1, interactive))


def test_a_bulk_job_yields_to_a_waiting_interactive_message(tiny_model: Path,
                                                            broker_url: str) -> None:
    client = redis_client(broker_url)
    provider = LocalProvider(tiny_model, threads=1)
    queue = embed_queue("local")
    asked = []

    def waiting() -> bool:
        asked.append(1)
        return client.llen(queue) > 0  # kombu keeps priority 0 (interactive) in the list itself

    try:
        job = make_job(24)
        per_slice = max(1, YIELD_SLICE_BYTES // len(job.chunks[0].text.encode()))
        assert per_slice < job.size  # the job spans several slices
        result, rest = embed_yielding(job, provider, should_yield=waiting)
        assert rest is None and [v.id for v in result.vectors] == [c.id for c in job.chunks]
        assert len(asked) == -(-job.size // per_slice) - 1  # between slices only

        client.lpush(queue, b"an interactive message")
        result, rest = embed_yielding(job, provider, should_yield=waiting)
        assert rest is not None and rest.route == job.route and rest.memory == "alpha"
        assert [v.id for v in result.vectors] == [c.id for c in job.chunks[:per_slice]]
        assert rest.chunks == job.chunks[per_slice:]  # nothing lost, nothing twice
        assert result.route == job.route and not result.failed

        asked.clear()
        urgent = make_job(24, interactive=True)  # interactive work never gives way
        result, rest = embed_yielding(urgent, provider, should_yield=waiting)
        assert rest is None and len(result.vectors) == urgent.size and asked == []
    finally:
        provider.close()
        client.close()
