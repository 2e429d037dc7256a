"""A bulk embedding job gives way to interactive work: between slices of its chunks it looks
at the interactive lane of its queue (real Redis) and, when a message waits there, hands back
what it has embedded and the rest of its chunks as a new bulk job."""

from __future__ import annotations

from pathlib import Path

from pipeline.embeddings.local import LocalProvider
from pipeline.embeddings.runner import (
    YIELD_SLICE_BYTES,
    YIELD_SLICE_LOCAL_CHUNKS,
    embed_yielding,
    slices,
)
from pipeline.messages import ChunkText, EmbedJob, ProviderSpec, Route
from pipeline.routing import embed_queue
from tests.conftest import redis_client


def make_job(chunks: int, *, interactive: bool = False, words: int = 40,
             provider: str = "local") -> EmbedJob:
    texts = [f"note {i}: " + "the billing service moved to Postgres " * words
             for i in range(chunks)]
    return EmbedJob("alpha", ProviderSpec(provider, "tiny-bert", "k"), "/stores/alpha.sqlite",
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
        per_slice = min(YIELD_SLICE_LOCAL_CHUNKS,
                        max(1, YIELD_SLICE_BYTES // len(job.chunks[0].text.encode())))
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


def test_slices_cut_by_bytes_and_for_the_local_model_by_chunks() -> None:
    small = make_job(32, words=5)  # about 200 bytes a chunk: one 8,000-byte slice...
    assert [len(p.chunks) for p in slices(small)] == [32]
    # ...but the local model embeds one text per call: 8 chunks a slice
    assert [len(p.chunks) for p in slices(small, max_chunks=YIELD_SLICE_LOCAL_CHUNKS)] == [8] * 4
    large = make_job(10, words=40, provider="openai")  # about 1,530 bytes a chunk
    parts = slices(large)
    assert [len(p.chunks) for p in parts] == [5, 5]
    assert tuple(c for p in parts for c in p.chunks) == large.chunks
    assert all(p.route == large.route and p.memory == large.memory for p in parts)


def test_a_provider_with_streams_gets_slices_as_many_times_longer(tiny_model: Path) -> None:
    provider = LocalProvider(tiny_model, threads=2)  # two decode streams
    assert provider.streams == 2
    asked: list[int] = []
    try:
        job = make_job(40, words=5)  # about 200 bytes a chunk: the chunk limit cuts
        result, rest = embed_yielding(job, provider, should_yield=lambda: bool(asked.append(1)))
        assert rest is None and [v.id for v in result.vectors] == [c.id for c in job.chunks]
        assert len(asked) == 2  # slices of 16, 16 and 8 chunks
        big = make_job(40, words=40)  # about 1,530 bytes a chunk: 16,000 bytes cut
        asked.clear()
        result, rest = embed_yielding(big, provider, should_yield=lambda: bool(asked.append(1)))
        assert rest is None and len(result.vectors) == big.size
        assert len(asked) == -(-big.size // (2 * YIELD_SLICE_BYTES // len(
            big.chunks[0].text.encode()))) - 1
    finally:
        provider.close()
