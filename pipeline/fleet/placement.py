"""Which memories' stores this host holds.

A memory's store lives on the host of its writer shard. On that host a memory is *local*: its
store is opened directly (searches, reads, index passes). Everywhere else it is *remote*: its
shard's reader answers over the broker, and this host never creates or claims a store for it.

``fleet.localShards`` says which shards are local: ``"all"``, ``"none"``, shard numbers, or
``"auto"`` (the default): the shards a writer or reader started from this host's data dir
claimed (``<data dir>/shards/<n>.json``, written at their start by :func:`claim_in`), plus any
memory whose store file is already here. The data dir is the settings' own
(``Settings.data_dir``, from the environment they were loaded with), not the process's.
Without a broker there is no fleet to ask: every memory is local.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from pipeline.config import Settings
from pipeline.config.paths import data_dir

CLAIMS_FOLDER = "shards"
#: How many of the workers that claimed a shard in a data dir its claim remembers.
CLAIM_NODES = 32


def claims_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where this host's shard claims are kept: ``<data dir>/shards``."""
    return data_dir(env) / CLAIMS_FOLDER


def claims_of(settings: Settings) -> Path:
    """Where the shard claims of ``settings``' own data dir are kept (``Settings.data_dir``,
    from the environment they were loaded with, not the process's)."""
    return settings.data_dir / CLAIMS_FOLDER


def claim(shards: Iterable[int], node: str, role: str,
          env: Mapping[str, str] | None = None) -> list[Path]:
    """Record that this host's data dir holds the stores of ``shards`` (a writer or reader
    ``node`` of ``role`` serves them from here); the files written."""
    return claim_in(claims_dir(env), shards, node, role)


def claim_in(folder: Path, shards: Iterable[int], node: str, role: str) -> list[Path]:
    """:func:`claim` in the claims ``folder`` (``<data dir>/shards``, e.g.
    :func:`claims_of` some settings); the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for shard in sorted(set(shards)):
        target = folder / f"{shard}.json"
        nodes = [n for n in claim_nodes(folder, shard) if n != node][-(CLAIM_NODES - 1):]
        body = json.dumps({"shard": shard, "node": node, "role": role, "since": time.time(),
                           "nodes": [*nodes, node]})
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{shard}.", suffix=".tmp")
        with os.fdopen(fd, "w") as out:
            out.write(body)
        os.replace(tmp, target)  # atomic: a reader of the folder never sees half a claim
        written.append(target)
    return written


def claim_nodes(folder: Path, shard: int) -> list[str]:
    """The workers that claimed ``shard`` in the claims ``folder``, oldest first (the last
    :data:`CLAIM_NODES`); empty when it is not claimed."""
    try:
        body = json.loads((folder / f"{shard}.json").read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(body, dict):
        return []
    nodes = body.get("nodes") or [body.get("node")]
    return [str(n) for n in nodes if n]


def unclaim_in(folder: Path, shards: Iterable[int]) -> list[int]:
    """This host no longer holds the stores of ``shards`` (its shard was moved): their claims
    in the claims ``folder`` (e.g. :func:`claims_of` some settings) are removed; the shards it
    had claimed."""
    dropped = []
    for shard in sorted(set(shards)):
        try:
            (folder / f"{shard}.json").unlink()
            dropped.append(shard)
        except FileNotFoundError:
            pass
    return dropped


def claimed(env: Mapping[str, str] | None = None) -> set[int]:
    """The shards this host's data dir claims."""
    return claimed_in(claims_dir(env))


def claimed_in(folder: Path) -> set[int]:
    """The shards claimed in the claims ``folder`` (``<data dir>/shards``)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return set()
    return {int(stem) for name in names
            if name.endswith(".json") and (stem := name[:-5]).isdigit()}


def store_is_here(settings: Settings) -> bool:
    """Whether this host holds the store of ``settings``' memory (see the module's doc)."""
    if not settings.broker_url:
        return True
    local = settings.fleet.local_shards
    if local == "all":
        return True
    shard = settings.fleet.shard_of(settings.agent_id)
    if local == "none":
        return False
    if isinstance(local, tuple):
        return shard in local
    # The claims of the data dir these settings were loaded for (not the process's).
    return shard in claimed_in(claims_of(settings)) or settings.store.path.exists()
