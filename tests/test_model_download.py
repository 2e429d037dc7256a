"""``local.modelPath = "hf:..."`` or an http(s) URL: parsed, downloaded into the model cache
(resumable, verified, atomic, locked), and used by the local provider, against a real HTTP
server on loopback that behaves like Hugging Face's hub and CDN (tests/fakes/model_server.py)
serving a real GGUF."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.embeddings.download import fetch_model
from pipeline.embeddings.local import LocalProvider
from pipeline.embeddings.model_source import model_source
from pipeline.embeddings.registry import _local_model_present, build_from_spec, choose_provider
from pipeline.errors import DownloadInterrupted, ModelDownloadError, ProviderUnavailable
from tests.conftest import EXAMPLE_WORKSPACE, run_memq
from tests.fakes.model_server import ModelServer
from tests.secrets_scan import SENTINEL

REPO = Path(__file__).resolve().parents[1]
URI = "hf:me/tiny-GGUF/tiny-bert.gguf"
TOKEN = SENTINEL  # the suite-wide secrets scan looks for it in every output and log


@pytest.fixture
def model_bytes(tiny_model: Path) -> bytes:
    return tiny_model.read_bytes()


@pytest.fixture
def hub(model_bytes: bytes, monkeypatch: pytest.MonkeyPatch):
    """The hub + CDN double serving the tiny GGUF as me/tiny-GGUF; HF_ENDPOINT points at it."""
    with ModelServer(files={"me/tiny-GGUF/tiny-bert.gguf": model_bytes}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url())
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setenv("HF_TOKEN_PATH", "/nonexistent/memq-test/token")
        yield server


def _leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.rglob("*") if p.is_file() and not p.name.endswith(".lock")
                  and p.suffix != ".gguf")


# -- where things come from and go ------------------------------------------------------------


def test_hf_uri_forms_name_the_same_file(tmp_path: Path) -> None:
    env = {"HF_ENDPOINT": "http://127.0.0.1:9/"}
    forms = ["hf:o/r/m.gguf", "hf://o/r/m.gguf", "huggingface:o/r/m.gguf",
             "huggingface://o/r/m.gguf", "hf:o/r/m.gguf#main"]
    sources = [model_source(f, tmp_path, env) for f in forms]
    assert {s.url for s in sources} == {"http://127.0.0.1:9/o/r/resolve/main/m.gguf"}
    assert {s.target for s in sources} == {tmp_path / "models/hf/o/r/m.gguf"}
    assert all(s.hub for s in sources)
    nested = model_source("hf:o/r/sub dir/m v2.gguf#refs/pr/1", tmp_path, env)
    assert nested.url == "http://127.0.0.1:9/o/r/resolve/refs%2Fpr%2F1/sub%20dir/m%20v2.gguf"
    assert nested.target == tmp_path / "models/hf/o/r@refs%2Fpr%2F1/sub dir/m v2.gguf"
    assert nested.candidates == (nested.target,)  # a revision is never taken for main's copy
    default = model_source("hf:ggml-org/embeddinggemma-300m-qat-q8_0-GGUF/"
                           "embeddinggemma-300m-qat-Q8_0.gguf", tmp_path, {})
    assert default.url == ("https://huggingface.co/ggml-org/embeddinggemma-300m-qat-q8_0-GGUF/"
                           "resolve/main/embeddinggemma-300m-qat-Q8_0.gguf")


@pytest.mark.parametrize(("uri", "message"), [
    ("hf:o/r", "expected hf:<owner>/<repo>/<file.gguf>"),
    ("hf:o/r:Q8_0", "tag form"),
    ("hf:o/r/../../../etc/m.gguf", "'..'"),
    ("hf:o//m.gguf", "empty"),
    ("https:///m.gguf", "no host"),
    ("https://example.com/", "names no model file"),
])
def test_unusable_model_uris_are_refused_with_a_reason(tmp_path: Path, uri: str,
                                                       message: str) -> None:
    with pytest.raises(ProviderUnavailable, match=message):
        model_source(uri, tmp_path, {})


def test_urls_get_their_own_cache_folders_and_only_the_hub_gets_the_token(tmp_path: Path
                                                                          ) -> None:
    a = model_source("https://example.com/a/m.gguf", tmp_path, {})
    b = model_source("https://example.com/b/m.gguf?sig=1", tmp_path, {})
    assert a.target.name == b.target.name == "m.gguf" and a.target != b.target
    assert not a.hub and b.shown == "https://example.com/b/m.gguf"
    blob = model_source("https://huggingface.co/o/r/blob/main/m.gguf", tmp_path, {})
    assert blob.hub and blob.url == "https://huggingface.co/o/r/resolve/main/m.gguf"
    env = {"HF_ENDPOINT": "http://127.0.0.1:8000"}
    assert model_source("http://127.0.0.1:8000/o/r/resolve/main/m.gguf", tmp_path, env).hub
    assert not model_source("http://127.0.0.1:8001/m.gguf", tmp_path, env).hub  # other port
    assert not model_source("https://huggingface.co/o/r/resolve/main/m.gguf", tmp_path, env).hub


# -- downloading ---------------------------------------------------------------------------------


def test_download_is_verified_renamed_into_place_and_then_used_offline(
        hub: ModelServer, tmp_path: Path, model_bytes: bytes, capsys) -> None:
    source = model_source(URI, tmp_path)
    path = fetch_model(source, progress=True)
    assert path == tmp_path / "models/hf/me/tiny-GGUF/tiny-bert.gguf"
    assert path.read_bytes() == model_bytes and _leftovers(tmp_path) == []
    assert "tiny-bert.gguf" in capsys.readouterr().err  # the progress bar, when asked for
    assert [r.status for r in hub.seen("hub")] == [302] and len(hub.seen("cdn")) == 1
    hub.stop()  # from now on there is no server at all
    assert fetch_model(model_source(URI, tmp_path), progress=False) == path
    assert capsys.readouterr().err == ""


def test_a_dropped_connection_is_resumed_with_a_range_request(
        hub: ModelServer, tmp_path: Path, model_bytes: bytes) -> None:
    half = len(model_bytes) // 2
    hub.cut_after, hub.cuts = half, 1
    path = fetch_model(model_source(URI, tmp_path), progress=False)
    assert path.read_bytes() == model_bytes
    ranges = [r.headers.get("range") for r in hub.seen("cdn")]
    assert ranges == [None, f"bytes={half}-"]
    assert [r.status for r in hub.seen("cdn")] == [200, 206]


def test_a_part_file_left_by_an_earlier_process_is_continued(
        hub: ModelServer, tmp_path: Path, model_bytes: bytes) -> None:
    source = model_source(URI, tmp_path)
    part = source.target.with_name("tiny-bert.gguf.part")
    part.parent.mkdir(parents=True)
    part.write_bytes(model_bytes[:1000])
    assert source.present() is None  # a .part is never taken for the model
    assert fetch_model(source, progress=False).read_bytes() == model_bytes
    assert [r.headers.get("range") for r in hub.seen("cdn")] == ["bytes=1000-"]
    assert not part.exists()


def test_a_server_that_ignores_the_range_is_read_from_the_start(
        hub: ModelServer, tmp_path: Path, model_bytes: bytes) -> None:
    hub.ignore_range = True
    source = model_source(URI, tmp_path)
    part = source.target.with_name("tiny-bert.gguf.part")
    part.parent.mkdir(parents=True)
    part.write_bytes(b"stale bytes from another version of the file")
    assert fetch_model(source, progress=False).read_bytes() == model_bytes
    assert [(r.headers.get("range"), r.status) for r in hub.seen("cdn")] == [
        ("bytes=44-", 200)]


def test_a_checksum_mismatch_is_refused_and_nothing_is_kept(
        hub: ModelServer, tmp_path: Path, model_bytes: bytes) -> None:
    hub.checksum = "wrong"
    source = model_source(URI, tmp_path)
    with pytest.raises(ModelDownloadError, match="checksum mismatch") as err:
        fetch_model(source, progress=False)
    assert hashlib.sha256(model_bytes).hexdigest() in str(err.value)  # what it got
    assert source.present() is None and _leftovers(tmp_path) == []
    hub.checksum = "right"
    assert fetch_model(source, progress=False).read_bytes() == model_bytes


def test_a_corrupt_part_file_is_caught_by_the_hubs_etag_sha256(
        hub: ModelServer, tmp_path: Path, model_bytes: bytes) -> None:
    # Right size, GGUF magic, wrong bytes in the part kept from before: only the sha256 the
    # hub states (here as its ETag, the form huggingface_hub also reads) can tell.
    hub.checksum = "etag"
    source = model_source(URI, tmp_path)
    part = source.target.with_name("tiny-bert.gguf.part")
    part.parent.mkdir(parents=True)
    part.write_bytes(b"GGUF" + b"\0" * 4000)
    with pytest.raises(ModelDownloadError, match="checksum mismatch"):
        fetch_model(source, progress=False)
    assert not part.exists()
    assert fetch_model(source, progress=False).read_bytes() == model_bytes


def test_missing_files_and_refused_tokens_are_clear_errors_without_the_token(
        hub: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        model_bytes: bytes) -> None:
    with pytest.raises(ModelDownloadError, match=r"not found \(HTTP 404") as err:
        fetch_model(model_source("hf:me/tiny-GGUF/other.gguf", tmp_path), progress=False)
    assert not isinstance(err.value, DownloadInterrupted)
    hub.token = TOKEN
    with pytest.raises(ModelDownloadError, match="gated or private: set HF_TOKEN"):
        fetch_model(model_source(URI, tmp_path), progress=False)
    monkeypatch.setenv("HF_TOKEN", "hf_WrongWrongWrongWrong0123")
    with pytest.raises(ModelDownloadError, match=r"token .* was refused") as err:
        fetch_model(model_source(URI, tmp_path), progress=False)
    assert "WrongWrong" not in str(err.value) and "Bearer" not in str(err.value)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert fetch_model(model_source(URI, tmp_path), progress=False).read_bytes() == model_bytes
    assert hub.seen("hub")[-1].headers["authorization"] == f"Bearer {TOKEN}"
    # the redirect leaves the hub's origin: the CDN never sees the token
    assert all("authorization" not in r.headers for r in hub.seen("cdn"))


def test_a_plain_url_is_downloaded_without_the_token(
        hub: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        model_bytes: bytes) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub.plain = {"tiny.gguf": model_bytes, "login.gguf": b"<html>please log in</html>"}
    url = f"{hub.url('cdn')}/plain/tiny.gguf"
    assert fetch_model(model_source(url, tmp_path), progress=False).read_bytes() == model_bytes
    with pytest.raises(ModelDownloadError, match="not a GGUF file"):
        fetch_model(model_source(f"{hub.url('cdn')}/plain/login.gguf", tmp_path),
                    progress=False)
    assert all("authorization" not in r.headers for r in hub.seen("cdn"))
    assert _leftovers(tmp_path) == []


def test_network_down_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with ModelServer() as gone:
        endpoint = gone.url()
    monkeypatch.setenv("HF_ENDPOINT", endpoint)  # nothing listens there any more
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with pytest.raises(ModelDownloadError, match="cannot connect to") as err:
        fetch_model(model_source(URI, tmp_path), progress=False)
    assert isinstance(err.value, DownloadInterrupted) and TOKEN not in str(err.value)


def _lock_waiters() -> set[int]:
    """Pids waiting for an flock (Linux /proc/locks marks waiters with "->")."""
    out = set()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[1] == "->" and fields[2] == "FLOCK":
            out.add(int(fields[5]))
    return out


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux /proc/locks")
def test_a_second_process_waits_for_the_first_download_and_uses_its_file(
        hub: ModelServer, tmp_path: Path, model_bytes: bytes) -> None:
    hub.hold_at = len(model_bytes) // 3
    source = model_source(URI, tmp_path)
    first: dict[str, object] = {}
    thread = threading.Thread(
        target=lambda: first.update(path=fetch_model(source, progress=False)))
    thread.start()
    assert hub.held.wait(30)  # the first download is in the middle of the file
    code = ("import sys; from pipeline.embeddings.download import fetch_model\n"
            "from pipeline.embeddings.model_source import model_source\n"
            "print(fetch_model(model_source(sys.argv[1], sys.argv[2]), progress=False))\n")
    second = subprocess.Popen([sys.executable, "-c", code, URI, str(tmp_path)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ})
    try:
        deadline = time.monotonic() + 60
        while second.pid not in _lock_waiters():
            assert second.poll() is None, second.communicate()
            assert time.monotonic() < deadline, "the second process never waited for the lock"
            time.sleep(0.05)
    finally:
        hub.release.set()
    out, err = second.communicate(timeout=60)
    thread.join(30)
    assert second.returncode == 0, err
    assert Path(out.strip()) == first["path"] == source.target
    assert source.target.read_bytes() == model_bytes
    assert len(hub.seen("hub")) == 1  # one transfer: the second process only waited


# -- the provider and provider selection ------------------------------------------------------


def test_auto_downloads_an_hf_model_and_the_provider_embeds_with_it(
        hub: ModelServer, workspace: Path, make_settings, tmp_path: Path,
        tiny_model: Path) -> None:
    cache = tmp_path / "cache"
    settings = make_settings(workspace, provider="auto",
                             local={"modelPath": URI, "modelCacheDir": str(cache)})
    assert settings.local.model_path == URI
    assert not _local_model_present(settings)
    reader = choose_provider(settings, fetch_default_model=False, env={})
    assert reader.provider is None and "not downloaded yet" in reader.reason
    assert hub.requests == []  # a reader never starts a download

    choice = choose_provider(settings, env={})
    assert choice.spec.name == "local" and choice.reason == "auto: local model"
    assert choice.spec.model == "tiny-bert" and choice.spec.options["model_path"] == URI
    assert (cache / "models/hf/me/tiny-GGUF/tiny-bert.gguf").is_file()
    assert _local_model_present(settings)
    want = LocalProvider(tiny_model, threads=1).embed_query("the cat sat on the mat")
    np.testing.assert_allclose(choice.provider.embed_query("the cat sat on the mat"), want,
                               atol=1e-6)
    # a worker rebuilding the provider from the spec uses the cached file: no new transfer
    worker_side = build_from_spec(choice.spec, settings)
    assert worker_side.embed_documents(["the cat sat on the mat"]).shape == (1, 32)
    assert choose_provider(settings, fetch_default_model=False, env={}).spec.name == "local"
    assert len(hub.seen("hub")) == 1


def test_model_uris_in_config_files_are_kept_as_written(workspace: Path, make_settings) -> None:
    for uri in (URI, "huggingface:me/tiny-GGUF/tiny-bert.gguf", "https://example.com/m.gguf"):
        assert make_settings(workspace, local={"modelPath": uri}).local.model_path == uri
    local = make_settings(workspace, local={"modelPath": "models/m.gguf"}).local.model_path
    assert Path(local).is_absolute()  # a path is still made absolute


def test_an_explicit_local_model_that_cannot_be_downloaded_uses_the_fallback(
        hub: ModelServer, workspace: Path, make_settings, tmp_path: Path) -> None:
    settings = make_settings(workspace, provider="local", fallback="openai",
                             local={"modelPath": "hf:me/tiny-GGUF/missing.gguf",
                                    "modelCacheDir": str(tmp_path / "cache")})
    choice = choose_provider(settings, env={"OPENAI_API_KEY": "sk-test-fallback"})
    assert choice.spec.name == "openai"
    assert "HTTP 404" in choice.reason and "hf:me/tiny-GGUF/missing.gguf" in choice.reason


def test_memq_index_and_search_with_an_hf_model(hub: ModelServer, tmp_path: Path) -> None:
    """The CLI end to end: `memq index` downloads the model once (the producer, where a bar
    could be seen), the embedded fleet's worker uses the cached file, `memq search` embeds the
    query with it."""
    env = {"MEMQ_CONFIG": "none", "MEMQ_PROVIDER": "local", "MEMQ_LOCAL_MODEL_PATH": URI,
           "MEMQ_CACHE_DIR": str(tmp_path / "cache"), "MEMQ_LOCAL_THREADS": "1",
           "MEMQ_STORE_PATH": str(tmp_path / "store.sqlite"), "MEMQ_BROKER_URL": "",
           "HF_ENDPOINT": hub.url(), "HF_TOKEN": TOKEN}
    indexed = run_memq("index", "--workspace", str(EXAMPLE_WORKSPACE), "--json", env=env)
    assert indexed.returncode == 0, indexed.stderr
    report = json.loads(indexed.stdout)
    assert (report["mode"], report["provider"], report["model"]) == ("hybrid", "local",
                                                                      "tiny-bert")
    assert report["chunksQueued"] > 0 and report["failedChunks"] == 0
    found = run_memq("search", "Ana school", "--workspace", str(EXAMPLE_WORKSPACE), "--json",
                     env=env)
    assert found.returncode == 0, found.stderr
    out = json.loads(found.stdout)
    assert (out["mode"], out["model"]) == ("hybrid", "tiny-bert") and out["results"]
    assert len(hub.seen("hub")) == 1
    assert TOKEN not in indexed.stdout + indexed.stderr + found.stdout + found.stderr
