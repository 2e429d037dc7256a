"""Batch files in and out: building the JSONL a job reads, and turning the output and error
files back into per-id vectors and reasons.

Output is mapped by id, never by position (the APIs shuffle lines). One bad line (an error, a
vector of the wrong width, an unreadable line) costs that id only; an id no line mentions is
reported :data:`~pipeline.batch.api.NOT_RUN`, so every submitted id ends up somewhere.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

import numpy as np

from pipeline.batch.api import NOT_RUN, BatchOutput, BatchRequest
from pipeline.embeddings.base import l2_normalise
from pipeline.embeddings.remote import decode_embedding
from pipeline.errors import EmbeddingError

__all__ = ["OutputCollector", "build_jsonl", "encode_line", "read_jsonl"]


def encode_line(item: Any) -> bytes:
    """One JSONL line, newline included (UTF-8 kept as is: the size limits count bytes)."""
    return json.dumps(item, ensure_ascii=False).encode() + b"\n"


def build_jsonl(label: str, requests: Sequence[BatchRequest], line: Callable[[BatchRequest],
                Any], *, max_requests: int, max_bytes: int) -> bytes:
    """The input file for ``requests``, one ``line(request)`` per line, within the API's
    limits; a bad submission (empty, duplicate ids, over a limit) raises, non-retryable."""
    if not requests:
        raise EmbeddingError(f"{label}: a batch needs at least one request")
    ids = [r.custom_id for r in requests]
    if len(set(ids)) != len(ids):
        raise EmbeddingError(f"{label}: duplicate custom ids in one batch")
    if len(requests) > max_requests:
        raise EmbeddingError(f"{label}: {len(requests)} requests exceed the batch limit of "
                             f"{max_requests}")
    data = b"".join(encode_line(line(r)) for r in requests)
    if len(data) > max_bytes:
        raise EmbeddingError(f"{label}: the batch file is {len(data)} bytes, over the limit of "
                             f"{max_bytes}")
    return data


def read_jsonl(data: bytes) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSONL file; blank and unreadable lines are skipped (their ids,
    if any, end up "not run")."""
    for raw in data.splitlines():
        if not raw.strip():
            continue
        try:
            item = json.loads(raw)
        except ValueError:
            continue
        if isinstance(item, dict):
            yield item


class OutputCollector:
    """Gathers one job's results by id; ``width`` is the model's known vector width, if any
    (else the first good vector sets it)."""

    def __init__(self, expected_ids: Collection[str], width: int | None) -> None:
        self._expected = set(expected_ids)
        self._width = width
        self._rows: dict[str, list[float]] = {}
        self._errors: dict[str, str] = {}

    def vector(self, custom_id: Any, value: Any) -> None:
        """A success line. A malformed vector becomes that id's error."""
        if custom_id not in self._expected or custom_id in self._rows:
            return
        row = decode_embedding(value)
        if not isinstance(row, list) or not row or not all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in row):
            self.error(custom_id, "the output line has no vector")
            return
        if self._width is None:
            self._width = len(row)
        if len(row) != self._width:
            self.error(custom_id, f"{len(row)}-dimensional vector, expected {self._width}")
            return
        self._rows[custom_id] = row
        self._errors.pop(custom_id, None)

    def error(self, custom_id: Any, reason: str) -> None:
        """A failed line (a success for the same id, seen earlier or later, wins)."""
        if custom_id in self._expected and custom_id not in self._rows:
            self._errors.setdefault(custom_id, reason)

    def output(self) -> BatchOutput:
        """Vectors L2-normalised (as the sync path stores them); unseen ids "not run"."""
        ids = list(self._rows)
        vectors: dict[str, np.ndarray] = {}
        if ids:
            matrix = l2_normalise(np.asarray([self._rows[i] for i in ids], dtype=np.float32))
            vectors = dict(zip(ids, matrix, strict=True))
        errors = dict(self._errors)
        errors.update({i: NOT_RUN for i in self._expected if i not in vectors and i not in errors})
        return BatchOutput(vectors=vectors, errors=errors)

