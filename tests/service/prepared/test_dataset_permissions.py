"""A prepared dataset is its owner's alone by default (0700/0600); `--dataset-group` lets one group read it."""

from __future__ import annotations

import grp
import os
import stat
import subprocess
import sys

import pytest

from graphtier.contract.errors import PreparedDatasetError
from graphtier.service.prepared import PrepareConfig, prepare_dataset


def _modes(directory) -> set[tuple[str, int, int]]:
    """(kind, mode bits, gid) of the directory and of every file in it."""
    entries = [directory, *directory.iterdir()]
    return {("dir" if p.is_dir() else "file", stat.S_IMODE(p.stat().st_mode), p.stat().st_gid) for p in entries}


def _config(root, **extra) -> PrepareConfig:
    return PrepareConfig(
        source="synthetic:rmat", name="tiny", root=root, source_options={"scale": 6, "feature_dim": 4}, **extra
    )


def test_a_dataset_is_readable_by_its_owner_only(tmp_path):
    old = os.umask(0o022)  # the usual umask: files would be 0644 without the dataset's own modes
    try:
        prepare_dataset(_config(tmp_path / "datasets"))
    finally:
        os.umask(old)
    gid = os.getgid()
    assert _modes(tmp_path / "datasets" / "tiny") == {("dir", 0o700, gid), ("file", 0o600, gid)}
    assert stat.S_IMODE((tmp_path / "datasets").stat().st_mode) == 0o700  # the root it made, too


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_dataset_group_lets_that_group_read_it(tmp_path):
    group = grp.getgrgid(os.getgid()).gr_name  # a group this user belongs to
    done = subprocess.run(
        [sys.executable, "-m", "graphtier.launcher.cli", "dataset", "prepare", "synthetic:rmat", "--name", "tiny"]
        + ["--scale", "6", "--feature-dim", "4", "--out", str(tmp_path), "--dataset-group", group],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    gid = os.getgid()
    assert _modes(tmp_path / "tiny") == {("dir", 0o750, gid), ("file", 0o640, gid)}


def test_an_unknown_group_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(PreparedDatasetError, match="--dataset-group 'no-such-group-x': no such group"):
        prepare_dataset(_config(tmp_path, group="no-such-group-x"))
    assert list(tmp_path.iterdir()) == []
