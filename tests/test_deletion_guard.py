"""A pass never empties a memory because its folder is empty, missing or unmounted.

One host, the real CLI and the library: the workspace's files moved away (what an unmounted
disk leaves), its ``memory/`` folder gone, one note deleted on purpose, and the explicit
``--allow-deletions``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.errors import DeletionRefused
from pipeline.memory import Memory
from pipeline.store import reads, schema
from tests.conftest import run_memq


def _files(settings: Settings) -> set[str]:
    db = schema.open_store(settings.store.path, want_vectors=False)
    assert db is not None
    try:
        return set(reads.known_files(db))
    finally:
        db.close()


def _index(settings: Settings, *extra: str) -> tuple[int, str, str]:
    done = run_memq("index", "--workspace", str(settings.workspace), "--config",
                    str(settings.config_file), *extra, timeout=120)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
def notes(tmp_path: Path, make_settings: Callable[..., Settings]) -> Settings:
    """A keyword-only memory of MEMORY.md and twelve daily notes, indexed."""
    ws = tmp_path / "agent"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\n- The billing service runs on PostgreSQL.\n")
    for day in range(1, 13):
        (ws / "memory" / f"2026-11-{day:02d}.md").write_text(
            f"# 2026-11-{day:02d}\n\nNote {day}: the heron came back to pond {day}.\n")
    settings = make_settings(ws, provider="none")
    code, _, err = _index(settings)
    assert code == 0, err
    assert len(_files(settings)) == 13
    return settings


def test_an_emptied_folder_is_refused_and_nothing_is_deleted(notes: Settings,
                                                             tmp_path: Path) -> None:
    ws = notes.workspace
    aside = tmp_path / "aside"
    shutil.move(str(ws), str(aside))
    ws.mkdir()  # the mount point an unmounted disk leaves

    code, out, err = _index(notes)
    assert code != 0, out
    assert "nothing was deleted" in err and "--allow-deletions" in err, err
    assert "13 of the 13 memory files" in err and "empty" in err, err
    assert len(_files(notes)) == 13

    with Memory(settings=notes) as memory:  # the library refuses the same way
        with pytest.raises(DeletionRefused) as refused:
            memory.index()
        assert (refused.value.deleted, refused.value.known) == (13, 13)
        # a search that syncs first answers from the index as it is, and says why
        results = memory.search("heron pond", sync=True)
        assert results.hits, results
        assert results.warning and "not synced" in results.warning
        assert memory.stale_files()  # the files are still unknown, not gone
    assert len(_files(notes)) == 13

    code, out, err = _index(notes, "--allow-deletions")  # said explicitly: done
    assert code == 0, err
    assert "13 deleted" in out, out
    assert _files(notes) == set()


def test_a_missing_notes_folder_is_refused(notes: Settings) -> None:
    shutil.rmtree(notes.workspace / "memory")  # 12 of 13 files gone at once
    code, out, err = _index(notes)
    assert code != 0, out
    assert "12 of the 13 memory files" in err, err
    assert len(_files(notes)) == 13


def test_files_deleted_one_at_a_time_go(notes: Settings) -> None:
    (notes.workspace / "memory" / "2026-11-03.md").unlink()
    (notes.workspace / "memory" / "2026-11-04.md").unlink()
    code, out, err = _index(notes)
    assert code == 0, err
    assert "2 deleted" in out, out
    assert len(_files(notes)) == 11


def test_the_last_file_of_a_small_memory_is_kept_when_nothing_is_left(
        tmp_path: Path, make_settings: Callable[..., Settings]) -> None:
    ws = tmp_path / "one"
    ws.mkdir()
    (ws / "MEMORY.md").write_text("# Memory\n\n- Only fact.\n")
    settings = make_settings(ws, provider="none")
    assert _index(settings)[0] == 0
    (ws / "MEMORY.md").unlink()
    code, _, err = _index(settings)
    assert code != 0 and "--allow-deletions" in err, err
    assert _files(settings) == {"MEMORY.md"}
    # a rename is no loss: the old name goes, the new one comes
    (ws / "USER.md").write_text("# User\n\n- Only fact.\n")
    code, _, err = _index(settings)
    assert code == 0, err
    assert _files(settings) == {"USER.md"}


def test_following_a_keyword_only_job_returns_when_it_ended(notes: Settings) -> None:
    """A keyword-only index has no vector to wait for: ``memq jobs --follow`` of its finished
    job answers at once (it waited forever for chunks that never get one)."""
    (notes.workspace / "memory" / "2026-11-13.md").write_text("# 13\n\nThe kestrel is back.\n")
    done = run_memq("index", "--workspace", str(notes.workspace), "--config",
                    str(notes.config_file), "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)["job"]
    followed = run_memq("jobs", "--workspace", str(notes.workspace), "--config",
                        str(notes.config_file), "--follow", job, timeout=60)
    assert followed.returncode == 0, followed.stderr
    assert job in followed.stdout and "1 files changed, 0 deleted" in followed.stdout, followed
