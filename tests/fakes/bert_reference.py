"""An independent NumPy BERT: HF's BertTokenizer (basic + WordPiece) and BertModel forward pass,
written without llama.cpp or memq's converter, so the GGUF path can be checked against it
(:mod:`tests.test_local_embeddings`, :mod:`tests.test_rerank_local`)."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping

import numpy as np


def _is_punct(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def wordpiece_ids(text: str, vocab: list[str], *, lowercase: bool = True) -> list[int]:
    """HF BertTokenizer (basic + WordPiece) on the raw vocab.txt, without [CLS]/[SEP]."""
    index = {tok: i for i, tok in reversed(list(enumerate(vocab)))}
    cleaned = []
    for ch in text:
        cp = ord(ch)
        if cp in (0, 0xFFFD) or (unicodedata.category(ch).startswith("C") and ch not in "\t\n\r"):
            continue
        if 0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF:
            cleaned.append(f" {ch} ")
        else:
            cleaned.append(" " if ch.isspace() else ch)
    words: list[str] = []
    for tok in "".join(cleaned).split():
        if lowercase:
            tok = unicodedata.normalize("NFD", tok.lower())
            tok = "".join(c for c in tok if unicodedata.category(c) != "Mn")
        cur = ""
        for ch in tok:
            if _is_punct(ch):
                if cur:
                    words.append(cur)
                words.append(ch)
                cur = ""
            else:
                cur += ch
        if cur:
            words.append(cur)
    ids: list[int] = []
    for word in words:
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in index:
                    pieces.append(index[piece])
                    break
                end -= 1
            if end == start:
                pieces = [index["[UNK]"]]
                break
            start = end
        ids.extend(pieces)
    return ids


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def bert_token_states(w: Mapping[str, np.ndarray], cfg: dict, ids: list[int]) -> np.ndarray:
    """A plain NumPy BERT encoder (HF BertModel semantics, exact-erf GELU), float64."""
    w = {k.removeprefix("bert."): np.asarray(v, dtype=np.float64) for k, v in w.items()}
    eps, n_head = cfg["layer_norm_eps"], cfg["num_attention_heads"]
    n = len(ids)
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:n]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}"

        def lin(name: str, v: np.ndarray, p: str = p) -> np.ndarray:
            return v @ w[f"{p}.{name}.weight"].T + w[f"{p}.{name}.bias"]

        d = x.shape[1] // n_head
        q, k, v = (
            lin(f"attention.self.{s}", x).reshape(n, n_head, d).transpose(1, 0, 2)
            for s in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probs = scores / scores.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(1, 0, 2).reshape(n, n_head * d)
        x = _layer_norm(
            lin("attention.output.dense", ctx) + x,
            w[f"{p}.attention.output.LayerNorm.weight"],
            w[f"{p}.attention.output.LayerNorm.bias"],
            eps,
        )
        h = lin("intermediate.dense", x)
        h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
        x = _layer_norm(
            lin("output.dense", h) + x,
            w[f"{p}.output.LayerNorm.weight"],
            w[f"{p}.output.LayerNorm.bias"],
            eps,
        )
    return x
