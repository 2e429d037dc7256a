"""Images and audio under extraPaths, through the real pipeline: a real Redis broker, real
``celery worker`` processes and the Gemini double (``gemini-embedding-2-preview``).

The double "sees" a PNG's tEXt caption and a WAV's ICMT comment as the file's content (see
tests/fakes/provider_doubles.py), so a text query for what a picture shows finds the picture
by its vector alone: the caption shares no word with the file's name or label, and keyword
search cannot find it. Oversize, misnamed and corrupt files are reported per file and
skipped; deleting a file removes its chunk; a change of modalities rebuilds the index.
"""

from __future__ import annotations

import base64
import random
from pathlib import Path

import numpy as np
import pytest

from pipeline.embeddings.base import MediaInput
from pipeline.embeddings.gemini import GeminiProvider
from pipeline.errors import EmbeddingError, ProviderRetryable
from pipeline.ingest.multimodal import MODEL_MIME_TYPES, sniff_mime
from pipeline.ingest.producer import index_identity
from pipeline.query import memory_search
from pipeline.status import index_status
from pipeline.store.engine import connect
from tests.fakes.media_files import png, wav
from tests.fakes.provider_doubles import ProviderDouble, media_vector
from workers.indexing import run_index

KEY = "gm-test-key-multimodal"
MODEL = "gemini-embedding-2-preview"
BIKE = "a red bicycle leaning on a fence"
CELLO = "a cello playing a slow waltz"


def test_sniffing_reads_the_bytes_not_the_name() -> None:
    samples = {
        png("x"): "image/png", b"\xff\xd8\xff\xe0\x00\x10JFIF": "image/jpeg",
        b"GIF89a\x01\x00": "image/gif", b"RIFF\x10\x00\x00\x00WEBPVP8 ": "image/webp",
        b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00": "image/heic",
        b"\x00\x00\x00\x18ftypmif1\x00\x00\x00\x00": "image/heif",
        wav("x"): "audio/wav", b"ID3\x04\x00\x00\x00\x00\x00\x00": "audio/mpeg",
        b"\xff\xfb\x90\x64\x00": "audio/mpeg", b"\xff\xf1\x50\x80": "audio/aac",
        b"fLaC\x00\x00\x00\x22": "audio/flac", b"OggS\x00\x02" + b"\x00" * 22 + b"OpusHead":
        "audio/opus", b"OggS\x00\x02" + b"\x00" * 22 + b"\x01vorbis": "audio/ogg",
        b"\x00\x00\x00\x20ftypM4A \x00\x00\x00\x00": "audio/mp4",
        b"\x00\x00\x00\x20ftypisom\x00\x00\x00\x00": "video/mp4",
    }
    for head, mime in samples.items():
        assert sniff_mime(head) == mime, (head[:12], mime)
    assert sniff_mime(b"# just Markdown\n") is None and sniff_mime(b"") is None


def test_gemini_sends_inline_parts_and_the_double_refuses_what_the_api_refuses() -> None:
    picture = png(BIKE)
    with ProviderDouble("gemini", api_key=KEY) as double:
        provider = GeminiProvider(MODEL, base_url=double.url, api_key=KEY,
                                  output_dimensionality=768)
        assert provider.accepts_media
        label = "Image file: media/img_0042.png"
        item = MediaInput(label, "image/png", base64.b64encode(picture).decode())
        vectors = provider.embed_documents(["plain text", item])
        sent = double.embed_requests()[-1]
        assert sent.path.endswith(":batchEmbedContents")
        assert len(sent.body["requests"]) == 1  # a media file travels alone in its request
        parts = double.embed_requests()[-1].body["requests"][0]["content"]["parts"]
        assert parts == [{"text": label}, {"inlineData": {
            "mimeType": "image/png", "data": base64.b64encode(picture).decode()}}]
        expected = media_vector(label, [picture], 768)
        assert np.allclose(vectors[1], expected / np.linalg.norm(expected), atol=1e-6)
        webp = MediaInput("Image file: a.webp", "image/webp", base64.b64encode(b"RIFF").decode())
        with pytest.raises(EmbeddingError, match="Unsupported MIME type: image/webp") as exc:
            provider.embed_documents([webp])
        assert not isinstance(exc.value, ProviderRetryable)
        assert not GeminiProvider(base_url=double.url, api_key=KEY).accepts_media  # 001
    assert set(MODEL_MIME_TYPES) <= {"image/png", "image/jpeg", "audio/mpeg", "audio/wav"}


def multimodal_settings(make_settings, workspace: Path, double: ProviderDouble, broker_url: str,
                        modalities: list[str]):
    return make_settings(workspace, provider="gemini", model=MODEL, outputDimensionality=768,
                         brokerUrl=broker_url, extraPaths=["media"],
                         remote={"baseUrl": double.url},
                         multimodal={"enabled": True, "modalities": modalities,
                                     "maxFileBytes": 4096})


def test_fingerprint_covers_the_multimodal_scope(workspace: Path, make_settings) -> None:
    with ProviderDouble("gemini", api_key=KEY) as double:
        both = multimodal_settings(make_settings, workspace, double, "redis://x", ["all"])
        image = multimodal_settings(make_settings, workspace, double, "redis://x", ["image"])
        assert index_identity(None, both) != index_identity(None, image)
        assert index_identity(None, both)["multimodal"]["modalities"] == ["image", "audio"]
    assert "multimodal" not in index_identity(None, make_settings(workspace, provider="none"))


def test_media_chunks_travel_alone_and_never_from_a_changed_file(
        workspace: Path, make_settings, monkeypatch) -> None:
    """Jobs are built without workers here: a media chunk gets its own job with its bytes
    inline; one whose file changed after its row was written is not queued (no label-only
    vector), and the next pass re-syncs and queues it."""
    from pipeline.embeddings.registry import choose_provider
    from pipeline.ingest.multimodal import MediaSource
    from pipeline.ingest.producer import index_once, queue_pending, sync_files
    from pipeline.messages import EmbedJob

    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    media = workspace / "media"
    media.mkdir()
    (media / "a.png").write_bytes(png("first picture"))
    (media / "b.png").write_bytes(png("second picture"))
    with ProviderDouble("gemini", api_key=KEY) as double:
        settings = multimodal_settings(make_settings, workspace, double, "redis://x", ["image"])
        choice = choose_provider(settings)
        db = connect(settings.store.path)
        try:
            sync_files(db, settings, choice)
            (media / "b.png").write_bytes(png("an edited picture"))
            jobs: list[EmbedJob] = []
            queue_pending(db, choice.spec, jobs.append, memory=settings.agent_id,
                          media=MediaSource(settings.workspace, settings.multimodal))
            inline = [j.chunks for j in jobs if j.chunks[0].media is not None]
            assert len(inline) == 1 and len(inline[0]) == 1  # a.png only, alone in its job
            chunk = inline[0][0]
            assert chunk.text == "Image file: media/a.png" and chunk.media is not None
            assert chunk.media.mime_type == "image/png"
            assert base64.b64decode(chunk.media.data) == png("first picture")
            assert all(c.media is None for j in jobs for c in j.chunks if c is not chunk)
            waiting = db.conn.execute("SELECT queued_at FROM chunks WHERE path = "
                                      "'media/b.png'").fetchone()
            assert waiting == (None,)  # left pending, not queued
            jobs.clear()
            index_once(db, settings, choice, jobs.append)
            again = [c.media for j in jobs for c in j.chunks if c.media is not None]
            assert [base64.b64decode(m.data) for m in again] == [png("an edited picture")]
        finally:
            db.close()


def media_folder(workspace: Path) -> Path:
    media = workspace / "media"
    media.mkdir()
    (media / "img_0042.png").write_bytes(png(BIKE))
    (media / "rec_7.wav").write_bytes(wav(CELLO))
    (media / "scan_big.png").write_bytes(png("too big") + b"\x00" * 5000)
    (media / "voice_memo.mp3").write_bytes(png("a picture, not a recording"))
    (media / "broken.jpg").write_bytes(random.Random(3).randbytes(600).replace(b"\xff", b"-"))
    (media / "sticker.webp").write_bytes(b"RIFF\x24\x00\x00\x00WEBPVP8 " + b"\x00" * 24)
    (media / "notes.md").write_text("# Media notes\nThe pictures live here.\n")
    return media


def top_path(settings, query: str) -> str | None:
    results = memory_search(query, settings=settings, sync=False)["results"]
    return results[0]["path"] if results else None


def test_media_files_are_indexed_found_by_text_reported_and_removed(
        workspace: Path, make_settings, broker_url: str, fleet, monkeypatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    media = media_folder(workspace)
    with ProviderDouble("gemini", api_key=KEY) as double:
        settings = multimodal_settings(make_settings, workspace, double, broker_url, ["all"])
        fleet.start(["store.0"], "writer")
        fleet.start(["embed.gemini"], "embed")
        run = run_index(settings, wait=True)
        status = index_status(settings)
        assert status["pending"] == 0 and status["failed"] == 0, status["chunkErrors"]
        assert status["vectors"] == status["chunks"] > 2
        errors = {e["path"]: e["error"] for e in status["fileErrors"]}
        assert errors == {
            "media/scan_big.png": f"skipped: {len(png('too big')) + 5000} bytes is over "
                                  "multimodal.maxFileBytes (4096)",
            "media/voice_memo.mp3": "skipped: named like audio but the bytes are image/png",
            "media/broken.jpg": "skipped: the bytes are no known image format (corrupt?)",
            # Converted to PNG before sending (tests/test_multimodal_formats.py), but these
            # bytes are only a WebP header.
            "media/sticker.webp": "skipped: image/webp could not be converted to image/png: "
                                  "could not create decoder object",
        }
        assert run.report.failed == 4

        # One chunk per file, its label as text, embedded with the bytes inline.
        db = connect(settings.store.path)
        rows = dict(db.conn.execute("SELECT path, text FROM chunks WHERE path LIKE 'media/%'"
                                    " AND path NOT LIKE '%.md'"))
        db.close()
        assert rows == {"media/img_0042.png": "Image file: media/img_0042.png",
                        "media/rec_7.wav": "Audio file: media/rec_7.wav"}
        inline = [p["inlineData"]["mimeType"] for r in double.embed_requests()
                  for q in r.body.get("requests", []) for p in q["content"]["parts"]
                  if "inlineData" in p]
        assert sorted(inline) == ["audio/wav", "image/png"]
        assert not any("asyncBatch" in r.path for r in double.requests)  # never the batch API

        # Found by what they show: no word of the query is in a name, label or note.
        assert top_path(settings, BIKE) == "media/img_0042.png"
        assert top_path(settings, CELLO) == "media/rec_7.wav"
        db = connect(settings.store.path)
        assert db.conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH "
                               "'bicycle OR fence OR cello OR waltz'").fetchone()[0] == 0
        db.close()

        # Deleting the picture removes its chunk and its hit.
        (media / "img_0042.png").unlink()
        run_index(settings, wait=True)
        assert top_path(settings, BIKE) != "media/img_0042.png"
        db = connect(settings.store.path)
        left = {r[0] for r in db.conn.execute("SELECT path FROM chunks")}
        db.close()
        assert "media/img_0042.png" not in left and "media/rec_7.wav" in left

        # Images only: a new fingerprint, so a rebuild beside the live index drops the audio.
        (media / "img_0042.png").write_bytes(png(BIKE))
        images = multimodal_settings(make_settings, workspace, double, broker_url, ["image"])
        rebuilt = run_index(images, wait=True)
        assert rebuilt.rebuild is not None and rebuilt.rebuild.done
        assert top_path(images, BIKE) == "media/img_0042.png"
        db = connect(images.store.path)
        paths = {r[0] for r in db.conn.execute("SELECT path FROM chunks")}
        db.close()
        assert "media/rec_7.wav" not in paths and "media/img_0042.png" in paths
