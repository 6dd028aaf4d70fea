"""Loading a prepared dataset into shared memory with and without checking every served array's checksum.

    python tests/bench/bench_load_verify.py [--root DIR] [--scale 21] [--repeats 3] [--quick] [--json FILE]

Default: R-MAT scale 21 with 128-dim features (about 1.4 GiB prepared), loaded whole into host
memory by `SharedDatasetStore`; verified and unverified loads alternate (which goes first
alternates too), each in the same process after a warm-up load (so both read the files from the
page cache). The unverified load copies in the kernel (`sendfile` from each file into its
segment); the verified load reads each 1 MiB chunk into a cached buffer, hashes it (BLAKE3) and
writes it into the segment from that buffer, and fails before any handle exists on a mismatch:
each way is the load's own. Prints the median wall times
and their ratio (target <= 1.3), and the process CPU seconds of each (the ratio a machine with
no spare core would see). `--quick`: scale 18, 5 rounds, under a minute.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline_overhead import ensure_dataset
from machine import bench_cache, cpu_model, write_figures

from graphtier.service.placement import PlacementPlan, TierBudgets
from graphtier.service.prepared import PreparedDataset
from graphtier.service.store import SharedDatasetStore

TARGET_RATIO = 1.3  # issue 27: a load with verification at most 1.3x one without


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def load_seconds(root: Path, name: str, verify: bool) -> tuple[float, float]:
    """(wall, CPU) seconds of one whole load into host shared memory, segments unlinked after."""
    ds = PreparedDataset.open(name, root)
    n, row = ds.manifest.num_nodes, ds.manifest.feature_row_bytes
    budgets = TierBudgets(
        num_devices=0, device_replicated_bytes=0, device_interleaved_bytes=0, host_bytes=None, structure_device_bytes=0
    )
    plan = PlacementPlan.from_budgets(budgets, num_nodes=n, row_bytes=row)
    t0, c0 = time.perf_counter(), _cpu_seconds()
    with SharedDatasetStore(ds, plan, verify=verify):
        return time.perf_counter() - t0, _cpu_seconds() - c0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, default=bench_cache("prepared"))
    p.add_argument("--scale", type=int, default=21)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="R-MAT scale 18, 5 rounds")
    p.add_argument("--json", help="also write the figures as JSON here")
    a = p.parse_args()
    if a.quick:
        a.scale, a.repeats = 18, 5
    name = f"rmat-{a.scale}"
    ds = ensure_dataset(a.root, name, a.scale)
    size = sum(info.nbytes for info in ds.manifest.arrays.values())
    load_seconds(a.root, name, verify=False)  # warm the page cache
    load_at_start = os.getloadavg()[0]
    plain: list[tuple[float, float]] = []
    checked: list[tuple[float, float]] = []
    for i in range(a.repeats):
        for verify in (False, True) if i % 2 == 0 else (True, False):
            (checked if verify else plain).append(load_seconds(a.root, name, verify=verify))
    t_plain, t_checked = (statistics.median(t for t, _ in runs) for runs in (plain, checked))
    c_plain, c_checked = (statistics.median(c for _, c in runs) for runs in (plain, checked))
    load = (load_at_start + os.getloadavg()[0]) / 2
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, load average {load:.2f}")
    algorithm = "blake3" if all(info.blake3 for info in ds.manifest.arrays.values()) else "sha256"
    print(
        f"dataset {name}: {size / 2**30:.2f} GiB of arrays, loaded whole into host shared memory; checksum {algorithm}"
        + (" (prepared before BLAKE3 was recorded: delete it to re-prepare)" if algorithm == "sha256" else "")
    )
    for label, runs, t, c in (("without", plain, t_plain, c_plain), ("with   ", checked, t_checked, c_checked)):
        print(
            f"load {label} checksums (median of {a.repeats}): {t:.2f} s wall, {c:.2f} s CPU  "
            f"{[round(w, 2) for w, _ in runs]}"
        )
    ratio, cpu_ratio = t_checked / t_plain, c_checked / c_plain
    verdict = "met" if ratio <= TARGET_RATIO else "NOT met"
    print(f"ratio: {ratio:.2f}x wall (target <= {TARGET_RATIO}: {verdict}); {cpu_ratio:.2f}x CPU")
    baseline = f"load without checksums ({t_plain:.2f} s, median)"
    figures: list[dict[str, object]] = [
        {
            "name": f"load with checksums, {size / 2**30:.2f} GiB (wall, median of {a.repeats})",
            "value": round(ratio, 2),
            "unit": "x",
            "better": "lower",
            "baseline": baseline,
            "target": TARGET_RATIO,
            "load_average": round(load, 2),
        },
        {
            "name": "load with checksums, process CPU seconds",
            "value": round(cpu_ratio, 2),
            "unit": "x",
            "better": "lower",
            "baseline": f"load without checksums ({c_plain:.2f} s CPU, median)",
            "target": None,
            "load_average": round(load, 2),
        },
    ]
    write_figures(a.json, "load verification", figures, command="python tests/bench/bench_load_verify.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
