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


#: ``memory_get``'s window when the caller gives no ``lines``, and its character budget: OpenClaw
#: 2026.9.6's ``DEFAULT_MEMORY_READ_LINES`` and ``DEFAULT_MEMORY_READ_MAX_CHARS``.
GET_LINES = 120
GET_MAX_CHARS = 12_000
#: ``MemoryText.status``: lines were read, the file does not exist (yet), the read was refused.
OK, NOT_FOUND, ERROR = "ok", "not_found", "error"
#: OpenClaw's ``code`` of a refused path, and of any other failed read (a blank path).
PATH_NOT_ALLOWED = "MEMORY_PATH_NOT_ALLOWED"
READ_FAILED = "MEMORY_READ_FAILED"
#: OpenClaw's message for a refused path (memq's own exceptions say ``path required``).
PATH_NOT_ALLOWED_MESSAGE = "path is not an allowed Markdown memory file"


@dataclass(frozen=True)
class MemoryText:
    """Lines of a memory file (``memory_get``), in OpenClaw 2026.9.6's shape.

    ``status`` is ``ok`` (``from_line``/``lines``: the window read, at most :data:`GET_LINES`
    lines and :data:`GET_MAX_CHARS` characters unless the caller asked for more lines),
    ``not_found`` (the file does not exist yet: empty text, no window) or ``error`` (a refused
    read: ``code`` and ``error`` say why; see :meth:`refused`). Left empty, it is ``ok`` when
    there is a window and ``not_found`` when there is none. ``truncated`` says the text
    stops before the file (or the line) does and ends with OpenClaw's continuation notice;
    ``next_from`` is then the line to continue from (None when one line alone was over the
    character budget).
    """

    path: str
    text: str
    from_line: int | None = None
    lines: int | None = None
    status: str = ""
    truncated: bool = False
    next_from: int | None = None
    code: str | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if not self.status:
            object.__setattr__(self, "status", OK if self.from_line is not None else NOT_FOUND)

    @classmethod
    def window(cls, path: str, content: str, from_line: int | None, lines: int | None, *,
               max_chars: int = GET_MAX_CHARS, suggest_read: bool = True) -> MemoryText:
        """OpenClaw's ``memory_get`` window of ``content``: ``lines`` lines (default
        :data:`GET_LINES`; at least 1) from 1-based ``from_line`` (default 1), cut at whole
        lines to ``max_chars`` characters (counted as JavaScript counts them, in UTF-16
        units). A first line alone over the budget is cut inside, never inside a surrogate
        pair; with ``suggest_read`` (a workspace memory file) the notice then points to the
        raw file. A final newline ends the last line, it does not start another."""
        rows = content.split("\n")
        if rows[-1] == "":
            rows.pop()
        start = max(1, int(from_line or 1))
        count = max(1, int(lines)) if lines is not None else GET_LINES
        selected = rows[start - 1 : start - 1 + count]
        more_rows = start - 1 + len(selected) < len(rows)
        budget = max(1, int(max_chars))
        included = chars = 0
        for row in selected:
            after = chars + utf16_len(row) + (1 if included else 0)
            if included and after > budget:
                break
            included, chars = included + 1, after
        cut_line = chars > budget
        text = utf16_prefix("\n".join(selected[:included]), budget)
        next_from = (start + included if not cut_line and (more_rows or included < len(selected))
                     else None)
        truncated = cut_line or included < len(selected) or more_rows
        if truncated and (text or cut_line):
            text += continuation_notice(next_from, read_fallback=cut_line and suggest_read)
        return cls(path, text, start, included, OK, truncated, next_from)

    @classmethod
    def refused(cls, path: str, reason: Exception | str) -> MemoryText:
        """The answer to a refused read of ``path`` (``status: "error"``), as OpenClaw's
        ``memory_get`` gives it: ``MEMORY_PATH_NOT_ALLOWED`` with OpenClaw's message for a
        path outside the memory files (memq's ``path required``), ``MEMORY_READ_FAILED`` for a
        blank path; another reason keeps its own words."""
        message = str(reason)
        if not path.strip():
            return cls(path, "", status=ERROR, code=READ_FAILED, error="path required")
        if message.startswith("path required"):  # memq's words for "not a memory file"
            message = PATH_NOT_ALLOWED_MESSAGE
        return cls(path, "", status=ERROR, code=PATH_NOT_ALLOWED, error=message)

    def to_dict(self) -> dict[str, Any]:
        """OpenClaw's JSON: ``{status, text, path, from, lines, truncated?, nextFrom?}``;
        ``{status: "not_found", text: "", path}``; ``{path, text: "", status: "error", code,
        error}``."""
        if self.status == ERROR:
            return {"path": self.path, "text": self.text, "status": ERROR, "code": self.code,
                    "error": self.error}
        out: dict[str, Any] = {"status": self.status, "text": self.text, "path": self.path}
        if self.from_line is not None:
            out.update({"from": self.from_line, "lines": self.lines})
        if self.truncated:
            out["truncated"] = True
        if self.next_from is not None:
            out["nextFrom"] = self.next_from
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryText:
        """The inverse of :meth:`to_dict` (lines read on another host)."""
        return cls(data["path"], data["text"], data.get("from"), data.get("lines"),
                   data.get("status") or "", bool(data.get("truncated", False)),
                   data.get("nextFrom"), data.get("code"), data.get("error"))


def continuation_notice(next_from: int | None, *, read_fallback: bool = False) -> str:
    """OpenClaw's ``buildContinuationNotice``: what ends a cut ``memory_get`` text."""
    base = (f"[More content available. Use from={next_from} to continue."
            if next_from is not None else
            "[More content available. Requested excerpt exceeded the default maxChars budget.")
    hint = " If you need the full raw line, use read on the source file." if read_fallback else ""
    return f"\n\n{base}{hint}]"


def utf16_len(text: str) -> int:
    """The length of ``text`` as JavaScript counts it (UTF-16 code units)."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF) if not text.isascii() \
        else len(text)


def utf16_prefix(text: str, limit: int) -> str:
    """The longest start of ``text`` at most ``limit`` UTF-16 units long that does not split a
    surrogate pair (OpenClaw's ``truncateUtf16Safe``)."""
    if len(text) <= limit and utf16_len(text) <= limit:
        return text
    used = 0
    for index, ch in enumerate(text):
        used += 2 if ord(ch) > 0xFFFF else 1
        if used > limit:
            return text[:index]
    return text


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
