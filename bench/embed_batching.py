"""Benchmark: where local-model embedding time goes, and whether packing several chunks into one
llama.cpp call beats one chunk per call (issue 37 item 4).

Not a test. SciFact documents (file order) are cut into chunks exactly as ``memq index`` cuts a
memory file (``chunk_markdown``, OpenClaw's 400/80 tokens), the first ``--chunks`` are kept, and
the same texts are embedded by:

(a) memq: ``LocalProvider.embed_documents(texts)`` (tokenising included), the path an embed
    worker runs (its llama.cpp calls counted), in its default layout (one decode stream per
    thread) and with one stream on every thread (``--no-one-stream``: not); ``--model2`` adds
    the default layout on another GGUF (e.g. the same weights stored as f32);
(b) bare, one sequence per call: llama.cpp's own context (the model's trained context), the
    texts tokenised beforehand (not timed), one ``llama_decode`` per chunk (per window for a
    chunk longer than the context), on ``--bare-threads`` threads (default ``--threads``; 1:
    what one decode stream's llama.cpp does with no Python around it);
(c) packed: a context of K sequences (``n_seq_max = K``), chunks packed in order into one
    decode until K sequences or ``budget`` tokens, each sequence's pooled vector read with
    ``llama_get_embeddings_seq``; for K in ``--ks``, with the budget K x the trained context
    and with the budget of one context (``--budgets``).

A chunk longer than the model's window (memq's default model: its trained 256 tokens; another:
the context) is split into windows as memq splits it (``pipeline.embeddings.local
.split_windows``) and its window vectors averaged by token count, in every run, so every run
decodes the sequences memq decodes and yields one unit vector per chunk. Each run is timed
``--rounds`` times (the order rotated between rounds; the best time is reported, the machine
is shared); "cpu s" is the process's CPU time (both threads; ggml's threads spin while they
wait for each other, so a loaded machine inflates it too). Its vectors are compared with
(b)'s: "max 1-cos" is the largest 1 - cosine over all chunks.
BERT-type models have no KV cache: llama.cpp encodes a batch in one graph whose attention
spans every token of the batch (other sequences masked out), so packing trades fewer calls and
larger matrix products for attention work that grows with the square of the batch's tokens.

The header names the llama.cpp build's CPU features (``llama_print_system_info``) and the time
tokenising the chunks takes alone. "GFLOP/cpu-s" is the model's arithmetic (a BERT's dense
layers and attention, from the GGUF's sizes) per CPU second of the run, beside a roofline
measured between the rounds: NumPy's float32 matrix product (OpenBLAS, one thread, 1024^3)
per CPU second.

    .venv/bin/python bench/embed_batching.py [--chunks 300] [--threads 2] [--ks 2,4,8]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the sgemm reference runs on one thread

import numpy as np
from evalsets import add_data_arg
from harness import add_common_args, add_quick_arg, header

from memq.evaluation import beir
from pipeline.embeddings import local
from pipeline.embeddings.base import l2_normalise
from pipeline.embeddings.default_model import default_model_path
from pipeline.embeddings.llama_model import load_llama
from pipeline.embeddings.local import LocalProvider, _special_affixes, split_windows
from pipeline.ingest.chunking import chunk_markdown

#: n_seq_max of a packed stream's context (llama.cpp wants it to divide the context)
PACK_SEQS = 64


def scifact_chunks(data: Path, limit: int) -> list[str]:
    """The first ``limit`` chunks of SciFact's documents in file order, cut as memq cuts a
    memory file."""
    collection = beir.load_collection(data / "scifact", "test")
    files, _ = beir.memory_files(collection.corpus)
    texts: list[str] = []
    for content in files.values():
        texts.extend(c.text for c in chunk_markdown(content))
        if len(texts) >= limit:
            break
    return texts[:limit]


@dataclass
class Piece:
    """One sequence to decode: a whole chunk or one window of it."""

    chunk: int
    ids: list[int]
    weight: int  # the chunk's own tokens in this window (windows are averaged by it)


def pieces(token_ids: list[list[int]], prefix: list[int], suffix: list[int],
           n_ctx: int, window: int = 0) -> list[Piece]:
    """Every chunk as the sequences memq decodes for it (one, or one per window of at most
    ``window`` tokens, or of the context when ``window`` is 0)."""
    room = n_ctx - len(prefix) - len(suffix)
    if window:
        room = min(room, window)
    out: list[Piece] = []
    for i, ids in enumerate(token_ids):
        if len(ids) <= room:
            out.append(Piece(i, prefix + ids + suffix, max(len(ids), 1)))
        else:
            out.extend(Piece(i, prefix + ids[s:e] + suffix, e - s)
                       for s, e in split_windows(len(ids), room))
    return out


class Packed:
    """A bare llama.cpp embedding context for up to ``k`` sequences of at most ``n_ctx``
    tokens each, ``budget`` tokens per decode (one ubatch: an encoder cannot split one).
    ``model``: an already loaded ``LlamaModel`` to share (its weights), else its own.
    ``unified``: llama.cpp's ``kv_unified`` (llama-cpp-python's ``Llama`` sets it; one
    attention over the whole batch, other sequences masked out) instead of per-sequence."""

    def __init__(self, path: Path, threads: int, n_ctx: int, k: int, budget: int, *,
                 model: object = None, flash: bool = True, unified: bool = False) -> None:
        import llama_cpp
        from llama_cpp import _internals as internals

        self.k, self.budget = k, budget
        self._stack = contextlib.ExitStack()
        if model is None:
            model = self._stack.enter_context(contextlib.closing(internals.LlamaModel(
                path_model=str(path), params=llama_cpp.llama_model_default_params(),
                verbose=False)))
        self.model = model
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = max(budget, n_ctx)
        cparams.n_batch = cparams.n_ubatch = budget
        cparams.n_seq_max = k
        cparams.kv_unified = unified
        cparams.embeddings = True
        cparams.n_threads = cparams.n_threads_batch = threads
        cparams.flash_attn_type = (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash
                                   else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        self.ctx = self._stack.enter_context(contextlib.closing(
            internals.LlamaContext(model=self.model, params=cparams, verbose=False)))
        self.batch = self._stack.enter_context(contextlib.closing(
            internals.LlamaBatch(n_tokens=budget, embd=0, n_seq_max=1, verbose=False)))
        self.dims = self.model.n_embd()

    def embed(self, seqs: list[Piece], n_chunks: int) -> np.ndarray:
        """Unit vectors, one per chunk, from ``seqs`` packed in order."""
        vectors = [v for group in self.groups(seqs) for v in self._decode(group)]
        return combine(seqs, vectors, n_chunks, self.dims)

    def groups(self, seqs: list[Piece]) -> Iterator[list[Piece]]:
        """``seqs``, in order, in the groups one call decodes: at most K sequences and
        ``budget`` tokens."""
        group: list[Piece] = []
        used = 0
        for piece in seqs:
            if group and (len(group) == self.k or used + len(piece.ids) > self.budget):
                yield group
                group, used = [], 0
            group.append(piece)
            used += len(piece.ids)
        if group:
            yield group

    def _decode(self, group: list[Piece]) -> list[np.ndarray]:
        import llama_cpp

        self.batch.reset()
        for s, piece in enumerate(group):
            self.batch.add_sequence(piece.ids, s, True)
        self.ctx.decode(self.batch)
        out = []
        for s in range(len(group)):
            ptr = llama_cpp.llama_get_embeddings_seq(self.ctx.ctx, s)
            out.append(np.ctypeslib.as_array(ptr, shape=(self.dims,)).astype(np.float64))
        return out

    def close(self) -> None:
        self._stack.close()


def model_flops(path: Path, seqs: list[Piece]) -> float:
    """Floating-point operations a BERT-type GGUF does for ``seqs``: per layer and token the
    Q, K, V and output projections and the feed-forward's two matrices (2 x H x (4H + 2F)),
    and attention (QK^T and its product with V: 4 x n x H for a sequence of n tokens)."""
    import gguf

    reader = gguf.GGUFReader(str(path))

    def field(name: str) -> int:
        f = reader.fields[name]
        return int(f.parts[f.data[0]][0])

    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    h, ff, layers = (field(f"{arch}.{k}") for k in
                     ("embedding_length", "feed_forward_length", "block_count"))
    return float(sum(layers * (2 * h * (4 * h + 2 * ff) * len(p.ids) + 4 * len(p.ids) ** 2 * h)
                     for p in seqs))


def sgemm_rate(n: int = 1024, repeat: int = 10) -> float:
    """GFLOP per CPU second of NumPy's float32 n x n matrix product (one OpenBLAS thread)."""
    rng = np.random.default_rng(0)
    a, b = (rng.random((n, n), dtype=np.float32) for _ in range(2))
    a @ b
    c0 = time.process_time()
    for _ in range(repeat):
        a @ b
    return repeat * 2 * n ** 3 / (time.process_time() - c0) / 1e9


def combine(seqs: list[Piece], vectors: list[np.ndarray], n_chunks: int, dims: int) -> np.ndarray:
    """One unit vector per chunk: its pieces' pooled vectors averaged by their weights."""
    total = np.zeros((n_chunks, dims), dtype=np.float64)
    weights = np.zeros(n_chunks)
    for piece, vec in zip(seqs, vectors, strict=True):
        total[piece.chunk] += piece.weight * vec
        weights[piece.chunk] += piece.weight
    return l2_normalise(total / np.maximum(weights, 1)[:, None])


class Streams:
    """``n`` contexts on one model, each decoding on ``threads`` threads in a Python thread of
    its own (ctypes releases the GIL during ``llama_decode``); each stream takes the next call's
    worth of sequences when it is done with its last. ``layout.pack``: 0, one sequence per call;
    else whole sequences, longest first, packed into calls of at most that many tokens (and
    ``PACK_SEQS``), each its own seq_id, in a context of ``n_seq_max = PACK_SEQS``, per-sequence
    (``layout.unified`` False) or unified (True) attention."""

    def __init__(self, path: Path, layout: Layout, n_ctx: int) -> None:
        import llama_cpp
        from llama_cpp import _internals as internals

        self._stack = contextlib.ExitStack()
        model = self._stack.enter_context(contextlib.closing(internals.LlamaModel(
            path_model=str(path), params=llama_cpp.llama_model_default_params(),
            verbose=False)))
        k, budget = (PACK_SEQS, max(layout.pack, n_ctx)) if layout.pack else (1, n_ctx)
        self.contexts = [self._stack.enter_context(contextlib.closing(
            Packed(path, layout.threads, n_ctx, k, budget, model=model, flash=layout.flash,
                   unified=layout.unified)))
            for _ in range(layout.streams)]
        self.dims = self.contexts[0].dims

    def calls(self, seqs: list[Piece]) -> list[list[Piece]]:
        """The sequences of each call, longest first."""
        return list(self.contexts[0].groups(sorted(seqs, key=lambda p: -len(p.ids))))

    def embed(self, seqs: list[Piece], n_chunks: int) -> np.ndarray:
        """Unit vectors, one per chunk; the calls shared out among the streams."""
        calls = self.calls(seqs)
        done: list[list[np.ndarray]] = [[] for _ in calls]
        taken = itertools.count()

        def stream(ctx: Packed) -> None:
            while (i := next(taken)) < len(calls):
                done[i] = ctx._decode(calls[i])

        if len(self.contexts) == 1:
            stream(self.contexts[0])
        else:
            with ThreadPoolExecutor(len(self.contexts)) as pool:
                for future in [pool.submit(stream, ctx) for ctx in self.contexts]:
                    future.result()
        order = [p for call in calls for p in call]
        return combine(order, [v for got in done for v in got], n_chunks, self.dims)

    def close(self) -> None:
        self._stack.close()


@dataclass
class Run:
    label: str
    embed: Callable[[], np.ndarray]
    calls: int
    tokens: int
    cpu: float = float("inf")
    vectors: np.ndarray | None = None
    times: list[float] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        """The best round's wall-clock time."""
        return min(self.times)


def layout_name(streams: int, threads: int) -> str:
    """"2 streams x 1 thr"."""
    return f"{streams} stream{'s' if streams > 1 else ''} x {threads} thr"


@dataclass(frozen=True)
class Layout:
    """A ``--streams`` row: ``streams`` contexts of ``threads`` threads; flash attention;
    tokens packed per call (0: one sequence per call); unified attention."""

    streams: int
    threads: int
    flash: bool = True
    pack: int = 0
    unified: bool = False

    def label(self) -> str:
        """"(d) 2 streams x 1 thr, packed 1024 tokens, unified"."""
        extra = ("" if self.flash else ", no FA") + (
            f", packed {self.pack} tokens" if self.pack else "") + (
            ", unified" if self.unified else "")
        return f"(d) {layout_name(self.streams, self.threads)}{extra}"


def parse_layout(ap: argparse.ArgumentParser, spec: str) -> Layout:
    """``SxT`` with any of ``:nofa`` (flash attention off), ``:packN`` (N tokens per call) and
    ``:unified`` (unified attention) after it."""
    shape, *flags = spec.split(":")
    try:
        n, threads = (int(x) for x in shape.split("x"))
        packs = [int(f[4:]) for f in flags if f.startswith("pack")]
    except ValueError:
        ap.error(f"--streams: {spec!r} is not SxT[:nofa][:packN][:unified] (e.g. 2x1:pack1024)")
    unknown = [f for f in flags if f not in ("nofa", "unified") and not f.startswith("pack")]
    if n < 1 or threads < 1 or unknown or len(packs) > 1 or any(p < 1 for p in packs):
        ap.error(f"--streams: {spec!r}: S and T >= 1; suffixes :nofa, :packN (N >= 1), :unified")
    return Layout(n, threads, "nofa" not in flags, packs[0] if packs else 0, "unified" in flags)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=300, help="SciFact chunks to embed (300)")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads, every run (2)")
    ap.add_argument("--ks", default="2,4,8",
                    help="sequences per packed call (2,4,8; empty: no packed rows)")
    ap.add_argument("--budgets", default="k,ctx",
                    help="token budgets per packed call: k (K x context), ctx (one context), "
                         "or numbers (k,ctx)")
    ap.add_argument("--streams", default="1x2,2x1",
                    help="bare streams rows, SxT: S contexts on one model decoding side by "
                         "side, T threads each, one sequence per call; after one ':nofa': flash "
                         "attention off, ':packN': whole sequences packed into calls of N "
                         "tokens, ':unified': unified attention (1x2,2x1; empty: none)")
    ap.add_argument("--one-stream", action=argparse.BooleanOptionalAction, default=True,
                    help="the memq row of one stream on every thread (on)")
    ap.add_argument("--bare-threads", type=int, default=0,
                    help="threads of (b), the bare loop every row is compared with (--threads)")
    ap.add_argument("--rounds", type=int, default=2, help="timed rounds per run, best kept (2)")
    ap.add_argument("--model", type=Path, default=None, help="GGUF (memq's default model)")
    ap.add_argument("--model2", type=Path, default=None,
                    help="another GGUF for a memq row in the default layout (e.g. f32 weights)")
    add_data_arg(ap)
    add_common_args(ap)
    add_quick_arg(ap, chunks=12, ks="2,4", streams="1x2,2x1,2x1:nofa,2x1:pack512",
                  rounds=1)
    args = ap.parse_args()
    if args.chunks < 1 or args.rounds < 1:
        ap.error("--chunks and --rounds must be >= 1")
    ks = [int(k) for k in args.ks.split(",") if k]
    if ks and min(ks) < 2:
        ap.error("--ks: packing needs K >= 2")
    layouts = [parse_layout(ap, spec) for spec in args.streams.split(",") if spec]

    texts = scifact_chunks(args.data, args.chunks)
    path = args.model or default_model_path()
    llm, n_ctx = load_llama(path, args.threads)  # the tokenizer, and memq's context length
    prefix, suffix = _special_affixes(llm)
    t0 = time.perf_counter()
    token_ids = [list(llm.tokenize(t.encode("utf-8"), add_bos=False, special=False))
                 for t in texts]
    tokenising = time.perf_counter() - t0
    llm.close()
    seqs = pieces(token_ids, prefix, suffix, n_ctx, LocalProvider(args.model).window_tokens)
    tokens = sum(len(p.ids) for p in seqs)

    contexts: list[Packed | Streams] = []

    def packed_run(label: str, k: int, budget: int, threads: int = args.threads) -> Run:
        ctx = Packed(path, threads, n_ctx, k, budget)
        contexts.append(ctx)
        ctx.embed(seqs[:1], 1)  # warm-up: the first graph
        return Run(label, lambda: ctx.embed(seqs, len(texts)),
                   sum(1 for _ in ctx.groups(seqs)), tokens)

    # memq's default layout (one stream per thread), one stream on every thread (before), and
    # the default layout on --model2
    rows = {(args.threads, path): layout_name(args.threads, 1)}
    if args.one_stream:
        rows[(1, path)] = layout_name(1, args.threads)
    if args.model2:
        rows[(args.threads, args.model2)] = f"{layout_name(args.threads, 1)}, {args.model2.name}"
    providers = {key: LocalProvider(key[1], threads=args.threads, streams=key[0])
                 for key in rows}
    calls: dict[tuple[int, Path], list[int]] = {key: [] for key in providers}

    def memq_run(key: tuple[int, Path]) -> np.ndarray:
        real = local.decode_pooled

        def counted(*a: object, **kw: object) -> np.ndarray | None:
            calls[key].append(1)
            return real(*a, **kw)

        local.decode_pooled = counted
        try:
            return providers[key].embed_documents(texts)
        finally:
            local.decode_pooled = real

    memq_rows = {}
    for key, provider in providers.items():
        provider.embed_documents(["warm-up: load the model", "and open its streams"])
        memq_rows[key] = Run(f"(a) memq LocalProvider, {rows[key]}",
                             lambda key=key: memq_run(key), 0, tokens)
    bare = args.bare_threads or args.threads
    runs = [*memq_rows.values(), packed_run(f"(b) bare, 1 sequence/call, {bare} thr", 1, n_ctx,
                                            bare)]
    for k in ks:
        for budget in args.budgets.split(","):
            size = k * n_ctx if budget == "k" else n_ctx if budget == "ctx" else int(budget)
            if size % k:  # llama.cpp's graph reserve asserts (aborts) unless K divides it
                continue
            runs.append(packed_run(f"(c) packed K={k}, {size} tokens", k, size))
    for layout in layouts:
        streams = Streams(path, layout, n_ctx)
        contexts.append(streams)
        for ctx in streams.contexts:  # warm-up: every stream's first graph
            ctx._decode(seqs[:1])
        runs.append(Run(layout.label(), lambda s=streams: s.embed(seqs, len(texts)),
                        len(streams.calls(seqs)), tokens))

    sgemm: list[float] = []
    for r in range(args.rounds):
        order = runs[r % len(runs):] + runs[:r % len(runs)]
        for run in order:
            t0, c0 = time.perf_counter(), time.process_time()
            vectors = run.embed()
            run.times.append(time.perf_counter() - t0)
            run.cpu = min(run.cpu, time.process_time() - c0)
            run.vectors = vectors
        sgemm.append(sgemm_rate())
    for key, row in memq_rows.items():
        row.calls = len(calls[key]) // args.rounds
        providers[key].close()
    for ctx in contexts:
        ctx.close()

    report(args, texts, seqs, n_ctx, runs, tokenising, (model_flops(path, seqs), sgemm))


def report(args: argparse.Namespace, texts: list[str], seqs: list[Piece], n_ctx: int,
           runs: list[Run], tokenising: float, roofline: tuple[float, list[float]]) -> None:
    import llama_cpp

    print(header("embed batching", threads=args.threads, chunks=len(texts), ks=args.ks or "-",
                 budgets=args.budgets, streams=args.streams or "-", rounds=args.rounds))
    print(f"llama.cpp build: {llama_cpp.llama_print_system_info().decode().strip()}")
    lengths = np.array([len(p.ids) for p in seqs])
    windowed = len(seqs) - len({p.chunk for p in seqs})
    print(f"chunks: {len(texts)} (avg {np.mean([len(t) for t in texts]):.0f} chars), "
          f"sequences: {len(seqs)} ({windowed} extra windows), context {n_ctx}, tokens per "
          f"sequence: median {np.median(lengths):.0f}, p90 {np.percentile(lengths, 90):.0f}, "
          f"max {lengths.max()}; tokenising them alone: {tokenising:.2f} s")
    flops, sgemm = roofline
    print(f"arithmetic: {flops / 1e9:.1f} GFLOP ({flops / sum(len(p.ids) for p in seqs) / 1e6:.1f}"
          f" MFLOP/token); NumPy float32 matmul, 1 thread: {max(sgemm):.1f} GFLOP/cpu-s (rounds:"
          f" {' '.join(f'{x:.1f}' for x in sgemm)})")
    print()
    base = next(run for run in runs if run.label.startswith("(b)"))
    width = max(len(run.label) for run in runs) + 2
    print(f"{'run':<{width}}{'calls':>6}{'best s':>8}{'median s':>9}{'texts/s':>8}{'tokens/s':>9}"
          f"{'vs (b)':>7}{'median':>7}{'cpu s':>7}{'cpu vs (b)':>11}{'GFLOP/cpu-s':>12}"
          f"{'max 1-cos':>10}")
    for run in runs:
        assert run.vectors is not None and base.vectors is not None
        dev = float(np.max(1.0 - np.sum(run.vectors.astype(np.float64) * base.vectors, axis=1)))
        median = float(np.median(run.times))
        print(f"{run.label:<{width}}{run.calls:>6}{run.seconds:>8.2f}{median:>9.2f}"
              f"{len(texts) / run.seconds:>8.1f}{run.tokens / run.seconds:>9.0f}"
              f"{base.seconds / run.seconds:>6.2f}x{np.median(base.times) / median:>6.2f}x"
              f"{run.cpu:>7.2f}{base.cpu / run.cpu:>10.2f}x{flops / run.cpu / 1e9:>12.1f}"
              f"{dev:>10.1e}")

if __name__ == "__main__":
    main()
