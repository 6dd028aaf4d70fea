"""How long do the CLI's control commands take against a running daemon? (issue 11: median <= 0.5 s)

Starts a daemon with `graphtier cluster start` in a temporary home, prepares a small R-MAT
graph, runs one short job to completion and starts a second, long one, then times each command
`--runs` times as a whole process (fork + interpreter + imports + gRPC/HTTP round trip + render),
while the second job trains: `graphtier job status ID`, `graphtier metrics`, `graphtier cluster
status`, `graphtier job list`. Two baselines from the same run put the figures in proportion:
`python -c pass` (the interpreter alone) and `python -c "import torch"` (what every command cost
when the client imported torch through the daemon's modules).

Run: python tests/bench/bench_cli_latency.py [--runs 10]
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

from machine import cpu_model


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
    args = p.parse_args()

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
        f"machine: {cpu_model()}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}; "
        f"{args.runs} runs each, a job training throughout ({still} at the end)"
    )
    base = statistics.median(figures["python -c pass"])
    print(f"{'command':<28} {'median s':>9} {'p90 s':>7} {'x interpreter':>14}")
    for name, times in figures.items():
        median = statistics.median(times)
        p90 = sorted(times)[max(0, int(round(0.9 * len(times))) - 1)]
        print(f"{name:<28} {median:>9.3f} {p90:>7.3f} {median / base:>14.1f}")
    worst = max(statistics.median(figures[k]) for k in figures if not k.startswith("python"))
    print(f"slowest control command: median {worst:.3f} s (target <= 0.5 s): {'met' if worst <= 0.5 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
