"""`graphtier dataset remove` deletes only what graphtier prepared: never a user's directory or a link's target."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest


def _remove(root, name):
    return subprocess.run(
        [sys.executable, "-m", "graphtier.launcher.cli", "dataset", "remove", name, "--out", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_remove_deletes_a_prepared_dataset(tmp_path, small_rmat):
    root = tmp_path / "datasets"
    shutil.copytree(small_rmat.directory, root / "rmat12")
    done = _remove(root, "rmat12")
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(root.iterdir()) == []  # no .trash-* left either


def test_remove_refuses_a_directory_graphtier_did_not_prepare(tmp_path):
    root = tmp_path / "datasets"
    (root / "important").mkdir(parents=True)
    (root / "important" / "thesis.tex").write_text("years of work")
    refused = _remove(root, "important")
    assert refused.returncode == 2
    assert "holds no valid graphtier manifest (manifest.json); nothing was removed" in " ".join(
        (refused.stdout + refused.stderr).split()
    )
    assert (root / "important" / "thesis.tex").read_text() == "years of work"


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_remove_refuses_a_borrowed_manifest_or_extra_files(tmp_path, small_rmat):
    root = tmp_path / "datasets"
    (root / "proj").mkdir(parents=True)
    (root / "proj" / "thesis.tex").write_text("precious")
    (root / "proj" / "manifest.json").symlink_to(small_rmat.directory / "manifest.json")
    refused = _remove(root, "proj")
    assert refused.returncode == 2 and "is a symbolic link" in refused.stdout + refused.stderr
    shutil.copytree(small_rmat.directory, root / "rmat12")
    (root / "rmat12" / "notes.txt").write_text("mine")
    refused = _remove(root, "rmat12")
    assert refused.returncode == 2 and "also holds files graphtier did not write (notes.txt)" in " ".join(
        (refused.stdout + refused.stderr).split()
    )
    assert (root / "proj" / "thesis.tex").exists() and (root / "rmat12" / "notes.txt").exists()


def test_remove_refuses_a_symlink_and_leaves_its_target(tmp_path, small_rmat):
    root = tmp_path / "datasets"
    root.mkdir()
    target = tmp_path / "elsewhere"
    shutil.copytree(small_rmat.directory, target)
    (root / "linked").symlink_to(target)
    refused = _remove(root, "linked")
    assert refused.returncode == 2 and "is a symbolic link" in refused.stdout + refused.stderr
    assert (root / "linked").is_symlink() and (target / "manifest.json").exists()
    assert [p.name for p in root.iterdir()] == ["linked"]  # no .trash-* link
