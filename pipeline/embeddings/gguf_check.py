"""Is a GGUF file whole? The checks llama.cpp makes when it loads one, without loading it.

A download cut short, an HTML error page saved as ``model.gguf`` or a file overwritten by
another tool passes ``is_file()`` but fails to load, and it would fail in every embed worker,
with every chunk. :func:`check_gguf` reads the header the way ``gguf_init_from_file`` does
(magic, version, every key/value pair, every tensor description, the data alignment) and
checks that each tensor's data lies inside the file, in milliseconds (arrays are stepped over,
never read), so provider selection can treat a broken model like a missing one and go to the
``fallback`` (:mod:`pipeline.embeddings.registry`).
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from pathlib import Path

from pipeline.embeddings.gguf_header import MAGIC, SUPPORTED_VERSIONS
from pipeline.errors import GGUFHeaderError

__all__ = ["check_gguf"]

#: GGML's limit on tensor dimensions.
MAX_DIMS = 4
DEFAULT_ALIGNMENT = 32
_STRING, _ARRAY = 8, 9
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}


#: ggml type -> (elements per block, bytes per block): ``gguf.constants.GGML_QUANT_SIZES``
#: of gguf 0.17, written out because importing ``gguf`` costs 0.2 s, more than the check
#: (tests/test_local_fallback.py keeps them equal).
TYPE_SIZES: dict[int, tuple[int, int]] = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 40), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
    14: (256, 210), 15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98),
    19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82), 23: (256, 136), 24: (1, 1),
    25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2), 34: (256, 54),
    35: (256, 66), 39: (32, 17), 40: (64, 36), 41: (128, 18),
}


class _Cursor:
    """Bounds-checked little- or big-endian reads from a memory-mapped GGUF."""

    def __init__(self, data: mmap.mmap | bytes) -> None:
        self.data = data
        self.pos = 0
        self.order = "<"

    def unpack(self, fmt: str) -> int | float:
        code = self.order + fmt
        n = struct.calcsize(code)
        if self.pos + n > len(self.data):
            raise GGUFHeaderError("the GGUF header is cut short (truncated file?)")
        value = struct.unpack_from(code, self.data, self.pos)[0]
        self.pos += n
        return value

    def skip(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise GGUFHeaderError("the GGUF header points past the end of the file")
        self.pos += n

    def string(self) -> str:
        n = int(self.unpack("Q"))
        start = self.pos
        self.skip(n)
        return bytes(self.data[start:self.pos]).decode("utf-8", errors="replace")

    def value(self, vtype: int) -> int | float | str | None:
        """One key/value value; arrays are stepped over (None)."""
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = int(self.unpack("I")), int(self.unpack("Q"))
            if etype == _STRING:  # a vocabulary: 30,000 strings, stepped over quickly
                length, data, pos = struct.Struct(self.order + "Q"), self.data, self.pos
                limit = len(data)
                for _ in range(count):
                    if pos + 8 > limit:
                        raise GGUFHeaderError("the GGUF header is cut short (truncated file?)")
                    pos += 8 + length.unpack_from(data, pos)[0]
                if pos > limit:
                    raise GGUFHeaderError("the GGUF header points past the end of the file")
                self.pos = pos
            elif etype == _ARRAY:
                for _ in range(count):
                    self.value(_ARRAY)
            else:
                if etype not in _SCALARS:
                    raise GGUFHeaderError(f"unknown GGUF array element type {etype}")
                self.skip(count * struct.calcsize(_SCALARS[etype]))
            return None
        if vtype not in _SCALARS:
            raise GGUFHeaderError(f"unknown GGUF value type {vtype}")
        return self.unpack(_SCALARS[vtype])


def check_gguf(path: str | os.PathLike[str] | Path) -> None:
    """Raise :class:`GGUFHeaderError` saying what is wrong unless ``path`` is a whole GGUF
    v2/v3 file: a readable header, known tensor types, and every tensor's data inside the
    file at the declared alignment."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size < 24:
            raise GGUFHeaderError("not a GGUF file (too short)")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            _check(_Cursor(data), size)


def _check(cur: _Cursor, size: int) -> None:
    if bytes(cur.data[:4]) != MAGIC:
        raise GGUFHeaderError("not a GGUF file (bad magic)")
    cur.pos = 4
    version = int(cur.unpack("I"))
    if version & 0xFFFF == 0:  # written on a big-endian host
        cur.order = ">"
        version = struct.unpack(">I", struct.pack("<I", version))[0]
    if version not in SUPPORTED_VERSIONS:
        raise GGUFHeaderError(f"GGUF version {version} is not supported")
    n_tensors, n_kv = int(cur.unpack("Q")), int(cur.unpack("Q"))
    alignment = DEFAULT_ALIGNMENT
    for _ in range(n_kv):
        key = cur.string()
        value = cur.value(int(cur.unpack("I")))
        if key == "general.alignment" and isinstance(value, int):
            alignment = value
    if alignment <= 0 or alignment & (alignment - 1):
        raise GGUFHeaderError(f"general.alignment {alignment} is not a power of two")
    tensors: list[tuple[str, int, int]] = []  # name, offset, bytes
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = int(cur.unpack("I"))
        if not 1 <= n_dims <= MAX_DIMS:
            raise GGUFHeaderError(f"tensor {name!r} has {n_dims} dimensions")
        shape = [int(cur.unpack("Q")) for _ in range(n_dims)]
        ggml_type, offset = int(cur.unpack("I")), int(cur.unpack("Q"))
        if ggml_type not in TYPE_SIZES:
            raise GGUFHeaderError(f"tensor {name!r} has an unknown type {ggml_type}")
        block, block_bytes = TYPE_SIZES[ggml_type]
        if shape[0] % block:
            raise GGUFHeaderError(f"tensor {name!r}: a row of {shape[0]} is not a whole "
                                  "number of blocks")
        tensors.append((name, offset, math.prod(shape) // block * block_bytes))
    data_start = -(-cur.pos // alignment) * alignment
    for name, offset, nbytes in tensors:
        if offset % alignment:
            raise GGUFHeaderError(f"tensor {name!r} is not aligned to {alignment} bytes")
        if data_start + offset + nbytes > size:
            raise GGUFHeaderError(f"tensor {name!r} ends past the end of the file "
                                  f"({size} bytes): the file is truncated")
