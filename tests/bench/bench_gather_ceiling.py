"""What a random-row gather can reach on this machine at all, in C without torch or graphtier: the
ceiling for bench_gather.py's native gather.

Compiles gather_ceiling.c (the system's C compiler, -O3 -march=native, into TMPDIR; at -O2 GCC kept
a row's eight vectors on the stack, 15-20% slower, while -O3 gives graphtier's own kernel's code) and runs it
`--runs` times, each a fresh process: a 2,000,000 x 512 B table in shared memory, 500,000 random
ids, 2 threads, the copy kernel graphtier's gather uses (a row's loads back to back, 64-byte
streaming stores) with several prefetch distances, and the ids grouped by 4 MiB region or sorted
before the clock starts (what a free grouping would give), against memcpy of 2 GiB on the same
threads; medians of interleaved, shuffled rounds. On some virtual machines the copy's speed
changes between processes (the host's state, not the guest's), while random rows move at the
speed of memory latency: each run prints its own copy and ratios, and the table keeps the run
with the fastest copy and the one with the slowest.

Run: python tests/bench/bench_gather_ceiling.py [--quick] [--runs 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from machine import cpu_model, write_figures

SOURCE = Path(__file__).with_name("gather_ceiling.c")
OURS = "batch order, 16 rows ahead, half rows (graphtier's kernel)"


def build(into: Path) -> Path:
    """The probe, compiled for this CPU; exits naming the compiler's error when it cannot be built."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("no C compiler: set CC or install gcc to build gather_ceiling.c")
    binary = into / "gather_ceiling"
    built = subprocess.run(
        [compiler, "-O3", "-march=native", "-pthread", "-o", str(binary), str(SOURCE)],
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        raise SystemExit(f"{compiler} could not build {SOURCE}:\n{built.stderr}")
    return binary


def run(binary: Path, rows: int, ids: int, threads: int, rounds: int) -> dict[str, float]:
    """One run: GB/s per case, the memcpy baseline first."""
    done = subprocess.run(
        [str(binary), str(rows), "512", str(ids), str(threads), str(rounds)], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"gather_ceiling exited {done.returncode}: {done.stderr.strip()}")
    return {name: float(gbs) for name, gbs in (line.split("\t") for line in done.stdout.splitlines())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=2_000_000, help="table rows of 512 B")
    p.add_argument("--gather", type=int, default=500_000, help="rows gathered per call")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=9, help="interleaved rounds per run; medians reported")
    p.add_argument("--runs", type=int, default=4, help="fresh processes")
    p.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    p.add_argument("--json", help="also write the figures as JSON here")
    a = p.parse_args()
    if a.quick:
        a.rows, a.gather, a.rounds, a.runs = 200_000, 50_000, 3, 1

    with tempfile.TemporaryDirectory(prefix="graphtier-gather-ceiling-") as tmp:
        binary = build(Path(tmp))
        runs = [run(binary, a.rows, a.gather, a.threads, a.rounds) for _ in range(a.runs)]
    print(
        f"cpu: {cpu_model()} ({os.cpu_count()} logical cpus); threads {a.threads}; table {a.rows:,} x 512 B in "
        f"shared memory; {a.gather:,} random ids; {a.rounds} rounds per run; load average {os.getloadavg()[0]:.2f}"
    )
    copy = "memcpy 2 GiB"
    for index, result in enumerate(runs):
        print(f"\nrun {index}: memcpy {result[copy]:.2f} GB/s")
        for name, gbs in result.items():
            if name != copy:
                print(f"  {name:60s} {gbs:6.2f} GB/s {gbs / result[copy]:5.2f} of memcpy")
    fastest, slowest = max(runs, key=lambda r: r[copy]), min(runs, key=lambda r: r[copy])
    figures: list[dict[str, object]] = []
    for label, result in (("fastest", fastest), ("slowest", slowest)):
        best = max((n for n in result if n != copy), key=lambda n: result[n])
        print(
            f"\nthe run with the {label} copy ({result[copy]:.2f} GB/s): graphtier's kernel "
            f"{result[OURS] / result[copy]:.2f} of it, the best case ({best}) {result[best] / result[copy]:.2f}"
        )
        figures.append(
            {
                "name": f"C gather ceiling, 512 B rows, random ids, best order, run with the {label} copy",
                "value": round(result[best] / result[copy], 2),
                "unit": "x memcpy",
                "baseline": f"memcpy 2 GiB at {result[copy]:.1f} GB/s, same run",
            }
        )
        if fastest is slowest:
            break
    write_figures(a.json, "gather_ceiling", figures, runs=runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
