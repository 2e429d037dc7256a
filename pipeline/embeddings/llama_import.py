"""llama-cpp-python, imported without the parts memq never runs.

``import llama_cpp`` also imports its chat-completion formats (``llama_chat_format``, which
imports Jinja2) and its on-disk prompt cache's library (``diskcache``): about a third of the
import, ~25 ms on the path of every one-shot ``memq search``. memq embeds and reranks; it never
formats a chat nor caches prompts on disk. :func:`import_llama_cpp` imports llama_cpp with those
two modules standing in as :class:`DeferredModule` objects, each imported for real on the first
use of any of its attributes (llama-cpp-python touches the chat formats only when a GGUF carries
a chat template, e.g. a reranker's), so nothing changes but when that cost is paid.
"""

from __future__ import annotations

import importlib
import sys
import threading
import types

__all__ = ["DEFERRED", "DeferredModule", "import_llama_cpp"]

#: Modules llama_cpp imports at start that memq's embedding and reranking never use.
DEFERRED = ("llama_cpp.llama_chat_format", "diskcache")

# Imports are process-wide (sys.modules), so is the guard that places the stand-ins once.
_placing = threading.Lock()


class DeferredModule(types.ModuleType):
    """Stands in ``sys.modules`` for the module ``name``: the first attribute asked of it
    imports the real module (which then replaces it in ``sys.modules``) and answers from it.
    Thread-safe; a module that bound the stand-in keeps working through it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._resolving = threading.Lock()
        self._real: types.ModuleType | None = None

    def resolve(self) -> types.ModuleType:
        """The real module, imported now if it is not yet."""
        with self._resolving:
            if self._real is None:
                if sys.modules.get(self.__name__) is self:
                    del sys.modules[self.__name__]
                self._real = importlib.import_module(self.__name__)
            return self._real

    def __getattr__(self, attr: str) -> object:
        # Only attributes the stand-in lacks come here: every one of the real module's.
        return getattr(self.resolve(), attr)


def import_llama_cpp() -> types.ModuleType:
    """``llama_cpp``, imported (the first time) with :data:`DEFERRED` deferred. Raises
    ImportError when llama-cpp-python is not installed (the stand-ins are taken back)."""
    with _placing:
        placed = []
        if "llama_cpp" not in sys.modules:
            placed = [name for name in DEFERRED if name not in sys.modules]
            for name in placed:
                sys.modules[name] = DeferredModule(name)
        try:
            import llama_cpp
        except BaseException:
            for name in placed:
                if isinstance(sys.modules.get(name), DeferredModule):
                    del sys.modules[name]
            raise
    return llama_cpp
