"""Preparation benchmark: score + reorder + write an R-MAT dataset with 128-dim features.

Runs `graphtier dataset prepare` in a fresh process (so its peak RSS is its own), and
prints the per-step timings from the manifest, the peak resident memory against this
machine's RAM, and the dataset size. Baseline in the same run: the time to generate the
same raw graph and features alone (the floor any preparation pays before scoring).

Run: python tests/bench/bench_prepare.py [--scale 21] [--score wrpr] [--memory-budget auto]
(`--memory-budget unlimited` for the in-memory path; bench_prepare_budget.py compares the two.)
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time

import psutil
import torch

from graphtier.service.sources.synthetic import generate_rmat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=21)
    parser.add_argument("--feature-dim", type=int, default=128)
    parser.add_argument("--score", default="wrpr")
    parser.add_argument("--memory-budget", default="auto", help="passed to prepare: auto = half of RAM")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="graphtier-bench-prepare-") as root:
        cmd = [
            sys.executable,
            "-m",
            "graphtier.launcher.cli",
            "dataset",
            "prepare",
            "synthetic:rmat",
            "--name",
            "bench",
            "--scale",
            str(args.scale),
            "--feature-dim",
            str(args.feature_dim),
            "--undirected",
            "--score",
            args.score,
            "--memory-budget",
            args.memory_budget,
            "--out",
            root,
            "--json",
        ]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            sys.exit(f"prepare failed ({done.returncode}):\n{done.stderr}")
        manifest = json.loads(done.stdout)

    torch.set_num_threads(2)
    t0 = time.perf_counter()
    generate_rmat(scale=args.scale, feature_dim=args.feature_dim)
    t_generate = time.perf_counter() - t0

    ram = psutil.virtual_memory().total
    peak = manifest["peak_rss_bytes"]
    data = sum(a["nbytes"] for a in manifest["arrays"].values())
    print(
        f"graphtier prepare benchmark: R-MAT scale {args.scale}, {args.feature_dim}-dim features, score {args.score}, "
        f"memory budget {args.memory_budget} ({manifest['preparation'].get('path', '?')} path); "
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {psutil.cpu_count()} cores, "
        f"{ram / 2**30:.1f} GiB RAM"
    )
    print(f"nodes {manifest['num_nodes']:,}  edges {manifest['num_edges']:,}  dataset {data / 2**30:.2f} GiB on disk")
    for step, seconds in manifest["timings_s"].items():
        print(f"  {step:22s} {seconds:8.2f} s")
    print(f"  {'process wall time':22s} {wall:8.2f} s   (includes interpreter start-up)")
    print(
        f"  {'baseline: generate only':22s} {t_generate:8.2f} s   -> prepare total / generate = "
        f"{manifest['timings_s']['total'] / t_generate:.2f}x"
    )
    print(f"peak RSS {peak / 2**30:.2f} GiB = {peak / ram:.0%} of RAM ({peak / data:.2f}x the dataset bytes)")


if __name__ == "__main__":
    main()
