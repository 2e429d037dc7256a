"""Every error memq raises on purpose, under one root, named for what the caller should do.

``except MemqError`` catches them all. Below it, the class says the next step:

- :class:`ConfigError`: fix the configuration (the message names the key and the file).
- :class:`MemoryDisabled`: the memory is turned off (``enabled = false``); turn it on to
  search, read or index it.
- :class:`RequestRefused`: fix the arguments of this call (a path outside the memory files,
  an empty note); nothing was read or written.
- :class:`EmbeddingError`: the embedding provider failed this input for good; the chunks are
  marked failed (``memq index --retry-failed`` tries them again). Its subclasses:

  - :class:`ProviderRetryable`: try again later (5xx, timeout, network), no sooner than
    ``retry_after`` seconds; :class:`ProviderThrottled` is a rate limit (429), so the whole
    fleet slows down, not one job;
  - :class:`InputTooLong`: the model's context is too small for this input; split it;
  - :class:`ProviderRefused`: the provider refused the credentials (401/403): the chunks wait,
    pending, until the configuration is fixed;
  - :class:`ProviderUnavailable`: the provider cannot be built here (no model file, no API key:
    :class:`MissingApiKey`; no credential for the configured endpoint:
    :class:`CredentialsNotConfigured`); another one may be chosen;
  - :class:`BatchUnavailable`: the provider's batch API is not there; use the sync path.

- :class:`StoreError`: the SQLite store cannot be used (corrupt, unwritable): move it aside and
  rebuild (it is derived from the Markdown files); :class:`StoreBusy`: locked or disk full,
  try again later, nothing is lost.
- :class:`FleetError`: the worker fleet or its broker cannot do what was asked (no broker,
  a job not taken, a worker that keeps dying); :class:`ShardUnreachable`: no reader of the
  memory's shard answered in time (the memory's store is on another host).

Messages never hold a secret (API keys, bearer tokens, URL passwords).
"""

from __future__ import annotations

from typing import Any


class MemqError(Exception):
    """The root of every error memq raises on purpose."""


class ConfigError(MemqError, ValueError):
    """A setting is wrong.

    The message names the key path (``query.minScore``) or the environment variable, the bad
    value (never a secret), what is allowed, and the file it came from. ``key`` is the dotted
    camelCase key path (or None for file-level problems); ``source`` is the config file's path,
    ``"environment variable NAME"``, or None.
    """

    def __init__(self, message: str, *, key: str | None = None, source: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.source = source


class UnknownMemory(ConfigError):
    """A memory name (``--agent``/``--memory``) the configuration does not list. ``known``
    holds the names it does list; the CLI prints them and exits with status 2."""

    def __init__(self, message: str, *, name: str, known: tuple[str, ...],
                 source: str | None = None) -> None:
        super().__init__(message, key="agentId", source=source)
        self.name = name
        self.known = known


class WorkspaceMissing(MemqError, FileNotFoundError):
    """The memory's workspace folder does not exist (a typo'd ``--workspace``, a moved
    folder): nothing is indexed or searched, and no store is created for it."""


class FilesElsewhere(WorkspaceMissing):
    """The memory's files are sent by a producer on another host (its store records that
    host's folder), and the folder at the workspace's path here is not that folder (an empty
    mount point, a stale copy): a pass here would read the wrong files, so none runs."""


class DeletionRefused(MemqError, RuntimeError):
    """A pass would remove every file (or most files) of a memory from its index, as when the
    folder is empty, missing or unmounted: nothing was deleted. ``deleted`` of ``known``
    files would have gone; the user says so explicitly to let it happen
    (``allow_deletions``, ``memq index --allow-deletions``)."""

    def __init__(self, message: str, *, deleted: int, known: int) -> None:
        super().__init__(message)
        self.deleted = deleted
        self.known = known


class MemoryDisabled(MemqError, RuntimeError):
    """The memory is turned off (``enabled = false``): as OpenClaw, which then builds no memory
    manager and registers no memory tools, nothing is searched, read, appended or indexed."""


def memory_disabled(config_file: object | None) -> MemoryDisabled:
    """The :class:`MemoryDisabled` error for a memory whose settings came from ``config_file``."""
    where = f" in {config_file}" if config_file else ""
    return MemoryDisabled(f"memory is disabled (enabled = false{where}): memory search, get, "
                          "append and indexing are off; set enabled = true to turn them on")


class RequestRefused(MemqError, ValueError):
    """An argument of this call was refused; nothing was read or written."""


class MemoryPathError(RequestRefused):
    """``memory_get`` (or an append) was asked for something that is not a memory file."""


class AppendError(RequestRefused):
    """The note or its target was refused; nothing was written."""


class EmbeddingError(MemqError, RuntimeError):
    """The provider could not embed this input, and trying again will not help.

    ``retry_after`` is only set on :class:`ProviderRetryable`. The message never holds a secret.
    """

    retry_after: float | None = None


class ProviderRetryable(EmbeddingError):
    """A passing failure (5xx, timeout, connection): try again, no sooner than
    ``retry_after`` seconds when the provider said (``Retry-After``, Gemini's ``retryDelay``)."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ProviderThrottled(ProviderRetryable):
    """A rate limit (HTTP 429 that is not an exhausted quota): the provider is fine and asks the
    client to slow down, so the fleet pauses (:class:`pipeline.embeddings.ratelimit.FleetPause`)
    rather than backing off job by job."""


class InputTooLong(EmbeddingError):
    """The model found an input too long: a request of several texts may succeed when split;
    a single text is failed."""


class ProviderRefused(EmbeddingError):
    """A refusal only a configuration fix can cure (a rejected API key): the chunks wait,
    pending, for the next pass after the fix."""


class ProviderUnavailable(EmbeddingError):
    """The provider cannot be built here (no model file, no API key): skip it, do not crash."""


class MissingApiKey(ProviderUnavailable):
    """No API key for a remote provider: ``provider: auto`` skips it silently, like OpenClaw."""


class CredentialsNotConfigured(ProviderUnavailable):
    """No credential applies to the destination (``remote.baseUrl`` points where neither the
    environment's key nor the ``models.providers`` entry's belongs, and neither
    ``remote.apiKey`` nor an Authorization header is set): refused before any request, with
    OpenClaw 2026.9.6's advice. The message names the endpoint, never a key."""


class BatchUnavailable(EmbeddingError):
    """The provider's batch API is not there (HTTP 404 on create, Gemini's
    "asyncBatchEmbedContent not available", or a provider without one): its batch mode is
    turned off at once and the chunks go the sync path."""


class StoreError(MemqError, RuntimeError):
    """The store file cannot be used (corrupt, not a database, unwritable)."""


class StoreOwnedElsewhere(StoreError):
    """The store file belongs to another memory (its ``owner`` meta names another memory or
    workspace): opening it for this one is refused, nothing is read or written."""


class StoreBusy(StoreError):
    """The store cannot be written right now (locked past the busy timeout, or its disk is
    full): worth trying again later, nothing is lost meanwhile."""


class FleetError(MemqError, RuntimeError):
    """The fleet cannot do what was asked: no broker, a job it did not take, a worker that
    keeps dying."""


class MessageRefused(FleetError):
    """A message this memq cannot read (another version, a malformed body): dropped with a
    warning, never applied."""


class ShardUnreachable(FleetError):
    """No reader of a memory's shard answered within ``fleet.queryTimeoutMs`` (the memory's
    store is on another host, and its ``memq worker --role reader`` is down, or the broker is):
    nothing was read; searches answer ``mode: "unavailable"`` with this reason. ``reason``
    says what happened, ``action`` (when known) what to do; the message is both."""

    def __init__(self, reason: str, action: str | None = None) -> None:
        super().__init__(f"{reason}: {action}" if action else reason)
        self.reason, self.action = reason, action


class BrokerUnreachable(ShardUnreachable):
    """The fleet's broker cannot be reached or refused this host (a refused port, a wrong
    password or vhost): nothing was sent."""


class UnknownJob(FleetError):
    """A job id that no job log holds and no queue holds a message of (a typo, or a job that
    expired from the log)."""


# -- Embedding models and providers' batch APIs --------------------------------------------


class ModelDownloadError(ProviderUnavailable):
    """A model file could not be downloaded. The message never holds a token."""


class DownloadInterrupted(ModelDownloadError):
    """A passing failure (no connection, a cut transfer, a corrupt copy that was removed):
    trying again may well succeed, and resumes what was kept."""


class BertConversionError(ProviderUnavailable, ValueError):
    """The input is not a BERT model this converter understands."""


class GGUFHeaderError(MemqError, ValueError):
    """The file is not a GGUF this reader understands, or its header is cut short."""


class BatchUnsupported(BatchUnavailable):
    """The provider has no batch API memq can use (only openai, gemini and voyage do)."""


class BatchCommandError(RequestRefused):
    """A batch command that cannot do what was asked (unknown job, nothing to cancel, ...)."""


# -- Files and stores ----------------------------------------------------------------------


class TranscodeError(MemqError, ValueError):
    """The file could not be converted (corrupt, truncated, or too big once converted)."""


class AgentDatabaseBusy(StoreBusy):
    """OpenClaw's agent database is locked or mid-recovery right now: read it again later."""


class AgentDatabaseUnreadable(StoreError):
    """The file is not an OpenClaw agent database memq can read (corrupt, or another schema)."""


class DimensionMismatch(StoreError, ValueError):
    """A vector's length differs from the index's dimensions."""


# -- Search backends -----------------------------------------------------------------------


class QmdUnavailable(MemqError, RuntimeError):
    """QMD cannot answer now; the caller answers from memq's own index instead.

    ``kind`` is one of :data:`pipeline.qmd.errors.KINDS`; ``reason`` is a one-line
    explanation that names the qmd subcommand but never the query, the environment or a secret;
    ``since`` (epoch seconds) is when QMD was first seen down in the current outage, and
    ``retry_at`` when it will be tried again (both None when unknown).
    """

    def __init__(self, kind: str, reason: str, *, since: float | None = None,
                 retry_at: float | None = None) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        self.since = since
        self.retry_at = retry_at

    def as_dict(self) -> dict[str, Any]:
        """The fallback note an answer carries: ``{"from": "qmd", "kind", "reason", …}``."""
        out: dict[str, Any] = {"from": "qmd", "kind": self.kind, "reason": self.reason}
        if self.since is not None:
            out["since"] = self.since
        if self.retry_at is not None:
            out["retryAt"] = self.retry_at
        return out


class QmdPathError(MemoryPathError):
    """``get`` was asked for a path that is not a file of a QMD collection (or escapes one)."""


class RerankFailed(MemqError, RuntimeError):
    """The reranker could not answer; ``kind`` is one of
    :data:`pipeline.search.rerank_wire.KINDS`, ``reason`` a line that never holds the query, the
    documents or a secret."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


# -- The fleet's jobs ----------------------------------------------------------------------


class JobLogError(MemqError):
    """The job log's database could not be read or written."""


class JobFailed(FleetError):
    """What a failed job's row holds: the error, and the job's meta (Celery stores it as
    ``{exc_type: "JobFailed", exc_message: [error, meta], …}``)."""


class JobError(FleetError):
    """An index job could not be queued."""


class EnqueueFailed(JobError):
    """No broker is configured, or it did not take the message (nothing was queued)."""


class IndexingFailed(FleetError):
    """The run could not finish (a worker keeps dying, no worker consumes the queue, …)."""


class JobRefused(MessageRefused):
    """A job this writer will not run (a memory its configuration does not list, another
    shard's memory, a message it cannot read): the task fails with it."""
