"""What memq gives back (search hits, lines read, a note appended): small dataclasses, each with
``to_dict()`` for OpenClaw's JSON shape (camelCase keys, the tool results agents already
know)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

#: OpenClaw's ``INVALID_PROJECT_ANNOTATION_KEY``: the project key given to an entry whose
#: ``<!-- project: … -->`` annotation could not be read; search never returns such an entry.
INVALID_PROJECT_KEY = "!invalid-project-annotation"


@dataclass(frozen=True)
class Provenance:
    """Where a hit's text came from, as OpenClaw 2026.9 labels an indexed chunk
    (``resolveChunkProvenance``): ``origin_class`` (``agent`` for the workspace's memory notes,
    ``system`` for dreaming output, ``untrusted`` for anything else, session transcripts
    included), ``session_kind`` (``unknown`` for files) and ``observed_at`` (the file's
    modification time, epoch milliseconds)."""

    origin_class: str
    session_kind: str = "unknown"
    observed_at: int = 0
    supersedes_key: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"originClass": self.origin_class, "sessionKind": self.session_kind,
                               "observedAt": self.observed_at}
        if self.supersedes_key is not None:
            out["supersedesKey"] = self.supersedes_key
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Provenance:
        """The inverse of :meth:`to_dict`."""
        return cls(data["originClass"], data.get("sessionKind", "unknown"),
                   int(data.get("observedAt", 0)), data.get("supersedesKey"))


@dataclass(frozen=True)
class SearchHit:
    """One result: where it is (``path``, 1-based inclusive ``start_line``..``end_line``), how
    well it matched (``score``, 0..1), the text (``snippet``, with a ``Source:`` line when
    citations are on) and where it came from (``source``: ``memory`` or ``sessions``; shown
    again as ``corpus``, OpenClaw's name for it in a result).
    ``importance``, ``triggers`` and ``project_key`` are its entry's annotation values
    (``<!-- importance: N -->`` …; None when absent, and then left out of :meth:`to_dict`).
    ``vector_score`` and ``text_score`` are the two retrievers' scores that were fused into
    ``score`` (cosine similarity; the keyword score, 0..1): 0.0 when that side did not return
    the chunk, None (left out) when that side did not run (a keyword-only search has no
    ``vector_score``). ``provenance``: :class:`Provenance` (None from a backend that has none).
    """

    path: str
    start_line: int
    end_line: int
    score: float
    snippet: str
    source: str
    citation: str | None = None
    importance: int | None = None
    triggers: str | None = None
    project_key: str | None = None
    vector_score: float | None = None
    text_score: float | None = None
    provenance: Provenance | None = None

    @property
    def corpus(self) -> str:
        """OpenClaw's ``corpus`` of a memory hit: its ``source``."""
        return self.source

    def to_dict(self) -> dict[str, Any]:
        # OpenClaw's key order: the ranked hit's fields, then the presentation's
        out: dict[str, Any] = {"path": self.path, "startLine": self.start_line,
                               "endLine": self.end_line, "score": self.score}
        for key, value in (("vectorScore", self.vector_score), ("textScore", self.text_score)):
            if value is not None:
                out[key] = value
        out.update(snippet=self.snippet, source=self.source)
        for key, value in (("importance", self.importance), ("triggers", self.triggers),
                           ("projectKey", self.project_key)):
            if value is not None:
                out[key] = value
        if self.provenance is not None:
            out["provenance"] = self.provenance.to_dict()
        out["corpus"] = self.corpus
        if self.citation is not None:
            out["citation"] = self.citation
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchHit:
        """The inverse of :meth:`to_dict` (a hit that came from another host)."""
        importance = data.get("importance")
        provenance = data.get("provenance")
        return cls(data["path"], int(data["startLine"]), int(data["endLine"]),
                   float(data["score"]), data["snippet"], data["source"], data.get("citation"),
                   None if importance is None else int(importance), data.get("triggers"),
                   data.get("projectKey"), _number(data.get("vectorScore")),
                   _number(data.get("textScore")),
                   None if provenance is None else Provenance.from_dict(provenance))


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


#: The optional facts of a search, in the order ``to_dict`` lists them (attribute, JSON key).
_NOTES = (("reason", "reason"), ("pending", "pending"), ("warning", "warning"),
          ("synced", "synced"), ("rebuilding", "rebuilding"), ("fallback", "fallback"),
          ("dirty", "dirty"), ("syncing", "syncing"), ("sync_error", "syncError"),
          ("backend", "backend"), ("rerank", "rerank"), ("partial", "partial"),
          ("timed_out", "timedOut"), ("timeout_ms", "timeoutMs"))
_COUNTS = ("pending", "synced", "dirty")  # shown only when not zero
#: ``warning`` of an unavailable search that gave no reason of its own.
UNAVAILABLE_WARNING = "Memory search is unavailable."


@dataclass
class SearchResults:
    """The hits of one search (iterable, best first) and how it was answered.

    ``mode`` is ``hybrid``, ``keyword-only`` or ``unavailable``; ``provider``/``model`` name
    the index's embedding model. ``citations`` is the citations mode (``auto``, ``on``,
    ``off``). The optional facts say why results may be incomplete:
    ``reason`` (why keyword-only), ``pending`` (chunks still without a vector), ``warning``
    (the query could not be embedded), ``synced`` (files brought up to date first),
    ``rebuilding`` (answered from the live index while a new one is built), ``dirty`` and
    ``syncing`` (a long-running server's files changed since the last index; a sync runs),
    ``rerank`` (with ``rerank.enabled``: what the reranker did, or why the fused order stands:
    :mod:`pipeline.search.rerank`). ``partial``, ``timed_out`` and ``timeout_ms``: the
    search ran out of time (``query.timeoutMs``; :mod:`pipeline.search.deadline`) and answers
    with the keyword matches only.

    ``vector_unavailable``: the index has an embedding provider but it could not embed the
    query, so the keyword side alone answered; :meth:`to_dict` then says so as OpenClaw
    would (``unavailable: true`` with ``warning`` and ``action``) while still giving the
    results (``disabled`` stays for a search that answered nothing). ``timings``: how long the
    search took (``searchMs``, ``toolMs``; milliseconds), shown in ``debug`` with the backend,
    the mode and the hit count.
    """

    hits: list[SearchHit] = field(default_factory=list)
    provider: str | None = None
    model: str | None = None
    mode: str = "keyword-only"
    citations: str | None = None
    reason: str | None = None
    pending: int | None = None
    warning: str | None = None
    synced: int | None = None
    rebuilding: str | None = None
    fallback: dict[str, Any] | None = None
    dirty: int | None = None
    syncing: bool | None = None
    sync_error: str | None = None
    backend: str | None = None
    rerank: dict[str, Any] | None = None
    partial: bool | None = None
    timed_out: bool | None = None
    timeout_ms: int | None = None
    error: str | None = None
    action: str | None = None
    vector_unavailable: bool = False
    timings: dict[str, float] = field(default_factory=dict)

    def __iter__(self) -> Iterator[SearchHit]:
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)

    def __getitem__(self, index: int) -> SearchHit:
        return self.hits[index]

    def to_dict(self) -> dict[str, Any]:
        """OpenClaw's ``memory_search`` result: ``{results, provider, model, mode, citations,
        …, debug}``; an unavailable search as OpenClaw's ``{results: [], disabled: true,
        unavailable: true, error, warning, action, debug}``."""
        out: dict[str, Any] = {"results": [h.to_dict() for h in self.hits],
                               "provider": self.provider, "model": self.model, "mode": self.mode}
        if self.mode == "unavailable":
            warning = self.warning or UNAVAILABLE_WARNING
            out.update(disabled=True, unavailable=True, error=self.error, warning=warning,
                       action=self.action,
                       debug={"warning": warning, "action": self.action, "error": self.error})
            if self.timed_out:  # no reader answered in time (a remote search)
                out.update(timedOut=True, timeoutMs=self.timeout_ms)
            return out
        if self.citations is not None:
            out["citations"] = self.citations
        for attr, key in _NOTES:
            value = getattr(self, attr)
            if value is not None and not (attr in _COUNTS and value == 0):
                out[key] = value
        if self.vector_unavailable:
            out["unavailable"] = True
            out["action"] = self.action or provider_down_action(self.warning)
        out["debug"] = {"backend": self.backend or "builtin", "effectiveMode": self.mode,
                        "hits": len(self.hits), **self.timings}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchResults:
        """The inverse of :meth:`to_dict`: the answer of a search run on another host."""
        mode = data.get("mode", "keyword-only")
        results = cls(hits=[SearchHit.from_dict(h) for h in data.get("results", [])],
                      provider=data.get("provider"), model=data.get("model"),
                      mode=mode, citations=data.get("citations"),
                      error=data.get("error"), action=data.get("action"),
                      vector_unavailable=mode != "unavailable" and data.get("unavailable") is True)
        for attr, key in _NOTES:
            if key in data:
                setattr(results, attr, data[key])
        debug = data.get("debug") or {}
        results.timings = {key: debug[key] for key in _TIMINGS if key in debug}
        return results


#: The timings ``debug`` carries (OpenClaw's names), kept when a result crosses hosts.
_TIMINGS = ("searchMs", "toolMs")
#: ``action`` when the vector side is down (OpenClaw's, for an embedding/provider error)...
PROVIDER_ACTION = "Check embedding provider configuration and retry memory_search."
#: ... and when the provider said its quota is spent (OpenClaw's test: :data:`_QUOTA`).
QUOTA_ACTION = "Top up or switch embedding provider, then retry memory_search."
_QUOTA = re.compile(r"insufficient_quota|quota|429")


def provider_down_action(reason: str | None) -> str:
    """What to do when the embedding provider failed with ``reason``, in OpenClaw's words
    (``buildMemorySearchUnavailableResult``: a quota error, or any other)."""
    return QUOTA_ACTION if _QUOTA.search((reason or "").lower()) else PROVIDER_ACTION


@dataclass(frozen=True)
class MemoryText:
    """Lines of a memory file (``memory_get``): ``from_line`` and ``lines`` are None when the
    file does not exist yet (its text is empty)."""

    path: str
    text: str
    from_line: int | None = None
    lines: int | None = None

    @classmethod
    def window(cls, path: str, content: str, from_line: int | None, lines: int | None
               ) -> MemoryText:
        """``lines`` lines of ``content`` (default: to the end) from 1-based ``from_line``
        (default 1), OpenClaw's ``memory_get`` window."""
        rows = content.split("\n")
        start = max(1, int(from_line or 1))
        end = len(rows) if lines is None else min(len(rows), start - 1 + max(0, int(lines)))
        return cls(path, "\n".join(rows[start - 1 : end]), start, max(0, end - start + 1))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "text": self.text}
        if self.from_line is not None:
            out.update({"from": self.from_line, "lines": self.lines})
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryText:
        """The inverse of :meth:`to_dict` (lines read on another host)."""
        return cls(data["path"], data["text"], data.get("from"), data.get("lines"))


@dataclass(frozen=True)
class Appended:
    """Where a note landed (``memory_append``), and what indexing it did: ``indexed`` (its
    text is keyword-searchable), ``vectors`` (embedded, queued, or why not), ``warning``."""

    path: str
    target: str
    start_line: int
    end_line: int
    bytes: int
    indexed: bool = False
    vectors: str | None = None
    warning: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "target": self.target,
                               "startLine": self.start_line, "endLine": self.end_line,
                               "bytes": self.bytes, "indexed": self.indexed}
        if self.vectors is not None:
            out["vectors"] = self.vectors
        if self.warning is not None:
            out["warning"] = self.warning
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Appended:
        """The inverse of :meth:`to_dict` (a note appended on another host)."""
        return cls(data["path"], data["target"], int(data["startLine"]), int(data["endLine"]),
                   int(data["bytes"]), bool(data.get("indexed", False)), data.get("vectors"),
                   data.get("warning"))
