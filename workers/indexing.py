"""``memq index``: index a memory through the fleet, a deployed one or one started for the run.

With ``brokerUrl`` / ``MEMQ_BROKER_URL`` the fleet's broker and workers do the work; without
one, an embedded broker and worker are started for the run and stopped after it
(:class:`~workers.embedded.EmbeddedFleet`), so the real pipeline runs with nothing installed.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING

from pipeline.config import Settings
from pipeline.embeddings.registry import ProviderChoice, choose_provider
from pipeline.errors import IndexingFailed
from pipeline.fleet.placement import store_is_here
from pipeline.memory import IndexRun, Memory

if TYPE_CHECKING:
    from pipeline.fleet.broker import FleetDispatcher


def fleet_dispatcher(settings: Settings, provider: str, *, durable: bool) -> FleetDispatcher:
    """The configured broker's dispatcher, else (``durable`` False) an embedded fleet for
    ``provider``; the caller closes it. Celery and kombu load here, when a pass has
    embedding work to send, not when this module is imported (a keyword-only pass
    needs neither)."""
    if settings.broker_url:
        from pipeline.fleet.broker import FleetDispatcher

        return FleetDispatcher(settings.broker_url)
    if durable:
        raise IndexingFailed("--no-wait needs a broker that outlives this command: set "
                             "MEMQ_BROKER_URL (or brokerUrl) and run workers")
    from workers.embedded import EmbeddedFleet

    return EmbeddedFleet.for_settings(settings, provider)


def run_index(settings: Settings, *, wait: bool = True, retry_failed: bool = False,
              on_progress: Callable[[int, int], None] | None = None,
              warn: Callable[[str], None] | None = None,
              choice: ProviderChoice | None = None, rebuild: str | None = None,
              allow_deletions: bool = False, files_here: bool = False) -> IndexRun:
    """Index the memory once through the fleet (:meth:`memq.Memory.index`); with ``wait``,
    return only when every vector is written (or the rebuild ``rebuild`` names is swapped in).
    A memory whose store is on another host is indexed there: a job for its shard, followed
    to the end with ``wait``. ``allow_deletions`` and ``files_here``: see
    :meth:`memq.Memory.index`.
    """
    guards = {"allow_deletions": allow_deletions, "files_here": files_here}
    if not store_is_here(settings):
        with Memory(settings=settings, in_memory=False) as memory:
            return memory.index(wait=wait, retry_failed=retry_failed, rebuild=rebuild,
                                on_progress=on_progress, warn=warn, **guards)
    choice = choice or choose_provider(settings)
    with ExitStack() as stack:
        dispatcher = None
        if choice.spec is not None:
            dispatcher = fleet_dispatcher(settings, choice.spec.name, durable=not wait)
            stack.callback(dispatcher.close)
        memory = stack.enter_context(Memory(settings=settings, dispatcher=dispatcher,
                                            in_memory=False))
        return memory.index(wait=wait, retry_failed=retry_failed, rebuild=rebuild,
                            choice=choice, on_progress=on_progress, warn=warn, **guards)


__all__ = ["IndexingFailed", "fleet_dispatcher", "run_index"]
