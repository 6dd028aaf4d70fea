"""Twenty jobs submitted at once: all finish, at most the configured number run together, memory
stays under the machine's, and the daemon answers status quickly throughout.

    python tests/bench/bench_admission.py [--jobs 20] [--max-running 2] [--scale 12]

Starts its own daemon on a private runtime directory, prepares a small R-MAT dataset, submits the
jobs back to back, and polls /v1/status over HTTP and GetJob over gRPC every 0.2 s, timing each
answer with a process-level clock. Prints the latencies (median, p99, max), the most jobs seen
running at once, and the lowest available memory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_model

from graphtier.contract.endpoints import read_endpoints
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client import DaemonClient


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=20)
    p.add_argument("--max-running", type=int, default=2)
    p.add_argument("--scale", type=int, default=12)
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gt-bench-admission-"))
    root, run = work / "datasets", work / "run"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "graphtier.launcher.cli",
            "dataset",
            "prepare",
            "synthetic:rmat",
            "--name",
            "bench",
            "--scale",
            str(a.scale),
            "--undirected",
            "--out",
            str(root),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "graphtier.service.daemon",
            "--runtime-dir",
            str(run),
            "--dataset-root",
            str(root),
            "--max-running-jobs",
            str(a.max_running),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while read_endpoints(run) is None:
            time.sleep(0.1)
        endpoints = read_endpoints(run)
        http, grpc_ms, most, low_memory = [], [], 0, psutil.virtual_memory().available
        with DaemonClient(endpoints.grpc_target) as client:
            spec = JobSpec(dataset="bench", fanouts=[10, 5], batch_size=512, hidden=32, epochs=1, nproc_per_node=1)
            t0 = time.perf_counter()
            ids = [client.submit_job(spec.model_copy(update={"name": f"j{i}"})).job_id for i in range(a.jobs)]
            while True:
                s = time.perf_counter()
                with urllib.request.urlopen(endpoints.http_url + "/v1/status", timeout=10) as reply:
                    reply.read()
                http.append(time.perf_counter() - s)
                s = time.perf_counter()
                states = [client.get_job(i).state for i in ids]
                grpc_ms.append((time.perf_counter() - s) / len(ids))
                most = max(most, sum(st in (JobState.STARTING, JobState.RUNNING) for st in states))
                low_memory = min(low_memory, psutil.virtual_memory().available)
                if all(st.final for st in states):
                    break
                time.sleep(0.2)
            wall = time.perf_counter() - t0
        outcome = {st.value: states.count(st) for st in set(states)}
    finally:
        daemon.terminate()
        daemon.wait(60)
        shutil.rmtree(work, ignore_errors=True)

    def line(name: str, xs: list[float]) -> str:
        xs = sorted(xs)
        over = sum(x > 0.1 for x in xs)
        return (
            f"{name}: median {1e3 * statistics.median(xs):.1f} ms, p99 {1e3 * xs[int(0.99 * (len(xs) - 1))]:.1f}"
            f" ms, max {1e3 * xs[-1]:.1f} ms over {len(xs)} polls; {over} over 100 ms"
        )

    print(
        f"machine: {cpu_model()}, {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.1f} GiB, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(f"{a.jobs} jobs, limit {a.max_running} running: outcome {outcome}, {wall:.1f} s in all")
    print(f"most running at once: {most} (limit {a.max_running})")
    print(f"lowest available memory: {low_memory / 2**30:.2f} GiB of {psutil.virtual_memory().total / 2**30:.1f} GiB")
    print(line("GET /v1/status", http))
    print(line("GetJob (per job)", grpc_ms))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
