"""A local model that cannot be loaded (a corrupt or truncated GGUF) falls back like a missing
one: ``provider: local`` goes to its ``fallback`` (here OpenAI, on a loopback double reached
through the openclaw.json's ``models.providers.openai``), ``auto`` goes on to the remote
providers, with a warning naming the file; search results then say so in ``fallback``
(OpenClaw's ``{from, reason}``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memq import Memory
from pipeline.config import load_settings
from pipeline.embeddings.registry import build_from_spec, choose_provider
from pipeline.errors import ProviderUnavailable
from pipeline.messages import ProviderSpec
from pipeline.status import index_status
from tests.conftest import run_memq
from tests.fakes.provider_doubles import ProviderDouble
from tests.secrets_scan import SENTINEL


@pytest.fixture(params=["truncated", "garbage", "missing"])
def broken_model(request, tiny_model: Path, tmp_path: Path) -> Path:
    path = tmp_path / "models" / "broken.gguf"
    path.parent.mkdir()
    data = tiny_model.read_bytes()
    if request.param == "truncated":  # a download cut short: the tensor data is incomplete
        path.write_bytes(data[: len(data) - 200])
    elif request.param == "garbage":
        path.write_bytes(b"<html>rate limited</html>" * 100)
    return path


@pytest.fixture
def openai_double():
    with ProviderDouble("openai", api_key=SENTINEL) as double:
        yield double


def _config(tmp_path: Path, workspace: Path, double: ProviderDouble, model: Path,
            **memory_search: object) -> Path:
    memory_search.setdefault("local", {"modelPath": str(model)})
    path = tmp_path / "openclaw.json"
    path.write_text(json.dumps({
        "agents": {"defaults": {"workspace": str(workspace), "memorySearch": memory_search}},
        "models": {"providers": {"openai": {"baseUrl": double.url, "apiKey": SENTINEL}}},
    }))
    return path


def _settings(cfg: Path, tmp_path: Path):
    return load_settings(config_file=cfg, env={"HOME": str(tmp_path),
                                               "MEMQ_STORE_PATH": str(tmp_path / "m.sqlite")})


def test_an_unloadable_local_model_goes_to_the_fallback(broken_model: Path, openai_double,
                                                        tmp_path: Path, workspace: Path) -> None:
    cfg = _config(tmp_path, workspace, openai_double, broken_model, provider="local",
                  fallback="openai")
    choice = choose_provider(_settings(cfg, tmp_path))
    assert choice.spec is not None and choice.spec.name == "openai"
    assert choice.fallback_from == "local"
    assert str(broken_model) in choice.reason and "fallback 'openai'" in choice.reason


def test_auto_skips_an_unloadable_local_model(broken_model: Path, openai_double, tmp_path: Path,
                                              workspace: Path) -> None:
    cfg = _config(tmp_path, workspace, openai_double, broken_model, provider="auto")
    choice = choose_provider(_settings(cfg, tmp_path))
    assert choice.spec is not None and choice.spec.name == "openai"
    assert "local: " in choice.reason and str(broken_model) in choice.reason


def test_a_worker_holding_a_broken_model_refuses_with_the_file_named(
        tiny_model: Path, tmp_path: Path, workspace: Path, make_settings) -> None:
    """The job names a local model the worker's own file cannot serve: the chunks are held
    (not failed) with the reason, never embedded with a half-read model."""
    broken = tmp_path / "tiny-bert.gguf"
    broken.write_bytes(tiny_model.read_bytes()[:-200])
    spec = ProviderSpec("local", "tiny-bert", "k", {"model_path": str(broken)})
    with pytest.raises(ProviderUnavailable, match=r"not a loadable GGUF file \(.*truncated"):
        build_from_spec(spec, make_settings(workspace, provider="local"))


def test_index_through_workers_warns_and_search_says_fallback(
        tiny_model: Path, openai_double, tmp_path: Path, workspace: Path) -> None:
    broken = tmp_path / "cut.gguf"
    broken.write_bytes(tiny_model.read_bytes()[:-200])
    cfg = _config(tmp_path, workspace, openai_double, broken, provider="local",
                  fallback="openai")
    env = {"MEMQ_STORE_PATH": str(tmp_path / "m.sqlite"), "MEMQ_CONFIG": str(cfg)}
    done = run_memq("index", env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "fallback 'openai'" in done.stderr and str(broken) in done.stderr
    assert "mode: hybrid (openai/text-embedding-3-small)" in done.stdout
    assert openai_double.embed_requests()
    settings = _settings(cfg, tmp_path)
    status = index_status(settings)
    assert status["provider"] == "openai" and status["vectors"] == status["chunks"] > 0
    with Memory(settings=settings) as memory:
        found = memory.search("project", min_score=0)
    assert found.mode == "hybrid" and len(found) > 0
    assert found.fallback is not None and found.fallback["from"] == "local"
    assert str(broken) in found.fallback["reason"]
    assert found.to_dict()["fallback"] == found.fallback
    searched = run_memq("search", "project", "--json", env=env, timeout=120)
    assert searched.returncode == 0, searched.stderr
    assert json.loads(searched.stdout)["fallback"]["from"] == "local"


def test_no_fallback_note_when_the_primary_serves(tiny_model: Path, openai_double,
                                                  tmp_path: Path, workspace: Path) -> None:
    cfg = _config(tmp_path, workspace, openai_double, tiny_model, provider="local",
                  fallback="openai")
    settings = _settings(cfg, tmp_path)
    with Memory(settings=settings) as memory:
        memory.index()
        found = memory.search("project", min_score=0)
    assert found.provider == "local" and found.fallback is None
    assert "fallback" not in found.to_dict()


def test_the_type_table_is_ggufs() -> None:
    from gguf.constants import GGML_QUANT_SIZES

    from pipeline.embeddings.gguf_check import TYPE_SIZES

    ours = {t: TYPE_SIZES[int(t)] for t in GGML_QUANT_SIZES if int(t) in TYPE_SIZES}
    assert ours == {t: tuple(map(int, v)) for t, v in GGML_QUANT_SIZES.items()}


def test_a_whole_model_passes_the_check(tiny_model: Path) -> None:
    from pipeline.embeddings.gguf_check import check_gguf

    check_gguf(tiny_model)  # raises if the check were wrong about a good file


def test_an_unchanged_model_is_read_once_per_process(tiny_model: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """One process indexing many memories with one model reads its header once; a file
    changed since is read again, and a broken one is refused every time (never remembered)."""
    from pipeline.embeddings import gguf_check
    from pipeline.embeddings.registry import check_local_model

    model = tmp_path / "copy.gguf"
    model.write_bytes(tiny_model.read_bytes())
    reads: list[Path] = []
    real = gguf_check.check_gguf
    monkeypatch.setattr(gguf_check, "check_gguf", lambda p: (reads.append(p), real(p))[1])
    for _ in range(3):
        check_local_model(model)
    assert len(reads) == 1
    model.write_bytes(model.read_bytes()[:-200])  # cut short in place: same path, new size
    for _ in range(2):
        with pytest.raises(ProviderUnavailable, match="not a loadable GGUF"):
            check_local_model(model)
    assert len(reads) == 3
