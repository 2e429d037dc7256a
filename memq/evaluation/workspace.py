"""An evaluation workspace: generated memory files indexed by ``run_index``, searched per mode.

The files are indexed exactly as ``memq index`` indexes an agent's memory: the producer cuts
them into chunks and writes the rows, the embedded broker carries the embedding jobs to a real
Celery worker, and the writer stores the vectors. Queries go through ``search_store``, with the
query provider built from the store's index spec, as ``memory_search`` does. Only the query
vectors are memoised (one per query text), so running five modes does not embed a query five
times.

The work folder (workspace, ``memq.json`` files, store) is kept between runs: a second run
finds every file unchanged and embeds nothing, so only the first run of a corpus is slow.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.config import Settings, load_settings
from pipeline.embeddings.base import EmbeddingProvider
from pipeline.embeddings.default_model import cache_root
from pipeline.embeddings.providers import ProviderPool
from pipeline.search.hybrid import HeldCopies, search_store
from pipeline.store import reads, schema
from pipeline.store.engine import Database
from workers.indexing import run_index


def _hybrid(fusion: str = "weighted", *, enabled: bool = True, mmr: bool = False,
            decay: bool = False) -> dict[str, Any]:
    """memq.json keys of one retrieval mode, every ranking pass named (so a mode measures the
    same thing whatever memq's defaults are)."""
    recency = {"enabled": True, "mode": "decay"} if decay else {"enabled": False}  # OpenClaw's
    return {"query": {"hybrid": {"enabled": enabled, "fusion": fusion,
                                 "mmr": {"enabled": mmr}, "temporalDecay": recency}}}


#: memq.json keys per mode; every mode runs on the same store with no score floor.
#: ``defaults`` is memq's own configuration, whatever it is (MMR and superseded recency on;
#: ``hybrid+decay`` is OpenClaw's decay).
MODES: dict[str, dict[str, Any]] = {
    "keyword": _hybrid(),
    "vector": _hybrid(enabled=False),
    "hybrid": _hybrid(),
    "rrf": _hybrid("rrf"),
    "hybrid+mmr": _hybrid(mmr=True),
    "hybrid+decay": _hybrid(decay=True),
    "defaults": {},
    # memq's defaults with superseded recency (issue 36 goal 4), whatever the default mode is
    "superseded": {"query": {"hybrid": {"temporalDecay": {"enabled": True,
                                                          "mode": "superseded"}}}},
}
KEYWORD_ONLY = "keyword"


def default_work_dir(collection: Path) -> Path:
    """``<memq cache>/eval/<name>-<hash of the absolute path>``: one per collection."""
    digest = hashlib.sha1(str(collection.resolve()).encode()).hexdigest()[:8]
    return cache_root(None) / "eval" / f"{collection.stem}-{digest}"


def deep_update(target: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``target`` with ``extra`` merged in, nested dicts key by key (in place, returned)."""
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            deep_update(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def write_if_changed(path: Path, text: str) -> None:
    """Write only new content, so an unchanged file keeps its mtime and is not re-read."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


class CachedQueries:
    """The query provider with one vector per distinct query text."""

    def __init__(self, provider: EmbeddingProvider) -> None:
        self.provider = provider
        self.vectors: dict[str, np.ndarray] = {}

    def embed_query(self, text: str) -> np.ndarray:
        if text not in self.vectors:
            self.vectors[text] = self.provider.embed_query(text)
        return self.vectors[text]


@dataclass
class Indexed:
    """An open, fully indexed evaluation store, what it was indexed with, and the copies of it
    held in memory for the queries; :meth:`close` releases them all."""

    db: Database
    provider: CachedQueries | None
    model: str | None
    chunks: int
    providers: ProviderPool = field(default_factory=ProviderPool)
    held: HeldCopies = field(default_factory=HeldCopies)

    def close(self) -> None:
        self.db.close()
        self.held.close()
        self.providers.close()


class EvalWorkspace:
    """A work folder holding one generated memory workspace and its store.

    ``base`` holds the memq.json keys every mode starts from (provider, model, threads);
    the workspace and store paths are always the work folder's own.
    """

    def __init__(self, work_dir: Path, base: dict[str, Any] | None = None) -> None:
        self.work_dir = work_dir
        self.root = work_dir / "workspace"
        self.base = deep_update(copy.deepcopy(base or {"provider": "local"}),
                                {"store": {"path": str(work_dir / "memq.sqlite")}})

    def sync_files(self, files: dict[str, str]) -> None:
        """Make ``memory/`` hold exactly ``files`` (relative path -> text)."""
        for rel, text in files.items():
            write_if_changed(self.root / rel, text)
        memory = self.root / "memory"
        for path in memory.rglob("*.md") if memory.exists() else ():
            if path.relative_to(self.root).as_posix() not in files:
                path.unlink()

    def settings(self, extra: dict[str, Any] | None = None, name: str = "base") -> Settings:
        """Settings for the base keys plus ``extra`` (written to ``memq-<name>.json``)."""
        keys = deep_update(copy.deepcopy(self.base), extra or {})
        cfg = self.work_dir / f"memq-{name}.json"
        cfg.parent.mkdir(parents=True, exist_ok=True)
        cfg.write_text(json.dumps(keys, indent=2), encoding="utf-8")
        return load_settings(config_file=cfg, workspace=self.root)

    def index(self, warn: Callable[[str], None] | None = None) -> Indexed:
        """Run ``memq index`` on the workspace (waiting for every vector) and open the store."""
        settings = self.settings()
        run = run_index(settings, wait=True, warn=warn)
        if run.failed_chunks:
            raise RuntimeError(f"{run.failed_chunks} chunks failed to embed; see `memq status "
                               f"--workspace {self.root} --config {self.work_dir}/memq-base.json`")
        db = schema.open_store(settings.store.path, want_vectors=settings.store.want_vectors)
        assert db is not None  # run_index created it
        spec = schema.index_spec(db)
        providers = ProviderPool()
        provider = (CachedQueries(providers.get(spec, settings)) if spec is not None else None)
        chunks = sum(reads.state_counts(db).values())
        return Indexed(db, provider, spec.model if spec else None, chunks, providers)


def mode_settings(work: EvalWorkspace, modes: Iterable[str], fused: dict[str, Any] | None = None,
                  named: dict[str, dict[str, Any]] | None = None) -> dict[str, Settings]:
    """Settings per mode name; ``fused`` (hybrid keys such as vectorWeight) applies to the
    fused modes only. ``named``: more modes (name -> memq.json keys), on top of memq's defaults."""
    known = {**MODES, **(named or {})}
    out = {}
    for name in modes:
        if name not in known:
            raise ValueError(f"unknown mode {name!r}; choose from {', '.join(known)}")
        keys = copy.deepcopy(known[name])
        if fused and name not in (KEYWORD_ONLY, "vector"):
            deep_update(keys, {"query": {"hybrid": fused}})
        out[name] = work.settings(keys, name=name)
    return out


def search(indexed: Indexed, settings: Settings, mode: str, query: str, depth: int,
           now: float | None = None) -> list[dict[str, Any]]:
    """The ``depth`` best chunks for ``query`` in ``mode`` (no minScore floor); ``now`` (epoch
    seconds, default the clock) is when the question is asked, for temporal decay."""
    provider = None if mode == KEYWORD_ONLY else indexed.provider
    if provider is None and mode != KEYWORD_ONLY and settings.provider != "none":
        raise RuntimeError("the store has no vectors (keyword-only index): only the keyword "
                           "mode can run")
    hits = search_store(indexed.db, settings, query, max_results=depth, min_score=0.0,
                        provider=provider, held=indexed.held,  # type: ignore[arg-type]
                        now=now)
    return [hit.to_dict() for hit in hits]
