"""One watch process follows every memory of the fleet: each with its own debounce and
reconcile, one polling where native events are unavailable, and ``memq status`` of each says
how its changes are followed."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from pipeline.config import load_settings
from pipeline.memory import Memory
from tests.conftest import Fleet, run_memq
from tests.test_fleet import memq_argv, nodes_on, wait_for
from tests.test_shards import fleet_env, store_counts, two_agents
from workers.watching import WatchGroup, run_watch

pytestmark = pytest.mark.integration


def test_one_watch_process_follows_two_memories_one_of_them_polling(
        tmp_path: Path, tiny_model: Path, broker_url: str, fleet: Fleet) -> None:
    config = two_agents(tmp_path, tiny_model)
    env = fleet_env(config, tmp_path)
    full_env = {**env, "MEMQ_BROKER_URL": broker_url}
    fleet.spawn(memq_argv("worker", "--role", "writer"), "writer", env)
    fleet.spawn(memq_argv("worker", "--role", "embed", "--provider", "local"), "embed", env)
    wait_for(lambda: nodes_on(broker_url, "store.1") and nodes_on(broker_url, "embed.local"),
             "the workers", fleet)
    alpha = load_settings(config_file=config, agent="alpha", env=full_env)
    beta = load_settings(config_file=config, agent="beta", env={**full_env,
                                                               "MEMQ_WATCH_POLLING": "true"})
    started: list[WatchGroup] = []
    thread = threading.Thread(
        target=run_watch, args=([alpha, beta],),
        kwargs={"debounce_s": 0.2, "on_start": started.append}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: started and all(s.reconciles for s in started[0].stats.values()),
                 "the first reconcile of both memories", fleet)
        (tmp_path / "ws-alpha" / "memory" / "2026-12-03.md").write_text(
            "- alpha moved the standup to 9:30\n")
        (tmp_path / "ws-beta" / "memory" / "2026-12-03.md").write_text(
            "- beta adopted a cat called Pixel\n")

        def found(settings, query: str, text: str) -> bool:
            if "pending" in store_counts(settings.store.path):
                return False
            with Memory(settings=settings) as memory:
                return any(text in h.snippet for h in memory.search(query).hits)

        wait_for(lambda: found(alpha, "standup time", "9:30")
                 and found(beta, "cat name", "Pixel"), "both edits searchable", fleet)
    finally:
        started[0].stop()
        thread.join(30)
    assert not thread.is_alive()
    with Memory(settings=alpha) as memory:
        assert all("Pixel" not in h.snippet for h in memory.search("cat called Pixel").hits)
    shown = {}
    for agent, extra in (("alpha", {}), ("beta", {"MEMQ_WATCH_POLLING": "true"})):
        done = run_memq("status", "--json", env={**full_env, **extra, "MEMQ_AGENT_ID": agent})
        assert done.returncode == 0, done.stderr
        shown[agent] = json.loads(done.stdout)["watch"]
    assert shown["alpha"]["mode"] == "events" and shown["alpha"]["reason"] is None
    assert shown["beta"] == {**shown["beta"], "mode": "polling",
                             "reason": "watch.polling is true"}
    text = run_memq("status", env={**full_env, "MEMQ_AGENT_ID": "beta"}).stdout
    assert "watch:     polling (watch.polling is true)" in text
