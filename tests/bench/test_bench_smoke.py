"""Smoke test: `bench_sampler.py --quick` runs end to end in a real subprocess and prints its table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent / "bench_sampler.py"


def test_bench_sampler_quick_prints_table(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--cache-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{out}\nstderr:\n{proc.stderr}"
    assert "machine: " in out and "torch " in out
    assert "R-MAT scale 16, N=65,536" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("sampler") and "batches/s" in line)
    rows = lines[header + 2 :]
    graphtier = [r for r in rows if r.startswith("graphtier NeighborSampler")]
    assert graphtier, out
    batches_per_s = float(graphtier[0].split()[3])
    assert batches_per_s > 0
    assert list(tmp_path.glob("rmat_s16_*.pt")), "the graph was not cached"
    if any(r.startswith("PyG NeighborLoader") for r in rows):
        assert "/ PyG NeighborLoader: " in out and "target >= 15x" in out
    else:
        assert "setup_pyg.sh" in out  # tells how to get the baseline
