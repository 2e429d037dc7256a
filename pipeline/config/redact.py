"""Hiding secrets: credential headers and passwords in URLs never reach reprs, output or errors."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

REDACTED = "***"

_SENSITIVE_HEADER_WORDS = (
    "auth",
    "key",
    "token",
    "secret",
    "password",
    "cookie",
    "credential",
    "signature",
    "session",
)


def is_sensitive_header(name: str) -> bool:
    """Whether a header's value is a credential (Authorization, X-Api-Key, Cookie, *token*…)."""
    lowered = name.lower()
    return any(word in lowered for word in _SENSITIVE_HEADER_WORDS)


def redact_url(url: str | None) -> str | None:
    """The URL with any password (or bare user-info, which may be a token) replaced by ***."""
    if url is None:
        return None
    try:
        parts = urlsplit(url)
        password, username = parts.password, parts.username
    except ValueError:
        return REDACTED
    if "@" not in parts.netloc:
        # Not a well-formed authority: hide whatever precedes an "@" after the scheme.
        return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*:/*)?.*@", r"\1***@", url) if "@" in url else url
    host = parts.netloc.rsplit("@", 1)[1]
    userinfo = f"{username or ''}:{REDACTED}" if password is not None else REDACTED
    return parts._replace(netloc=f"{userinfo}@{host}").geturl()


class Headers(Mapping[str, str]):
    """An immutable, hashable ``str -> str`` mapping whose repr hides credential values."""

    __slots__ = ("_data",)

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        self._data: dict[str, str] = dict(items)

    def __getitem__(self, name: str) -> str:
        return self._data[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    def redacted(self) -> dict[str, str]:
        """A plain dict with credential values replaced by ``***``."""
        return {k: (REDACTED if is_sensitive_header(k) else v) for k, v in self._data.items()}

    def __repr__(self) -> str:
        return f"Headers({self.redacted()!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Headers, (self._data,))
