"""Permissions, for real: ``memq`` runs as an unprivileged user (the suite itself runs as root,
which reads and writes everything), facing unreadable files and folders and a store in a folder
it may not write. The user gets a clear error and everything readable is still indexed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_WORKSPACE, REPO, write_config

NOBODY = 65534


def _untraversable_ancestor(path: Path) -> Path | None:
    """The first folder on the way to ``path`` that others may not enter (e.g. /root, 700)."""
    for folder in [*reversed(path.parents), path]:
        if not folder.stat().st_mode & 0o001:
            return folder
    return None


def as_nobody(argv: list[str], scratch: Path) -> list[str]:
    """``argv`` run as uid/gid 65534 without supplementary groups.

    When the interpreter lives under a folder others cannot enter (pyenv under /root), only
    that process gets a private mount namespace where the folder is an open tmpfs holding the
    interpreter's tree bind-mounted back: the host is not changed, and the user still reaches
    nothing else of root's.
    """
    drop = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", "--"]
    prefix = Path(sys.base_prefix).resolve()
    blocked = _untraversable_ancestor(prefix)
    if blocked is None:
        return [*drop, *argv]
    script = ('mount --bind "$1" "$2" && mount -t tmpfs -o mode=755 tmpfs "$1" && '
              'mkdir -p "$3" && mount --bind "$2/$4" "$3" && shift 4 && exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
            str(blocked), str(scratch), str(prefix), str(prefix.relative_to(blocked)),
            *drop, *argv]


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder the unprivileged user can reach (pytest's tmp_path is root-only, mode 700)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run memq as an unprivileged user")
    root = Path(tempfile.mkdtemp(prefix="memq-perms-"))
    root.chmod(0o755)
    (root / "mnt").mkdir()
    probe = subprocess.run(as_nobody([sys.executable, "-c", "import memq.cli"], root / "mnt"),
                           cwd=REPO, capture_output=True, text=True)
    try:
        if probe.returncode != 0:
            pytest.skip(f"uid {NOBODY} cannot run memq here: {probe.stderr.strip()[-300:]}")
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def memq_as_nobody(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    argv = as_nobody([sys.executable, "-m", "memq.cli", *args], home.parent / "mnt")
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(home), "MEMQ_BROKER_URL": "",
                               "REDIS_URL": "", "MEMQ_HOME": ""})  # the data dir in HOME


def give_to_nobody(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        os.chown(p, NOBODY, NOBODY)


def workspace_for_nobody(shared_dir: Path) -> tuple[Path, Path]:
    """A copy of the sample workspace and a home folder, both owned by the unprivileged user."""
    ws = shared_dir / "ws"
    shutil.copytree(EXAMPLE_WORKSPACE, ws)
    home = shared_dir / "home"
    home.mkdir()
    give_to_nobody(home)
    give_to_nobody(ws)
    return ws, home


def test_unreadable_files_and_folders_are_reported_the_rest_indexed(shared_dir: Path) -> None:
    """A root-only file is listed with its reason; a folder that becomes unreadable is named
    in the run's output and the notes indexed from it before are kept, not deleted."""
    ws, home = workspace_for_nobody(shared_dir)
    private = ws / "memory" / "private.md"
    private.write_text("# Private\n\nroot only marker\n")
    private.chmod(0o600)  # root's
    locked = ws / "memory" / "locked"
    locked.mkdir(mode=0o755)  # root's, readable for now
    (locked / "inside.md").write_text("# Inside\n\nbehind a closed folder\n")
    cfg = write_config(home / "memq.json", provider="none",
                       store={"path": str(home / "store" / "memq.sqlite")})
    args = ("--workspace", str(ws), "--config", str(cfg))

    first = memq_as_nobody("index", *args, home=home)
    assert first.returncode == 0, first.stderr
    locked.chmod(0o700)
    second = memq_as_nobody("index", *args, home=home)
    assert second.returncode == 0 and "Traceback" not in second.stderr, second.stderr
    assert "memory/locked/: unreadable folder (Permission denied)" in second.stdout, \
        second.stdout
    s = json.loads(memq_as_nobody("status", "--json", *args, home=home).stdout)
    assert s["files"] == 5 + 1, s  # the sample workspace's notes and the one kept from locked/
    errors = {e["path"]: e["error"] for e in s["fileErrors"]}
    assert errors == {"memory/private.md": "unreadable: Permission denied"}, s
    for query, path in (("Zigbee", "memory/2026-11-10.md"),
                        ("behind a closed folder", "memory/locked/inside.md")):
        found = memq_as_nobody("search", query, *args, home=home)
        assert path in found.stdout, found.stdout + found.stderr


def test_store_in_a_folder_the_user_cannot_write_is_a_clear_error(shared_dir: Path) -> None:
    ws, home = workspace_for_nobody(shared_dir)
    read_only = shared_dir / "read-only"
    read_only.mkdir(mode=0o755)  # root's, and not writable by the user
    cfg = write_config(home / "memq.json", provider="none",
                       store={"path": str(read_only / "memq.sqlite")})
    done = memq_as_nobody("index", "--workspace", str(ws), "--config", str(cfg), home=home)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    assert str(read_only / "memq.sqlite") in done.stderr and "ermission" in done.stderr, \
        done.stderr
    assert list(read_only.iterdir()) == []
