"""The batch workflow's steps in this process against the OpenAI double (the Celery side is in
test_batch_pipeline.py): a job stuck in a state nobody knows is cancelled at its deadline and
counts as a timeout; a cancel by hand keeps the finished lines and sends the rest to sync
without counting against the provider; a poll that meets a 5xx just polls again."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.batch import admin, policy, workflow
from pipeline.batch.api import batch_api_for
from pipeline.embeddings.registry import choose_provider
from pipeline.ingest.producer import index_once
from pipeline.store import batches
from pipeline.store.engine import connect
from tests.fakes.batch_doubles import BatchPlan
from tests.fakes.provider_doubles import Fault, ProviderDouble

KEY = "sk-SENTINEL-workflow-51c2"


@pytest.fixture
def setup(workspace: Path, make_settings, monkeypatch):
    """A submitted batch job of the sample workspace; yields (settings, db, double, api,
    first poll message)."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ProviderDouble("openai", api_key=KEY) as double:
        settings = make_settings(workspace, provider="openai",
                                 remote={"baseUrl": double.url, "batch": {"enabled": True}})
        db = connect(settings.store.path)
        yield settings, db, double
        db.close()


def submit(settings, db, double, plan: BatchPlan):
    double.batches.plan = plan
    submits: list = []
    choice = choose_provider(settings)
    index_once(db, settings, choice, lambda job: None,
               batch=workflow.routing_for(settings.remote.batch, submits.append))
    api = batch_api_for(choice.spec, settings)
    step = workflow.submit_step(api, submits[0])
    for update in step.updates:
        workflow.apply_update(db, update)
    return api, step.next_poll


def apply(db, settings, step: workflow.Step) -> list:
    sync_jobs = []
    for update in step.updates:
        sync_jobs += workflow.apply_update(db, update).embed_jobs
    return sync_jobs


def test_a_stuck_job_is_cancelled_at_its_deadline(setup) -> None:
    settings, db, double = setup
    api, poll = submit(settings, db, double, BatchPlan(outcome="stuck"))
    double.batches.advance(3)  # "paused": a state no client knows
    step = workflow.poll_step(api, poll)
    assert step.next_poll is not None and step.next_poll.remote["state"] == "unknown"
    step = workflow.poll_step(api, step.next_poll, now=poll.deadline + 1)
    assert step.next_poll is None
    sync_jobs = apply(db, settings, step)
    job = batches.get_job(db, poll.job)
    assert job["state"] == "timeout" and "cancelled" in job["last_error"]
    assert double.batches.job(poll.remote["remote_id"]).state in ("cancelling", "cancelled")
    pending = db.conn.execute("SELECT count(*) FROM chunks WHERE state = 'pending'").fetchone()
    assert sum(j.size for j in sync_jobs) == job["to_sync"] == pending[0] > 0
    state = policy.provider_policy(db, "openai")
    assert state["failures"] == 2 and state["disabled"]  # a timeout counts 2
    api.close()


def test_cancel_by_hand_keeps_finished_lines_and_counts_nothing(setup) -> None:
    settings, db, double = setup
    api, poll = submit(settings, db, double, BatchPlan(partial=0.5))
    remote = admin.cancel_job(settings, poll.job)
    assert remote.raw_state in ("cancelling", "cancelled")
    double.batches.advance()
    step = workflow.poll_step(api, poll)
    assert step.next_poll is None
    sync_jobs = apply(db, settings, step)
    job = batches.get_job(db, poll.job)
    assert job["state"] == "cancelled" and job["embedded"] + job["to_sync"] == job["chunks"]
    assert sum(j.size for j in sync_jobs) == job["to_sync"]
    assert policy.provider_policy(db, "openai")["failures"] == 0
    with pytest.raises(admin.BatchCommandError, match="already finished"):
        admin.cancel_job(settings, poll.job)
    api.close()


def test_a_poll_that_meets_a_5xx_polls_again(setup) -> None:
    settings, db, double = setup
    api, poll = submit(settings, db, double, BatchPlan())
    double.script.extend([Fault("503")])
    step = workflow.poll_step(api, poll)
    assert [r.status for r in double.requests if r.method == "GET"] == [503]
    assert step.updates == [] and step.next_poll == poll  # the same poll, next interval
    assert batches.get_job(db, poll.job)["state"] == "submitted"
    api.close()
