"""``memq search`` and ``memq get``: one answer each, then the process ends (their imports are
the start-up a one-shot query pays)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import click

from memq.cli.common import (
    Args,
    Choice,
    command,
    emit,
    existing,
    memory_options,
    settings_of,
    warn,
)
from memq.cli.exits import CommandFailed, ExitCode

if TYPE_CHECKING:
    from pipeline.config import Settings
    from pipeline.embeddings.providers import ProviderPool

#: memory_search's corpus values (pipeline.search.corpus.CORPORA, not imported by `--help`).
SEARCH_CORPORA = ("memory", "wiki", "all", "sessions")
#: Characters of a snippet ``memq search`` shows (``--json`` gives the whole snippet).
SNIPPET_SHOWN = 200


def _preloading(settings: Settings) -> ProviderPool:
    """Providers for one search whose local model (when the search embeds with one here) is
    already loading on another thread: llama.cpp reads it while this process imports the
    pipeline and opens the store, instead of after."""
    from pipeline.embeddings.providers import ProviderPool
    from pipeline.fleet.placement import store_is_here

    providers = ProviderPool()
    if settings.backend == "builtin" and store_is_here(settings):
        providers.preload(settings)
    return providers


@command("search", "hybrid search of the memory", answers_once=True)
@memory_options
@click.argument("query")
@click.option("--max-results", type=int)
@click.option("--min-score", type=float)
@click.option("--citations", type=Choice(["auto", "on", "off"]), default="auto",
              help="add a Source: path#Ls-Le line to each snippet (default auto = on)")
@click.option("--corpus", type=Choice(SEARCH_CORPORA),
              help="memory: notes only; sessions: transcripts only; all (default): "
                   "every configured source; wiki: none (memq has no wiki)")
@click.option("--project", multiple=True, metavar="KEY",
              help="an active project key (repeatable, e.g. github.com/org/repo): "
                   "entries annotated <!-- project: ... --> with only active keys rank "
                   "higher (x1.15), other annotated entries lower (x0.9)")
def search(args: Args) -> int:
    """``memq search QUERY``: the memory's best snippets, with the mode that found them."""
    settings = existing(settings_of(args))
    providers = _preloading(settings)
    from pipeline.memory import Memory

    # One query per process: vec0 and FTS5 answer faster than loading the store into memory.
    with contextlib.closing(providers), Memory(settings=settings, in_memory=False,
                                               providers=providers) as memory:
        # the library's answer as it is (no timings: the same JSON as Memory.search gives)
        out = memory.search(args.query, max_results=args.max_results, min_score=args.min_score,
                            citations=args.citations, corpus=args.corpus,
                            projects=list(args.project) or None).to_dict()
    lines = []
    for hit in out["results"]:
        snippet = " ".join(hit["snippet"].split())
        lines.append(f"{hit['score']:.3f}  {hit['path']}:{hit['startLine']}-{hit['endLine']}\n"
                     f"       {_cut(snippet, SNIPPET_SHOWN)}")
    if not out["results"]:
        lines.append("no results")
    footer = f"[{out['mode']}" + (f", {out['provider']}/{out['model']}" if out["provider"] else "")
    notes = ("reason", "synced", "pending", "warning", "action", "rebuilding")
    footer += "]" + "".join(f" {k}: {out[k]}" for k in notes if k in out)
    fallback = out.get("fallback")
    if "backend" in out:
        qmd_down = fallback if fallback and fallback.get("from") == "qmd" else None
        footer += f" backend: {out['backend']}" + (
            f" (qmd {qmd_down['kind']}: {qmd_down['reason']})" if qmd_down else "")
    if fallback and fallback.get("from") != "qmd":
        footer += f" fallback from {fallback['from']}: {fallback['reason']}"
    footer += _rerank_footer(out.get("rerank"))
    if out["mode"] == "unavailable":
        warn(f"search unavailable: {out['error']}" + (f" ({out['action']})"
                                                       if out.get("action") else ""))
        if args.json:
            emit(args, out, "")
        from pipeline.search.corpus import SESSIONS_DISABLED

        return ExitCode.USAGE if out["error"] == SESSIONS_DISABLED else ExitCode.UNREACHABLE
    lines.append(footer)
    emit(args, out, "\n".join(lines))
    return ExitCode.OK


def _cut(text: str, limit: int) -> str:
    """``text`` up to ``limit`` characters, ending with "…" when it was cut there."""
    return text if len(text) <= limit else text[:limit] + "…"


def _rerank_footer(note: dict[str, Any] | None) -> str:
    """What the reranker did, for the search footer ("" when none is configured)."""
    if not note:
        return ""
    who = note.get("model") or note.get("provider")
    if note.get("fallback"):
        return f" rerank {who}: not applied ({note.get('kind')}: {note.get('reason')})"
    return f" rerank {who}: {note.get('reranked', 0)} reranked"


#: What ``memq get`` reads (MemoryPathError's "path required" is memq's wording; ``--json`` and
#: MCP answer OpenClaw's ``MEMORY_PATH_NOT_ALLOWED``, the CLI's stderr names the rule).
_GET_RULE = ("memq get reads only MEMORY.md, USER.md, .md files under memory/ and the "
             "configured extra paths, never a symlink or a session transcript")
_PATH_REQUIRED = "path required"


@command("get", "read lines of a memory file", answers_once=True)
@memory_options
@click.argument("path")
@click.option("--from", "from_line", type=int, help="first line (1-based; default 1)")
@click.option("--lines", type=int,
              help="how many lines (default 120; the text stops at 12,000 characters)")
def get(args: Args) -> int:
    """``memq get PATH``: lines of one memory file, as OpenClaw's ``memory_get`` reads them
    (``--json``: its answer; a refusal is ``status: "error"`` with a ``code``, exit 2; a
    file that does not exist is ``status: "not_found"``, exit 1)."""
    from pipeline.errors import MemoryPathError
    from pipeline.memory import Memory
    from pipeline.results import NOT_FOUND, MemoryText

    try:
        with Memory(settings=existing(settings_of(args)), in_memory=False) as memory:
            got = memory.get(args.path, args.from_line, args.lines)
    except MemoryPathError as exc:
        why = str(exc)
        if why.startswith(_PATH_REQUIRED):
            detail = why[len(_PATH_REQUIRED):].lstrip(": ")
            why = f"outside the memory files; {_GET_RULE}" + (
                f"; expected {detail}" if detail and "memory .md file" not in detail else "")
        if args.json:
            emit(args, MemoryText.refused(args.path, exc).to_dict(), "")
        raise CommandFailed(f"refused {args.path}: {why}") from None
    out = got.to_dict()
    if got.status == NOT_FOUND:  # a file that could exist, but does not
        if args.json:
            emit(args, out, "")
        warn(f"{got.path} does not exist (no such memory file; `memq search` finds the "
             "ones that do)")
        return ExitCode.FAILED
    emit(args, out, out["text"])
    return ExitCode.OK
