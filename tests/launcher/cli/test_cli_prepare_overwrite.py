"""`dataset prepare --overwrite` replaces only a dataset graphtier prepared, the same test `dataset remove`
applies: never a user's directory, a link's target, or a dataset directory a user put files in."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def _prepare(root: Path, name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "graphtier.launcher.cli",
            "dataset",
            "prepare",
            "synthetic:rmat",
            "--name",
            name,
            "--scale",
            "7",
            "--feature-dim",
            "4",
            "--score",
            "degree",
            "--out",
            str(root),
            "--overwrite",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _said(done: subprocess.CompletedProcess[str]) -> str:
    return " ".join((done.stdout + done.stderr).split())


def _dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_overwrite_replaces_a_prepared_dataset_and_leaves_no_trash(tmp_path):
    root = tmp_path / "datasets"
    assert _prepare(root, "graph").returncode == 0
    first = json.loads((root / "graph" / "manifest.json").read_text())["created_at"]
    again = _prepare(root, "graph", "--seed", "3")
    assert again.returncode == 0, _said(again)
    assert json.loads((root / "graph" / "manifest.json").read_text())["created_at"] != first
    assert [p.name for p in root.iterdir()] == ["graph"]


@pytest.mark.parametrize("under_out", [False, True], ids=["dataset-root", "out-dir"])
@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_overwrite_refuses_a_plain_directory_of_the_users(tmp_path, under_out):
    root = tmp_path / ("some-dir" if under_out else "datasets")
    (root / "mydir").mkdir(parents=True)
    (root / "mydir" / "thesis.txt").write_text("years of work")
    refused = _prepare(root, "mydir")
    assert refused.returncode == 2
    assert f"{root / 'mydir'} holds no valid graphtier manifest (manifest.json); nothing was replaced" in _said(refused)
    assert (root / "mydir" / "thesis.txt").read_text() == "years of work"
    assert sorted(p.name for p in root.iterdir()) == ["mydir"]  # no temporary left behind


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_overwrite_refuses_a_link_named_like_the_dataset_and_leaves_its_target(tmp_path):
    root, home = tmp_path / "datasets", tmp_path / "home"
    (home / "papers").mkdir(parents=True)
    (home / "papers" / "draft.tex").write_text("mine")
    root.mkdir()
    (root / "graph").symlink_to(home / "papers")
    refused = _prepare(root, "graph")
    assert refused.returncode == 2 and f"{root / 'graph'} is a symbolic link" in _said(refused)
    assert (root / "graph").is_symlink() and (home / "papers" / "draft.tex").read_text() == "mine"
    assert [p.name for p in root.iterdir()] == ["graph"]


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_overwrite_refuses_a_link_even_to_a_prepared_dataset(tmp_path):
    """A link's target is someone's: even a dataset elsewhere is not replaced through a link in the root."""
    elsewhere, root = tmp_path / "elsewhere", tmp_path / "datasets"
    assert _prepare(elsewhere, "graph").returncode == 0
    root.mkdir()
    (root / "graph").symlink_to(elsewhere / "graph")
    refused = _prepare(root, "graph")
    assert refused.returncode == 2 and "is a symbolic link" in _said(refused)
    assert (elsewhere / "graph" / "manifest.json").is_file() and (root / "graph").is_symlink()


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_overwrite_refuses_a_dataset_directory_holding_a_users_file(tmp_path):
    """A file graphtier did not write makes the directory partly the user's: refused, both kept."""
    root = tmp_path / "datasets"
    assert _prepare(root, "graph").returncode == 0
    (root / "graph" / "notes.txt").write_text("my observations")
    before = (root / "graph" / "manifest.json").read_bytes()
    refused = _prepare(root, "graph")
    assert refused.returncode == 2
    assert "also holds files graphtier did not write (notes.txt); nothing was replaced" in _said(refused)
    assert (root / "graph" / "notes.txt").read_text() == "my observations"
    assert (root / "graph" / "manifest.json").read_bytes() == before


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_overwrite_keeps_a_tiering_report_graphtier_wrote(tmp_path):
    """`tiering-report` writes its figure into the dataset directory: that file is graphtier's."""
    root = tmp_path / "datasets"
    assert _prepare(root, "graph").returncode == 0
    (root / "graph" / "tiering-report.png").write_bytes(b"\x89PNG")
    again = _prepare(root, "graph")
    assert again.returncode == 0, _said(again)
    assert not (root / "graph" / "tiering-report.png").exists()


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_overwrite_refuses_a_dataset_of_another_name(tmp_path):
    root = tmp_path / "datasets"
    assert _prepare(root, "graph").returncode == 0
    (root / "graph").rename(root / "other")
    refused = _prepare(root, "other")
    assert refused.returncode == 2 and "holds dataset 'graph', not 'other'" in _said(refused)
    assert (root / "other" / "manifest.json").is_file()


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_out_at_the_file_system_root_or_a_home_is_refused(tmp_path):
    """`--out /` and `--out $HOME`: an existing directory there is never the dataset to replace."""
    refused = _prepare(Path("/"), "proc")  # a directory no rename can move, even if the check failed
    assert refused.returncode == 2 and "/proc holds no valid graphtier manifest" in _said(refused)
    home = tmp_path / "home"
    (home / "Documents").mkdir(parents=True)
    (home / "Documents" / "taxes.pdf").write_text("receipts")
    (home / ".bashrc").write_text("alias ll='ls -l'")
    refused = _prepare(home, "Documents")
    assert refused.returncode == 2 and "nothing was replaced" in _said(refused)
    assert (home / "Documents" / "taxes.pdf").read_text() == "receipts"
    assert sorted(p.name for p in home.iterdir()) == [".bashrc", "Documents"]


def test_leftover_trash_links_are_unlinked_and_their_targets_kept(tmp_path):
    """A `.trash-*` link (moved aside by an older writer) is reclaimed by unlinking it, never its target's files."""
    root, target = tmp_path / "datasets", tmp_path / "users-dir"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    root.mkdir()
    pid = _dead_pid()
    (root / f".trash-graph-{pid}-0badcafe").symlink_to(target)
    (root / f".tmp-graph-{pid}-0badcafe").mkdir()
    done = _prepare(root, "graph")
    assert done.returncode == 0, _said(done)
    assert [p.name for p in root.iterdir()] == ["graph"]
    assert (target / "keep.txt").read_text() == "mine"


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_remove_shares_the_check_and_reclaims_nothing_of_the_users(tmp_path):
    root = tmp_path / "datasets"
    assert _prepare(root, "graph").returncode == 0
    shutil.copytree(root / "graph", tmp_path / "copy")
    removed = subprocess.run(
        [sys.executable, "-m", "graphtier.launcher.cli", "dataset", "remove", "graph", "--out", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert removed.returncode == 0, _said(removed)
    assert list(root.iterdir()) == [] and (tmp_path / "copy" / "manifest.json").is_file()
