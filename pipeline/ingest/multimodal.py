"""Images and audio under extraPaths, embedded by Gemini's multimodal model (OpenClaw's rules).

With ``multimodal.enabled`` (provider ``gemini``, model ``gemini-embedding-2-preview``; the
config checks that), files under ``extraPaths`` with an image extension (``.jpg .jpeg .png
.webp .gif .heic .heif``) or an audio one (``.mp3 .wav .ogg .opus .m4a .aac .flac``) are
memory too, for the modalities selected. Each is **one chunk** (lines 1-1) whose text is its
label, ``Image file: <path>`` or ``Audio file: <path>``: that is what keyword search and
snippets see, while the embedding request carries the label *and* the file's bytes inline.

Checked when the file is listed, before anything is queued (OpenClaw #11, "size at
file-entry time"): the size against ``multimodal.maxFileBytes`` (10 MiB by default) before
the file is read, then the MIME type **sniffed from the bytes** (magic numbers, not the
name). Gemini embedding 2 takes image/png, image/jpeg, audio/mpeg and audio/wav only, so the
other listed formats (WebP, GIF, HEIC/HEIF, Ogg, Opus, M4A, AAC, FLAC) are converted to PNG,
JPEG or 16 kHz mono WAV (:mod:`pipeline.ingest.transcode`); the converted bytes must fit
``maxFileBytes`` too. A file whose bytes are no known image or audio format, whose format
belongs to the other modality (a PNG named ``.mp3``), or that cannot be decoded gets a clear
per-file error in ``memq status`` and is skipped; OpenClaw drops such files silently.

The chunk hash is OpenClaw's: sha256 of ``{path, contentText, mimeType, dataHash}`` of the
file as it is on disk (its sniffed type and bytes, not the converted ones), so the embedding
cache and the freshness guard see a new image at the same path as new content, and a
conversion that comes out differently (a newer FFmpeg) never makes an unchanged file look new.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from pipeline.config import MultimodalSettings
from pipeline.errors import TranscodeError
from pipeline.ingest.chunking import Chunk, hash_text
from pipeline.ingest.transcode import NATIVE, target_mime, transcode
from pipeline.message_fields import MediaPart

__all__ = ["MediaFile", "MediaSource", "classify", "file_chunks", "label", "media_chunk",
           "read_media", "sniff_mime"]

EXTENSIONS: dict[str, tuple[str, ...]] = {
    "image": (".jpg", ".jpeg", ".png", ".webp", ".gif", ".heic", ".heif"),
    "audio": (".mp3", ".wav", ".ogg", ".opus", ".m4a", ".aac", ".flac"),
}
LABEL_PREFIX = {"image": "Image file", "audio": "Audio file"}
#: What gemini-embedding-2-preview takes as inline data (Google's model page).
MODEL_MIME_TYPES = NATIVE
SNIFF_BYTES = 512  # OpenClaw sniffs the first 512 bytes too
_HEIF_BRANDS = {b"heic": "image/heic", b"heix": "image/heic", b"hevc": "image/heic",
                b"hevx": "image/heic", b"heim": "image/heic", b"heis": "image/heic",
                b"mif1": "image/heif", b"msf1": "image/heif", b"heif": "image/heif"}
_M4A_BRANDS = (b"M4A ", b"M4B ", b"M4P ")


@dataclass(frozen=True)
class MediaFile:
    """A multimodal file that passed the checks: what its one chunk and its request need.

    ``mime_type`` and ``payload`` are what the request carries (converted when the model does
    not take the file's own type, ``source_mime``)."""

    modality: str
    mime_type: str
    label: str
    chunk_hash: str
    source_mime: str = ""
    payload: bytes = field(default=b"", repr=False, compare=False)


def classify(path: str, settings: MultimodalSettings) -> str | None:
    """The modality a file name stands for under these settings, or None (not multimodal)."""
    if not settings.active:
        return None
    lower = path.strip().lower()
    for modality in settings.modalities:
        if lower.endswith(EXTENSIONS[modality]):
            return modality
    return None


def label(modality: str, path: str) -> str:
    """OpenClaw's chunk text for a media file: ``Image file: <path>``."""
    return f"{LABEL_PREFIX[modality]}: {path}"


def sniff_mime(head: bytes) -> str | None:
    """The MIME type the first bytes of a file announce (images and audio only), or None."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav"
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        if brand in _HEIF_BRANDS:
            return _HEIF_BRANDS[brand]
        return "audio/mp4" if brand in _M4A_BRANDS else "video/mp4"
    if head.startswith(b"fLaC"):
        return "audio/flac"
    if head.startswith(b"OggS"):
        return "audio/opus" if b"OpusHead" in head[:64] else "audio/ogg"
    if head.startswith(b"ID3"):
        return "audio/mpeg"
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:
        # An MPEG audio frame sync; layer bits 00 mean AAC in an ADTS stream.
        return "audio/aac" if head[1] & 0x06 == 0 else "audio/mpeg"
    return None


def media_chunk(path: str, modality: str, mime_type: str, data_hash: str) -> MediaFile:
    """The checked file's chunk identity: OpenClaw's label and chunk hash."""
    text = label(modality, path)
    blob = json.dumps({"path": path, "contentText": text, "mimeType": mime_type,
                       "dataHash": data_hash}, separators=(",", ":"))
    return MediaFile(modality, mime_type, text, hash_text(blob), source_mime=mime_type)


def read_media(file_path: str, rel_path: str, modality: str, size: int,
               settings: MultimodalSettings) -> tuple[bytes | None, MediaFile | None, str | None]:
    """Return (raw bytes, checked media, error): the file-entry checks, in OpenClaw's order."""
    if size > settings.max_file_bytes:
        return None, None, (f"skipped: {size} bytes is over multimodal.maxFileBytes "
                            f"({settings.max_file_bytes})")
    try:
        with open(file_path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        return None, None, f"unreadable: {exc.strerror or exc}"
    return check_media(raw, rel_path, modality, settings)


def check_media(raw: bytes, rel_path: str, modality: str, settings: MultimodalSettings
                ) -> tuple[bytes | None, MediaFile | None, str | None]:
    """:func:`read_media`'s checks on bytes already read (a file sent by the producer that
    holds it): (raw bytes, checked media, error)."""
    if len(raw) > settings.max_file_bytes:
        return None, None, (f"skipped: {len(raw)} bytes is over multimodal.maxFileBytes "
                            f"({settings.max_file_bytes})")
    mime = sniff_mime(raw[:SNIFF_BYTES])
    if mime is None:
        return raw, None, f"skipped: the bytes are no known {modality} format (corrupt?)"
    if not mime.startswith(f"{modality}/"):
        return raw, None, (f"skipped: named like {modality} but the bytes are {mime}")
    try:
        payload, sent = transcode(raw, mime, settings.max_file_bytes)
    except TranscodeError as exc:
        if str(exc) == "too big once converted":
            return raw, None, (f"skipped: converted to {target_mime(mime)} it is over "
                               f"multimodal.maxFileBytes ({settings.max_file_bytes})")
        return raw, None, f"skipped: {mime} could not be converted to {target_mime(mime)}: {exc}"
    media = media_chunk(rel_path, modality, mime, hashlib.sha256(raw).hexdigest())
    return raw, replace(media, mime_type=sent, payload=payload), None


def file_chunks(media: MediaFile) -> list[Chunk]:
    """The file's single chunk: its label on line 1."""
    return [Chunk(1, 1, media.label, media.chunk_hash)]


class MediaParts(Protocol):
    """Where the bytes of pending media chunks come from when their jobs are queued."""

    def covers(self, rel_path: str) -> bool:
        """Is this store path a media file (its chunk needs its bytes to be embedded)?"""
        ...

    def inline(self, rel_path: str, text_hash: str) -> MediaPart | None:
        """The chunk's bytes (base64) and MIME type, or None when they are not at hand."""
        ...


@dataclass(frozen=True)
class ReceivedMedia:
    """A media source for files that arrived in a message (their producer is on another
    host): the chunk of a file is embedded from the bytes that came with it, when they are
    still the bytes of its chunk."""

    files: dict[str, MediaFile]
    settings: MultimodalSettings

    def covers(self, rel_path: str) -> bool:
        return classify(rel_path, self.settings) is not None

    def inline(self, rel_path: str, text_hash: str) -> MediaPart | None:
        media = self.files.get(rel_path)
        if media is None or media.chunk_hash != text_hash:
            return None
        return MediaPart(media.mime_type, base64.b64encode(media.payload).decode("ascii"))


@dataclass(frozen=True)
class MediaSource:
    """Reads the inline part of pending media chunks when their embedding job is queued."""

    workspace: Path
    settings: MultimodalSettings

    def covers(self, rel_path: str) -> bool:
        """Is this store path a media file (its chunk needs its bytes to be embedded)?"""
        return classify(rel_path, self.settings) is not None

    def inline(self, rel_path: str, text_hash: str) -> MediaPart | None:
        """The file's bytes (base64; converted when the model does not take its type) and MIME
        type for the chunk, read now, or None when the file changed or vanished since its
        chunk was written: the chunk then waits for the pass that re-syncs the file, and is
        never embedded from its label alone."""
        modality = classify(rel_path, self.settings)
        path = os.path.normpath(self.workspace / rel_path)
        try:
            size = os.stat(path).st_size
        except OSError:
            return None
        if modality is None:
            return None
        raw, media, _ = read_media(path, rel_path, modality, size, self.settings)
        if raw is None or media is None or media.chunk_hash != text_hash:
            return None
        return MediaPart(media.mime_type, base64.b64encode(media.payload).decode("ascii"))
