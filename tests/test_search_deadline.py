"""A search's deadline (``query.timeoutMs``, OpenClaw's 30 s): a query-embedding provider that
stalls does not hold the search. Past the deadline the answer is the keyword matches with
``partial``, ``timedOut`` and ``timeoutMs`` and a warning, and the provider is skipped for the
next 60 s (the next search does not wait). Against a real OpenAI-shaped HTTP double on
loopback whose embedding request stalls, the bound lowered to 1 s through the config."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from memq import Memory
from pipeline.results import SearchResults
from pipeline.search.deadline import COOLDOWN_S, Cooldown, Deadline, embed_within
from tests.fakes.provider_doubles import Fault, ProviderDouble

BOUND_S = 1.0
#: Time a search may take beyond its bound (a keyword search on a busy two-core machine).
MARGIN_S = 0.6
QUERY = "PostgreSQL storage billing"
#: Another process that holds a store's write lock (as an index pass does) until told.
HOLD_WRITE_LOCK = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.readline()
db.rollback()
"""


@pytest.fixture
def double():
    with ProviderDouble("openai") as running:
        yield running


@pytest.fixture
def memory(double: ProviderDouble, workspace: Path, make_settings):
    settings = make_settings(workspace, provider="openai",
                             remote={"baseUrl": double.url, "apiKey": double.api_key},
                             query={"timeoutMs": int(BOUND_S * 1000)})
    with Memory(settings=settings) as opened:
        run = opened.index(wait=True)
        assert run.pending == 0
        yield opened


def embedding_requests(double: ProviderDouble) -> int:
    return sum(1 for seen in double.requests if seen.path.endswith("/embeddings"))


def timed_search(memory: Memory) -> tuple[SearchResults, float]:
    began = time.monotonic()
    results = memory.search(QUERY)
    return results, time.monotonic() - began


def test_a_stalled_query_embedding_gives_keyword_results_within_the_bound_then_a_cooldown(
        memory: Memory, double: ProviderDouble) -> None:
    answered, _ = timed_search(memory)  # the provider answers: a full hybrid search
    assert answered.mode == "hybrid" and len(answered) > 0
    assert {"partial", "timedOut", "timeoutMs"}.isdisjoint(answered.to_dict())

    double.script = [Fault("stall", seconds=BOUND_S + 2.5)]
    asked = embedding_requests(double)
    partial, took = timed_search(memory)
    assert BOUND_S - 0.05 <= took <= BOUND_S + MARGIN_S, took
    assert embedding_requests(double) == asked + 1  # it did ask, and waited for the bound
    out = partial.to_dict()
    assert out["mode"] == "keyword-only" and out["partial"] is True
    assert out["timedOut"] is True and out["timeoutMs"] == 1000
    assert "memory_search timed out after 1s" in out["warning"]
    assert "query embedding (openai) did not answer in time" in out["warning"]
    assert f"skipped for the next {COOLDOWN_S:.0f} s" in out["warning"]
    assert out["results"] and any("PostgreSQL" in hit["snippet"] for hit in out["results"])

    cooled, took = timed_search(memory)  # the provider is skipped: no wait, no request
    assert took < 0.3, took
    assert embedding_requests(double) == asked + 1
    out = cooled.to_dict()
    assert out["mode"] == "keyword-only" and out["partial"] is True and out["timedOut"] is True
    assert "skipped for another" in out["warning"]
    assert "memory_search timed out after 1s" in out["warning"]
    assert [h.path for h in cooled] == [h.path for h in partial]


def test_the_deadline_runs_from_the_start_of_the_search() -> None:
    deadline = Deadline(200)
    assert 0.15 < deadline.left() <= 0.2
    assert Deadline(100, started=time.monotonic() - 1).left() == 0.0


class _Slow:
    name, model, max_input_bytes = "slow", "m", 8000

    def __init__(self, seconds: float, error: Exception | None = None) -> None:
        self.seconds, self.error = seconds, error

    def embed_query(self, text: str):
        import numpy as np

        time.sleep(self.seconds)
        if self.error is not None:
            raise self.error
        return np.ones(3, dtype=np.float32)


def test_embed_within_waits_only_as_long_as_given_and_passes_errors_on() -> None:
    began = time.monotonic()
    assert embed_within(_Slow(1.0), "q", 0.1) is None  # type: ignore[arg-type]
    assert time.monotonic() - began < 0.5
    assert embed_within(_Slow(1.0), "q", 0) is None  # type: ignore[arg-type]
    assert embed_within(_Slow(0.0), "q", 1.0) is not None  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="boom"):
        embed_within(_Slow(0.0, ValueError("boom")), "q", 1.0)  # type: ignore[arg-type]


def test_the_cooldown_skips_only_the_provider_that_ran_out_of_time() -> None:
    cooldown = Cooldown(seconds=0.2)
    assert cooldown.left(("openai", "m")) == 0.0
    cooldown.start(("openai", "m"), "why")
    assert 0.1 < cooldown.left(("openai", "m")) <= 0.2 and cooldown.reason == "why"
    assert cooldown.left(("gemini", "m")) == 0.0
    time.sleep(0.25)
    assert cooldown.left(("openai", "m")) == 0.0


def test_the_fields_cross_the_fleet_and_mark_a_reader_that_did_not_answer() -> None:
    partial = SearchResults(mode="keyword-only", warning="w", partial=True, timed_out=True,
                            timeout_ms=30000)
    out = partial.to_dict()
    assert (out["partial"], out["timedOut"], out["timeoutMs"]) == (True, True, 30000)
    assert SearchResults.from_dict(out).to_dict() == out
    silent = SearchResults(mode="unavailable", error="no reader", action="start one",
                           timed_out=True, timeout_ms=5000).to_dict()
    assert silent["unavailable"] is True and silent["timedOut"] is True
    assert silent["timeoutMs"] == 5000


def test_a_sync_on_search_held_up_by_a_writer_answers_from_the_index_as_it_was(
        workspace: Path, make_settings) -> None:
    """Another writer holds the store (an index pass, say): the sync of a changed file waits
    for it in the background; the search answers within its bound from the index as it was,
    saying so, and a later search finds the new text once the sync got through."""
    settings = make_settings(workspace, provider="none", query={"timeoutMs": 1000})
    with Memory(settings=settings) as memory:
        memory.index(wait=True)
        note = workspace / "memory" / "2026-11-25.md"
        note.write_text(note.read_text() + "\n- Zanzibar ferry schedule checked.\n")
        writer = subprocess.Popen([sys.executable, "-c", HOLD_WRITE_LOCK, str(settings.store.path)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert writer.stdout is not None and writer.stdout.readline() == "held\n"
            began = time.monotonic()
            held = memory.search("Zanzibar ferry")
            took = time.monotonic() - began
        finally:
            writer.communicate("\n", timeout=10)  # lets go of the lock, and ends
        out = held.to_dict()
        assert BOUND_S - 0.05 <= took <= BOUND_S + MARGIN_S, (took, out)
        assert out["partial"] is True and out["timedOut"] is True and out["syncing"] is True
        assert "while the changed files were synced" in out["warning"]
        assert out["results"] == []  # the new text is not in the index yet
        deadline = time.monotonic() + 5
        while True:  # the sync goes on once the writer let go
            found = memory.search("Zanzibar ferry")
            if found.hits or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert found.hits and "Zanzibar" in found.hits[0].snippet
        assert "partial" not in found.to_dict()


def test_a_remote_search_no_reader_answers_in_time_says_it_timed_out(
        workspace: Path, make_settings, broker_url: str) -> None:
    """A memory whose store is on another host: no reader of its shard answers within
    ``fleet.queryTimeoutMs`` (a real broker, no reader), so the answer is OpenClaw's
    unavailable shape with ``timedOut`` and the bound waited. (A reader's own answer cut at
    its ``query.timeoutMs`` comes back with its ``partial`` fields:
    ``test_the_fields_cross_the_fleet_and_mark_a_reader_that_did_not_answer``.)"""
    settings = make_settings(workspace, provider="none", brokerUrl=broker_url,
                             fleet={"queryTimeoutMs": 300})
    with Memory(settings=settings, local=False) as memory:
        began = time.monotonic()
        out = memory.search(QUERY).to_dict()
        took = time.monotonic() - began
    assert out["unavailable"] is True and out["results"] == []
    assert out["timedOut"] is True and out["timeoutMs"] == 300
    assert "no reader of shard" in out["error"]
    assert took < 5, took
