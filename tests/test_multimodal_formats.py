"""Every extension OpenClaw's docs list for multimodal memory is indexed: ``.jpg .jpeg .png
.webp .gif .heic .heif`` and ``.mp3 .wav .ogg .opus .m4a .aac .flac``.

gemini-embedding-2-preview takes PNG, JPEG, MP3 and WAV only (the double refuses the rest
with the real API's "Unsupported MIME type"), so memq converts the others before sending:
images to PNG (or JPEG for photos without transparency), audio to 16 kHz mono WAV. The files
here are real ones, written by Pillow, pillow-heif and PyAV (FFmpeg); what the double receives
is decoded again and compared with what was written.
"""

from __future__ import annotations

import base64
import hashlib
import io
import math
import wave
from pathlib import Path

import av
import numpy as np
import pillow_heif
import pytest
from PIL import Image

from pipeline.ingest.multimodal import EXTENSIONS, media_chunk, read_media
from pipeline.memory import Memory
from pipeline.status import index_status
from pipeline.store.engine import connect
from tests.fakes.media_files import png, wav
from tests.fakes.provider_doubles import ProviderDouble

KEY = "gm-test-key-formats"
MODEL = "gemini-embedding-2-preview"
TONE_HZ = 440.0
SECONDS = 1.0


def picture(mode: str = "RGB") -> Image.Image:
    """A 48x32 picture with flat colour blocks (survives lossy codecs recognisably)."""
    image = Image.new(mode, (48, 32), (20, 120, 200, 255)[: len(mode)])
    block = Image.new(mode, (24, 16), (230, 40, 40, 255)[: len(mode)])
    image.paste(block, (0, 0))
    if mode == "RGBA":
        image.paste(Image.new("RGBA", (24, 16), (0, 0, 0, 0)), (24, 16))
    return image


def image_bytes(kind: str) -> bytes:
    out = io.BytesIO()
    if kind == "webp":
        picture("RGBA").save(out, "WEBP", lossless=True)
    elif kind == "gif":
        picture().quantize(8).save(out, "GIF")
    elif kind in ("heic", "heif"):
        pillow_heif.from_pillow(picture()).save(out, quality=95)
    elif kind == "jpg":
        picture().save(out, "JPEG", quality=95)
    return out.getvalue()


def tone(rate: int) -> np.ndarray:
    t = np.arange(int(rate * SECONDS)) / rate
    return (0.5 * np.sin(2 * math.pi * TONE_HZ * t)).astype(np.float32)


def audio_bytes(kind: str) -> bytes:
    """One second of a 440 Hz tone, stereo 44.1 kHz (48 kHz for Opus), encoded by FFmpeg."""
    container, codec, rate = {"ogg": ("ogg", "vorbis", 44100), "opus": ("ogg", "libopus", 48000),
                              "m4a": ("ipod", "aac", 44100), "aac": ("adts", "aac", 44100),
                              "flac": ("flac", "flac", 44100), "mp3": ("mp3", "libmp3lame", 44100)
                              }[kind]
    out = io.BytesIO()
    with av.open(out, "w", format=container) as box:
        stream = box.add_stream(codec, rate=rate, layout="stereo")
        if codec == "vorbis":
            stream.codec_context.options = {"strict": "experimental"}
        samples = np.stack([tone(rate), tone(rate)])  # planar stereo
        fmt = "fltp" if codec != "flac" else "s16p"
        data = samples if fmt == "fltp" else (samples * 32767).astype(np.int16)
        step = stream.codec_context.frame_size or 1024
        for start in range(0, data.shape[1], step):
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(data[:, start:start + step]),
                                               format=fmt, layout="stereo")
            frame.rate = rate
            for packet in stream.encode(frame):
                box.mux(packet)
        for packet in stream.encode(None):
            box.mux(packet)
    return out.getvalue()


FILES = {
    "photo.jpg": lambda: image_bytes("jpg"), "shot.jpeg": lambda: image_bytes("jpg"),
    "plain.png": lambda: png("a plain png"), "sticker.webp": lambda: image_bytes("webp"),
    "anim.gif": lambda: image_bytes("gif"), "iphone.heic": lambda: image_bytes("heic"),
    "camera.heif": lambda: image_bytes("heif"),
    "memo.mp3": lambda: audio_bytes("mp3"), "note.wav": lambda: wav("a plain wav"),
    "song.ogg": lambda: audio_bytes("ogg"), "voice.opus": lambda: audio_bytes("opus"),
    "podcast.m4a": lambda: audio_bytes("m4a"), "stream.aac": lambda: audio_bytes("aac"),
    "lossless.flac": lambda: audio_bytes("flac"),
}


def test_the_files_cover_every_listed_extension() -> None:
    listed = {ext for exts in EXTENSIONS.values() for ext in exts}
    assert listed == {"." + name.rsplit(".", 1)[1] for name in FILES}
    assert len(listed) == 14


def _sent(double: ProviderDouble) -> dict[str, tuple[str, bytes]]:
    """What the double received for each media file: label path → (MIME type, bytes)."""
    out = {}
    for request in double.embed_requests():
        for item in request.body.get("requests", []):
            parts = item["content"]["parts"]
            inline = [p["inlineData"] for p in parts if "inlineData" in p]
            if inline:
                label = parts[0]["text"].split(": ", 1)[1]
                out[label] = (inline[0]["mimeType"], base64.b64decode(inline[0]["data"]))
    return out


def _peak_hz(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[int(np.argmax(spectrum))])


def test_every_listed_format_is_indexed_and_sent_as_the_model_takes_it(
        workspace: Path, make_settings, monkeypatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    media = workspace / "media"
    media.mkdir()
    written = {name: make() for name, make in FILES.items()}
    for name, data in written.items():
        (media / name).write_bytes(data)
    with ProviderDouble("gemini", api_key=KEY) as double:
        settings = make_settings(workspace, provider="gemini", model=MODEL,
                                 outputDimensionality=768, extraPaths=["media"],
                                 remote={"baseUrl": double.url},
                                 multimodal={"enabled": True, "modalities": ["all"]})
        with Memory(settings=settings, in_memory=False) as memory:
            run = memory.index()
        status = index_status(settings)
        assert status["fileErrors"] == [] and run.report.failed == 0
        assert status["pending"] == 0 and status["failed"] == 0, status["chunkErrors"]
        sent = _sent(double)
    db = connect(settings.store.path)
    rows = dict(db.conn.execute("SELECT path, text FROM chunks WHERE path LIKE 'media/%' "
                                "AND path NOT LIKE '%.md'"))
    db.close()
    assert set(rows) == {f"media/{name}" for name in FILES}
    assert set(sent) == set(rows)

    mimes = {path.split("/", 1)[1]: mime for path, (mime, _) in sent.items()}
    assert mimes == {
        "photo.jpg": "image/jpeg", "shot.jpeg": "image/jpeg", "plain.png": "image/png",
        "sticker.webp": "image/png",  # transparency: PNG
        "anim.gif": "image/png", "iphone.heic": "image/jpeg", "camera.heif": "image/jpeg",
        "memo.mp3": "audio/mpeg", "note.wav": "audio/wav", "song.ogg": "audio/wav",
        "voice.opus": "audio/wav", "podcast.m4a": "audio/wav", "stream.aac": "audio/wav",
        "lossless.flac": "audio/wav"}
    # Files the model takes travel as they are.
    for name in ("photo.jpg", "plain.png", "memo.mp3", "note.wav"):
        assert sent[f"media/{name}"][1] == written[name]

    # Converted pictures are the same pictures (lossless sources: pixel for pixel).
    for name in ("sticker.webp", "anim.gif"):
        got = Image.open(io.BytesIO(sent[f"media/{name}"][1]))
        want = Image.open(io.BytesIO(written[name]))
        mode = "RGBA" if name.endswith("webp") else "RGB"
        assert got.size == want.size == (48, 32)
        assert np.array_equal(np.asarray(got.convert(mode)), np.asarray(want.convert(mode)))
    for name in ("iphone.heic", "camera.heif"):
        got = np.asarray(Image.open(io.BytesIO(sent[f"media/{name}"][1])).convert("RGB"), float)
        want = np.asarray(picture(), float)
        assert got.shape == want.shape and np.abs(got - want).mean() < 8

    # Converted recordings: 16 kHz mono 16-bit WAV, the same second of the same tone.
    for name in ("song.ogg", "voice.opus", "podcast.m4a", "stream.aac", "lossless.flac"):
        with wave.open(io.BytesIO(sent[f"media/{name}"][1])) as w:
            assert (w.getnchannels(), w.getframerate(), w.getsampwidth()) == (1, 16000, 2)
            samples = np.frombuffer(w.readframes(w.getnframes()), np.int16) / 32768
        assert abs(len(samples) / 16000 - SECONDS) < 0.1, name
        assert abs(_peak_hz(samples, 16000) - TONE_HZ) < 5, name
        assert 0.2 < np.abs(samples).max() < 0.8, name


def test_undecodable_and_oversize_conversions_are_per_file_errors(tmp_path: Path,
                                                                 make_settings) -> None:
    settings = make_settings(tmp_path, provider="gemini", model=MODEL, extraPaths=["."],
                             multimodal={"enabled": True, "maxFileBytes": 40_000})
    cases = {
        "broken.webp": b"RIFF\x24\x00\x00\x00WEBPVP8 " + b"\x00" * 24,
        "broken.flac": b"fLaC\x00\x00\x00\x22" + b"\x00" * 64,
        # 15 s of tone as FLAC is small, but 15 s of 16 kHz WAV is 480 kB: over the cap.
        "long.flac": b"",
    }
    samples = np.tile(tone(44100), 15)
    out = io.BytesIO()
    with av.open(out, "w", format="flac") as box:
        stream = box.add_stream("flac", rate=44100, layout="mono")
        data = (samples * 0).astype(np.int16)[None, :]  # silence compresses to almost nothing
        for start in range(0, data.shape[1], 4096):
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(data[:, start:start + 4096]),
                                               format="s16p", layout="mono")
            frame.rate = 44100
            for packet in stream.encode(frame):
                box.mux(packet)
        for packet in stream.encode(None):
            box.mux(packet)
    cases["long.flac"] = out.getvalue()
    assert len(cases["long.flac"]) < 40_000
    errors = {}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        modality = "image" if name.endswith("webp") else "audio"
        raw, media, error = read_media(str(tmp_path / name), name, modality, len(data),
                                       settings.multimodal)
        assert raw == data and media is None, name
        errors[name] = error
    assert errors["broken.webp"] == ("skipped: image/webp could not be converted to image/png: "
                                     "could not create decoder object")
    assert errors["broken.flac"] == ("skipped: audio/flac could not be converted to audio/wav: "
                                     "Invalid data found when processing input")
    assert errors["long.flac"] == ("skipped: converted to audio/wav it is over "
                                   "multimodal.maxFileBytes (40000)")


@pytest.mark.parametrize("name", ["sticker.webp", "song.ogg"])
def test_conversion_keeps_the_chunk_identity_of_the_original(tmp_path: Path, make_settings,
                                                             name: str) -> None:
    """The chunk hash is OpenClaw's (the original bytes and sniffed type), so a re-encode by
    a newer FFmpeg or Pillow never makes an unchanged file look new."""
    settings = make_settings(tmp_path, provider="gemini", model=MODEL, extraPaths=["."],
                             multimodal={"enabled": True})
    data = FILES[name]()
    (tmp_path / name).write_bytes(data)
    modality = "image" if name.endswith("webp") else "audio"
    _, media, error = read_media(str(tmp_path / name), name, modality, len(data),
                                 settings.multimodal)
    assert error is None and media is not None
    original = "image/webp" if modality == "image" else "audio/ogg"
    assert media.source_mime == original
    assert media.chunk_hash == media_chunk(name, modality, original,
                                           hashlib.sha256(data).hexdigest()).chunk_hash
    assert media.mime_type in ("image/png", "audio/wav")
