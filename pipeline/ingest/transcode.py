"""Media the embedding model does not take, converted to what it does.

OpenClaw's docs list ``.webp .gif .heic .heif`` images and ``.ogg .opus .m4a .aac .flac``
audio as multimodal memory, but gemini-embedding-2-preview takes PNG, JPEG, MP3 and WAV only
(the API answers anything else with "Unsupported MIME type"). memq converts, in-process:

- **images** (Pillow, with pillow-heif for HEIC/HEIF): the first frame, turned upright by its
  EXIF orientation, as **PNG** when it has transparency or a palette (GIF, most stickers),
  else as **JPEG** at quality 90 (photos: a 12-megapixel HEIC would be a 20 MB PNG);
- **audio** (PyAV, FFmpeg's decoders): **16 kHz mono 16-bit WAV**, which is what Gemini reduces
  audio to before it listens (so nothing it would hear is lost), 32 kB per second.

The converted bytes must fit ``maxFileBytes`` too (they travel base64-encoded in one request);
decoding stops as soon as they cannot. A file that cannot be decoded raises
:class:`TranscodeError`, which becomes a per-file error in ``memq status``.
"""

from __future__ import annotations

import io
import re
import wave
from typing import Any

from pipeline.errors import TranscodeError

__all__ = ["NATIVE", "TranscodeError", "target_mime", "transcode"]

#: What gemini-embedding-2-preview takes as inline data (Google's model page).
NATIVE = ("image/png", "image/jpeg", "audio/mpeg", "audio/wav")
WAV_RATE = 16_000
JPEG_QUALITY = 90


def target_mime(mime: str) -> str:
    """The type a file of type ``mime`` is sent as (itself when the model takes it)."""
    if mime in NATIVE:
        return mime
    return "image/png" if mime.startswith("image/") else "audio/wav"


def transcode(raw: bytes, mime: str, max_bytes: int) -> tuple[bytes, str]:
    """``raw`` as the model takes it: (bytes, MIME type). Native types come back unchanged;
    raises :class:`TranscodeError` when the file cannot be decoded or the result would be
    over ``max_bytes``."""
    if mime in NATIVE:
        return raw, mime
    try:
        if mime.startswith("image/"):
            out, sent = _image(raw, mime)
        else:
            out, sent = _audio(raw, max_bytes), "audio/wav"
    except TranscodeError:
        raise
    except Exception as exc:  # Pillow, pillow-heif and FFmpeg raise many kinds
        raise TranscodeError(_reason(exc)) from exc
    if len(out) > max_bytes:
        raise TranscodeError("too big once converted")
    return out, sent


def _reason(exc: Exception) -> str:
    """The library's message, without what differs from run to run (object addresses, FFmpeg's
    error numbers and its ``'<none>'`` file name), so a per-file error reads the same twice."""
    text = re.sub(r"\s*<[^<>]* at 0x[0-9a-f]+>", "", str(exc))
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", text)
    text = re.sub(r":\s*'<none>'$", "", text).strip()
    return (text or type(exc).__name__)[:200]


def _register_heif() -> None:
    """Teach Pillow HEIC/HEIF (idempotent: registering again replaces the same opener)."""
    import pillow_heif

    pillow_heif.register_heif_opener()


def _image(raw: bytes, mime: str) -> tuple[bytes, str]:
    from PIL import Image, ImageOps

    if mime in ("image/heic", "image/heif"):
        _register_heif()
    with Image.open(io.BytesIO(raw)) as opened:
        opened.seek(0)  # an animation's first frame
        opened.load()
        image: Any = ImageOps.exif_transpose(opened) or opened
        alpha = image.mode in ("RGBA", "LA", "PA") or (
            image.mode == "P" and "transparency" in image.info)
        out = io.BytesIO()
        if alpha or image.mode == "P":
            if image.mode not in ("1", "L", "LA", "P", "RGB", "RGBA"):
                image = image.convert("RGBA" if alpha else "RGB")
            image.save(out, "PNG")
            return out.getvalue(), "image/png"
        image.convert("RGB").save(out, "JPEG", quality=JPEG_QUALITY)
        return out.getvalue(), "image/jpeg"


def _audio(raw: bytes, max_bytes: int) -> bytes:
    import av

    pcm = bytearray()
    limit = max(0, max_bytes - 44)  # the WAV header
    with av.open(io.BytesIO(raw), "r") as box:
        if not box.streams.audio:
            raise TranscodeError("no audio stream")
        stream = box.streams.audio[0]
        resampler = av.AudioResampler(format="s16", layout="mono", rate=WAV_RATE)
        for frame in box.decode(stream):
            for out in resampler.resample(frame):
                pcm += out.to_ndarray().tobytes()
            if len(pcm) > limit:
                raise TranscodeError("too big once converted")
        for out in resampler.resample(None):
            pcm += out.to_ndarray().tobytes()
    if not pcm:
        raise TranscodeError("no audio samples")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(WAV_RATE)
        w.writeframes(bytes(pcm))
    return buffer.getvalue()
