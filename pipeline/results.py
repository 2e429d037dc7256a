"""What memq gives back (search hits, lines read, a note appended): small dataclasses, each with
``to_dict()`` for OpenClaw's JSON shape (camelCase keys, the tool results agents already
know)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

#: OpenClaw's ``INVALID_PROJECT_ANNOTATION_KEY``: the project key given to an entry whose
#: ``<!-- project: … -->`` annotation could not be read; search never returns such an entry.
INVALID_PROJECT_KEY = "!invalid-project-annotation"


@dataclass(frozen=True)
class SearchHit:
    """One result: where it is (``path``, 1-based inclusive ``start_line``..``end_line``), how
    well it matched (``score``, 0..1), the text (``snippet``, with a ``Source:`` line when
    citations are on) and where it came from (``source``: ``memory`` or ``sessions``).
    ``importance``, ``triggers`` and ``project_key`` are its entry's annotation values
    (``<!-- importance: N -->`` …; None when absent, and then left out of :meth:`to_dict`)."""

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

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "startLine": self.start_line,
                               "endLine": self.end_line, "score": self.score,
                               "snippet": self.snippet, "source": self.source}
        if self.citation is not None:
            out["citation"] = self.citation
        for key, value in (("importance", self.importance), ("triggers", self.triggers),
                           ("projectKey", self.project_key)):
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchHit:
        """The inverse of :meth:`to_dict` (a hit that came from another host)."""
        importance = data.get("importance")
        return cls(data["path"], int(data["startLine"]), int(data["endLine"]),
                   float(data["score"]), data["snippet"], data["source"], data.get("citation"),
                   None if importance is None else int(importance), data.get("triggers"),
                   data.get("projectKey"))


#: The optional facts of a search, in the order ``to_dict`` lists them (attribute, JSON key).
_NOTES = (("reason", "reason"), ("pending", "pending"), ("warning", "warning"),
          ("synced", "synced"), ("rebuilding", "rebuilding"), ("fallback", "fallback"),
          ("dirty", "dirty"), ("syncing", "syncing"), ("sync_error", "syncError"),
          ("backend", "backend"), ("rerank", "rerank"), ("partial", "partial"),
          ("timed_out", "timedOut"), ("timeout_ms", "timeoutMs"))
_COUNTS = ("pending", "synced", "dirty")  # shown only when not zero


@dataclass
class SearchResults:
    """The hits of one search (iterable, best first) and how it was answered.

    ``mode`` is ``hybrid``, ``keyword-only`` or ``unavailable``; ``provider``/``model`` name
    the index's embedding model. The optional facts say why results may be incomplete:
    ``reason`` (why keyword-only), ``pending`` (chunks still without a vector), ``warning``
    (the query could not be embedded), ``synced`` (files brought up to date first),
    ``rebuilding`` (answered from the live index while a new one is built), ``dirty`` and
    ``syncing`` (a long-running server's files changed since the last index; a sync runs),
    ``rerank`` (with ``rerank.enabled``: what the reranker did, or why the fused order stands:
    :mod:`pipeline.search.rerank`). ``partial``, ``timed_out`` and ``timeout_ms``: the
    search ran out of time (``query.timeoutMs``; :mod:`pipeline.search.deadline`) and answers
    with the keyword matches only.
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

    def __iter__(self) -> Iterator[SearchHit]:
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)

    def __getitem__(self, index: int) -> SearchHit:
        return self.hits[index]

    def to_dict(self) -> dict[str, Any]:
        """OpenClaw's ``memory_search`` result: ``{results, provider, model, mode, …}``."""
        out: dict[str, Any] = {"results": [h.to_dict() for h in self.hits],
                               "provider": self.provider, "model": self.model, "mode": self.mode}
        if self.mode == "unavailable":
            out.update(unavailable=True, error=self.error, action=self.action)
            if self.timed_out:  # no reader answered in time (a remote search)
                out.update(timedOut=True, timeoutMs=self.timeout_ms)
            return out
        if self.citations is not None:
            out["citations"] = self.citations
        for attr, key in _NOTES:
            value = getattr(self, attr)
            if value is not None and not (attr in _COUNTS and value == 0):
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchResults:
        """The inverse of :meth:`to_dict`: the answer of a search run on another host."""
        results = cls(hits=[SearchHit.from_dict(h) for h in data.get("results", [])],
                      provider=data.get("provider"), model=data.get("model"),
                      mode=data.get("mode", "keyword-only"), citations=data.get("citations"),
                      error=data.get("error"), action=data.get("action"))
        for attr, key in _NOTES:
            if key in data:
                setattr(results, attr, data[key])
        return results


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
