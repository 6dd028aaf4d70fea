"""prepare's failures outside its control are one line and exit 2, never a traceback: an npz whose
indices are out of range, a target it may not write, a full disk (nothing is left behind)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp


def _npz(path: Path, *, bad_index: bool = False) -> None:
    n = 50
    adj = sp.random(n, n, density=0.1, format="csr", random_state=0)
    indices = adj.indices.copy()
    if bad_index:
        indices[3] = 10_000
    np.savez(
        path,
        adj_data=adj.data,
        adj_indices=indices,
        adj_indptr=adj.indptr,
        adj_shape=adj.shape,
        attr_data=np.ones(n, dtype=np.float32),
        attr_indices=np.zeros(n, dtype=np.int64),
        attr_indptr=np.arange(n + 1),
        attr_shape=(n, 1),
        labels=np.arange(n, dtype=np.int64) % 3,
    )


def _prepare(source: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "graphtier.launcher.cli",
            "dataset",
            "prepare",
            f"npz:{source}",
            "--name",
            "g",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_line_error(done: subprocess.CompletedProcess, text: str, status: int = 2) -> None:
    """One line naming `text`, no traceback, exit `status` (2 a refused input, 1 an I/O failure)."""
    output = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == status and text in output, output
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_out_of_range_npz_indices_name_the_file(tmp_path):
    _npz(tmp_path / "bad.npz", bad_index=True)
    _one_line_error(
        _prepare(tmp_path / "bad.npz", tmp_path / "out"),
        f"{tmp_path / 'bad.npz'}: keys adj_* do not form a valid CSR matrix (indices must be < 50)",
    )


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_an_unwritable_target_names_the_path(tmp_path):
    _npz(tmp_path / "ok.npz")
    _one_line_error(_prepare(tmp_path / "ok.npz", Path("/proc/graphtier-test")), "/proc/graphtier-test", status=1)


def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path):
    _npz(tmp_path / "ok.npz")
    full = tmp_path / "full"
    full.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(full)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        _one_line_error(_prepare(tmp_path / "ok.npz", full), "No space left on device", status=1)
        assert os.listdir(full) == []  # no half-written dataset, no temporary directory
    finally:
        subprocess.run(["umount", str(full)], check=True)
