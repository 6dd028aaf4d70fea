"""Multi-node jobs on one machine: accuracy of 2- and 3-node GraphSAGE against 1 node, and the time
from submit to every rank training for a 3-node job.

Three real daemons ("nodes" on 127.0.0.1-3, each its own home, runtime directory, socket, port and
dataset root; one TLS certificate and one cluster token), the dataset prepared once and copied to
each (the same version). For each seed, the same spec (GraphSAGE 2x256, fanout 25,10, Adam 0.003,
weight decay 5e-4, 1 rank per node) runs on 1, 2 and 3 nodes, every job submitted to node 0, with
one global batch of 64 seeds per step split over the ranks (64, 32, 22 per rank), so every job
takes the same number of optimizer steps (`--batch-per-rank` gives every rank 64 instead: N nodes
then take 1/N of the steps). The figure is the final test accuracy (rank 0's evaluation after the
last epoch), mean and spread over seeds, with the 2- and 3-node means as a ratio to the 1-node
mean measured in the same run. The start-up figure is the wall time from the SubmitJob call of a
3-node job until every rank of every node has done a training step (polled every 0.1 s), median
over seeds (issue 10 target: <= 15 s on this machine class).

Run: python tests/bench/bench_multinode.py [--dataset cora|citeseer] [--seeds 3] [--epochs 30] [--batch-per-rank]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from machine import cpu_model

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "service" / "daemon" / "cluster"))
from cluster_nodes import start_daemon_processes  # noqa: E402  (found through the sys.path entry above)

SHARED = REPO_ROOT.parent / "shared" / "datasets"
SOURCES = {"cora": f"planetoid:{SHARED / 'planetoid_cora'}", "citeseer": f"planetoid:{SHARED / 'planetoid_citeseer'}"}
BATCH = 64


def run_job(client, spec) -> tuple[float, float, object]:
    """(seconds from submit to every rank's first step, test accuracy, final job)."""
    started = time.perf_counter()
    job = client.submit_job(spec)
    training = None
    while True:
        current = client.get_job(job.job_id)
        ranks = current.ranks
        if training is None and len(ranks) == spec.world_size and all(r.global_step > 0 for r in ranks):
            training = time.perf_counter() - started
        if current.state.final:
            break
        time.sleep(0.1)
    if current.state.value != "succeeded":
        raise SystemExit(f"job on {spec.nnodes} node(s) {current.state.value}: {current.message}")
    return training if training is not None else float("nan"), current.result.test_accuracy, current


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", choices=sorted(SOURCES), default="cora")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-per-rank", action="store_true", help="64 seeds per rank, not 64 per step in all")
    args = p.parse_args()

    from graphtier.contract.jobs.spec import JobSpec
    from graphtier.launcher.client import DaemonClient
    from graphtier.service.prepared import PrepareConfig, prepare_dataset

    base = Path(tempfile.mkdtemp(prefix="gt-bmn-"))
    nodes = []
    try:
        prepare_dataset(
            PrepareConfig(source=SOURCES[args.dataset], name=args.dataset, undirected=True, root=base / "prepared")
        )
        nodes = start_daemon_processes(base, base / "prepared" / args.dataset, 3)
        accuracy: dict[int, list[float]] = {1: [], 2: [], 3: []}
        startup: list[float] = []
        with DaemonClient(runtime_dir=nodes[0][1]) as client:
            for seed in range(args.seeds):
                for nnodes in (1, 2, 3):
                    batch = BATCH if args.batch_per_rank else -(-BATCH // nnodes)
                    spec = JobSpec(
                        dataset=args.dataset,
                        model="sage",
                        fanouts=[25, 10],
                        batch_size=batch,
                        hidden=256,
                        epochs=args.epochs,
                        lr=0.003,
                        weight_decay=5e-4,
                        nproc_per_node=1,
                        nnodes=nnodes,
                        seed=seed,
                    )
                    took, test, _ = run_job(client, spec)
                    accuracy[nnodes].append(test)
                    if nnodes == 3:
                        startup.append(took)
                    print(
                        f"seed {seed} {nnodes} node(s): test {test:.4f}, submit to all ranks training {took:.1f} s "
                        f"(load {os.getloadavg()[0]:.2f})",
                        flush=True,
                    )
    finally:
        for popen, _, _ in nodes:
            popen.send_signal(signal.SIGTERM)
        for popen, _, _ in nodes:
            try:
                popen.wait(60)
            except subprocess.TimeoutExpired:
                popen.kill()
        shutil.rmtree(base, ignore_errors=True)

    print(
        f"\nmachine: {cpu_model()}, {platform.machine()}, {os.cpu_count()} cores; torch {torch.__version__}; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    batches = f"{BATCH} per rank" if args.batch_per_rank else f"{BATCH} per step split over the ranks"
    print(
        f"{args.dataset}: GraphSAGE 2x256, fanout 25,10, batch {batches}, {args.epochs} epochs, 1 rank per node, "
        f"seeds 0..{args.seeds - 1}"
    )
    one = statistics.mean(accuracy[1])
    print(f"{'nodes':<7}{'test acc mean':>15}{'spread (min..max)':>22}{'/ 1 node':>10}")
    for nnodes, values in accuracy.items():
        mean = statistics.mean(values)
        print(f"{nnodes:<7}{mean:>15.4f}{f'{min(values):.4f}..{max(values):.4f}':>22}{mean / one:>9.3f}x")
    print(
        f"3-node job, submit to every rank training: median {statistics.median(startup):.1f} s "
        f"(runs: {', '.join(f'{s:.1f}' for s in startup)}); target <= 15 s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
