"""The docs name no machine paths (issue 27): a reader's clone has no /work, /root, /check or
someone's /home folder, so the docs point at repo-relative paths (``../shared/eval/...``),
``~``, placeholders such as ``/path/to/...`` or a data set's public source instead."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = sorted([Path(REPO) / "README.md", *(Path(REPO) / "docs").glob("*.md"),
               *(Path(REPO) / "bench").glob("*.md")])
#: A machine path: one of these roots at the start of a path (not inside a longer one, such as
#: ``memory/work/2026-02-10.md`` or ``https://host/check/x``).
MACHINE_PATH = re.compile(r"(?<![\w.~/-])/(?:work|root|check)(?:/|\b)|(?<![\w.~/-])/home/\w+")


def machine_paths(text: str) -> list[str]:
    """Each line of ``text`` (numbered from 1) that names a machine path."""
    return [f"{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
            if MACHINE_PATH.search(line)]


def test_the_pattern_catches_machine_paths_only() -> None:
    assert machine_paths("see /work/shared/eval/scifact\nok ../shared/eval\n") == [
        "1: see /work/shared/eval/scifact"]
    assert machine_paths("`/root/.cache/memq` and /check/x and /home/sam/ws") != []
    assert len(machine_paths("a\n/home/me/agent/memq.toml\n/check\n")) == 2
    assert machine_paths("memory/work/2026-02-10.md https://x.org/check/y ~/work/ws "
                         "/path/to/memq /tmp/q.json /srv/agent/memory") == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_docs_name_no_machine_paths(doc: Path) -> None:
    assert machine_paths(doc.read_text(encoding="utf-8")) == []
