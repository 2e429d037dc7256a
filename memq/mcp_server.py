"""``memq mcp``: the agent's memory as Model Context Protocol tools.

Three tools over one :class:`memq.Memory`, with OpenClaw's result shapes:
``memory_search`` (:meth:`~memq.Memory.search`), ``memory_get``
(:meth:`~memq.Memory.get`) and ``memory_append`` (:meth:`~memq.Memory.append`).
Arguments are checked against the published JSON Schemas before any library call, and every
refusal comes back as a tool error (``isError``) the model can read and correct, never as a
crash of the server; a ``memory_get`` of a path outside the memory files is answered, as
OpenClaw answers it (``status: "error"`` with a ``code``). Every tool has a title and MCP
annotations (``ANNOTATIONS``): clients such as OpenClaw run read-only and non-destructive
closed-world tools without asking the operator.

With ``backend: "qmd"`` the ``Memory`` asks the ``qmd`` CLI first and falls back to memq's own
index (the answer's ``backend`` and ``fallback`` say so); ``memory_get`` reads ``qmd://`` paths.
Searches never wait for indexing: a search whose index is behind the disk is answered from the
index as it is, says so (``dirty``: how many files differ), and starts a background sync.
A memory whose store is on another host is served through its shard's reader: its syncs are
jobs for the shard, and a shard that does not answer gives ``mode: "unavailable"`` with the
reason, as an answer the model reads, not a failed call.
Served over stdio, or over streamable HTTP bound to loopback unless a bearer token protects it.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
from jsonschema import Draft202012Validator
from mcp.server.lowlevel import Server

from memq import installed_version
from pipeline.config import ConfigError, Settings
from pipeline.errors import (
    AppendError,
    EmbeddingError,
    FleetError,
    MemoryDisabled,
    MemoryPathError,
    RequestRefused,
    WorkspaceMissing,
)
from pipeline.ingest.append import TARGETS
from pipeline.memory import Memory
from pipeline.results import NOT_FOUND, MemoryText
from pipeline.search.corpus import CORPORA, GET_CORPORA, corpus_outcomes

log = logging.getLogger("memq.mcp")

MAX_QUERY_CHARS = 4000
MIN_TOKEN_CHARS = 16

RECALL = (
    "## Memory Recall\n"
    "Before answering anything about prior work, decisions, dates, people, preferences, or "
    "todos: run memory_search; for memory-file hits, use memory_get to pull only the needed "
    "lines. If low confidence after search, say you checked.\n"
    "To remember something for later, use memory_append (daily log or long-term memory)."
)
CITE_ON = ("Citations: include Source: <path#line> when it helps the user verify memory "
           "snippets.")
CITE_OFF = ("Citations are disabled: do not mention file paths or line numbers in replies "
            "unless the user explicitly asks.")

#: Each tool's description (a template: ``{files}``, ``{search}``, ``{evergreen}`` are filled in
#: by :func:`tool_descriptions` from the memory's settings) and input schema.
TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "memory_search": (
        "Mandatory recall step: search {search} by meaning and keywords before answering "
        "questions about prior work, decisions, dates, people, preferences, or todos. Returns "
        "the top snippets with path, startLine and endLine; then call memory_get for just the "
        "lines you need.{evergreen} `corpus=memory` restricts hits to indexed memory files "
        "(no session transcript chunks); `corpus=sessions` searches indexed session "
        "transcripts only and answers unavailable when session indexing is disabled; "
        "`corpus=wiki` finds nothing (memq has no compiled wiki) and says so in `warning`; "
        "`corpus=all` or none searches everything indexed. `mode` says hybrid or keyword-only; "
        "`pending` (chunks without vectors yet) or `dirty` (files changed since the last "
        "index, a sync is running) mean results may be incomplete. With the QMD backend, "
        "`backend` says which engine answered (`fallback`: why memq's own index did). With "
        "a reranker configured, `rerank` says whether it re-ordered the results.",
        {"type": "object", "additionalProperties": False, "required": ["query"], "properties": {
            "query": {"type": "string", "maxLength": MAX_QUERY_CHARS,
                      "description": "what to recall, in natural language"},
            "maxResults": {"type": "integer", "minimum": 1,
                           "description": "how many snippets at most (default 6)"},
            "minScore": {"type": "number", "minimum": 0, "maximum": 1,
                         "description": "drop results scoring below this (default 0.35)"},
            "corpus": {"type": "string", "enum": list(CORPORA),
                       "description": "memory: memory files only; sessions: session "
                                      "transcripts only; wiki: nothing (memq has no wiki); "
                                      "all (default): everything indexed"},
            "projects": {"type": "array", "maxItems": 64,
                         "items": {"type": "string", "minLength": 1},
                         "description": "active project keys (e.g. github.com/org/repo): "
                                        "entries annotated <!-- project: ... --> with only "
                                        "these keys rank higher, other annotated ones lower"},
        }},
    ),
    "memory_get": (
        "Read lines of {files}, typically right after memory_search: pass a result's path "
        "with from=startLine and lines=endLine-startLine+1 (widen a little for context) to "
        "pull only the needed lines instead of whole files. Returns at most 120 lines and "
        "12,000 characters; a longer text ends with a notice and `nextFrom` (continue with "
        "from=nextFrom). A memory file that does not exist yet answers status not_found; "
        "paths outside the memory files (session transcripts too) answer status error with "
        "a code.",
        {"type": "object", "additionalProperties": False, "required": ["path"], "properties": {
            "path": {"type": "string", "minLength": 1,
                     "description": "e.g. MEMORY.md or memory/2026-11-03.md"},
            "from": {"type": "integer", "minimum": 1, "description": "first line (1-based)"},
            "lines": {"type": "integer", "minimum": 1,
                      "description": "how many lines (default 120; the text stops at "
                                     "12,000 characters)"},
            "corpus": {"type": "string", "enum": list(GET_CORPORA),
                       "description": "memory or all (default): the memory files; wiki: "
                                      "nothing (memq has no wiki)"},
        }},
    ),
    "memory_append": (
        "Remember something for later: append a Markdown note to today's daily log "
        "(target=daily, memory/YYYY-MM-DD.md: events, running context, what was done) or to "
        "long-term memory (target=longterm, MEMORY.md: durable facts, decisions, preferences). "
        "Write self-contained notes (who, what, when). The note is searchable with "
        "memory_search as soon as this returns.",
        {"type": "object", "additionalProperties": False, "required": ["text"], "properties": {
            "text": {"type": "string", "minLength": 1, "description": "the note, as Markdown"},
            "target": {"type": "string", "enum": list(TARGETS), "default": "daily"},
        }},
    ),
}
_VALIDATORS = {name: Draft202012Validator(schema) for name, (_, schema) in TOOLS.items()}

# MCP tool annotations: what a client may assume before it calls. OpenClaw runs a tool without
# asking the operator when it is read-only, or neither destructive nor open-world; a server
# whose tools carry no annotations needs approval for every call in prompting postures.
ANNOTATIONS: dict[str, types.ToolAnnotations] = {
    "memory_search": types.ToolAnnotations(
        title="Search memory", read_only_hint=True, open_world_hint=False),
    "memory_get": types.ToolAnnotations(
        title="Read memory lines", read_only_hint=True, open_world_hint=False),
    # Appends only (never rewrites or deletes), so not destructive; a repeated call writes the
    # note twice, so not idempotent; it touches the workspace's memory files only.
    "memory_append": types.ToolAnnotations(
        title="Append to memory", read_only_hint=False, destructive_hint=False,
        idempotent_hint=False, open_world_hint=False),
}


#: The memory files, in OpenClaw 2026.9.6's words (``resolveMemorySourceContract``).
MEMORY_FILES = "MEMORY.md, USER.md, Markdown files recursively under memory/"
QMD_DEFAULT_FILES = "MEMORY.md, Markdown files recursively under memory/"
EVERGREEN = (" Older notes rank lower (temporal decay); MEMORY.md and USER.md are "
             "evergreen and never decay.")
#: memq's default recency (``temporalDecay.mode: "superseded"``) told in the same place.
SUPERSEDING = (" Where a newer note says the same thing as an older one, the newer ranks "
               "first; an older note that alone answers keeps its rank. MEMORY.md and USER.md "
               "are evergreen.")


def memory_sources(settings: Settings) -> tuple[str, str]:
    """What ``memory_get`` reads and what ``memory_search`` searches, as description text.

    As OpenClaw 2026.9.6: the memory files, configured extra paths when there are some, and
    indexed session transcripts when ``sources`` has them. With ``backend: "qmd"`` a search
    reads QMD's collections (``memory-root``/``memory-dir``: no ``USER.md``, and the
    ``qmd.paths`` ones), while ``memory_get`` still reads every memory file.
    """
    extra = ", configured extra paths" if settings.extra_paths or settings.extra_path_patterns \
        else ""
    files = MEMORY_FILES + extra
    if settings.backend == "qmd":
        qmd = settings.qmd
        parts = [QMD_DEFAULT_FILES] if qmd.include_default_memory else []
        parts += ["configured QMD paths"] if qmd.paths else []
        parts += ["exported session transcripts"] if qmd.sessions.enabled else []
        return files, ", ".join(parts) or "the configured QMD collections"
    sessions = ", indexed session transcripts" if "sessions" in settings.sources else ""
    return files, files + sessions


def tool_descriptions(settings: Settings) -> dict[str, str]:
    """Each tool's description for the memory of ``settings`` (:data:`TOOLS`' templates)."""
    files, search = memory_sources(settings)
    recency = settings.query.hybrid.temporal_decay
    told = ""
    if settings.backend == "builtin" and recency.enabled:
        # keyword-only memories decay as OpenClaw's do (no chunk vectors to compare)
        superseding = recency.mode == "superseded" and settings.provider != "none"
        told = SUPERSEDING if superseding else EVERGREEN
    fill = {"files": files, "search": search, "evergreen": told}
    return {name: text.format(**fill) for name, (text, _) in TOOLS.items()}


class ToolRefused(RequestRefused):
    """A call the model can fix: bad arguments or a refused path. Becomes ``isError``."""


def citations_on(settings: Settings) -> bool:
    """``memory.citations``: auto cites in direct chats, and an MCP client is one user's chat."""
    return settings.citations != "off"


def _check(name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
    arguments = arguments or {}
    error = next(iter(sorted(_VALIDATORS[name].iter_errors(arguments),
                             key=lambda e: list(e.absolute_path))), None)
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "arguments"
        message = error.message if len(error.message) <= 200 else error.message[:200] + "…"
        raise ToolRefused(f"invalid {where} for {name}: {message}")
    return arguments


class MemoryTools:
    """The tool implementations for one memory (plain, synchronous, thread-safe)."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.settings = memory.settings

    def search(self, args: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            stale = self.memory.stale_files()
        except (FleetError, WorkspaceMissing):  # the shard does not answer, or cannot tell:
            stale = []  # the search says what it can, below
        # Never sync in the request path: the answer comes from the index as it is (and says
        # so), the background sync catches up.
        searching = time.perf_counter()
        results = self.memory.search(
            args["query"], sync=False, max_results=args.get("maxResults"),
            min_score=args.get("minScore"), corpus=args.get("corpus"),
            projects=args.get("projects"),
            citations="on" if citations_on(self.settings) else "off")
        done = time.perf_counter()
        # OpenClaw's answer names the configured mode (auto by default), not the one applied
        results.citations = self.settings.citations
        results.timings.setdefault("searchMs", _ms(done - searching))
        if stale:
            if self.settings.sync.on_search:
                self.memory.sync_in_background()
            results.dirty = len(stale)
            results.syncing = self.memory.syncing
            results.sync_error = self.memory.sync_error
        results.timings["toolMs"] = _ms(time.perf_counter() - started)
        return results.to_dict()

    def get(self, args: dict[str, Any]) -> dict[str, Any]:
        """OpenClaw 2026.9.6's ``memory_get``: a window of at most 120 lines and 12,000
        characters (:meth:`MemoryText.window`); a refused path is an answer (``status:
        "error"`` with a ``code``), not a failed call."""
        corpus, path = args.get("corpus"), args["path"]
        if corpus == "wiki":  # OpenClaw's answer when no wiki corpus is registered
            return {"path": path, "text": "", **corpus_outcomes(corpus)}
        try:
            text = self.memory.get(path, args.get("from"), args.get("lines")).to_dict()
        except MemoryPathError as exc:
            refused = MemoryText.refused(path, exc)
            if corpus != "all":
                return refused.to_dict()
            # OpenClaw's corpus "all": the memory corpus failed and no wiki answered
            return {"status": "error", "path": path, "text": "",
                    **refused_outcomes(str(refused.error))}
        if corpus != "all":
            return text
        if text["status"] == NOT_FOUND:  # OpenClaw's "every corpus missed" answer
            text = {"status": NOT_FOUND, "path": path, "text": ""}
        return {**text, **corpus_outcomes(corpus)}

    def append(self, args: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.memory.append(args["text"], args.get("target", "daily")).to_dict()
        except (AppendError, MemoryPathError) as exc:
            raise ToolRefused(str(exc)) from exc


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def refused_outcomes(error: str) -> dict[str, Any]:
    """What OpenClaw 2026.9.6's ``memory_get`` with ``corpus: "all"`` says of its corpora when
    the memory files refused the path (``error``) and no wiki is registered."""
    return {"corpora": [{"corpus": "memory", "outcome": "unavailable", "error": error},
                        {"corpus": "wiki", "outcome": "not-registered"}],
            "warning": f"Memory corpus unavailable: {error}", "error": error}


def build_server(memory: Memory) -> Server[Any]:
    """The low-level MCP server with memq's three tools over ``memory``."""
    tools = MemoryTools(memory)
    settings = memory.settings
    calls: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "memory_search": tools.search, "memory_get": tools.get, "memory_append": tools.append}

    descriptions = tool_descriptions(settings)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=name, title=ANNOTATIONS[name].title, description=descriptions[name],
                       input_schema=schema, annotations=ANNOTATIONS[name])
            for name, (_, schema) in TOOLS.items()])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        name = params.name
        try:
            if name not in calls:
                raise ToolRefused(f"unknown tool {name!r}; tools: {', '.join(TOOLS)}")
            args = _check(name, params.arguments)
            out = await anyio.to_thread.run_sync(calls[name], args)
        except (ToolRefused, MemoryDisabled) as exc:
            return _error(str(exc))
        except (ConfigError, EmbeddingError, FleetError) as exc:
            return _error(f"{name} failed: {exc}")
        except Exception:
            log.exception("%s crashed", name)
            return _error(f"{name} failed with an internal error (details in the server log)")
        return types.CallToolResult(content=[types.TextContent(type="text", text=_mirror(out))],
                                    structured_content=out)

    def input_schema(name: str) -> dict[str, Any] | None:
        return TOOLS[name][1] if name in TOOLS else None

    server: Server[Any] = Server(
        "memq", version=installed_version(),
        instructions=RECALL + "\n" + (CITE_ON if citations_on(settings) else CITE_OFF),
        get_tool_input_schema=input_schema, on_list_tools=list_tools, on_call_tool=call_tool)
    if settings.sync.on_session_start:
        memory.sync_in_background()
    return server


def _mirror(out: dict[str, Any]) -> str:
    """The structured answer as text, laid out as JavaScript's ``JSON.stringify(out, null, 2)``.

    OpenClaw shows its model the structured content and drops a text block equal to that
    layout, so the model reads the answer once instead of twice.
    """
    return json.dumps(_whole_floats_as_ints(out), ensure_ascii=False, indent=2)


def _whole_floats_as_ints(value: Any) -> Any:
    # JSON.stringify writes 1.0 as 1 (other floats in 1e-4..1e16 print alike in both languages).
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return int(value)
    if isinstance(value, dict):
        return {key: _whole_floats_as_ints(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole_floats_as_ints(item) for item in value]
    return value


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)],
                                is_error=True)


def run_stdio(settings: Settings) -> None:
    from mcp.server.stdio import stdio_server

    memory = Memory(settings=settings)
    server = build_server(memory)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    try:
        anyio.run(main)
    finally:
        memory.close()


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[v6]:PORT`` or ``PORT`` (loopback)."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--http wants HOST:PORT (e.g. 127.0.0.1:8765), got {text!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class BearerAuth:
    """ASGI guard: every HTTP request needs ``Authorization: Bearer <token>``."""

    def __init__(self, app: Callable[..., Awaitable[None]], token: str) -> None:
        self.app, self.expected = app, token.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not self._allowed(scope):
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"www-authenticate", b'Bearer realm="memq"'),
                                    (b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"missing or wrong bearer token\n"})
            return
        await self.app(scope, receive, send)

    def _allowed(self, scope: dict[str, Any]) -> bool:
        header = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        scheme, _, token = header.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.expected)


def run_http(settings: Settings, host: str, port: int, token: str | None) -> None:
    """Streamable HTTP at ``/mcp``; refuses to start exposed without a token."""
    import uvicorn

    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"the bearer token must be at least {MIN_TOKEN_CHARS} characters")
    if token is None and not is_loopback(host):
        raise ValueError(f"refusing to serve memory on {host} without a bearer token: set "
                         "MEMQ_MCP_TOKEN (or --token), or bind to 127.0.0.1")
    memory = Memory(settings=settings)
    app: Any = build_server(memory).streamable_http_app(host=host)
    if token is not None:
        app = BearerAuth(app, token)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        memory.close()
