"""Batch jobs in the store, without workers: schema v3 migrates a v2 store in place, the
producer packs chunks of many files into one job and never queues chunks a live job holds
(however old), the writer's side is idempotent, and the failure policy counts as OpenClaw's."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.batch import policy, workflow
from pipeline.ingest.producer import queue_pending, sync_files
from pipeline.messages import BatchOptions, BatchUpdate, ProviderSpec
from pipeline.store import batches, schema
from pipeline.store.engine import connect

SPEC = ProviderSpec("openai", "text-embedding-3-small", "key-of-index", {})
OPTIONS = BatchOptions(poll_s=0.2, timeout_s=3600.0, concurrency=2)


@pytest.fixture
def store(workspace: Path, make_settings):
    """A keyword-only index of the sample workspace made to look like an openai index."""
    from pipeline.embeddings.registry import ProviderChoice

    for i in range(30):
        (workspace / "memory" / f"2025-03-{i + 1:02d}.md").write_text(
            f"# Day {i}\n\nThe harbour lantern number {i} was lit.\n")
    settings = make_settings(workspace, provider="none")
    db = connect(settings.store.path)
    sync_files(db, settings, ProviderChoice(None, None, "test"))
    with schema.transaction(db):
        schema.set_meta(db, "index", {"provider": SPEC.name, "model": SPEC.model,
                                      "provider_key": SPEC.provider_key})
    yield settings, db
    db.close()


def _queue(db, sent: list, *, batch: bool = True, requeue_after_s: float = 3600.0):
    routing = workflow.BatchRouting(OPTIONS, sent.append) if batch else None
    synced: list = []
    report = queue_pending(db, SPEC, synced.append, memory="main", batch=routing,
                           requeue_after_s=requeue_after_s)
    return report, synced


def test_v2_store_gains_the_batch_tables_in_place(tmp_path: Path) -> None:
    db = connect(tmp_path / "old.sqlite")
    schema.ensure_schema(db)
    db.conn.executescript("DROP TABLE batch_chunks; DROP TABLE batch_jobs; "
                          "UPDATE meta SET value = '2' WHERE key = 'schema_version';")
    db.conn.execute("INSERT INTO chunks(id, path, source, start_line, end_line, hash, text, "
                    "updated_at) VALUES ('c1', 'a.md', 'memory', 1, 1, 'h', 'lantern', 0)")
    db.close()
    db = connect(tmp_path / "old.sqlite")
    schema.ensure_schema(db)
    assert schema.get_meta(db, "schema_version") == schema.SCHEMA_VERSION
    assert db.conn.execute("SELECT count(*) FROM batch_jobs").fetchone() == (0,)
    # The full-text index was kept, not rebuilt (only stores before version 2 need that).
    assert db.conn.execute(
        "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'lantern'").fetchone() == (1,)
    db.close()


def test_one_job_across_files_and_live_chunks_are_never_requeued(store) -> None:
    _, db = store
    sent: list = []
    report, synced = _queue(db, sent)
    chunks = db.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    files = db.conn.execute("SELECT count(DISTINCT path) FROM chunks WHERE id IN "
                            "(SELECT chunk_id FROM batch_chunks)").fetchone()[0]
    assert report.batch_jobs == 1 and len(sent) == 1 and synced == []
    assert len(sent[0].chunks) == report.chunks_queued == chunks > 30 and files > 30
    [job] = batches.live_jobs(db)
    assert job["state"] == "queued" and job["chunks"] == chunks
    # An hour later the rule "queued long ago means lost" must not touch a live batch job.
    again, synced = _queue(db, sent, requeue_after_s=0.0)
    assert (again.chunks_queued, again.batch_jobs, synced, len(sent)) == (0, 0, [], 1)


def test_concurrency_limits_jobs_and_the_rest_waits(store, monkeypatch) -> None:
    _, db = store
    monkeypatch.setattr(workflow, "batch_limits", lambda provider: (10, 10**6))
    sent: list = []
    report, _ = _queue(db, sent)
    total = db.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    assert report.batch_jobs == len(sent) == 2 and report.chunks_queued == 20 < total
    unqueued = db.conn.execute(
        "SELECT count(*) FROM chunks WHERE queued_at IS NULL").fetchone()[0]
    assert unqueued == total - 20


def _finish(db, msg, embedded, outcome="completed", error=None):
    ref = (msg.job, msg.memory, msg.spec, msg.store, msg.options)
    vectors = tuple((cid, np.ones(4, dtype=np.float32)) for cid in embedded)
    updates = [BatchUpdate(*ref, event="vectors", vectors=vectors),
               BatchUpdate(*ref, event="finished", outcome=outcome, embedded=tuple(embedded),
                           error=error)]
    # Through JSON, as the writer gets them.
    return [workflow.apply_update(db, BatchUpdate.from_json(u.to_json())) for u in updates]


def test_finished_job_sends_the_rest_to_sync_once(store) -> None:
    _, db = store
    sent: list = []
    _queue(db, sent)
    ids = [cid for cid, _ in sent[0].chunks]
    _, applied = _finish(db, sent[0], ids[:-3], error="3 line(s) failed")
    assert sorted(c.id for job in applied.embed_jobs for c in job.chunks) == sorted(ids[-3:])
    assert applied.top_up
    ready = db.conn.execute("SELECT count(*) FROM chunks WHERE state = 'ready'").fetchone()[0]
    assert ready == len(ids) - 3
    job = batches.get_job(db, sent[0].job)
    assert (job["state"], job["embedded"], job["to_sync"]) == ("completed", len(ids) - 3, 3)
    # A redelivered finishing message changes nothing and sends nothing twice.
    _, again = _finish(db, sent[0], ids[:-3])
    assert again.embed_jobs == [] and not again.top_up


def test_failure_policy_counts_like_openclaw(store) -> None:
    _, db = store
    assert policy.record_outcome(db, "openai", "failed")["failures"] == 1
    assert policy.record_outcome(db, "openai", "completed")["failures"] == 0
    assert not policy.record_outcome(db, "openai", "expired")["disabled"]
    state = policy.record_outcome(db, "openai", "failed", "validation")
    assert state["disabled"] and "failed" in state["reason"]
    policy.enable(db, "openai")
    assert policy.provider_policy(db, "openai") == {"failures": 0, "disabled": False,
                                                     "reason": None, "at": None}
    assert policy.record_outcome(db, "gemini", "timeout")["disabled"]  # a timeout counts 2
    state = policy.record_outcome(db, "voyage", "disabled", "HTTP 404")
    assert state["disabled"] and "not available" in state["reason"]
    assert policy.record_outcome(db, "openai", "cancelled")["failures"] == 0
    # Disabled: the producer sends the chunks the sync way.
    sent: list = []
    policy.record_outcome(db, "openai", "disabled", "HTTP 404")
    report, synced = _queue(db, sent)
    assert sent == [] and report.batch_jobs == 0 and len(synced) == report.jobs > 0


class _Leases:
    def __init__(self) -> None:
        self.held: dict[str, str] = {}

    def claim(self, job_id: str, token: str, ttl: float) -> bool:
        if job_id in self.held:
            return False
        self.held[job_id] = token
        return True

    def hold(self, job_id: str, token: str, ttl: float) -> bool:
        return self.held.setdefault(job_id, token) == token


def test_reconcile_resumes_only_jobs_nobody_holds(store) -> None:
    _, db = store
    sent: list = []
    _queue(db, sent)
    leases = _Leases()
    leases.claim(sent[0].job, sent[0].token, 60)
    submits: list = []
    polls: list = []
    args = {"submit": submits.append, "poll": polls.append, "submit_ttl": 60,
            "poll_grace_s": 5}
    assert workflow.reconcile(db, "main", sent[0].store, leases, **args) == 0
    leases.held.clear()  # the broker was flushed
    assert workflow.reconcile(db, "main", sent[0].store, leases, **args) == 1
    assert [c[0] for c in submits[0].chunks] == [c[0] for c in sent[0].chunks]
    assert submits[0].token != sent[0].token and polls == []
    # Once submitted, a resumed chain polls instead.
    remote = {"provider": "openai", "remote_id": "batch_1", "state": "running",
              "raw_state": "in_progress"}
    batches.record_state(db, sent[0].job, "running", "in_progress", remote)
    leases.held.clear()
    assert workflow.reconcile(db, "main", sent[0].store, leases, **args) == 1
    assert polls[0].remote["remote_id"] == "batch_1"
    assert polls[0].deadline > time.time()
