"""A query gets the same hits and scores whoever answers it: vec0 in the store, or the vectors
held in memory by a long-running reader (the MCP server, a shard's reader worker). Before
this held, the last digit of a score and the order of near ties depended on the path."""

from __future__ import annotations

import random
from pathlib import Path

from pipeline.memory import Memory
from tests.faultkit import write_corpus


def test_held_and_stored_vectors_give_the_same_answers(tmp_path: Path, tiny_model: Path,
                                                      make_settings) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    write_corpus(ws, files=12, lines=12, seed=3)
    settings = make_settings(ws, provider="local", local={"modelPath": str(tiny_model)})
    with Memory(settings=settings) as memory:
        memory.index()
    words = [w for p in sorted(ws.rglob("*.md")) for w in p.read_text().split() if len(w) > 3]
    rng = random.Random(1)
    queries = [" ".join(rng.sample(words, rng.randint(1, 4))) for _ in range(60)]
    with Memory(settings=settings, in_memory=False) as stored, Memory(settings=settings) as held:
        held.search(queries[0])
        held.local.search_part().held.wait(30)  # the copy is loaded in the background
        answers = [(stored.search(q).to_dict(), held.search(q).to_dict()) for q in queries]
    assert all(a == b for a, b in answers), next((a, b) for a, b in answers if a != b)
    assert sum(len(a["results"]) for a, _ in answers) > 100
