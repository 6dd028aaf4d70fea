"""Loading a prepared dataset into shared memory with and without checking every served array's sha256.

    python tests/bench/bench_load_verify.py [--root DIR] [--scale 21] [--repeats 3]

Default: R-MAT scale 21 with 128-dim features (about 1.4 GiB prepared), loaded whole into host
memory by `SharedDatasetStore`, verified and unverified runs interleaved, each in the same
process after a warm-up load (so both read the files from the page cache). Prints the median
load times and their ratio (target <= 1.5).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline_overhead import ensure_dataset  # noqa: E402
from machine import bench_cache, cpu_model  # noqa: E402

from graphtier.service.placement import PlacementPlan, TierBudgets  # noqa: E402
from graphtier.service.prepared import PreparedDataset  # noqa: E402
from graphtier.service.store import SharedDatasetStore  # noqa: E402


def load_seconds(root: Path, name: str, verify: bool) -> tuple[float, float]:
    ds = PreparedDataset.open(name, root)
    n, row = ds.manifest.num_nodes, ds.manifest.feature_row_bytes
    budgets = TierBudgets(
        num_devices=0, device_replicated_bytes=0, device_interleaved_bytes=0, host_bytes=None, structure_device_bytes=0
    )
    plan = PlacementPlan.from_budgets(budgets, num_nodes=n, row_bytes=row)
    t0 = time.perf_counter()
    with SharedDatasetStore(ds, plan, verify=verify) as store:
        seconds = time.perf_counter() - t0
        return seconds, store.verify_seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, default=bench_cache("prepared"))
    p.add_argument("--scale", type=int, default=21)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    name = f"rmat-{a.scale}"
    ds = ensure_dataset(a.root, name, a.scale)
    size = sum(info.nbytes for info in ds.manifest.arrays.values())
    load_seconds(a.root, name, verify=False)  # warm the page cache
    plain, checked = [], []
    for _ in range(a.repeats):
        plain.append(load_seconds(a.root, name, verify=False)[0])
        checked.append(load_seconds(a.root, name, verify=True)[0])
    t_plain, t_checked = statistics.median(plain), statistics.median(checked)
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    algorithm = "blake3" if all(info.blake3 for info in ds.manifest.arrays.values()) else "sha256"
    print(
        f"dataset {name}: {size / 2**30:.2f} GiB of arrays, loaded whole into host shared memory; checksum {algorithm}"
        + (" (prepared before BLAKE3 was recorded: delete it to re-prepare)" if algorithm == "sha256" else "")
    )
    print(f"load without checksums (median of {a.repeats}): {t_plain:.2f} s  {[round(t, 2) for t in plain]}")
    print(f"load with checksums    (median of {a.repeats}): {t_checked:.2f} s  {[round(t, 2) for t in checked]}")
    print(f"ratio: {t_checked / t_plain:.2f}x (target <= 1.5)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
