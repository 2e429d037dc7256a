"""The OpenAI-compatible path against a real third-party server: llama-cpp-python's own
OpenAI-compatible server serving a GGUF. Its vectors must match memq's in-process ``local``
provider on the same model, and its API-key check must see memq's Bearer key."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from pipeline.embeddings.local import LocalProvider
from pipeline.embeddings.openai import OpenAIProvider
from pipeline.errors import EmbeddingError, ProviderRetryable
from tests.secrets_scan import SENTINEL

pytestmark = pytest.mark.integration
pytest.importorskip("llama_cpp.server.app", reason="needs llama-cpp-python[server]")

SERVER_KEY = SENTINEL


@pytest.fixture(scope="module")
def llama_server(tiny_model) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(tiny_model),
         "--model_alias", "tiny-bert", "--embedding", "true", "--n_ctx", "64",
         "--host", "127.0.0.1", "--port", str(port), "--api_key", SERVER_KEY,
         "--verbose", "false"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/models", headers={"Authorization": f"Bearer {SERVER_KEY}"})
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(proc.stdout.read().decode(errors="replace")) from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


def test_vectors_match_the_local_provider(llama_server: str, tiny_model) -> None:
    texts = ["the cat sat on the mat", "a dog in the garden", "zigbee coordinator"]
    remote = OpenAIProvider("tiny-bert", base_url=llama_server, api_key=SERVER_KEY)
    local = LocalProvider(str(tiny_model), threads=1)
    try:
        got = remote.embed_documents(texts)
        want = local.embed_documents(texts)
        assert got.shape == want.shape == (3, 32)
        np.testing.assert_allclose(np.sum(got * want, axis=1), 1.0, atol=1e-4)
        np.testing.assert_allclose(remote.embed_query(texts[2]), got[2], atol=1e-5)
    finally:
        local.close()


def test_a_wrong_key_is_rejected_and_not_shown(llama_server: str) -> None:
    with pytest.raises(EmbeddingError) as info:
        OpenAIProvider("tiny-bert", base_url=llama_server, api_key="sk-wrong-SENTINEL"
                       ).embed_query("x")
    assert not isinstance(info.value, ProviderRetryable) and "HTTP 401" in str(info.value)
    assert "SENTINEL" not in str(info.value)
