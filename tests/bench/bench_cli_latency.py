"""How long do the CLI's control commands take against a running daemon? (job status <= 0.3 s idle, <= 1 s at load 4)

Starts a daemon with `graphtier cluster start` in a temporary home, prepares a small R-MAT
graph, runs one short job to completion and starts a second, long one, then times each command
`--runs` times as a whole process (fork + interpreter + imports + gRPC/HTTP round trip + render),
while the second job trains: `graphtier job status ID`, `graphtier metrics`, `graphtier cluster
status`, `graphtier job list`. Two baselines from the same run put the figures in proportion:
`python -c pass` (the interpreter alone) and `python -c "import torch"` (what every command cost
when the client imported torch through the daemon's modules). The target that applies depends
on the load average when the timing starts: 0.3 s for `job status` on an idle machine (load
below 1.5), 1 s at load 4; in between both are printed and neither is claimed.

Run: python tests/bench/bench_cli_latency.py [--runs 10] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from machine import cpu_model, write_figures

IDLE_LOAD, BUSY_LOAD = 1.5, 4.0  # below IDLE_LOAD the idle target applies, from BUSY_LOAD the loaded one
IDLE_TARGET_S, BUSY_TARGET_S = 0.3, 1.0


def timed(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    """Wall seconds of `runs` runs of `argv`, each a fresh process; a failing run aborts the bench."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--scale", type=int, default=12)
    p.add_argument("--quick", action="store_true", help="5 runs per command")
    p.add_argument("--json", help="also write the figures as JSON here")
    args = p.parse_args()
    if args.quick:
        args.runs = 5

    with tempfile.TemporaryDirectory(prefix="graphtier-bench-cli-") as home:
        env = {**os.environ, "GRAPHTIER_HOME": home, "COLUMNS": "120"}
        cli = [sys.executable, "-m", "graphtier.launcher.cli"]

        def graphtier(*argv: str, check: bool = True) -> str:
            done = subprocess.run([*cli, *argv], env=env, capture_output=True, text=True)
            if check and done.returncode != 0:
                raise SystemExit(f"graphtier {' '.join(argv)}: {done.stderr.strip()[-500:]}")
            return done.stdout

        graphtier("dataset", "prepare", "synthetic:rmat", "--name", "bench", "--scale", str(args.scale), "--undirected")
        graphtier("cluster", "start")
        running: dict | None = None
        try:
            job_args = ["--dataset", "bench", "--model", "sage", "--fanout", "10,5", "--nproc-per-node", "1"]
            first = json.loads(graphtier("job", "submit", *job_args, "--epochs", "1", "--wait", "--json"))
            running = json.loads(graphtier("job", "submit", *job_args, "--epochs", "10000", "--json"))
            deadline = time.monotonic() + 120
            while json.loads(graphtier("job", "status", running["job_id"], "--json"))["state"] != "running":
                if time.monotonic() > deadline:
                    raise SystemExit("the second job did not start within 120 s")
                time.sleep(0.5)
            load_at_start = os.getloadavg()[0]
            figures = {
                "python -c pass": timed([sys.executable, "-c", "pass"], env, args.runs),
                'python -c "import torch"': timed([sys.executable, "-c", "import torch"], env, args.runs),
                f"job status {first['job_id']}": timed([*cli, "job", "status", first["job_id"]], env, args.runs),
                "metrics": timed([*cli, "metrics"], env, args.runs),
                "cluster status": timed([*cli, "cluster", "status"], env, args.runs),
                "job list": timed([*cli, "job", "list"], env, args.runs),
            }
            still = json.loads(graphtier("job", "status", running["job_id"], "--json"))["state"]
        finally:
            if running is not None:
                graphtier("job", "cancel", running["job_id"], check=False)
            graphtier("cluster", "stop", check=False)

    print(
        f"machine: {cpu_model()}, {os.cpu_count()} cores; load average {load_at_start:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end; "
        f"{args.runs} runs each, a job training throughout ({still} at the end)"
    )
    base = statistics.median(figures["python -c pass"])
    print(f"{'command':<28} {'median s':>9} {'p90 s':>7} {'x interpreter':>14}")
    for name, times in figures.items():
        median = statistics.median(times)
        p90 = sorted(times)[max(0, int(round(0.9 * len(times))) - 1)]
        print(f"{name:<28} {median:>9.3f} {p90:>7.3f} {median / base:>14.1f}")
    worst = max(statistics.median(figures[k]) for k in figures if not k.startswith("python"))
    status = statistics.median(figures[f"job status {first['job_id']}"])
    print(f"slowest control command: median {worst:.3f} s")
    if load_at_start < IDLE_LOAD:
        target = IDLE_TARGET_S
    elif load_at_start >= BUSY_LOAD:
        target = BUSY_TARGET_S
    else:
        target = None
    if target is None:
        print(
            f"job status: median {status:.3f} s at load {load_at_start:.2f}, between the idle target "
            f"(<= {IDLE_TARGET_S} s below load {IDLE_LOAD}) and the loaded one "
            f"(<= {BUSY_TARGET_S} s from load {BUSY_LOAD})"
        )
    else:
        verdict = "met" if status <= target else "NOT met"
        print(f"job status: median {status:.3f} s at load {load_at_start:.2f} (target <= {target} s: {verdict})")
    rows = []
    for name, times in figures.items():
        command = "job status" if name.startswith("job status") else name  # the job id varies
        rows.append(
            {
                "name": command if command.startswith("python") else f"graphtier {command}",
                "value": round(statistics.median(times), 3),
                "unit": "s",
                "baseline": "python -c pass",
                "baseline_value": round(base, 3),
                "target": target if command == "job status" else None,
                "load_average": round(load_at_start, 2),
            }
        )
    write_figures(
        args.json, "CLI control commands", rows, command=f"python tests/bench/bench_cli_latency.py --runs {args.runs}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
