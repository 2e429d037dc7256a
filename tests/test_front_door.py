"""``from memq import ...`` is the library's public surface, and importing it costs nothing."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest

import memq
from tests.conftest import REPO


@pytest.mark.parametrize("name", memq.__all__)
def test_every_public_name_is_the_object_its_module_defines(name: str) -> None:
    value = getattr(memq, name)
    assert value is getattr(importlib.import_module(memq._EXPORTS[name]), name)


def test_every_exported_error_is_a_memq_error() -> None:
    errors = [getattr(memq, name) for name in memq._ERRORS]
    assert all(issubclass(error, memq.MemqError) for error in errors)
    assert memq.MemqError in errors


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'Memroy'"):
        memq.Memroy  # noqa: B018


def test_importing_memq_loads_nothing_of_the_library() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, memq; print(' '.join(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True, cwd=REPO).stdout.split()
    heavy = [m for m in loaded if m.split(".")[0] in
             ("pipeline", "workers", "celery", "kombu", "sqlalchemy", "numpy", "llama_cpp")]
    assert heavy == []


def test_the_docs_show_the_library_only_through_memq() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    found = [f"{page.name}: {line.strip()}" for page in pages
             for line in page.read_text().splitlines()
             if re.match(r"\s*(from pipeline(\.\w+)* import|import pipeline)", line)]
    assert found == []


def test_all_names_exactly_the_exports() -> None:
    assert sorted(memq.__all__) == sorted(memq._EXPORTS)
