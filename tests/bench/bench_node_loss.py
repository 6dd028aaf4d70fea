"""A 3-node job that loses a node at 40% and restarts on the other two (`--max-restarts 1`), against
the same job undisturbed: test accuracy of both, and the wall time the loss costs.

Three real daemons ("nodes" on 127.0.0.1-3, each its own home, runtime directory, port and dataset
root; one TLS certificate and one cluster token, peer timeout 15 s, the daemon's default), started
afresh for each seed. For each seed, interleaved, the same spec runs twice from node 0: undisturbed,
then with the daemon of node 2 killed with -9 once the job's global step reaches 40% of its total.
The spec is bench_multinode.py's (GraphSAGE 2x256, fanout 25,10, Adam 0.003, weight decay 5e-4,
1 rank per node, 64 seeds per step split over the ranks) with a checkpoint every
`--checkpoint-every` steps. Figures: rank 0's final test accuracy of each run, mean and spread over
seeds; the wall time from submit to the end of each run and their difference (the time lost:
detection, the restart, and the steps redone since the checkpoint); the restart's checkpoint step.

Run: python tests/bench/bench_node_loss.py [--dataset cora|citeseer] [--seeds 2] [--epochs 30]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
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
KILL_AT = 0.4


def run_job(client, spec, kill: subprocess.Popen | None) -> tuple[float, float, object, int | None]:
    """(seconds from submit to the end, test accuracy, the final job, step it restarted from); with `kill`,
    that daemon is killed with -9 once the job's global step reaches KILL_AT of its total."""
    started = time.perf_counter()
    job = client.submit_job(spec)
    while True:
        current = client.get_job(job.job_id)
        p = current.progress
        if kill is not None and kill.poll() is None and p is not None and p.global_step >= KILL_AT * p.total_steps > 0:
            kill.kill()
            print(f"  killed -9 the daemon of node 2 at step {p.global_step} of {p.total_steps}", flush=True)
        if current.state.final:
            break
        time.sleep(0.1)
    took = time.perf_counter() - started
    if current.state.value != "succeeded":
        raise SystemExit(f"job {current.state.value}: {current.message}")
    found = [re.search(r"from checkpoint step (\d+)", note) for note in current.notes]
    step = next((int(m.group(1)) for m in found if m), None)
    return took, current.result.test_accuracy, current, step


def stop(nodes) -> None:
    for popen, _, _ in nodes:
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)
    for popen, _, _ in nodes:
        try:
            popen.wait(60)
        except subprocess.TimeoutExpired:
            popen.kill()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", choices=sorted(SOURCES), default="cora")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--checkpoint-every", type=int, default=5, help="steps between checkpoints")
    args = p.parse_args()

    from graphtier.contract.jobs.spec import JobSpec
    from graphtier.launcher.client import DaemonClient
    from graphtier.service.prepared import PrepareConfig, prepare_dataset

    base = Path(tempfile.mkdtemp(prefix="gt-bnl-"))
    runs: dict[str, list[tuple[float, float]]] = {"undisturbed": [], "node lost at 40%": []}
    steps: list[int] = []
    loads: list[float] = []
    try:
        prepare_dataset(
            PrepareConfig(source=SOURCES[args.dataset], name=args.dataset, undirected=True, root=base / "prepared")
        )
        for seed in range(args.seeds):
            (base / f"seed{seed}").mkdir()
            nodes = start_daemon_processes(base / f"seed{seed}", base / "prepared" / args.dataset, 3)
            try:
                with DaemonClient(runtime_dir=nodes[0][1]) as client:
                    spec = JobSpec(
                        dataset=args.dataset,
                        model="sage",
                        fanouts=[25, 10],
                        batch_size=-(-BATCH // 3),
                        hidden=256,
                        epochs=args.epochs,
                        lr=0.003,
                        weight_decay=5e-4,
                        nproc_per_node=1,
                        nnodes=3,
                        seed=seed,
                        max_restarts=1,
                        checkpoint_every_steps=args.checkpoint_every,
                    )
                    for name, kill in (("undisturbed", None), ("node lost at 40%", nodes[2][0])):
                        took, test, job, step = run_job(client, spec, kill)
                        runs[name].append((took, test))
                        loads.append(os.getloadavg()[0])
                        if kill is not None:
                            if job.restarts != 1 or job.spec.nnodes != 2 or step is None:
                                raise SystemExit(
                                    f"the job did not restart on 2 nodes once: {job.message!r}, notes {job.notes}"
                                )
                            steps.append(step)
                        print(
                            f"seed {seed} {name}: test {test:.4f}, submit to end {took:.1f} s, "
                            f"{job.spec.nnodes} nodes at the end (load {loads[-1]:.2f})",
                            flush=True,
                        )
            finally:
                stop(nodes)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print(
        f"\nmachine: {cpu_model()}, {platform.machine()}, {os.cpu_count()} cores; torch {torch.__version__}; "
        f"load average during the runs {min(loads):.2f}..{max(loads):.2f}"
    )
    print(
        f"{args.dataset}: GraphSAGE 2x256, fanout 25,10, batch {BATCH} per step split over 3 ranks, {args.epochs} "
        f"epochs, 1 rank per node, checkpoint every {args.checkpoint_every} steps, seeds 0..{args.seeds - 1}"
    )
    print(f"{'run':<18}{'test acc mean':>15}{'spread (min..max)':>22}{'wall s mean':>13}")
    for name, values in runs.items():
        accs, walls = [a for _, a in values], [w for w, _ in values]
        print(
            f"{name:<18}{statistics.mean(accs):>15.4f}{f'{min(accs):.4f}..{max(accs):.4f}':>22}"
            f"{statistics.mean(walls):>13.1f}"
        )
    lost = [d[0] - u[0] for u, d in zip(runs["undisturbed"], runs["node lost at 40%"], strict=True)]
    print(
        f"time lost to the node (disturbed - undisturbed, same seed): mean {statistics.mean(lost):.1f} s "
        f"(runs: {', '.join(f'{x:.1f}' for x in lost)}); restarted from checkpoint steps {steps}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
