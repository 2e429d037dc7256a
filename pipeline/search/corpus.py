"""``memory_search``'s ``corpus`` argument: which indexed sources one search reads.

OpenClaw 2026.9's tool takes ``corpus`` (``memory``, ``wiki``, ``all``, ``sessions``) and
refuses any other value rather than searching everything (a model-authored argument must fail
closed). ``memory`` reads memory notes only, ``sessions`` session transcripts only (refused
with OpenClaw's advice when no transcripts are indexed), ``all`` (or no corpus) OpenClaw's
search sources (``Settings.search_sources``). memq has no wiki: ``wiki`` answers nothing, and
says so.

``rememberAcrossConversations`` as OpenClaw 2026.9.6 (``resolveMemorySearchSourcePolicy``):
transcripts are indexed, but a search without ``corpus`` (or ``all``) leaves them out unless
``sources`` lists ``sessions`` (with session memory on). ``corpus: "sessions"`` reads them.
There OpenClaw differs: it refuses a model's ``sessions`` corpus unless the search sources hold
transcripts, and reaches remembered ones only through Active Memory's protected recall of the
same agent's conversations, which memq does not have; memq's ``sessions`` corpus is that way
in, for the caller that asks.
"""

from __future__ import annotations

from pipeline.config import Settings
from pipeline.errors import RequestRefused
from pipeline.results import SearchResults

CORPORA = ("memory", "wiki", "all", "sessions")
#: ``memory_get``'s corpora (OpenClaw 2026.9: it reads files, never transcripts).
GET_CORPORA = ("memory", "wiki", "all")
SESSIONS_DISABLED = "Session transcript search is not enabled."
SESSIONS_ACTION = ("ask the operator to enable semantic session search by enabling "
                   "memory.search.experimental.sessionMemory and adding \"sessions\" to "
                   "memory.search.sources")
NO_WIKI = ("Wiki corpus is not registered; results do not cover that requested corpus "
           "(memq has no wiki).")


def check_corpus(corpus: str | None) -> str | None:
    """``corpus`` if it is one of :data:`CORPORA` (or None); RequestRefused otherwise."""
    if corpus is None or corpus in CORPORA:
        return corpus
    raise RequestRefused(f"corpus must be one of: {', '.join(CORPORA)}")


def refusal(settings: Settings, corpus: str | None) -> SearchResults | None:
    """The answer when ``corpus`` cannot be searched at all (None when it can)."""
    if corpus == "sessions" and "sessions" not in settings.sources:
        return SearchResults(mode="unavailable", error=SESSIONS_DISABLED,
                             warning="Session transcript search is unavailable for this "
                                     "agent.", action=SESSIONS_ACTION)
    if corpus == "wiki":
        return SearchResults(warning=NO_WIKI)
    return None


def search_sources(settings: Settings) -> tuple[str, ...]:
    """What a search without ``corpus`` reads: the indexed sources OpenClaw searches by default
    (``searchSources``; remembered transcripts are indexed, not searched)."""
    wanted = settings.search_sources or settings.sources
    return tuple(s for s in settings.sources if s in wanted) or settings.sources


def corpus_sources(settings: Settings, corpus: str | None) -> tuple[str, ...] | None:
    """The sources a search of ``corpus`` reads: None for every indexed source (no filter)."""
    wanted = search_sources(settings) if corpus in (None, "all") else (corpus,)
    return None if wanted == settings.sources else wanted


def corpus_outcomes(corpus: str | None) -> dict[str, object]:
    """What a ``memory_get`` of ``corpus`` says of each corpus it asked, as OpenClaw 2026.9
    does: ``wiki`` alone is not registered (with a warning), ``all`` read the memory files
    and found no wiki; ``memory`` (or none) says nothing."""
    if corpus == "wiki":
        return {"corpora": [{"corpus": "wiki", "outcome": "not-registered"}],
                "warning": NO_WIKI}
    if corpus == "all":
        return {"corpora": [{"corpus": "memory", "outcome": "ok"},
                            {"corpus": "wiki", "outcome": "not-registered"}]}
    return {}
