"""``memq index`` / ``status`` / ``search`` against each provider's double, exactly as a user
would run them against the real service: config file, key in the environment, embedded broker
and worker, and query-time embedding with a keyword fallback when the provider fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_memq, write_config
from tests.fakes.provider_doubles import Fault, ProviderDouble
from tests.secrets_scan import SENTINEL

pytestmark = pytest.mark.integration

ENV_KEY = {"openai": "OPENAI_API_KEY", "gemini": "GEMINI_API_KEY", "voyage": "VOYAGE_API_KEY",
           "mistral": "MISTRAL_API_KEY", "ollama": "OLLAMA_API_KEY"}
DIMS = {"openai": 1536, "gemini": 3072, "voyage": 1024, "mistral": 1024, "ollama": 768}


@pytest.mark.parametrize("style", list(ENV_KEY))
def test_memq_index_and_search_through_each_double(style: str, workspace: Path,
                                                   tmp_path: Path) -> None:
    key = SENTINEL
    with ProviderDouble(style, api_key=key) as double:
        cfg = write_config(tmp_path / "memq.json", provider=style,
                           remote={"baseUrl": double.url})
        env = {"MEMQ_HOME": str(tmp_path / "home"), "MEMQ_CONFIG": str(cfg),
               "MEMQ_BROKER_URL": "", "REDIS_URL": "", ENV_KEY[style]: key}
        done = run_memq("index", "--workspace", str(workspace), "--json", env=env, timeout=180)
        assert done.returncode == 0, done.stderr
        status = json.loads(run_memq("status", "--workspace", str(workspace), "--json",
                                     env=env).stdout)
        assert (status["mode"], status["provider"], status["dims"]) == ("hybrid", style,
                                                                        DIMS[style])
        assert status["vectors"] == status["chunks"] > 0 and status["pending"] == 0
        found = json.loads(run_memq("search", "--workspace", str(workspace), "--json",
                                    "--min-score", "0", "Zigbee coordinator", env=env).stdout)
        assert found["mode"] == "hybrid" and found["provider"] == style
        assert found["results"][0]["path"] == "memory/2026-11-10.md"
        kinds = {"query" if "Zigbee coordinator" in json.dumps(r.body) else "document"
                 for r in double.embed_requests()}
        assert kinds == {"query", "document"}

        double.script.extend([Fault("500")] * 3)  # the provider breaks: keywords still answer
        broken = json.loads(run_memq("search", "--workspace", str(workspace), "--json",
                                     "--min-score", "0", "Zigbee coordinator", env=env).stdout)
        assert broken["mode"] == "keyword-only" and "HTTP 500" in broken["warning"]
        assert broken["results"][0]["path"] == "memory/2026-11-10.md"
        for out in (done.stdout, done.stderr, json.dumps(status), json.dumps(broken)):
            assert key not in out
