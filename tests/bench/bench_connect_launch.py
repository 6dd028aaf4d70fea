"""Does launching your own ranks cost anything? `torchrun train.py` vs `job submit --script train.py`.

One graphtierd process, Cora (the Planetoid split), examples/sage_blocks.py with its defaults
(GraphSAGE 2x256, fanout 25,10, batch 64, 30 epochs, lr 0.003, weight decay 5e-4), 2 ranks; two
launches alternate for `--reps` rounds:
  submitted -- `graphtier job submit --script examples/sage_blocks.py` with the same spec: the
               daemon runs torchrun;
  torchrun  -- `torchrun --standalone --nproc-per-node 2 examples/sage_blocks.py --dataset cora`:
               the ranks register the job themselves (`graphtier.connect`).
The figure is the ranks' training steps/s per epoch (epochs after the first, from the
`epoch N trained: ... batches/s` lines), median over ranks, epochs and rounds, as a ratio to the
submitted launch measured in the same run (target >= 0.95), plus each round's test accuracy
(target >= 0.78). Cora has 140 train ids: 2 steps per rank per epoch, so each epoch's rate is
noisy; the median over 29 epochs x 2 ranks x rounds is the figure.

Run: python tests/bench/bench_connect_launch.py [--reps 2] [--cora /work/shared/datasets/planetoid_cora]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

import torch
from machine import cpu_model

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "sage_blocks.py"
SPEC = {"fanouts": [25, 10], "batch_size": 64, "epochs": 30, "lr": 0.003, "weight_decay": 5e-4, "hidden": 256}


def rates(log: str) -> list[float]:
    return [float(r) for e, r in re.findall(r"epoch (\d+) trained: .* ([\d.]+) batches/s", log) if e != "0"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--cora", type=Path, default=Path("/work/shared/datasets/planetoid_cora"))
    args = p.parse_args()

    from graphtier.contract.endpoints import read_endpoints
    from graphtier.contract.jobs.spec import JobSpec
    from graphtier.launcher.client import DaemonClient
    from graphtier.service.prepared import PrepareConfig, prepare_dataset

    with tempfile.TemporaryDirectory(prefix="bench-connect-") as tmp:
        root, run = Path(tmp) / "prepared", Path(tmp) / "run"
        prepare_dataset(PrepareConfig(source=f"planetoid:{args.cora}", name="cora", undirected=True, root=root))
        daemon_log = open(Path(tmp) / "graphtierd.out", "wb")
        daemon = subprocess.Popen(
            [sys.executable, "-m", "graphtier.service.daemon", "--runtime-dir", str(run), "--dataset-root", str(root)],
            stdout=daemon_log,
            stderr=subprocess.STDOUT,
        )
        while (found := read_endpoints(run)) is None or found.pid != daemon.pid:
            if daemon.poll() is not None:
                raise SystemExit(f"graphtierd exited: {(Path(tmp) / 'graphtierd.out').read_text()}")
            time.sleep(0.05)
        env = {**os.environ, "GRAPHTIER_RUNTIME_DIR": str(run), "OMP_NUM_THREADS": "1"}
        seen: dict[str, list[float]] = {"submitted": [], "torchrun": []}
        accuracy: dict[str, list[float]] = {"submitted": [], "torchrun": []}
        try:
            with DaemonClient(runtime_dir=run) as client:
                for rep in range(args.reps):
                    job = client.submit_job(JobSpec(dataset="cora", nproc_per_node=2, script=str(EXAMPLE), **SPEC))
                    deque(client.job_events(job.job_id, follow=True), maxlen=0)  # follow it to its end
                    done = client.get_job(job.job_id)
                    if done.state.value != "succeeded":
                        raise SystemExit(f"submitted job failed: {done.message}")
                    seen["submitted"] += rates(Path(done.log_path).read_text())
                    accuracy["submitted"].append(done.result.test_accuracy)
                    before = {j.job_id for j in client.list_jobs()}
                    launch = subprocess.run(
                        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                         "--log-dir", str(Path(tmp) / f"te{rep}"), str(EXAMPLE), "--dataset", "cora"],
                        env=env, capture_output=True, text=True, check=False,
                    )  # fmt: skip
                    if launch.returncode != 0:
                        raise SystemExit(f"torchrun failed:\n{launch.stdout[-2000:]}{launch.stderr[-2000:]}")
                    (mine,) = [j for j in client.list_jobs() if j.job_id not in before]
                    while not (mine := client.get_job(mine.job_id)).state.final:
                        time.sleep(0.2)
                    seen["torchrun"] += rates(launch.stdout + launch.stderr)
                    accuracy["torchrun"].append(mine.result.test_accuracy)
                    print(
                        f"round {rep + 1}: submitted {statistics.median(seen['submitted']):.1f}, torchrun "
                        f"{statistics.median(seen['torchrun']):.1f} steps/s per rank; test "
                        f"{accuracy['submitted'][-1]:.4f} / {accuracy['torchrun'][-1]:.4f}",
                        flush=True,
                    )
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(60)
            daemon_log.close()

    print(f"\nmachine: {cpu_model()}, {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"torch {torch.__version__}; Cora, {EXAMPLE.name} defaults, 2 ranks, {args.reps} rounds")
    base = statistics.median(seen["submitted"])
    print(f"{'launch':<11}{'steps/s/rank':>14}{'/ submitted':>13}{'test acc (rounds)':>30}")
    for kind in seen:
        med = statistics.median(seen[kind])
        print(f"{kind:<11}{med:>14.1f}{med / base:>12.2f}x  {', '.join(f'{a:.4f}' for a in accuracy[kind]):>28}")
    print("target: torchrun >= 0.95x submitted, test accuracy >= 0.78")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
