"""One exception tree: every error class the library and the workers define lives in
pipeline/errors.py, under ``MemqError`` (``from memq import MemqError`` catches them all); the
edges' own (the CLI's, the MCP server's, ``memq eval``'s) subclass it too.

Kept elsewhere on purpose: ``Invalid``, the config loader's carrier of a value's problem until
it knows the file (a ``ConfigError``); private control flow (a leading underscore); and the
``SystemExit`` subclasses a worker process ends with.
"""

from __future__ import annotations

import ast

from tests.test_architecture import modules

ALLOWED_ELSEWHERE = {("pipeline.config.errors", "Invalid")}


def error_classes() -> list[tuple[str, str, list[str]]]:
    """(module, class, base names) of every class whose bases name an error or exception."""
    found = []
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
                if any(b.endswith(("Error", "Exception", "Exit", "Refused", "Failed", "Busy",
                                   "Unavailable", "Missing", "Elsewhere", "Mismatch",
                                   "Throttled", "Retryable", "TooLong", "Interrupted"))
                       for b in bases):
                    found.append((module, node.name, bases))
    return found


def test_every_error_class_lives_in_pipeline_errors() -> None:
    elsewhere = sorted((m, c) for m, c, bases in error_classes()
                       if m != "pipeline.errors" and not c.startswith("_")
                       and not m.startswith("memq")
                       and (m, c) not in ALLOWED_ELSEWHERE and "SystemExit" not in bases)
    assert elsewhere == []


def test_every_error_of_pipeline_errors_is_a_memq_error() -> None:
    import pipeline.errors as errors

    classes = [getattr(errors, c) for m, c, _ in error_classes() if m == "pipeline.errors"]
    assert len(classes) > 40
    assert [c.__name__ for c in classes if not issubclass(c, errors.MemqError)] == []


def test_the_edges_errors_are_memq_errors() -> None:
    import importlib

    from pipeline.errors import MemqError

    edges = [getattr(importlib.import_module(m), c) for m, c, _ in error_classes()
             if m.startswith("memq")]
    assert edges and [e.__name__ for e in edges if not issubclass(e, MemqError)] == []
