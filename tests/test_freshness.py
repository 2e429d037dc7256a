"""The freshness guard through real workers: a file edited while its old chunks are in flight
ends with the new text's vectors only; the old results are dropped, never attached."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.embeddings.registry import choose_provider
from pipeline.status import index_status
from pipeline.store.engine import connect
from pipeline.store.vectors import get_vectors
from tests.indexcheck import index_vs_disk, wait_until
from workers.indexing import run_index

pytestmark = pytest.mark.integration


def test_edit_racing_inflight_embedding_keeps_only_new_vectors(workspace: Path, make_settings,
                                                               tiny_model, broker_url,
                                                               fleet) -> None:
    settings = make_settings(workspace, provider="local", brokerUrl=broker_url,
                             local={"modelPath": str(tiny_model)})
    fleet.start(["store.0"], "writer")
    old = run_index(settings, wait=False)  # version 1's jobs sit in the embed queue
    assert old.report.chunks_queued > 0
    note = workspace / "memory" / "2026-11-10.md"
    note.write_text("# 2026-11-10\n\n- Replaced the boiler with a heat pump.\n"
                    "- The plumber is called Ines.\n")
    new = run_index(settings, wait=False)  # version 2 is queued behind version 1
    assert new.report.changed == 1 and new.report.chunks_queued >= 1
    fleet.start(["embed.local"], "embed")
    wait_until(lambda: index_vs_disk(settings), 60, "after the race")
    # The writer saw results for chunks that no longer exist and dropped them.
    deadline = time.monotonic() + 10
    while not re.search(r"'stale': [1-9]", fleet.logs(None)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert re.search(r"'stale': [1-9]", fleet.logs(None)), fleet.logs()
    # Every stored vector is the embedding of the text its chunk holds now.
    provider = choose_provider(settings).provider
    db = connect(settings.store.path)
    try:
        rows = db.conn.execute("SELECT rowid, text FROM chunks ORDER BY rowid").fetchall()
        note_texts = [t for (t,) in db.conn.execute(
            "SELECT text FROM chunks WHERE path = 'memory/2026-11-10.md'")]
        vectors = get_vectors(db, [r for r, _ in rows])
    finally:
        db.close()
    expected = provider.embed_documents([t for _, t in rows])
    for (rowid, text), want in zip(rows, expected, strict=True):
        assert np.allclose(vectors[rowid], want, atol=1e-4), text[:60]
    assert index_status(settings)["pending"] == 0
    assert note_texts and all("heat pump" in t and "Zigbee" not in t for t in note_texts)
