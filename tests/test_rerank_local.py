"""``rerank.provider: "local"``: a GGUF cross-encoder in llama.cpp re-orders the fused candidates.

The model is a tiny random-weight BERT cross-encoder (``BertForSequenceClassification``, one
label) built in the test and converted by memq's own converter. Its scores are checked two
ways: against llama.cpp driven directly here (its C API, the pair spelled out as HF's
``[CLS] query [SEP] document [SEP]``), and against an independent NumPy forward pass of the
same weights (pooler, tanh, classifier), which proves the converter maps the head right. No
mocks: a missing, broken or wrong model file is a real file the real loader refuses.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import shutil
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from safetensors.numpy import load as load_safetensors

from memq import Memory
from pipeline.config import ConfigError, load_settings
from pipeline.errors import RerankFailed
from pipeline.search.hybrid import search, search_store
from pipeline.search.rerank import build_reranker
from pipeline.search.rerank_local import LocalScorer, fit_pair
from tests.conftest import run_memq
from tests.fakes.bert_reference import bert_token_states, wordpiece_ids
from tests.fakes.tiny_gguf import tiny_cross_encoder_files, write_tiny_gguf, write_tiny_reranker
from tests.searchkit import QueryVector, build

llama_cpp = pytest.importorskip("llama_cpp")

TINY_CTX = 64
REPO = Path(__file__).resolve().parents[1]
QUERY = "the cat sat on the mat"
NOTES = {
    "memory/a.md": "a dog runs fast",
    "memory/b.md": "the cat sits on a mat",
    "memory/c.md": "memory of an agent note",
    "memory/d.md": "token window and memory",
    "memory/e.md": "the cat and the dog",
}
FUSED = sorted(NOTES)  # the fused (vector-only) order the vector scores give
SCORES = dict(zip(FUSED, (0.95, 0.9, 0.85, 0.8, 0.75), strict=True))
#: Vector scores only, and no MMR after the reranker (its diversity pass would move the tiny
#: model's close scores): the answer is in the reranker's order.
VECTOR_ONLY = {"hybrid": {"enabled": False, "mmr": {"enabled": False}}, "minScore": 0.0,
               "maxResults": 5}


# -- independent references ------------------------------------------------------------------


class NumpyCrossEncoder:
    """HF BertForSequenceClassification on the model's own files, in NumPy: the logit of
    classifier(tanh(pooler(h[CLS]))). Token type 0 everywhere, as llama.cpp's BERT graph."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.cfg = json.loads(files["config.json"])
        self.w = {k.removeprefix("bert."): v.astype(np.float64)
                  for k, v in load_safetensors(files["model.safetensors"]).items()
                  if v.dtype != np.int64}
        self.vocab = files["vocab.txt"].decode().split("\n")
        self.cls, self.sep = self.vocab.index("[CLS]"), self.vocab.index("[SEP]")

    def ids(self, query: str, document: str) -> list[int]:
        return [self.cls, *wordpiece_ids(query, self.vocab), self.sep,
                *wordpiece_ids(document, self.vocab), self.sep]

    def logit(self, ids: list[int]) -> float:
        h = bert_token_states(self.w, self.cfg, ids)[0]
        pooled = np.tanh(self.w["pooler.dense.weight"] @ h + self.w["pooler.dense.bias"])
        return float((self.w["classifier.weight"] @ pooled + self.w["classifier.bias"])[0])


def llama_logits(path: Path, sequences: list[list[int]]) -> list[float]:
    """Each token sequence decoded alone through llama.cpp's C API (not memq's code), with
    rank pooling; the rank head's output for sequence 0."""
    llm = llama_cpp.Llama(str(path), embedding=True, n_ctx=TINY_CTX, n_batch=TINY_CTX,
                          n_ubatch=TINY_CTX, n_threads=1, n_threads_batch=1, verbose=False,
                          flash_attn=True,
                          pooling_type=llama_cpp.LLAMA_POOLING_TYPE_RANK)
    out = []
    try:
        for ids in sequences:
            batch = llama_cpp.llama_batch_init(len(ids), 0, 1)
            try:
                for i, tok in enumerate(ids):
                    batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, i, 1
                    batch.seq_id[i][0], batch.logits[i] = 0, True
                batch.n_tokens = len(ids)
                memory = llama_cpp.llama_get_memory(llm.ctx)
                if memory:
                    llama_cpp.llama_memory_clear(memory, True)
                assert llama_cpp.llama_decode(llm.ctx, batch) == 0
                out.append(float(llama_cpp.llama_get_embeddings_seq(llm.ctx, 0)[0]))
            finally:
                llama_cpp.llama_batch_free(batch)
    finally:
        llm.close()
    return out


def logistic(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return tiny_cross_encoder_files(max_positions=TINY_CTX)


@pytest.fixture(scope="module")
def reranker_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_reranker(tmp_path_factory.mktemp("rr") / "tiny-reranker.gguf",
                               max_positions=TINY_CTX)


@pytest.fixture(scope="module")
def scorer(reranker_gguf: Path) -> LocalScorer:
    s = LocalScorer(str(reranker_gguf), threads=1)
    yield s
    s.close()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


def _local(model_path: Path | str, **extra: object) -> dict[str, object]:
    return {"enabled": True, "provider": "local", "modelPath": str(model_path), **extra}


def _paths(hits) -> list[str]:
    return [h.path for h in hits]


# -- the converter ---------------------------------------------------------------------------


def test_converter_writes_a_rank_head(reranker_gguf: Path, files: dict[str, bytes]) -> None:
    reader = gguf.GGUFReader(str(reranker_gguf))
    fields = {name: f.contents() for name, f in reader.fields.items()}
    assert fields["bert.pooling_type"] == gguf.PoolingType.RANK
    assert fields["tokenizer.ggml.add_sep_token"] is False
    tensors = {t.name: t for t in reader.tensors}
    weights = load_safetensors(files["model.safetensors"])
    for gguf_name, hf_name in (("cls.weight", "bert.pooler.dense.weight"),
                               ("cls.bias", "bert.pooler.dense.bias"),
                               ("cls.output.weight", "classifier.weight"),
                               ("cls.output.bias", "classifier.bias")):
        got = np.asarray(tensors[gguf_name].data).reshape(weights[hf_name].shape)
        np.testing.assert_array_equal(got, weights[hf_name])
    assert not any(n.startswith(("classifier", "pooler")) for n in tensors)


def test_an_embedding_model_keeps_no_head(tmp_path: Path) -> None:
    reader = gguf.GGUFReader(str(write_tiny_gguf(tmp_path / "e.gguf", max_positions=TINY_CTX)))
    assert not any(t.name.startswith("cls") for t in reader.tensors)
    fields = {name: f.contents() for name, f in reader.fields.items()}
    assert fields["bert.pooling_type"] == gguf.PoolingType.MEAN
    assert "tokenizer.ggml.add_sep_token" not in fields


def test_converter_refuses_a_many_label_classifier(tmp_path: Path, files) -> None:
    from safetensors.numpy import save

    from pipeline.embeddings.gguf_bert import convert_bert_to_gguf
    from pipeline.errors import BertConversionError

    weights = dict(load_safetensors(files["model.safetensors"]))
    weights["classifier.weight"] = np.zeros((2, weights["classifier.weight"].shape[1]),
                                            dtype=np.float32)
    weights["classifier.bias"] = np.zeros(2, dtype=np.float32)
    with pytest.raises(BertConversionError, match="2 labels"):
        convert_bert_to_gguf({**files, "model.safetensors": save(weights)}, tmp_path / "x.gguf")


def test_converter_command_line(tmp_path: Path, files, reranker_gguf: Path) -> None:
    """What a user runs on a downloaded cross-encoder directory."""
    model_dir = tmp_path / "ms-marco-tiny"
    for name, data in files.items():
        (model_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (model_dir / name).write_bytes(data)
    out = tmp_path / "out" / "tiny-reranker.gguf"
    done = subprocess.run([sys.executable, "-m", "pipeline.embeddings.gguf_bert", str(model_dir),
                           str(out), "--dtype", "f32", "--name", "tiny-reranker"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out)
    assert out.read_bytes() == reranker_gguf.read_bytes()
    (model_dir / "config.json").unlink()
    bad = subprocess.run([sys.executable, "-m", "pipeline.embeddings.gguf_bert", str(model_dir),
                          str(tmp_path / "bad.gguf")], capture_output=True, text=True, cwd=REPO,
                         timeout=120)
    assert bad.returncode == 1 and "config.json is missing" in bad.stderr
    assert not (tmp_path / "bad.gguf").exists()


# -- the scorer ------------------------------------------------------------------------------


def test_pair_is_cls_query_sep_document_sep(scorer: LocalScorer, files) -> None:
    ref = NumpyCrossEncoder(files)
    for query, document in ((QUERY, NOTES["memory/b.md"]), ("dogs?", "Running, fast!")):
        assert scorer.pair_tokens(query, document) == ref.ids(query, document)


def test_tiny_reranker_scores_like_numpy_and_llama_cpp(scorer: LocalScorer, reranker_gguf: Path,
                                                       files) -> None:
    ref = NumpyCrossEncoder(files)
    docs = list(NOTES.values())
    got = scorer.logits(QUERY, docs)
    numpy_logits = [ref.logit(ref.ids(QUERY, d)) for d in docs]
    direct = llama_logits(reranker_gguf, [ref.ids(QUERY, d) for d in docs])
    assert got == pytest.approx(direct, abs=1e-6)  # the same kernels: the same numbers
    # float32 kernels and flash attention against float64: ~1e-3 on logits spread over > 0.5
    assert got == pytest.approx(numpy_logits, abs=5e-3)
    assert max(numpy_logits) - min(numpy_logits) > 0.5
    # what llama.cpp's own converter would give (pooler dropped: classifier(h[CLS])) is not it
    no_pooler = [float((ref.w["classifier.weight"] @ bert_token_states(
        ref.w, ref.cfg, ref.ids(QUERY, d))[0] + ref.w["classifier.bias"])[0]) for d in docs]
    assert max(abs(a - b) for a, b in zip(got, no_pooler, strict=True)) > 0.1
    assert scorer.scores(QUERY, docs) == pytest.approx([logistic(x) for x in direct], abs=1e-6)


def test_a_pair_longer_than_the_context_is_cut_longest_first(scorer: LocalScorer,
                                                             reranker_gguf: Path,
                                                             files) -> None:
    ref = NumpyCrossEncoder(files)
    long_doc = " ".join(["memory window token note"] * 40)  # 160 words, context 64
    ids = scorer.pair_tokens(QUERY, long_doc)
    assert len(ids) == TINY_CTX
    q, d = wordpiece_ids(QUERY, ref.vocab), wordpiece_ids(long_doc, ref.vocab)
    assert ids == [ref.cls, *q, ref.sep, *d[: TINY_CTX - 3 - len(q)], ref.sep]
    (logit,) = scorer.logits(QUERY, [long_doc])
    assert logit == pytest.approx(llama_logits(reranker_gguf, [ids])[0], abs=1e-6)
    assert fit_pair([1] * 50, [2] * 5, 20) == ([1] * 15, [2] * 5)
    assert fit_pair([1] * 30, [2] * 30, 20) == ([1] * 10, [2] * 10)


def test_a_rerank_template_is_filled_in(tmp_path: Path, reranker_gguf: Path, files) -> None:
    """A GGUF with a ``rerank`` chat template (as llama.cpp's converter writes for Qwen3
    rerankers) is given the template filled in, special tokens parsed; a pair too long for the
    context loses the document's tail, not the template's end."""
    path = tmp_path / "templated.gguf"
    template = [{"name": "rerank", "template": "[CLS] query: {query} [SEP] {document} [SEP]"}]
    subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", str(reranker_gguf),
                    str(path), "--chat-template", json.dumps(template), "--force"],
                   check=True, capture_output=True, timeout=120)
    ref = NumpyCrossEncoder(files)
    templated = LocalScorer(str(path), threads=1)
    try:
        doc = NOTES["memory/b.md"]
        ids = templated.pair_tokens(QUERY, doc)
        assert ids == ref.ids(f"query: {QUERY}", doc)
        assert templated.logits(QUERY, [doc]) == pytest.approx(llama_logits(path, [ids]),
                                                               abs=1e-6)
        long_ids = templated.pair_tokens(QUERY, " ".join(["memory window token note"] * 40))
        head = ref.ids(f"query: {QUERY}", "")[:-1]
        assert len(long_ids) == TINY_CTX
        assert long_ids[: len(head)] == head and long_ids[-1] == ref.sep
    finally:
        templated.close()


def test_a_forked_child_scores_the_same(scorer: LocalScorer) -> None:
    """A worker forked after the model was loaded (it loads its own copy) scores the same."""
    docs = list(NOTES.values())
    want = scorer.logits(QUERY, docs)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=lambda: queue.put(scorer.logits(QUERY, docs)))
    child.start()
    got = queue.get(timeout=120)
    child.join(60)
    assert child.exitcode == 0
    assert got == want


# -- the stage -------------------------------------------------------------------------------


def test_local_reranker_orders_as_llama_cpp_scores(ws: Path, make_settings, reranker_gguf: Path,
                                                   files) -> None:
    ref = NumpyCrossEncoder(files)
    direct = dict(zip(FUSED, llama_logits(reranker_gguf,
                                          [ref.ids(QUERY, NOTES[p]) for p in FUSED]), strict=True))
    expected = sorted(FUSED, key=lambda p: -direct[p])
    assert expected != FUSED  # the premise: the reranker changes the order
    db, settings = build(ws, make_settings, NOTES, SCORES, query=VECTOR_ONLY,
                         rerank=_local(reranker_gguf), local={"threads": 1})
    assert _paths(search_store(db, settings, QUERY, provider=QueryVector())) == FUSED
    reranker = build_reranker(settings.rerank, local=settings.local)
    assert reranker is not None
    try:
        answer = search(db, settings, QUERY, provider=QueryVector(), reranker=reranker)
    finally:
        reranker.close()
    assert _paths(answer.hits) == expected
    assert [h.score for h in answer.hits] == pytest.approx(
        [logistic(direct[p]) for p in expected], abs=1e-5)
    assert answer.rerank == {"provider": "local", "model": "tiny-reranker", "reranked": 5}


@pytest.mark.parametrize("problem", ["missing", "broken", "truncated", "embedder"])
def test_a_bad_model_file_falls_back_to_the_fused_order(ws: Path, make_settings, tmp_path: Path,
                                                        reranker_gguf: Path,
                                                        problem: str) -> None:
    path = tmp_path / f"{problem}.gguf"
    if problem == "broken":
        path.write_bytes(b"GGUF" + b"\0" * 64)
    elif problem == "truncated":  # a whole header, half the tensor data
        whole = reranker_gguf.read_bytes()
        path.write_bytes(whole[: len(whole) // 2])
    elif problem == "embedder":
        write_tiny_gguf(path, max_positions=TINY_CTX)
    db, settings = build(ws, make_settings, NOTES, SCORES, query=VECTOR_ONLY,
                         rerank=_local(path), local={"threads": 1})
    reranker = build_reranker(settings.rerank, local=settings.local)
    answer = search(db, settings, QUERY, provider=QueryVector(), reranker=reranker)
    assert _paths(answer.hits) == FUSED
    assert [h.to_dict() for h in answer.hits] == [
        h.to_dict() for h in search_store(db, settings, QUERY, provider=QueryVector())]
    note = answer.rerank
    assert (note["provider"], note["reranked"], note["fallback"], note["kind"]) == (
        "local", 0, "fused", "model")
    assert str(path) in note["reason"]
    assert {"missing": "not found", "broken": "not a readable GGUF",
            "truncated": "could not load", "embedder": "not a reranker"}[problem] in note["reason"]
    for text in NOTES.values():
        assert text not in note["reason"]
    reranker.close()


def test_the_model_is_loaded_once_and_reused(ws: Path, make_settings, reranker_gguf: Path,
                                             tmp_path: Path) -> None:
    """Through ``Memory`` (the CLI's and MCP server's path): the second search reranks with the
    model loaded by the first, even though the file is gone by then."""
    model = tmp_path / "models" / "tiny-reranker.gguf"
    model.parent.mkdir()
    shutil.copy(reranker_gguf, model)
    _db, settings = build(ws, make_settings, NOTES, None, provider="none",
                          query={"minScore": 0.0, "maxResults": 5},
                          rerank=_local(model), local={"threads": 1})
    with Memory(settings=settings) as memory:
        first = memory.search(QUERY).to_dict()
        model.unlink()
        second = memory.search(QUERY).to_dict()
    assert first["rerank"]["reranked"] == len(first["results"]) > 1
    assert second["rerank"] == first["rerank"]
    assert second["results"] == first["results"]
    with pytest.raises(RerankFailed) as err:
        LocalScorer(str(model))
    assert err.value.kind == "model" and "not found" in err.value.reason


def test_cli_search_reranks_locally(tmp_path: Path, make_settings, reranker_gguf: Path) -> None:
    """The one-shot ``memq search`` (a fresh process): the local model is loaded there and the
    note is in ``--json`` and in the text footer."""
    ws = tmp_path / "ws"
    for rel, text in NOTES.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text, encoding="utf-8")
    settings = make_settings(ws, provider="none", query={"minScore": 0.0},
                             rerank=_local(reranker_gguf), local={"threads": 1})
    common = ("--workspace", str(ws), "--config", str(settings.config_file))
    env = {"MEMQ_CONFIG": str(settings.config_file)}
    assert run_memq("index", *common, env=env, timeout=120).returncode == 0
    as_json = run_memq("search", *common, "--json", QUERY, env=env, timeout=120)
    as_text = run_memq("search", *common, QUERY, env=env, timeout=120)
    assert as_json.returncode == 0, as_json.stderr
    out = json.loads(as_json.stdout)
    assert out["rerank"] == {"provider": "local", "model": "tiny-reranker",
                             "reranked": len(out["results"])}
    assert len(out["results"]) > 1
    assert f"rerank tiny-reranker: {len(out['results'])} reranked" in as_text.stdout


# -- settings ---------------------------------------------------------------------------------


def test_config_local_needs_a_model_path(tmp_path: Path) -> None:
    cfg = tmp_path / "memq.json"
    home = {"HOME": str(tmp_path)}
    cfg.write_text(json.dumps({"rerank": {"enabled": True, "provider": "local"}}))
    with pytest.raises(ConfigError, match=r"rerank\.modelPath: must be set when rerank\.provider "
                                          r"is \"local\""):
        load_settings(cfg, workspace=tmp_path, env=home)
    cfg.write_text(json.dumps({"rerank": {"enabled": True, "provider": "local",
                                          "modelPath": "models/rr.gguf"}}))
    s = load_settings(cfg, workspace=tmp_path, env=home)
    assert s.rerank.model_path == str(tmp_path / "models" / "rr.gguf")  # beside the config
    assert s.rerank.base_url is None
    cfg.write_text(json.dumps({"rerank": {"provider": "local"}}))  # off: nothing required
    assert load_settings(cfg, workspace=tmp_path, env=home).rerank.model_path is None
    oc = tmp_path / "openclaw.json"
    oc.write_text(json.dumps({"memory": {"search": {"rerank": {
        "enabled": True, "provider": "local", "modelPath": "hf:me/rr/rr-f16.gguf"}}}}))
    s = load_settings(oc, workspace=tmp_path, env=home)
    assert (s.rerank.provider, s.rerank.model_path) == ("local", "hf:me/rr/rr-f16.gguf")
