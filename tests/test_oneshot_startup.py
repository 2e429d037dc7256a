"""What a one-shot ``memq search`` pays before it answers: the GGUF header read (a few keys
instead of gguf.GGUFReader's whole-file parse), the imports it does not need, the model loaded
while the rest is imported (same vectors), no garbage collection at exit, and the
single-threaded decode of a short query."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest

from memq.cli import _answering_once, main
from pipeline.config import Settings
from pipeline.embeddings.gguf_header import (
    GGUFHeaderError,
    read_gguf_metadata,
    trained_context_length,
)
from pipeline.embeddings.local import QUERY_ONE_THREAD_TOKENS, LocalProvider
from pipeline.embeddings.providers import ProviderPool
from pipeline.embeddings.registry import chosen_local
from pipeline.errors import ProviderUnavailable
from tests.conftest import run_memq

REPO = Path(__file__).resolve().parents[1]
#: What a one-shot search must not import: the broker and job-log stacks, the GGUF converter,
#: llama-cpp-python's chat formats and disk cache (their stand-ins may be there), and the
#: pipeline's indexing side (message classes, producer, batch workflow, dispatch, store
#: writer, QMD backend, fleet).
NOT_FOR_A_SEARCH = ("gguf", "redis", "celery", "kombu", "httpx", "sqlalchemy", "pydantic",
                    "jinja2", "diskcache", "llama_cpp.llama_chat_format",
                    "zstandard", "workers", "pipeline.messages", "pipeline.dispatch",
                    "pipeline.batch", "pipeline.ingest.producer", "pipeline.ingest.transfer",
                    "pipeline.ingest.reindex", "pipeline.qmd", "pipeline.store.writer",
                    "pipeline.fleet.broker", "pipeline.remote", "pipeline.fleet.job_log",
                    "pipeline.ingest.session_text", "pipeline.ingest.redaction")
#: What a keyword-only ``memq index`` with nothing to do must not import: NumPy (the vector
#: codec, the chunker's weights, the hybrid ranking), pydantic and the message classes, the
#: batch workflow, the search side, the ``sqlite_vec`` package (its ``__init__`` imports
#: ``numpy.typing``; its library is found without it), and the broker and job-log stacks.
NOT_FOR_A_NOOP_INDEX = ("numpy", "pydantic", "pydantic_core", "pipeline.messages",
                        "pipeline.batch.workflow", "pipeline.batch.api", "pipeline.dispatch",
                        "pipeline.search.hybrid", "pipeline.search.rerank",
                        "pipeline.search.retrievers", "pipeline.store.matrix", "sqlite_vec",
                        "celery", "kombu", "redis", "sqlalchemy", "workers.app",
                        "workers.embedded", "pipeline.fleet.broker")


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
    provider = LocalProvider(tiny_model, threads=2, streams=1)  # documents on both threads
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
    provider = LocalProvider(tiny_model, threads=2)  # the default: one stream per thread
    np.testing.assert_allclose(provider.embed_documents([text])[0], doc, atol=1e-6)
    assert ctx_threads() == 1  # each stream decodes on one thread
    provider.embed_query(long_query)
    assert ctx_threads() == 2  # a long query: one sequence on every thread
    provider.close()


def _local_settings(workspace: Path, tiny_model: Path,
                    make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(workspace, provider="local",
                         local={"modelPath": str(tiny_model), "threads": 1})


def test_a_one_shot_memq_search_imports_only_what_it_uses(
        workspace: Path, tiny_model: Path, make_settings: Callable[..., Settings]) -> None:
    settings = _local_settings(workspace, tiny_model, make_settings)
    config = str(settings.config_file)
    done = run_memq("index", "--workspace", str(workspace), "--config", config, timeout=300)
    assert done.returncode == 0, done.stderr
    # The command line itself (argv from sys.argv, as the `memq` script runs it); what it
    # imported is read once it has answered.
    code = ("import json, sys\n"
            "import memq.cli\n"
            "sys.argv = ['memq', 'search', 'Ana school', '--json', '--workspace', sys.argv[1],"
            " '--config', sys.argv[2]]\n"
            "status = memq.cli.main()\n"
            f"heavy = {NOT_FOR_A_SEARCH!r}\n"
            "from pipeline.embeddings.llama_import import DeferredModule\n"
            "loaded = sorted(m for m, mod in sys.modules.items()\n"
            "                if m.startswith(heavy) and not isinstance(mod, DeferredModule))\n"
            "print(json.dumps({'status': status, 'loaded': loaded}), file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(workspace), config],
                          capture_output=True, text=True, timeout=300, cwd=workspace)
    assert proc.returncode == 0, proc.stderr[-2000:]
    answer = json.loads(proc.stdout)
    assert answer["mode"] == "hybrid" and answer["results"]  # the model did embed the query
    seen = json.loads(proc.stderr.strip().splitlines()[-1])
    assert seen == {"status": 0, "loaded": []}


def test_a_noop_keyword_only_memq_index_imports_only_what_it_uses(
        keyword_settings: Settings) -> None:
    # The fixture indexed the workspace once; this second pass, in a fresh process as the
    # `memq` script runs it, finds nothing changed. What it imported is read once it is done.
    code = ("import json, sys\n"
            "import memq.cli\n"
            "sys.argv = ['memq', 'index', '--json', '--workspace', sys.argv[1], '--config',"
            " sys.argv[2]]\n"
            "status = memq.cli.main()\n"
            f"heavy = {NOT_FOR_A_NOOP_INDEX!r}\n"
            "loaded = sorted(m for m in sys.modules\n"
            "                if any(m == h or m.startswith(h + '.') for h in heavy))\n"
            "print(json.dumps({'status': status, 'loaded': loaded}), file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(keyword_settings.workspace),
                           str(keyword_settings.config_file)], capture_output=True, text=True,
                          timeout=120, cwd=keyword_settings.workspace)
    assert proc.returncode == 0, proc.stderr[-2000:]
    answer = json.loads(proc.stdout)
    assert answer["mode"] == "keyword-only" and answer["files"] > 0
    assert answer["changed"] == answer["deleted"] == 0  # a pass with nothing to do
    seen = json.loads(proc.stderr.strip().splitlines()[-1])
    assert seen == {"status": 0, "loaded": []}


def test_a_preloaded_local_model_gives_the_same_vectors(
        workspace: Path, tiny_model: Path, make_settings: Callable[..., Settings]) -> None:
    settings = _local_settings(workspace, tiny_model, make_settings)
    chosen = chosen_local(settings)
    assert chosen is not None
    spec = chosen[1]
    pool = ProviderPool()
    try:
        pool.preload(settings)
        preloaded = pool.get(spec, settings)
        assert pool.get(spec, settings) is preloaded  # the one loading, not a second build
        fresh = LocalProvider(tiny_model, threads=1)
        for text in ("the cat sat", "", "会议纪要 and a longer query " * 3):
            assert np.array_equal(preloaded.embed_query(text), fresh.embed_query(text))
        fresh.close()
    finally:
        pool.close()


def test_nothing_is_preloaded_unless_the_settings_index_with_a_local_model_on_disk(
        workspace: Path, tiny_model: Path, tmp_path: Path,
        make_settings: Callable[..., Settings]) -> None:
    assert chosen_local(make_settings(workspace, provider="none")) is None
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + (3).to_bytes(4, "little"))
    settings = make_settings(workspace, provider="local", local={"modelPath": str(broken)})
    assert chosen_local(settings) is None
    pool = ProviderPool()
    pool.preload(settings)  # silent: the search that needs the model says what is wrong
    with pytest.raises(ProviderUnavailable, match="not a readable GGUF"):
        LocalProvider(broken, threads=1).embed_query("hello")
    pool.close()


def test_a_preload_that_fails_raises_where_the_model_is_needed(tmp_path: Path) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGUF" + (3).to_bytes(4, "little"))
    provider = LocalProvider(path, threads=1)
    provider.warm()
    with pytest.raises(ProviderUnavailable, match="not a readable GGUF"):
        provider.embed_query("hello")
    provider.close()


def test_in_process_commands_leave_garbage_collection_as_it_was(keyword_settings: Settings,
                                                                capsys) -> None:
    frozen = gc.get_freeze_count()
    status = main(["search", "Ana", "--workspace", str(keyword_settings.workspace),
                   "--config", str(keyword_settings.config_file)])
    assert status == 0 and "[keyword-only]" in capsys.readouterr().out
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    with _answering_once(exiting=True):
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() > frozen  # the process would end now
    gc.unfreeze()


def test_the_oneshot_benchmark_runs_at_a_tiny_size(tiny_model: Path) -> None:
    done = subprocess.run([sys.executable, "bench/oneshot_latency.py", "--quick", "--model",
                           str(tiny_model)], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "local rows use local/tiny-bert" in out
    assert "quiet pass:" in out and "loaded pass: 1 busy loops" in out
    for row in ("memq --help", "memq search, local model", "memq search, keyword-only",
                "model load (python -c)"):
        line = next(x for x in out.splitlines() if x.strip().startswith(row + " "))
        quiet, q_ratio, imports, loaded, l_ratio = line[len("  ") + 38:].split()
        assert float(quiet) > 0 and float(imports) > 0 and float(loaded) > 0
        assert q_ratio.endswith("x") and l_ratio.endswith("x")
    assert "memq search, local model / memq --help: quiet " in out and "goal <= 3x quiet" in out
