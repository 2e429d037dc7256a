"""Small real image and audio files for the multimodal tests, built byte by byte.

``png(caption)`` is a valid 1x1 PNG (signature, IHDR, tEXt ``Description``, IDAT, IEND, with
CRCs); ``wav(comment)`` a valid PCM WAV with a ``LIST/INFO ICMT`` comment. The captions are
what the Gemini double "sees" in them (:func:`tests.fakes.provider_doubles.media_content`).
"""

from __future__ import annotations

import struct
import zlib


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def png(caption: str, pixel: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A 1x1 RGB PNG whose tEXt ``Description`` is ``caption``."""
    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    scanline = b"\x00" + bytes(pixel)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header)
            + _png_chunk(b"tEXt", b"Description\x00" + caption.encode("latin-1"))
            + _png_chunk(b"IDAT", zlib.compress(scanline)) + _png_chunk(b"IEND", b""))


def _riff_chunk(kind: bytes, data: bytes) -> bytes:
    return kind + struct.pack("<I", len(data)) + data + (b"\x00" if len(data) % 2 else b"")


def wav(comment: str, samples: int = 800) -> bytes:
    """A mono 8 kHz 16-bit PCM WAV (0.1 s of silence) with ``comment`` in LIST/INFO/ICMT."""
    fmt = struct.pack("<HHIIHH", 1, 1, 8000, 16000, 2, 16)
    info = b"INFO" + _riff_chunk(b"ICMT", comment.encode("latin-1") + b"\x00")
    body = (b"WAVE" + _riff_chunk(b"fmt ", fmt) + _riff_chunk(b"LIST", info)
            + _riff_chunk(b"data", b"\x00\x00" * samples))
    return b"RIFF" + struct.pack("<I", len(body)) + body
