"""How a path is compared with a query that may name it (OpenClaw 2026.9.6's
``normalizePathIdentifier``), and the keys ``files`` indexes it by.

A path or query is trimmed (JavaScript's ``trim``), ``\\`` read as ``/``, a leading ``./``
dropped, NFC-normalised and lower-cased. A file is indexed by its name (the last ``/``
segment) and its stem (the name before its last ``.``, unless that dot starts it), so a query
that names a file by path, name or stem finds it with an index seek.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["js_trim", "name_keys", "normalized_path"]

# String.prototype.trim's whitespace (Python's str.strip differs on U+001C..U+001F, U+0085
# and U+FEFF).
_SPACE = "[\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
_EDGES = re.compile(f"^{_SPACE}+|{_SPACE}+\\Z")


def js_trim(text: str) -> str:
    """``text.trim()`` as JavaScript trims."""
    return _EDGES.sub("", text)


def normalized_path(value: str) -> str:
    """``normalizePathIdentifier``: trimmed, ``/`` for ``\\``, no leading ``./``, NFC, lower."""
    text = js_trim(value).replace("\\", "/")
    if text.startswith("./"):
        text = text[2:]
    return unicodedata.normalize("NFC", text).lower()


def name_keys(path: str) -> tuple[str, str]:
    """(name, stem) of a normalised ``path``, the keys ``files.name_key``/``stem_key``."""
    name = normalized_path(path).rsplit("/", 1)[-1]
    dot = name.rfind(".")
    return name, name[:dot] if dot > 0 else name
