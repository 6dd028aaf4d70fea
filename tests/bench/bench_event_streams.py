"""Do followed event streams starve the daemon? 100 followers of a running job against none (issue 22).

One daemon (`python -m graphtier.service.daemon`, default settings: 16 gRPC workers), one small
prepared R-MAT graph, one job spec (GraphSAGE, one rank). Each round runs the job twice, one after
the other: alone, then with `--followers` StreamJobEvents(follow=True, include_logs=True) streams
open on it from the moment it is submitted, each on a channel of its own, as that many
`graphtier job logs N --follow` would hold (threads of this process rather than 100 CLI processes,
so the machine's two cores are not spent starting interpreters). During both runs GetJob is called
every `--interval` seconds and timed. Figures: the median and p95 GetJob latency with the followers,
and the job's training rate (the ranks' batches/s, summed) with followers / without, same round.
Targets: GetJob median < 100 ms, rate >= 0.9x.

Run: python tests/bench/bench_event_streams.py [--followers 100] [--rounds 2] [--scale 14] [--epochs 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
from machine import cpu_model

from graphtier.contract.endpoints import read_endpoints
from graphtier.contract.jobs.spec import JobSpec
from graphtier.launcher.client import DaemonClient
from graphtier.service.prepared import PrepareConfig, prepare_dataset
from graphtier.v1 import jobs_pb2, jobs_pb2_grpc


def run_job(client: DaemonClient, target: str, spec: JobSpec, followers: int, interval: float) -> tuple[float, list]:
    """The job run to its end with `followers` streams open on it: (ranks' batches/s, GetJob latencies in s)."""
    job_id = client.submit_job(spec).job_id
    channels = [grpc.insecure_channel(target) for _ in range(followers)]
    received = [0] * followers

    def follow(i: int) -> None:
        request = jobs_pb2.StreamJobEventsRequest(job_id=job_id, follow=True, include_logs=True)
        try:
            for _ in jobs_pb2_grpc.JobServiceStub(channels[i]).StreamJobEvents(request):
                received[i] += 1
        except grpc.RpcError as exc:
            print(f"follower {i}: {exc.code().name}: {exc.details()}", flush=True)

    threads = [threading.Thread(target=follow, args=(i,), daemon=True) for i in range(followers)]
    for thread in threads:
        thread.start()
    latencies = []
    while True:
        started = time.perf_counter()
        info = client.get_job(job_id)
        latencies.append(time.perf_counter() - started)
        if info.state.final:
            break
        time.sleep(interval)
    for thread in threads:
        thread.join(60)
    for channel in channels:
        channel.close()
    if info.state.value != "succeeded":
        raise SystemExit(f"job {job_id} {info.state.value}: {info.message}")
    if followers and min(received) == 0:
        raise SystemExit("a follower received no event")
    return sum(r.batches_per_second for r in info.ranks), latencies


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--followers", type=int, default=100)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--scale", type=int, default=14)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--interval", type=float, default=0.25, help="seconds between GetJob calls")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="graphtier-bench-streams-") as tmp:
        root, run = Path(tmp) / "datasets", Path(tmp) / "run"
        prepare_dataset(
            PrepareConfig(
                source="synthetic:rmat",
                name="streams",
                undirected=True,
                root=root,
                source_options={"scale": a.scale, "feature_dim": 64},
            )
        )
        out = open(Path(tmp) / "daemon.out", "w")  # closed below
        daemon = subprocess.Popen(
            [sys.executable, "-m", "graphtier.service.daemon", "--runtime-dir", str(run), "--dataset-root", str(root)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 120
            while read_endpoints(run) is None:
                if daemon.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the daemon did not start: {(Path(tmp) / 'daemon.out').read_text()[-2000:]}")
                time.sleep(0.2)
            target = read_endpoints(run).grpc_target
            spec = JobSpec(dataset="streams", fanouts=[10, 5], batch_size=256, hidden=64, epochs=a.epochs)
            load = os.getloadavg()
            print(
                f"machine: {cpu_model()}, {os.cpu_count()} cores; "
                f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
            )
            alone, crowded, ratios = [], [], []
            with DaemonClient(target) as client:
                client.wait_until_serving(60)
                for round_ in range(a.rounds):
                    rate0, lat0 = run_job(client, target, spec, 0, a.interval)
                    rate1, lat1 = run_job(client, target, spec, a.followers, a.interval)
                    alone += lat0
                    crowded += lat1
                    ratios.append(rate1 / rate0)
                    print(
                        f"round {round_ + 1}: alone {rate0:.2f} batches/s, GetJob median "
                        f"{statistics.median(lat0) * 1e3:.1f} ms; with {a.followers} followers {rate1:.2f} batches/s, "
                        f"GetJob median {statistics.median(lat1) * 1e3:.1f} ms, max {max(lat1) * 1e3:.1f} ms",
                        flush=True,
                    )
        finally:
            daemon.terminate()
            daemon.wait(120)
            out.close()
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    median = statistics.median(crowded) * 1e3
    p95 = statistics.quantiles(crowded, n=20)[-1] * 1e3 if len(crowded) > 1 else median
    ratio = statistics.median(ratios)
    print(
        f"GetJob with {a.followers} followers: median {median:.1f} ms, p95 {p95:.1f} ms (alone: median "
        f"{statistics.median(alone) * 1e3:.1f} ms); target median < 100 ms: {'met' if median < 100 else 'NOT met'}"
    )
    print(
        f"training rate with / without followers: {ratio:.2f}x (median of {a.rounds} rounds); target >= 0.9x: "
        f"{'met' if ratio >= 0.9 else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
