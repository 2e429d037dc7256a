"""llama-cpp-python imported without its chat formats and disk cache (pipeline.embeddings.
llama_import), and a preload that returns once the library is imported. Each case runs in a
fresh interpreter: what a process has imported is the thing under test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")
REPO = Path(__file__).resolve().parents[1]

STATE = ("def state():\n"
         "    from pipeline.embeddings.llama_import import DeferredModule\n"
         "    names = ('jinja2', 'diskcache', 'llama_cpp.llama_chat_format')\n"
         "    return {n: ('absent' if n not in sys.modules else 'deferred'\n"
         "                if isinstance(sys.modules[n], DeferredModule) else 'real')\n"
         "            for n in names}\n")


def run_python(code: str, *args: str) -> dict:
    """Run ``code`` in a fresh interpreter; its last stdout line is JSON."""
    proc = subprocess.run([sys.executable, "-c", "import json, sys\n" + STATE + code, *args],
                          capture_output=True, text=True, timeout=180, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_an_embedding_never_imports_chat_formats_nor_the_disk_cache(tiny_model: Path) -> None:
    seen = run_python(
        "from pipeline.embeddings.local import LocalProvider\n"
        "v = LocalProvider(sys.argv[1], threads=1).embed_query('the cat sat')\n"
        "print(json.dumps({'dims': len(v), **state()}))\n", str(tiny_model))
    assert seen == {"dims": 32, "jinja2": "absent", "diskcache": "deferred",
                    "llama_cpp.llama_chat_format": "deferred"}


def test_a_deferred_module_is_imported_on_first_use(tmp_path: Path) -> None:
    seen = run_python(
        "from pipeline.embeddings.llama_import import import_llama_cpp\n"
        "llama_cpp = import_llama_cpp()\n"
        "before = state()\n"
        "formatter = llama_cpp.llama_chat_format.Jinja2ChatFormatter(\n"
        "    template='{{ messages[0].content }}!', eos_token='', bos_token='')\n"
        "text = formatter(messages=[{'role': 'user', 'content': 'hi'}]).prompt\n"
        # diskcache through the stand-in llama_cpp.llama_cache bound at import:
        "cache = llama_cpp.LlamaDiskCache(cache_dir=sys.argv[1])\n"
        "from diskcache import Cache\n"
        "print(json.dumps({'before': before, 'after': state(), 'text': text,\n"
        "                  'cache': type(cache.cache) is Cache}))\n", str(tmp_path / "cache"))
    assert seen["before"] == {"jinja2": "absent", "diskcache": "deferred",
                              "llama_cpp.llama_chat_format": "deferred"}
    assert seen["after"] == {"jinja2": "real", "diskcache": "real",
                             "llama_cpp.llama_chat_format": "real"}
    assert seen["text"] == "hi!" and seen["cache"] is True


def test_a_model_with_a_chat_template_loads_and_embeds(tiny_model: Path, tmp_path: Path) -> None:
    # llama-cpp-python builds a chat handler for a GGUF that carries a template: the deferred
    # chat formats are imported then, during the load.
    path = tmp_path / "templated.gguf"
    subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", str(tiny_model),
                    str(path), "--chat-template", "{{ messages[0].content }}", "--force"],
                   check=True, capture_output=True, timeout=120)
    code = ("from pipeline.embeddings.local import LocalProvider\n"
            "v = LocalProvider(sys.argv[1], threads=1).embed_query('the cat sat')\n"
            "print(json.dumps({'v': [round(float(x), 6) for x in v], **state()}))\n")
    templated, plain = run_python(code, str(path)), run_python(code, str(tiny_model))
    assert templated["llama_cpp.llama_chat_format"] == "real" and templated["jinja2"] == "real"
    assert templated["v"] == plain["v"]


def test_threads_that_first_use_a_deferred_module_together_get_the_real_one() -> None:
    seen = run_python(
        "import threading\n"
        "from pipeline.embeddings.llama_import import import_llama_cpp\n"
        "llama_cpp = import_llama_cpp()\n"
        "stand_in = sys.modules['llama_cpp.llama_chat_format']\n"
        "go, got = threading.Barrier(8), []\n"
        "def use():\n"
        "    go.wait()\n"
        "    got.append(stand_in.Jinja2ChatFormatter)\n"
        "threads = [threading.Thread(target=use) for _ in range(8)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "real = sys.modules['llama_cpp.llama_chat_format']\n"
        "print(json.dumps({'n': len(got), 'same': all(g is real.Jinja2ChatFormatter\n"
        "                                             for g in got), **state()}))\n")
    assert seen["n"] == 8 and seen["same"] is True
    assert seen["llama_cpp.llama_chat_format"] == "real"


def test_without_llama_cpp_the_stand_ins_are_taken_back() -> None:
    seen = run_python(
        "class NoLlama:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'llama_cpp':\n"
        "            raise ImportError('llama-cpp-python is not installed (test)')\n"
        "sys.meta_path.insert(0, NoLlama())\n"
        "from pipeline.embeddings.llama_import import import_llama_cpp\n"
        "try:\n"
        "    import_llama_cpp()\n"
        "    raised = False\n"
        "except ImportError:\n"
        "    raised = True\n"
        "print(json.dumps({'raised': raised, **state()}))\n")
    assert seen == {"raised": True, "jinja2": "absent", "diskcache": "absent",
                    "llama_cpp.llama_chat_format": "absent"}


def test_a_preload_returns_once_llama_cpp_is_imported(tiny_model: Path) -> None:
    # The model is read on the loading thread while the caller goes on; the import before it
    # is done by the time warm() returns, so the two do not fight over the GIL.
    seen = run_python(
        "from pipeline.embeddings.local import LocalProvider\n"
        "provider = LocalProvider(sys.argv[1], threads=1)\n"
        "provider.warm()\n"
        "imported = hasattr(sys.modules.get('llama_cpp'), 'Llama')\n"
        "v = provider.embed_query('the cat sat')\n"
        "print(json.dumps({'imported': imported, 'dims': len(v)}))\n", str(tiny_model))
    assert seen == {"imported": True, "dims": 32}
