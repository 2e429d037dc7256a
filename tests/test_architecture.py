"""The layout's rules, checked on the source (docs/architecture.md explains them).

- No import cycle between memq's modules, counting imports inside functions too: a lazy import
  may save start-up time, never hide a cycle.
- ``pipeline`` (the library) never imports ``workers`` (Celery's side) nor ``memq`` (the CLI
  and MCP edges); ``workers`` never imports ``memq``.
- Inside ``pipeline``, each part imports only the parts below it (:data:`ALLOWED`).
- SQL is written only under ``pipeline/store/``.
- Every package the code imports is a declared dependency of the distribution.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

from tests.conftest import REPO

PACKAGES = ("pipeline", "workers", "memq")

#: What each part of the library may import (besides itself and the standard library).
ALLOWED: dict[str, set[str]] = {
    "pipeline.errors": set(),
    "pipeline.routing": set(),
    "pipeline.results": set(),
    "pipeline.polling": set(),
    "pipeline.message_fields": {"pipeline.errors"},
    "pipeline.messages": {"pipeline.errors", "pipeline.message_fields"},
    "pipeline.config": {"pipeline.errors", "pipeline.routing"},
    "pipeline.store": {"pipeline.errors", "pipeline.message_fields", "pipeline.messages"},
    "pipeline.embeddings": {"pipeline.errors", "pipeline.message_fields", "pipeline.messages",
                            "pipeline.config"},
    "pipeline.batch": {"pipeline.errors", "pipeline.messages", "pipeline.config",
                       "pipeline.embeddings", "pipeline.store"},
    "pipeline.search": {"pipeline.errors", "pipeline.results", "pipeline.config",
                        "pipeline.embeddings", "pipeline.store"},
    "pipeline.ingest": {"pipeline.errors", "pipeline.message_fields", "pipeline.messages",
                        "pipeline.results",
                        "pipeline.config", "pipeline.embeddings", "pipeline.store",
                        "pipeline.batch"},
    "pipeline.qmd": {"pipeline.errors", "pipeline.results", "pipeline.config", "pipeline.store",
                     "pipeline.ingest"},
    # The only library code that imports celery and kombu (broker, job log, placement, shard
    # copy, kombu's repairs).
    "pipeline.fleet": {"pipeline.errors", "pipeline.messages", "pipeline.routing",
                       "pipeline.config", "pipeline.store", "pipeline.batch"},
    "pipeline.outcome": {"pipeline.store"},
    "pipeline.status": {"pipeline.errors", "pipeline.config", "pipeline.store", "pipeline.batch",
                        "pipeline.ingest", "pipeline.fleet"},
    "pipeline.dispatch": {"pipeline.errors", "pipeline.messages", "pipeline.config",
                          "pipeline.embeddings", "pipeline.store", "pipeline.batch"},
    # A memory whose store is here: search, get, append, the index pass, QMD.
    "pipeline.local": {"pipeline.errors", "pipeline.messages", "pipeline.routing",
                       "pipeline.results", "pipeline.config", "pipeline.embeddings",
                       "pipeline.store", "pipeline.batch", "pipeline.search",
                       "pipeline.ingest", "pipeline.status", "pipeline.dispatch",
                       "pipeline.fleet", "pipeline.qmd", "pipeline.polling", "pipeline.outcome"},
    # The same surface through the fleet (its Celery side is pipeline.fleet's).
    "pipeline.remote": {"pipeline.errors", "pipeline.config", "pipeline.messages",
                        "pipeline.results", "pipeline.routing", "pipeline.fleet",
                        "pipeline.ingest", "pipeline.polling", "pipeline.outcome",
                        "pipeline.local"},
    # The front: picks pipeline.local or pipeline.remote once.
    "pipeline.memory": {"pipeline.errors", "pipeline.results", "pipeline.config",
                        "pipeline.embeddings", "pipeline.fleet", "pipeline.local",
                        "pipeline.remote", "pipeline.dispatch", "pipeline.qmd"},
    "pipeline.query": {"pipeline.config", "pipeline.memory"},
    "pipeline.catalog": {"pipeline.errors", "pipeline.config", "pipeline.store",
                         "pipeline.routing", "pipeline.fleet", "pipeline.remote"},
    # The package itself exports nothing: the public names are memq's (memq/__init__.py).
    "pipeline": set(),
}
#: The statements memq writes (case matters: prose that starts with "Drop" is not SQL).
SQL = re.compile(r"\b(SELECT\b.*\bFROM|INSERT (OR \w+ )?INTO|UPDATE \w+ SET|DELETE FROM|"
                 r"CREATE (TABLE|INDEX|VIRTUAL|TRIGGER)|DROP (TABLE|INDEX|TRIGGER)|PRAGMA \w+|"
                 r"ATTACH DATABASE|DETACH DATABASE)\b", re.DOTALL)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(path: Path) -> list[str]:
    """Every module named by an import statement anywhere in the file (functions included)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def graph() -> dict[str, set[str]]:
    """Module -> the memq modules it imports (``from a import b`` counts as ``a.b`` when that
    is a module, else ``a``)."""
    known = modules()

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in known.items():
        for name in imports(path):
            if name.split(".")[0] in PACKAGES:
                target = resolve(name)
                if target is not None and target != module:
                    edges[module].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def part(module: str) -> str:
    """``pipeline.ingest.producer`` -> ``pipeline.ingest``; top-level modules are their own."""
    pieces = module.split(".")
    return ".".join(pieces[:2]) if pieces[0] == "pipeline" else pieces[0]


def test_no_import_cycles() -> None:
    assert cycles(graph()) == []


def test_the_checker_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_library_never_imports_the_queue_or_the_edges() -> None:
    wrong = {(m, t) for m, targets in graph().items() for t in targets
             if (m.startswith("pipeline") and not t.startswith("pipeline"))
             or (m.startswith("workers") and t.startswith("memq"))}
    assert wrong == set()


def test_each_part_of_the_library_imports_only_the_parts_below_it() -> None:
    assert set(ALLOWED) >= {part(m) for m in modules() if m.startswith("pipeline")}, \
        "a new part of pipeline/ needs its row in ALLOWED (and in docs/architecture.md)"
    wrong = sorted((m, t) for m, targets in graph().items() if m.startswith("pipeline")
                   for t in targets
                   if part(t) != part(m) and part(t) not in ALLOWED[part(m)])
    assert wrong == []


#: Where Celery and kombu may be imported: the library's fleet and the workers.
QUEUE_PACKAGES = ("celery", "kombu")
QUEUE_SIDE = ("pipeline.fleet", "workers")


def test_only_the_fleet_and_the_workers_import_celery_or_kombu() -> None:
    wrong = sorted(f"{module}: {name}" for module, path in modules().items()
                   if not module.startswith(QUEUE_SIDE)
                   for name in imports(path) if name.split(".")[0] in QUEUE_PACKAGES)
    assert wrong == []


#: SQL that is not about memq's store, and why.
FOREIGN_SQL = {"pipeline.qmd.backend": "reads qmd's own index (read-only), not memq's store"}


def test_sql_is_written_only_in_the_store() -> None:
    found = []
    for module, path in modules().items():
        if module.startswith("pipeline.store") or module in FOREIGN_SQL:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and SQL.search(node.value):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value[:40]!r}")
    assert found == []


def test_every_imported_package_is_a_declared_dependency() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {re.split(r"[\[<>=;~! ]", d, maxsplit=1)[0].lower().replace("_", "-")
                for d in project["dependencies"]}
    owners = importlib.metadata.packages_distributions()
    missing = set()
    for path in modules().values():
        for name in imports(path):
            top = name.split(".")[0]
            if top in PACKAGES or top in sys.stdlib_module_names:
                continue
            dists = {d.lower().replace("_", "-") for d in owners.get(top, [top])}
            if not dists & declared:
                missing.add(f"{top} ({path.relative_to(REPO)})")
    assert missing == set()
