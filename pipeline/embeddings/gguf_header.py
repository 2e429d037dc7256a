"""Reading a few metadata values from a GGUF file without parsing the rest of it.

``gguf.GGUFReader`` builds a NumPy view of every key, value and tensor description, including
each of a BERT vocabulary's 30,000 token strings: about 1.8 s for MiniLM, paid on every model
load. Loading needs two values (``general.architecture`` and ``{arch}.context_length``), which
converters write near the start of the key/value section, so this reader walks that section in
order, keeps scalar and string values, steps over arrays without building them, and stops as
soon as the caller has what it needs.

The layout (GGUF versions 2 and 3, https://github.com/ggml-org/ggml/blob/master/docs/gguf.md):
magic ``GGUF``, uint32 version, uint64 tensor count, uint64 key/value count, then per pair a
string key (uint64 length + UTF-8 bytes), a uint32 value type and the value. An array is a
uint32 element type, a uint64 count and the elements. A file written big-endian has its
version's bytes swapped (GGUFReader tells it the same way).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from pipeline.errors import GGUFHeaderError

__all__ = ["GGUFHeaderError", "read_gguf_metadata", "trained_context_length"]

Scalar = int | float | bool | str

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
# GGUF value type -> struct format of one value (string = 8 and array = 9 are handled apart)
_SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?",
                   10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
MAX_KEY_BYTES = 65_535
MAX_STRING_BYTES = 1 << 26  # 64 MiB: a chat template is large, a metadata string is not this


class _Walker:
    """Sequential reads of little- or big-endian GGUF fields, bounded by the file size."""

    def __init__(self, fh: BinaryIO, size: int) -> None:
        self.fh = fh
        self.size = size
        self.order = "<"

    def take(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) != n:
            raise GGUFHeaderError("the GGUF header is cut short (truncated file?)")
        return data

    def unpack(self, fmt: str) -> Scalar:
        code = self.order + fmt
        return struct.unpack(code, self.take(struct.calcsize(code)))[0]

    def skip(self, n: int) -> None:
        if n < 0 or self.fh.tell() + n > self.size:
            raise GGUFHeaderError("the GGUF header points past the end of the file")
        self.fh.seek(n, os.SEEK_CUR)

    def string(self, limit: int = MAX_STRING_BYTES) -> str:
        n = int(self.unpack("Q"))
        if n > limit:
            raise GGUFHeaderError(f"a GGUF metadata string of {n} bytes is implausible")
        return self.take(n).decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Scalar | None:
        """Read one value; arrays are stepped over and give None."""
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            self.skip_array()
            return None
        fmt = _SCALAR_FORMATS.get(vtype)
        if fmt is None:
            raise GGUFHeaderError(f"unknown GGUF value type {vtype}")
        return self.unpack(fmt)

    def skip_array(self) -> None:
        etype, count = int(self.unpack("I")), int(self.unpack("Q"))
        if etype in _SCALAR_FORMATS:
            self.skip(count * struct.calcsize(_SCALAR_FORMATS[etype]))
        elif etype == _STRING:
            for _ in range(count):
                self.skip(int(self.unpack("Q")))
        elif etype == _ARRAY:
            for _ in range(count):
                self.skip_array()
        else:
            raise GGUFHeaderError(f"unknown GGUF array element type {etype}")


def read_gguf_metadata(path: str | os.PathLike[str],
                       done: Callable[[dict[str, Scalar]], bool] | None = None
                       ) -> dict[str, Scalar]:
    """The scalar and string metadata of a GGUF file, in file order (arrays are left out).

    ``done`` is asked after each value; once it returns True, reading stops there. Raises
    :class:`GGUFHeaderError` for anything that is not a well-formed GGUF v2/v3 header.
    """
    with open(path, "rb") as fh:
        walker = _Walker(fh, os.fstat(fh.fileno()).st_size)
        if walker.take(4) != MAGIC:
            raise GGUFHeaderError("not a GGUF file (bad magic)")
        raw_version = walker.take(4)
        version = struct.unpack("<I", raw_version)[0]
        if version & 0xFFFF == 0:  # written on a big-endian host
            walker.order = ">"
            version = struct.unpack(">I", raw_version)[0]
        if version not in SUPPORTED_VERSIONS:
            raise GGUFHeaderError(f"GGUF version {version} is not supported "
                                  f"(only {', '.join(map(str, SUPPORTED_VERSIONS))})")
        walker.unpack("Q")  # tensor count
        n_kv = int(walker.unpack("Q"))
        meta: dict[str, Scalar] = {}
        for _ in range(n_kv):
            key = walker.string(MAX_KEY_BYTES)
            value = walker.value(int(walker.unpack("I")))
            if value is not None:
                meta[key] = value
                if done is not None and done(meta):
                    break
        return meta


def trained_context_length(path: str | os.PathLike[str] | Path) -> int:
    """``{general.architecture}.context_length`` of a GGUF model (0 if it states none)."""

    def found(meta: dict[str, Scalar]) -> bool:
        arch = meta.get("general.architecture")
        return arch is not None and f"{arch}.context_length" in meta

    meta = read_gguf_metadata(path, found)
    arch = meta.get("general.architecture")
    value = meta.get(f"{arch}.context_length") if arch is not None else None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0
