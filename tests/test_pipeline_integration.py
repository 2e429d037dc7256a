"""The real pipeline: a real Redis broker, real ``celery worker`` processes (a writer on
``store`` and an embedder on ``embed.local``), a real GGUF model through llama.cpp."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.query import memory_search
from pipeline.status import index_status
from pipeline.store.engine import connect
from tests.conftest import run_memq, write_config
from workers.indexing import run_index

pytestmark = pytest.mark.integration


def consistency(settings) -> dict[str, int]:
    """Counts that must agree when the index has converged."""
    db = connect(settings.store.path)
    try:
        q = lambda sql: db.conn.execute(sql).fetchone()[0]  # noqa: E731
        return {
            "chunks": q("SELECT count(*) FROM chunks"),
            "ready": q("SELECT count(*) FROM chunks WHERE state = 'ready'"),
            "vectors": q("SELECT count(*) FROM chunks_vec"),
            "orphan_vectors": q("SELECT count(*) FROM chunks_vec WHERE rowid NOT IN "
                                "(SELECT rowid FROM chunks)"),
            "fts": q("SELECT count(*) FROM chunks_fts"),
            "orphan_chunks": q("SELECT count(*) FROM chunks WHERE path NOT IN "
                               "(SELECT path FROM files)"),
        }
    finally:
        db.close()


def test_index_edit_delete_through_real_workers(workspace: Path, make_settings, tiny_model,
                                                broker_url, fleet) -> None:
    settings = make_settings(workspace, provider="local", brokerUrl=broker_url,
                             local={"modelPath": str(tiny_model)},
                             query={"minScore": 0.0})
    fleet.start(["store.0"], "writer")
    fleet.start(["embed.local"], "embed")

    first = run_index(settings, wait=True)
    assert first.waited and first.report.chunks_queued > 0, fleet.logs()
    counts = consistency(settings)
    assert counts["ready"] == counts["chunks"] == counts["vectors"] == counts["fts"] > 0
    out = memory_search("Zigbee coordinator", settings=settings)
    assert out["mode"] == "hybrid" and out["provider"] == "local"
    assert out["results"][0]["path"] == "memory/2026-11-10.md"

    note = workspace / "memory" / "2026-11-10.md"
    note.write_text(note.read_text().replace("Zigbee", "Thread") + "\n- A tortoise named Kip.\n")
    (workspace / "memory" / "2026-11-18.md").unlink()
    second = run_index(settings, wait=True)
    assert (second.report.changed, second.report.deleted) == (1, 1)
    counts = consistency(settings)
    assert counts["ready"] == counts["chunks"] == counts["vectors"] == counts["fts"]
    assert counts["orphan_vectors"] == counts["orphan_chunks"] == 0
    paths = {r["path"] for r in memory_search("tortoise Kip", settings=settings)["results"]}
    assert "memory/2026-11-10.md" in paths
    assert not any(r["path"] == "memory/2026-11-18.md"
                   for r in memory_search("LH1169 Berlin flight", settings=settings)["results"])
    stale = memory_search("coordinator router antenna Zigbee", settings=settings)["results"]
    assert all("Zigbee" not in r["snippet"] or r["path"] == "MEMORY.md" for r in stale)

    third = run_index(settings, wait=True)
    assert (third.report.changed, third.report.chunks_queued) == (0, 0)
    assert index_status(settings)["pending"] == 0


def test_no_wait_returns_and_workers_finish_later(workspace: Path, make_settings, tiny_model,
                                                  broker_url, fleet) -> None:
    import time

    settings = make_settings(workspace, provider="local", brokerUrl=broker_url,
                             local={"modelPath": str(tiny_model)})
    run = run_index(settings, wait=False)
    assert not run.waited and run.report.jobs > 0
    assert index_status(settings)["pending"] == run.report.chunks_queued  # nobody consumes yet
    fleet.start(["store.0", "embed.local"], "both")
    deadline = time.monotonic() + 60
    while index_status(settings)["pending"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert index_status(settings)["pending"] == 0, fleet.logs()


def test_cli_index_and_search_with_embedded_broker(workspace: Path, tmp_path: Path,
                                                    tiny_model) -> None:
    """No broker configured: `memq index` starts its own Redis and worker process."""
    # Temporal decay off: the sample notes are dated, and with a random-weight model the
    # ranking would otherwise depend on the day the test runs.
    config = write_config(tmp_path / "memq.json")  # it turns decay off
    env = {"MEMQ_HOME": str(tmp_path / "home"), "MEMQ_LOCAL_MODEL_PATH": str(tiny_model),
           "MEMQ_PROVIDER": "local", "MEMQ_BROKER_URL": "", "REDIS_URL": "",
           "MEMQ_CONFIG": str(config)}
    done = run_memq("index", "--workspace", str(workspace), "--json", env=env, timeout=180)
    assert done.returncode == 0, done.stderr
    status = run_memq("status", "--workspace", str(workspace), "--json", env=env)
    import json

    s = json.loads(status.stdout)
    assert s["vectors"] == s["chunks"] > 0 and s["pending"] == 0 and s["mode"] == "hybrid"
    found = json.loads(run_memq("search", "--workspace", str(workspace), "--json",
                                "--min-score", "0", "flight LH1169", env=env).stdout)
    assert found["results"][0]["path"] == "memory/2026-11-18.md"
