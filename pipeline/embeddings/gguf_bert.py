"""Convert a Hugging Face BERT sentence-transformer or cross-encoder into a GGUF that llama.cpp
loads as "bert".

This is a small, torch-free port of what llama.cpp's ``convert_hf_to_gguf.py`` ``BertModel`` does
(``conversion/bert.py`` plus ``TextModel.set_gguf_parameters`` / ``get_vocab_base`` in
``conversion/base.py``), for the one family memq needs: absolute-position BERT encoders such as
all-MiniLM-L6-v2. Weights are read with ``safetensors.numpy``.

What llama.cpp needs, and where it comes from:

* ``bert.context_length`` = ``max_position_embeddings`` (llama.cpp checks the position-embedding
  tensor is exactly ``{n_embd, n_ctx_train}``), ``bert.embedding_length``, ``bert.block_count``,
  ``bert.feed_forward_length``, ``bert.attention.head_count``,
  ``bert.attention.layer_norm_epsilon`` (read unconditionally by the bert loader),
  ``bert.attention.causal = false``, ``bert.pooling_type`` (from the sentence-transformers
  ``Pooling`` module; MEAN when there is none).
* ``tokenizer.ggml.model = "bert"`` selects llama.cpp's WordPiece (WPM) tokenizer. Its vocabulary
  is in "phantom space" form: a word-start piece ``foo`` is stored as ``"\\u2581foo"``, a
  continuation piece ``##bar`` as ``bar``, and CONTROL tokens (``[CLS]``...) unchanged.
* ``tokenizer.ggml.token_type_count`` = ``type_vocab_size`` (the loader refuses a BERT without
  it), and the special-token ids (bos = [CLS], eos/sep = [SEP], unk, pad, mask).
* ``tokenizer.ggml.normalizer.lowercase`` / ``.strip_accents`` (BertNormalizer options; recent
  llama.cpp reads them, older builds ignore them and always lowercase + strip accents).
* Tensor names from ``gguf.TensorNameMap`` for ``MODEL_ARCH.BERT`` (``token_embd``,
  ``token_types``, ``position_embd``, ``token_embd_norm``, ``blk.N.attn_q`` ...). The pooler,
  ``position_ids`` and MLM/NSP heads are dropped. Norms, biases, ``position_embd`` and
  ``token_types`` stay float32 (as llama.cpp's converter forces; an f16 ``token_types`` aborts
  the process in ggml's CPU add).

A cross-encoder (``BertForSequenceClassification`` with one label, e.g.
cross-encoder/ms-marco-MiniLM-L-6-v2) becomes a reranker: ``bert.pooling_type`` RANK, the
pooler ``bert.pooler.dense`` as llama.cpp's ``cls`` (applied with tanh to the [CLS] state, as
HF's ``BertPooler``) and ``classifier`` as ``cls.output``, and ``tokenizer.ggml.add_sep_token``
false, so llama.cpp's rerank input is ``[CLS] query [SEP] document [SEP]`` (llama.cpp's
``format_prompt_rerank``; HF's pair template). Unlike llama.cpp's own converter, which drops the
pooler and so scores ``classifier(h_cls)`` instead of ``classifier(tanh(pooler(h_cls)))``, the
scores keep the model's trained scale. One difference from HF stays: llama.cpp adds token type
0 to every position, where HF gives the document's tokens type 1.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.errors import BertConversionError

if TYPE_CHECKING:  # imported where converting needs it: importing gguf costs ~0.1 s
    import gguf

__all__ = ["BERT_SPECIAL_TOKENS", "BertConversionError", "convert_bert_to_gguf", "read_model_dir"]

PHANTOM_SPACE = "\u2581"

# tokenizer_config / special_tokens_map key -> what it is, in llama.cpp terms
BERT_SPECIAL_TOKENS = ("cls_token", "sep_token", "unk_token", "pad_token", "mask_token")

# HF tensor names of a cross-encoder's head (after the "bert." prefix is dropped) -> llama.cpp's.
_RANK_HEAD = {
    "pooler.dense.weight": "cls.weight",
    "pooler.dense.bias": "cls.bias",
    "classifier.weight": "cls.output.weight",
    "classifier.bias": "cls.output.bias",
}

# Files the converter may read; anything else in a model directory is ignored.
MODEL_FILES = (
    "config.json",
    "vocab.txt",
    "model.safetensors",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "modules.json",
)
REQUIRED_FILES = ("config.json", "vocab.txt", "model.safetensors")

# Normaliser keys: newer than gguf 0.19's constants, so spelled out here (llama.cpp llama-arch.cpp).
_KEY_NORMALIZER_LOWERCASE = "tokenizer.ggml.normalizer.lowercase"
_KEY_NORMALIZER_STRIP_ACCENTS = "tokenizer.ggml.normalizer.strip_accents"


def read_model_dir(model_dir: Path) -> dict[str, bytes]:
    """Read the files the converter needs from a Hugging Face model directory."""
    files: dict[str, bytes] = {}
    for name in MODEL_FILES:
        p = model_dir / name
        if p.is_file():
            files[name] = p.read_bytes()
    modules = files.get("modules.json")
    if modules is not None:
        pooling_dir = _pooling_dir(json.loads(modules))
        if pooling_dir is not None:
            p = model_dir / pooling_dir / "config.json"
            if p.is_file():
                files[f"{pooling_dir}/config.json"] = p.read_bytes()
    return files


def _pooling_dir(modules: Any) -> str | None:
    if not isinstance(modules, list):
        return None
    for mod in modules:
        if isinstance(mod, dict) and mod.get("type") == "sentence_transformers.models.Pooling":
            path = str(mod.get("path", "")).strip("/")
            return path or None
    return None


def _json(files: Mapping[str, bytes], name: str) -> Any:
    raw = files.get(name)
    return None if raw is None else json.loads(raw.decode("utf-8"))


def _pooling_type(files: Mapping[str, bytes]) -> gguf.PoolingType:
    """The sentence-transformers pooling mode, as llama.cpp's ``_try_set_pooling_type`` reads it."""
    import gguf
    pooling_dir = _pooling_dir(_json(files, "modules.json"))
    cfg = _json(files, f"{pooling_dir}/config.json") if pooling_dir else None
    if not isinstance(cfg, dict):
        return gguf.PoolingType.MEAN
    if cfg.get("pooling_mode_mean_tokens"):
        return gguf.PoolingType.MEAN
    if cfg.get("pooling_mode_cls_token"):
        return gguf.PoolingType.CLS
    if cfg.get("pooling_mode_lasttoken"):
        return gguf.PoolingType.LAST
    raise BertConversionError("only MEAN, CLS and LAST sentence-transformers pooling are supported")


def _read_vocab(raw: bytes) -> list[str]:
    # Like transformers' load_vocab: one token per line, split on "\n" only (not str.splitlines,
    # which would also split on U+2028, \x1c, ... that can be legitimate vocabulary entries).
    lines = raw.decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def _token_content(entry: Any) -> str | None:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict) and isinstance(entry.get("content"), str):
        return entry["content"]
    return None


def _build_vocab(
    files: Mapping[str, bytes], vocab_size: int
) -> tuple[list[str], list[int], dict[str, int], dict[str, bool]]:
    """Return (phantom-space tokens, token types, special ids, normaliser options)."""
    import gguf
    if "vocab.txt" not in files:
        raise BertConversionError("vocab.txt is missing (a WordPiece vocabulary is required)")
    vocab_lines = _read_vocab(files["vocab.txt"])
    if len(vocab_lines) > vocab_size:
        raise BertConversionError(
            f"vocab.txt has {len(vocab_lines)} tokens but config.json says vocab_size={vocab_size}"
        )
    words: dict[int, str] = dict(enumerate(vocab_lines))
    # Later lines win, as in transformers' load_vocab (and _dedupe below).
    token_to_id: dict[str, int] = {w: i for i, w in words.items()}

    tok_cfg = _json(files, "tokenizer_config.json") or {}
    special_map = _json(files, "special_tokens_map.json") or {}
    tok_json = _json(files, "tokenizer.json") or {}

    # Added tokens: special ones become CONTROL, others USER_DEFINED (as get_vocab_base does).
    control: set[int] = set()
    user_defined: set[int] = set()
    added: list[tuple[int, str, bool]] = []
    for entry in tok_json.get("added_tokens") or []:
        if isinstance(entry, dict) and isinstance(entry.get("id"), int):
            added.append((entry["id"], str(entry.get("content", "")), bool(entry.get("special"))))
    for key, entry in (tok_cfg.get("added_tokens_decoder") or {}).items():
        if isinstance(entry, dict) and str(key).isdigit():
            added.append((int(key), str(entry.get("content", "")), bool(entry.get("special"))))
    for tid, content, special in added:
        if 0 <= tid < vocab_size:
            (control if special else user_defined).add(tid)
            words[tid] = content
            token_to_id[content] = tid

    special_ids: dict[str, int] = {}
    for key in BERT_SPECIAL_TOKENS:
        content = _token_content(tok_cfg.get(key)) or _token_content(special_map.get(key))
        if content is None:
            content = f"[{key.split('_')[0].upper()}]"  # BertTokenizer's defaults: [CLS], [SEP]...
        tid = token_to_id.get(content)
        if tid is not None:
            special_ids[key] = tid
            control.add(tid)
    for key in ("cls_token", "sep_token", "unk_token"):
        if key not in special_ids:
            raise BertConversionError(f"the vocabulary has no {key} (looked in tokenizer files)")

    tokens: list[str] = []
    toktypes: list[int] = []
    for i in range(vocab_size):
        tok = words.get(i)
        if tok is None:  # ids the vocabulary does not cover (get_vocab_base's "[PAD{i}]")
            tokens.append(f"[PAD{i}]")
            toktypes.append(gguf.TokenType.UNUSED)
            continue
        if i in control:
            tokens.append(tok)  # CONTROL tokens are kept verbatim
            toktypes.append(gguf.TokenType.CONTROL)
        elif i in user_defined:
            tokens.append(tok)
            toktypes.append(gguf.TokenType.USER_DEFINED)
        elif tok.startswith("##"):
            tokens.append(tok[2:])  # continuation piece: no phantom space
            toktypes.append(gguf.TokenType.NORMAL)
        else:
            tokens.append(PHANTOM_SPACE + tok)  # word-start piece
            toktypes.append(gguf.TokenType.NORMAL)

    _dedupe(tokens, toktypes)

    # BertNormalizer options: tokenizer.json first, then tokenizer_config.json.
    norm: dict[str, bool] = {}
    normalizer = tok_json.get("normalizer")
    if isinstance(normalizer, dict) and normalizer.get("type") == "BertNormalizer":
        if isinstance(normalizer.get("lowercase"), bool):
            norm["lowercase"] = normalizer["lowercase"]
        if isinstance(normalizer.get("strip_accents"), bool):
            norm["strip_accents"] = normalizer["strip_accents"]
    if "lowercase" not in norm and isinstance(tok_cfg.get("do_lower_case"), bool):
        norm["lowercase"] = tok_cfg["do_lower_case"]
    if "strip_accents" not in norm and isinstance(tok_cfg.get("strip_accents"), bool):
        norm["strip_accents"] = tok_cfg["strip_accents"]
    return tokens, toktypes, special_ids, norm


def _dedupe(tokens: list[str], toktypes: list[int]) -> None:
    """Make every token string unique, in place.

    llama.cpp aborts the whole process (``GGML_ASSERT(id_to_token.size() ==
    token_to_id.size())`` in llama-vocab.cpp) when two tokens have the same text, which a
    vocab.txt with a repeated line would cause. Like transformers' ``load_vocab`` (later lines
    win), the last occurrence keeps the text; earlier ones become unused placeholders.
    llama.cpp itself renames empty tokens to ``[EMPTY_<id>]``, so those are compared that way.
    """
    import gguf
    owner: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        key = tok or f"[EMPTY_{i}]"
        prev = owner.get(key)
        if prev is not None:
            n = 0
            while (placeholder := f"[DUP{prev}{'_' * n}]") in owner or placeholder in tokens:
                n += 1
            tokens[prev] = placeholder
            toktypes[prev] = gguf.TokenType.UNUSED
            owner[placeholder] = prev
        owner[key] = i


_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64}


def _load_safetensors(raw: bytes) -> dict[str, np.ndarray]:
    """safetensors.numpy.load, with a fallback for BF16 (which NumPy has no dtype for)."""
    import safetensors.numpy

    try:
        return dict(safetensors.numpy.load(raw))
    except Exception as exc:  # BF16 and friends: parse the (simple) format ourselves
        (header_len,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + header_len])
        base = 8 + header_len
        out: dict[str, np.ndarray] = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            start, end = info["data_offsets"]
            buf = raw[base + start : base + end]
            dt = info["dtype"]
            if dt == "BF16":
                u16 = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
                arr = u16.view(np.float32)
            elif dt in _ST_DTYPES:
                arr = np.frombuffer(buf, dtype=np.dtype(_ST_DTYPES[dt]).newbyteorder("<"))
            else:
                raise BertConversionError(f"unsupported safetensors dtype {dt} for {name}") from exc
            out[name] = arr.reshape(info["shape"])
        return out


def _hf_to_gguf_name(name: str, tmap: gguf.TensorNameMap, *, rank: bool = False) -> str | None:
    """Map an HF BERT tensor name, or None for tensors llama.cpp's BertModel drops. With
    ``rank`` (a cross-encoder) the pooler and classifier become the rank head."""
    if name.startswith("bert."):
        name = name[5:]
    if name.endswith(".gamma"):
        name = name[:-6] + ".weight"
    if name.endswith(".beta"):
        name = name[:-5] + ".bias"
    if rank and name in _RANK_HEAD:
        return _RANK_HEAD[name]
    if name in ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"):
        return None
    if name.startswith(("cls.predictions", "cls.seq_relationship", "pooler.")):
        return None
    mapped = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
    if mapped is None:
        raise BertConversionError(f"cannot map tensor {name!r} to a llama.cpp BERT tensor")
    return mapped


# llama.cpp's prepare_tensors keeps these in float32 whatever the output type. It matters: the
# bert graph adds a row of token_types straight onto the float32 activations, and ggml's CPU add
# aborts the process on f32 + f16 ("binary_op: unsupported types").
_F32_TENSORS = ("position_embd.weight", "token_types.weight")


def _keep_f32(new_name: str, ndim: int) -> bool:
    return (
        ndim <= 1
        or new_name.endswith("_norm.weight")
        or new_name in _F32_TENSORS
        or not new_name.endswith(".weight")
    )


def _tensor_sort_key(name: str) -> tuple[int, str]:
    parts = name.split(".")
    if len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit():
        return int(parts[1]), name
    return -1, name


def _is_cross_encoder(cfg: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> bool:
    """Whether the model is a one-label ``BertForSequenceClassification`` (a reranker); raises
    for a classifier memq cannot score with (several labels, no pooler)."""
    archs = cfg.get("architectures") or []
    if "classifier.weight" not in tensors and "BertForSequenceClassification" not in archs:
        return False
    weight = tensors.get("classifier.weight")
    if weight is None or weight.ndim != 2:
        raise BertConversionError("a sequence classifier without a classifier.weight matrix")
    if weight.shape[0] != 1:
        raise BertConversionError(f"the classifier has {weight.shape[0]} labels; only one-label "
                                  "cross-encoders (a relevance logit) are supported")
    if not {"pooler.dense.weight", "bert.pooler.dense.weight"} & set(tensors):
        raise BertConversionError("a cross-encoder without bert.pooler.dense")
    return True


def convert_bert_to_gguf(
    model_files: Mapping[str, bytes] | Path,
    out_path: Path,
    *,
    dtype: str = "f16",
    name: str | None = None,
    pooling: gguf.PoolingType | None = None,
) -> Path:
    """Write a llama.cpp "bert" GGUF for a HF BERT sentence-transformer, or a reranker GGUF
    for a one-label BERT cross-encoder (see the module docstring); return ``out_path``.

    ``model_files`` is either a model directory or a mapping from relative file name
    (``"config.json"``, ``"vocab.txt"``, ``"model.safetensors"``, optionally
    ``"tokenizer_config.json"``, ``"special_tokens_map.json"``, ``"tokenizer.json"``,
    ``"modules.json"`` and ``"<pooling dir>/config.json"``) to file contents.
    ``dtype`` is ``"f16"`` (matrices as float16) or ``"f32"``; norms and biases are always float32.
    ``name`` sets ``general.name``; ``pooling`` overrides the sentence-transformers pooling mode
    (a cross-encoder is always RANK).
    The file is written to a temporary name next to ``out_path`` and renamed into place.
    """
    import gguf

    if dtype not in ("f16", "f32"):
        raise ValueError(f"dtype must be 'f16' or 'f32', not {dtype!r}")
    if isinstance(model_files, (str, Path)):
        files: Mapping[str, bytes] = read_model_dir(Path(model_files))
    else:
        files = model_files
    for required in ("config.json", "model.safetensors"):
        if required not in files:
            raise BertConversionError(f"{required} is missing")

    cfg = _json(files, "config.json")
    if not isinstance(cfg, dict):
        raise BertConversionError("config.json is not a JSON object")
    if cfg.get("model_type", "bert") != "bert":
        raise BertConversionError(f"model_type {cfg.get('model_type')!r} is not 'bert'")
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        raise BertConversionError("only absolute position embeddings are supported")
    if cfg.get("hidden_act", "gelu") not in ("gelu", "gelu_new", "gelu_pytorch_tanh"):
        raise BertConversionError(f"hidden_act {cfg.get('hidden_act')!r} is not a GELU")
    try:
        n_ctx = int(cfg["max_position_embeddings"])
        n_embd = int(cfg["hidden_size"])
        n_layer = int(cfg["num_hidden_layers"])
        n_ff = int(cfg["intermediate_size"])
        n_head = int(cfg["num_attention_heads"])
    except KeyError as exc:
        raise BertConversionError(f"config.json lacks {exc.args[0]}") from None
    eps = float(cfg.get("layer_norm_eps", 1e-12))
    n_types = int(cfg.get("type_vocab_size", 1))

    tensors = _load_safetensors(files["model.safetensors"])
    word_emb = tensors.get("embeddings.word_embeddings.weight")
    if word_emb is None:
        word_emb = tensors.get("bert.embeddings.word_embeddings.weight")
    if word_emb is None:
        raise BertConversionError("model.safetensors has no embeddings.word_embeddings.weight")
    vocab_size = int(cfg.get("vocab_size", word_emb.shape[0]))
    if word_emb.shape != (vocab_size, n_embd):
        raise BertConversionError(
            f"word embeddings are {word_emb.shape}, config says ({vocab_size}, {n_embd})"
        )

    tokens, toktypes, special_ids, norm = _build_vocab(files, vocab_size)
    rank = _is_cross_encoder(cfg, tensors)
    if rank:
        pooling = gguf.PoolingType.RANK

    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".tmp", dir=out_path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        w = gguf.GGUFWriter(tmp, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
        w.add_type(gguf.GGUFType.MODEL)
        w.add_name(name or str(cfg.get("_name_or_path") or "bert").rsplit("/", 1)[-1])
        w.add_block_count(n_layer)
        w.add_context_length(n_ctx)
        w.add_embedding_length(n_embd)
        w.add_feed_forward_length(n_ff)
        w.add_head_count(n_head)
        w.add_layer_norm_eps(eps)
        w.add_causal_attention(False)
        w.add_pooling_type(_pooling_type(files) if pooling is None else pooling)
        w.add_file_type(
            gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.ALL_F32
        )

        w.add_token_type_count(n_types)
        w.add_tokenizer_model("bert")
        w.add_tokenizer_pre("default")  # llama.cpp only uses pre-tokenisers for BPE vocabularies
        w.add_token_list(tokens)
        w.add_token_types(toktypes)
        w.add_bos_token_id(special_ids["cls_token"])
        w.add_eos_token_id(special_ids["sep_token"])
        w.add_sep_token_id(special_ids["sep_token"])
        w.add_unk_token_id(special_ids["unk_token"])
        if "pad_token" in special_ids:
            w.add_pad_token_id(special_ids["pad_token"])
        if "mask_token" in special_ids:
            w.add_mask_token_id(special_ids["mask_token"])
        w.add_add_bos_token(True)
        w.add_add_eos_token(True)
        if rank:  # [CLS] query [SEP] document [SEP]: no second separator between the two
            w.add_add_sep_token(False)
        if "lowercase" in norm:
            w.add_bool(_KEY_NORMALIZER_LOWERCASE, norm["lowercase"])
        if "strip_accents" in norm:
            w.add_bool(_KEY_NORMALIZER_STRIP_ACCENTS, norm["strip_accents"])
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)

        tmap = gguf.TensorNameMap(gguf.MODEL_ARCH.BERT, n_layer)
        seen: set[str] = set()
        mapped = [(_hf_to_gguf_name(k, tmap, rank=rank), arr) for k, arr in tensors.items()]
        # safetensors hands tensors back in hash order; sort so the same weights always give
        # a byte-identical file (globals first, then blk.0, blk.1, ...).
        mapped.sort(key=lambda item: _tensor_sort_key(item[0] or ""))
        for new_name, arr in mapped:
            if new_name is None:
                continue
            if new_name in seen:
                raise BertConversionError(f"two tensors map to {new_name}")
            seen.add(new_name)
            data = np.asarray(arr)
            if dtype == "f32" or _keep_f32(new_name, data.ndim):
                data = np.ascontiguousarray(data, dtype=np.float32)
            else:
                data = np.ascontiguousarray(data, dtype=np.float16)
            w.add_tensor(new_name, data)

        must_have = {"token_embd.weight", "position_embd.weight", "token_embd_norm.weight"}
        if rank:
            must_have |= set(_RANK_HEAD.values())
        if missing := must_have - seen:
            raise BertConversionError(f"missing tensors: {sorted(missing)}")
        pos = tensors.get("embeddings.position_embeddings.weight")
        if pos is None:
            pos = tensors.get("bert.embeddings.position_embeddings.weight")
        if pos is not None and pos.shape[0] != n_ctx:
            raise BertConversionError(
                f"position embeddings have {pos.shape[0]} rows, max_position_embeddings={n_ctx}"
            )

        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, out_path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return out_path


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.embeddings.gguf_bert MODEL_DIR OUT.gguf [--dtype f16|f32]``:
    convert a downloaded HF BERT sentence-transformer or one-label cross-encoder directory."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m pipeline.embeddings.gguf_bert",
        description="Convert a Hugging Face BERT sentence-transformer (an embedding model) or a "
                    "one-label BERT cross-encoder (a reranker, e.g. "
                    "cross-encoder/ms-marco-MiniLM-L-6-v2) into a GGUF llama.cpp loads.")
    parser.add_argument("model_dir", type=Path, help="the model's directory (config.json, "
                        "vocab.txt, model.safetensors, tokenizer files)")
    parser.add_argument("out", type=Path, help="the .gguf file to write")
    parser.add_argument("--dtype", choices=("f16", "f32"), default="f16",
                        help="matrices as float16 (default) or float32")
    parser.add_argument("--name", help="general.name (default: from config.json)")
    args = parser.parse_args(argv)
    try:
        out = convert_bert_to_gguf(args.model_dir, args.out, dtype=args.dtype, name=args.name)
    except (BertConversionError, OSError, ValueError) as exc:
        print(f"cannot convert {args.model_dir}: {exc}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
