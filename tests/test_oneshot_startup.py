"""What a one-shot ``memq search`` pays before it answers: the GGUF header read (a few keys
instead of gguf.GGUFReader's whole-file parse), the imports it does not need, and the
single-threaded decode of a short query."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from pipeline.embeddings.gguf_header import (
    GGUFHeaderError,
    read_gguf_metadata,
    trained_context_length,
)
from pipeline.embeddings.local import QUERY_ONE_THREAD_TOKENS, LocalProvider

REPO = Path(__file__).resolve().parents[1]


def _write_gguf(path: Path, *, context: int | None = 256, vocab: int = 2000,
                context_after_vocab: bool = False,
                endian: gguf.GGUFEndian = gguf.GGUFEndian.LITTLE) -> Path:
    """A tensor-less GGUF whose metadata has the shapes that matter: scalars, a string, a long
    string array and a numeric array, with the context length before or after them."""
    w = gguf.GGUFWriter(str(path), "bert", endianess=endian)
    w.add_name("header-test")
    if context is not None and not context_after_vocab:
        w.add_context_length(context)
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(vocab)])
    w.add_array("tokenizer.ggml.token_type", [1] * vocab)
    w.add_float32("bert.attention.layer_norm_epsilon", 1e-12)
    w.add_bool("bert.attention.causal", False)
    if context is not None and context_after_vocab:
        w.add_context_length(context)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _reader_scalars(path: Path) -> dict[str, object]:
    """gguf.GGUFReader's view of the same metadata: every non-array value, in file order."""
    reader = gguf.GGUFReader(str(path))
    return {name: field.contents() for name, field in reader.fields.items()
            if not name.startswith("GGUF.") and field.types[0] != gguf.GGUFValueType.ARRAY}


@pytest.mark.parametrize("endian", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG])
def test_header_reader_agrees_with_gguf_reader(tmp_path: Path, endian: gguf.GGUFEndian) -> None:
    path = _write_gguf(tmp_path / "m.gguf", context_after_vocab=True, endian=endian)
    meta = read_gguf_metadata(path)
    want = _reader_scalars(path)
    assert list(meta) == list(want)  # same keys, same order, arrays stepped over
    for key, value in want.items():
        assert meta[key] == pytest.approx(value), key
    assert trained_context_length(path) == 256  # found after walking the 2,000 strings


def test_header_reader_agrees_on_a_real_model(tiny_model: Path) -> None:
    meta = read_gguf_metadata(tiny_model)
    assert meta == pytest.approx(_reader_scalars(tiny_model))
    assert trained_context_length(tiny_model) == meta["bert.context_length"] > 0


def test_reading_stops_once_the_context_length_is_known(tmp_path: Path) -> None:
    path = _write_gguf(tmp_path / "m.gguf", vocab=5000)
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])  # the vocabulary array is cut in the middle
    assert trained_context_length(cut) == 256  # never reached the cut
    with pytest.raises(GGUFHeaderError):
        read_gguf_metadata(cut)  # reading everything does reach it


def test_a_model_without_context_length_gives_zero(tmp_path: Path) -> None:
    assert trained_context_length(_write_gguf(tmp_path / "m.gguf", context=None)) == 0


@pytest.mark.parametrize("data", [
    b"",
    b"GGML" + b"\0" * 60,
    b"GGUF" + (1).to_bytes(4, "little") + b"\0" * 16,  # version 1
    b"GGUF" + (3).to_bytes(4, "little") + b"\0" * 8 + (5).to_bytes(8, "little"),  # 5 keys, none
    b"GGUF" + (3).to_bytes(4, "little") + b"\0" * 8 + (1).to_bytes(8, "little")
    + (1 << 40).to_bytes(8, "little"),  # a key 1 TB long
])
def test_a_broken_header_is_an_error_not_a_crash(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(GGUFHeaderError):
        trained_context_length(path)


def test_a_broken_model_file_is_unavailable(tmp_path: Path) -> None:
    from pipeline.errors import ProviderUnavailable

    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGUF" + (3).to_bytes(4, "little"))
    with pytest.raises(ProviderUnavailable, match="not a readable GGUF"):
        LocalProvider(path, threads=1).embed_query("hello")


def test_a_one_shot_search_process_imports_neither_gguf_nor_redis(tiny_model: Path) -> None:
    # gguf (GGUFReader, ~0.1 s plus yaml) and redis (~0.3 s) are not needed to embed a query
    # and search: a regression here is start-up time every `memq search` pays.
    code = (
        "import sys\n"
        "import memq.cli, pipeline.query, pipeline.memory, pipeline.ingest.refresh\n"
        "from pipeline.embeddings.local import LocalProvider\n"
        "v = LocalProvider(sys.argv[1], threads=1).embed_query('the cat sat')\n"
        "heavy = ('gguf', 'redis', 'celery', 'httpx')\n"
        "print(len(v), sorted(m for m in heavy if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tiny_model)], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split(maxsplit=1) == ["32", "[]\n"]


def test_a_short_query_is_decoded_on_one_thread(tiny_model: Path) -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    provider = LocalProvider(tiny_model, threads=2)
    text = "the cat sat on the mat"

    def ctx_threads() -> int:
        return int(llama_cpp.llama_n_threads(provider._llm._ctx.ctx))

    doc = provider.embed_documents([text])[0]
    assert ctx_threads() == 2
    query = provider.embed_query(text)
    assert ctx_threads() == 1
    np.testing.assert_allclose(query, doc, atol=1e-6)  # same vector, fewer threads
    long_query = " ".join(["cat"] * (QUERY_ONE_THREAD_TOKENS + 1))
    assert provider.count_tokens(long_query) > QUERY_ONE_THREAD_TOKENS
    provider.embed_query(long_query)
    assert ctx_threads() == 2
    provider.close()
