"""Every .cu file compiles with nvcc, on any machine that has it (no GPU needed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
CU_FILES = sorted((REPO / "native" / "cuda").glob("*.cu"))


def test_there_are_kernels_to_compile():
    assert CU_FILES, "native/cuda holds no .cu file"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("source", CU_FILES, ids=lambda p: p.name)
def test_cuda_source_compiles_for_hopper(source, tmp_path):
    result = subprocess.run(
        ["nvcc", "-std=c++17", "-O3", "-arch=sm_90", f"-I{REPO / 'native' / 'include'}", "-Xptxas=-v",
         "-c", str(source), "-o", str(tmp_path / "kernel.o")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "spill stores" in result.stderr and " 0 bytes spill stores" in result.stderr
