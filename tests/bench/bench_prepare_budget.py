"""Preparation under a memory budget: peak memory against the budget, time against the in-memory path.

For every scale, runs `graphtier dataset prepare synthetic:rmat` (128-dim features,
--undirected, wrpr) in fresh processes, one after the other in the same run: with
`--memory-budget BUDGET` (the out-of-core path) and with `--memory-budget unlimited` (the
in-memory path). Each process's peak RSS is its own VmHWM, recorded in the manifest
(`getrusage`'s ru_maxrss, also read here by `os.wait4`, would carry a parent's peak
across exec; it is printed when it differs). Prints per
scale: peak / budget, time and time / in-memory time, whether the two datasets are
byte-identical (every array's sha256), and the time growth per doubling of the graph for
both paths. The machine may be shared: the 1-minute load average is printed with each run.

Run: python tests/bench/bench_prepare_budget.py [--scales 18,20,22] [--budgets 1GiB,2GiB,3GiB]
     [--repeat 1] [--feature-dim 128] [--score wrpr] [--no-unbounded]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import torch

from graphtier.service.out_of_core.memory_budget import parse_memory_budget

GiB = 2**30


def run_prepare(root: Path, name: str, scale: int, budget: str, args: argparse.Namespace) -> dict:
    """One prepare in a fresh process: manifest, wall time and the kernel's peak RSS for it."""
    cmd = [
        sys.executable,
        "-m",
        "graphtier.launcher.cli",
        "dataset",
        "prepare",
        "synthetic:rmat",
        "--name",
        name,
        "--scale",
        str(scale),
        "--feature-dim",
        str(args.feature_dim),
        "--undirected",
        "--score",
        args.score,
        "--memory-budget",
        budget,
        "--out",
        str(root),
        "--json",
    ]
    load = os.getloadavg()[0]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            sys.exit(f"prepare {name} failed ({proc.returncode}):\n{err.read()[-3000:]}")
        out.seek(0)
        manifest = json.loads(out.read())
    return {
        "manifest": manifest,
        "wall": wall,
        "peak": manifest["peak_rss_bytes"],
        "wait4_peak": usage.ru_maxrss * 1024,
        "load": load,
        "cpu": usage.ru_utime + usage.ru_stime,
        "total": manifest["timings_s"]["total"],
        "sha": {k: v["sha256"] for k, v in manifest["arrays"].items()},
    }


def best(runs: list[dict]) -> dict:
    return min(runs, key=lambda r: r["total"])


def median_time(runs: list[dict], key: str = "total") -> float:
    """The median of the runs' times, or of their `key` (the mean of the middle two for an even count)."""
    times = sorted(r[key] for r in runs)
    middle = len(times) // 2
    return times[middle] if len(times) % 2 else (times[middle - 1] + times[middle]) / 2


def growth(scales: list[int], times: dict[int, float]) -> list[str]:
    """Time ratio per doubling between consecutive measured scales (geometric mean over a gap)."""
    out = []
    for lo, hi in zip(scales, scales[1:], strict=False):
        if lo in times and hi in times:
            out.append(f"{lo}->{hi}: {(times[hi] / times[lo]) ** (1 / (hi - lo)):.2f}x")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="18,20,22")
    parser.add_argument("--budgets", default="1GiB,2GiB,3GiB", help="one per scale, or one for all")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per path and scale, going round the scales each time, up and down in turn; "
        "growth is shown for the fastest and for the median run",
    )
    parser.add_argument("--feature-dim", type=int, default=128)
    parser.add_argument("--score", default="wrpr")
    parser.add_argument("--no-unbounded", action="store_true", help="skip the in-memory runs")
    args = parser.parse_args()
    scales = [int(s) for s in args.scales.split(",")]
    budgets = args.budgets.split(",")
    budgets = budgets * len(scales) if len(budgets) == 1 else budgets
    if len(budgets) != len(scales):
        sys.exit("--budgets: give one budget, or one per scale")

    ram = psutil.virtual_memory().total
    print(
        f"graphtier prepare under a memory budget: R-MAT, {args.feature_dim}-dim features, undirected, score "
        f"{args.score}; torch {torch.__version__}, {platform.machine()}, {psutil.cpu_count()} cores, "
        f"{ram / GiB:.1f} GiB RAM; load average at start {os.getloadavg()[0]:.2f}"
    )
    rows, bounded_times, unbounded_times, bounded_medians, unbounded_medians = [], {}, {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="graphtier-bench-budget-", dir=os.environ.get("TMPDIR")) as tmp:
        root = Path(tmp)
        bounded: dict[int, list[dict]] = {scale: [] for scale in scales}
        unbounded: dict[int, list[dict]] = {scale: [] for scale in scales}
        for i in range(args.repeat):  # round the scales each time: a drift in the machine's load touches them alike;
            order = list(
                zip(scales, budgets, strict=True)
            )  # up, then down: each scale follows a larger and a smaller one's run
            for scale, budget in order if i % 2 == 0 else order[::-1]:
                bounded[scale].append(run_prepare(root, f"b{scale}-{i}", scale, budget, args))
                print(
                    f"  scale {scale} budget {budget}: {bounded[scale][-1]['total']:.1f}s peak "
                    f"{bounded[scale][-1]['peak'] / GiB:.2f} GiB (load {bounded[scale][-1]['load']:.2f})",
                    flush=True,
                )
                if not args.no_unbounded:
                    unbounded[scale].append(run_prepare(root, f"u{scale}-{i}", scale, "unlimited", args))
                    print(
                        f"  scale {scale} unlimited: {unbounded[scale][-1]['total']:.1f}s peak "
                        f"{unbounded[scale][-1]['peak'] / GiB:.2f} GiB (load {unbounded[scale][-1]['load']:.2f})",
                        flush=True,
                    )
                for entry in root.iterdir():
                    shutil.rmtree(entry, ignore_errors=True)
        for scale, budget in zip(scales, budgets, strict=True):
            b = best(bounded[scale])
            u = best(unbounded[scale]) if unbounded[scale] else None
            bounded_times[scale], bounded_medians[scale] = b["total"], median_time(bounded[scale])
            if u:
                unbounded_times[scale], unbounded_medians[scale] = u["total"], median_time(unbounded[scale])
            m = b["manifest"]
            data = sum(a["nbytes"] for a in m["arrays"].values())
            rows.append((scale, m["num_nodes"], m["num_edges"], data, parse_memory_budget(budget), b, u))

    print(
        f"\n{'scale':>5} {'nodes':>10} {'edges':>12} {'data GiB':>8} {'budget':>7} {'peak GiB':>8} {'peak/budget':>11} "
        f"{'time s':>7} {'in-mem s':>8} {'ratio':>6} {'cpu s':>6} {'in-mem cpu':>10} {'ratio':>6} {'in-mem peak':>11} "
        f"{'identical':>9}"
    )
    for scale, nodes, edges, data, budget_bytes, b, u in rows:
        ratio = f"{b['total'] / u['total']:.2f}" if u else "-"
        cpu_ratio = f"{b['cpu'] / u['cpu']:.2f}" if u else "-"
        same = ("yes" if u["sha"] == b["sha"] else "NO") if u else "-"
        print(
            f"{scale:>5} {nodes:>10,} {edges:>12,} {data / GiB:>8.2f} {budget_bytes / GiB:>6.2f}G "
            f"{b['peak'] / GiB:>8.2f} {b['peak'] / budget_bytes:>11.2f} {b['total']:>7.1f} "
            f"{(u['total'] if u else math.nan):>8.1f} {ratio:>6} {b['cpu']:>6.1f} "
            f"{(u['cpu'] if u else math.nan):>10.1f} {cpu_ratio:>6} "
            f"{(u['peak'] / GiB if u else math.nan):>10.2f}G {same:>9}"
        )
    print(
        "time = the manifest's total (the process's own clock, without interpreter start-up); cpu = user + sys of "
        "the process (wait4), less sensitive to other load on a shared machine; "
        "the table shows the fastest of --repeat runs"
    )
    print("time per doubling, out of core, fastest runs:", ", ".join(growth(scales, bounded_times)) or "-")
    print("                                median runs: ", ", ".join(growth(scales, bounded_medians)) or "-")
    cpu_medians = {scale: median_time(bounded[scale], "cpu") for scale in scales if bounded[scale]}
    print("cpu per doubling, out of core, median runs: ", ", ".join(growth(scales, cpu_medians)) or "-")
    print("time per doubling, in memory, fastest runs:  ", ", ".join(growth(scales, unbounded_times)) or "-")
    print("                              median runs:   ", ", ".join(growth(scales, unbounded_medians)) or "-")
    for scale in scales:
        print(f"scale {scale} out-of-core times: " + " ".join(f"{r['total']:.1f}" for r in bounded[scale]))
    for scale, *_, b, u in rows:
        for label, r in (("out-of-core", b), ("in-memory", u)):
            if r is None:
                continue
            cpu = r["manifest"]["preparation"].get("cpu_s_by_step", {})
            steps = " ".join(
                f"{k}={v:.1f}" + (f"/{cpu[k]:.1f}" if k in cpu else "") for k, v in r["manifest"]["timings_s"].items()
            )
            print(f"scale {scale} {label} steps (s, time/cpu): {steps}; wall {r['wall']:.1f}s")
        step_names = b["manifest"]["timings_s"]
        medians = " ".join(
            f"{k}={statistics.median(r['manifest']['timings_s'][k] for r in bounded[scale]):.1f}" for k in step_names
        )
        print(f"scale {scale} out-of-core steps, median of {len(bounded[scale])} runs (s): {medians}")
        plan = {
            k: v
            for k, v in b["manifest"]["preparation"].items()
            if k in ("build_csc", "reorder_structure", "reorder_features")
        }
        print(f"scale {scale} buckets and spill: {plan}")
        if b["wait4_peak"] - b["peak"] > 64 << 20:
            print(
                f"  note: wait4's ru_maxrss {b['wait4_peak'] / GiB:.2f} GiB exceeds the process's VmHWM: it carries "
                "this bench's own peak across exec"
            )
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
