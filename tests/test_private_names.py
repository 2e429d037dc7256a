"""No module reaches into another module's ``_private`` names (docs/architecture.md).

A leading underscore says "this module's business": a name another module needs is public, and
named as such. Checked on the source: ``from a import _b`` and ``a._b`` where ``a`` is a memq
module imported by name. Tests may reach in; the code may not.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from tests.test_architecture import PACKAGES, modules


@functools.cache
def module_names() -> frozenset[str]:
    return frozenset(modules())


def private_uses(path: Path) -> list[str]:
    """Every ``from <memq module> import _x`` and ``<memq module alias>._x`` in one file."""
    tree = ast.parse(path.read_text())
    aliases: set[str] = set()
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname for a in node.names
                        if a.asname and a.name.split(".")[0] in PACKAGES}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] in PACKAGES:
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path}:{node.lineno}: from {node.module} import {alias.name}")
                elif f"{node.module}.{alias.name}" in module_names():
                    aliases.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            found.append(f"{path}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names() -> None:
    found = [use for path in modules().values() for use in private_uses(path)]
    assert found == []


def test_the_checker_sees_both_forms(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from pipeline.store import reads\nfrom pipeline.messages import _text\n"
                      "reads._private()\nreads.public()\n")
    assert [use.split(": ", 1)[1] for use in private_uses(sample)] == [
        "from pipeline.messages import _text", "reads._private"]
