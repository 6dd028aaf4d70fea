"""Neighbour sampling beside a busy trainer: graphtier against PyG and DGL, per sampled edge.

In a job the samplers share their cores with the trainer ranks, so this is the speed users
get. On the symmetrised R-MAT graph (rmat_fixture.py), fanout 15,10,5, batch 1024, every
sampler with `--threads` torch threads, sampling without replacement, it times in two phases:

  - idle: nothing else started by the bench;
  - busy: a CPU-bound trainer process (an MLP's forward, backward and SGD step in a loop, with
    `--trainer-threads` torch threads, the machine's cores by default) on the same cores;

and in each phase, batch by batch in turn (so load falls on every sampler alike):
  - graphtier `NeighborSampler` (native backend), in this process;
  - PyG `NeighborLoader` (torch-sparse ops, replace=False, is_sorted=True), in this process;
  - DGL 2.1 `NeighborSampler.sample_blocks`, in a worker process running DGL's own venv
    (baselines/dgl_sampler_worker.py; it times each batch itself).

Every process of the bench runs with OMP_WAIT_POLICY=PASSIVE, as the daemon runs its producers and
ranks (an OMP_WAIT_POLICY already in the environment is kept, and printed): with OpenMP's default,
the threads of the torch op that ran last spin on the cores the next sampler needs. It is the
faster setting for the baselines too (PyG's median batch: 208 ms passive, 303-335 ms active).

DGL's blocks re-expand the destination nodes at every layer and so sample more edges than
graphtier or PyG for the same seeds: the ratios are of sampled edges per second, equal work.
3 warm-up batches per phase are dropped. Baselines: `--ts-ops` / BASELINE_TS_OPS (PyG's
torch-sparse ops, see baselines/README.md) and `--dgl-python` / BASELINE_DGL_PYTHON (the
python of a venv with dgl 2.1); a missing one is reported and its rows left out.

Targets (2-core machine): busy >= 15x PyG and >= 3x DGL; idle >= 40x PyG.
Run: python tests/bench/bench_sampler_contended.py [--scale 21] [--batches 20] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# as in the daemon's producers and ranks (service/pipeline/forkserver.py, service/daemon/jobs/runner.py);
# read by OpenMP once, when torch loads it, and inherited by the trainer and the DGL worker
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
from bench_sampler import (
    WARMUP,
    Result,
    Sampler,
    graphtier_step,
    load_pyg,
    pyg_samplers,
    seed_batches,
    time_interleaved,
)
from machine import machine_summary, write_figures
from rmat_fixture import DEFAULT_CACHE_DIR, RMatParams, load_or_build_rmat

from graphtier.contract.errors import GraphtierError

TARGETS = {
    ("busy", "PyG NeighborLoader"): 15.0,
    ("busy", "DGL sample_blocks"): 3.0,
    ("idle", "PyG NeighborLoader"): 40.0,
}
BENCH_DIR = Path(__file__).resolve().parent
DGL_WORKER = BENCH_DIR / "baselines" / "dgl_sampler_worker.py"
GRAPHTIER = "graphtier NeighborSampler (native)"

# The busy trainer: a GraphSAGE-sized MLP step in a loop; on SIGTERM it prints its steps/s.
TRAINER = """
import signal, sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                            torch.nn.ReLU(), torch.nn.Linear(512, 47))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(4096, 256), torch.randint(0, 47, (4096,))
steps, start = 0, time.perf_counter()
def stop(*_):
    print(f"{steps / (time.perf_counter() - start):.2f}", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
while True:
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    steps += 1
"""


class DglWorker:
    """DGL's sampler in its own venv's process, one batch per request; it times each batch itself."""

    def __init__(self, python: str, saved: Path) -> None:
        self.proc = subprocess.Popen(
            [python, str(DGL_WORKER), str(saved)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self.proc.stdout.readline().split()  # type: ignore[union-attr]  # stdout=PIPE
        if not ready or ready[0] != "ready":
            self.close()
            raise RuntimeError(f"the DGL worker did not start (exit {self.proc.poll()})")
        print(f"DGL worker: DGLGraph from CSC in {float(ready[1]):.2f}s; {' '.join(ready[2:])}")
        self.last_elapsed = 0.0

    def step(self, i: int) -> tuple[float, int, int]:
        self.proc.stdin.write(f"{i}\n")  # type: ignore[union-attr]  # stdin=PIPE
        self.proc.stdin.flush()  # type: ignore[union-attr]  # stdin=PIPE
        elapsed, nodes, edges = self.proc.stdout.readline().split()  # type: ignore[union-attr]  # stdout=PIPE
        return float(elapsed), int(nodes), int(edges)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def dgl_sampler(worker: DglWorker, num_batches: int) -> tuple[Sampler, dict[int, float]]:
    """A Sampler whose time is the worker's own per-batch time (not the pipe round trip)."""
    inner: dict[int, float] = {}

    def step(i: int, seeds: torch.Tensor) -> tuple[int, int]:
        elapsed, nodes, edges = worker.step(i)
        inner[i] = elapsed
        return nodes, edges

    return Sampler("DGL sample_blocks", step, num_batches), inner


def start_trainer(threads: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", TRAINER, str(threads)], stdout=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "ready":  # type: ignore[union-attr]  # stdout=PIPE
        raise SystemExit(f"the busy trainer did not start (exit {proc.poll()})")
    time.sleep(1.0)  # let it reach its steady state
    return proc


def stop_trainer(proc: subprocess.Popen[str]) -> float:
    """Stop the trainer; its training steps per second while it ran."""
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    return float(out.strip() or "nan")


def run_phase(samplers: list[Sampler], batches: list[torch.Tensor], dgl_inner: dict[int, float] | None) -> list[Result]:
    results = [r for r in time_interleaved(samplers, batches) if r.times]
    if dgl_inner is not None:  # replace DGL's round-trip times by the worker's own
        for r in results:
            if r.name == "DGL sample_blocks":
                r.times = [dgl_inner[i] for i in range(WARMUP, WARMUP + len(r.times))]
    return results


def edges_per_s(r: Result) -> float:
    return sum(r.edges) / sum(r.times)


def print_phase(phase: str, results: list[Result], load: tuple[float, float], trainer_steps: float | None) -> None:
    head = f"{'sampler':40s} {'median ms':>10s} {'edges/batch':>12s} {'Medges/s':>9s} {'graphtier x':>12s}"
    extra = f", trainer {trainer_steps:.2f} steps/s" if trainer_steps is not None else ""
    print(f"\nphase {phase}: load average {load[0]:.2f} at start, {load[1]:.2f} at end{extra}")
    print(head)
    print("-" * len(head))
    ours = next((r for r in results if r.name == GRAPHTIER), None)
    for r in results:
        ratio = f"{edges_per_s(ours) / edges_per_s(r):11.1f}x" if ours is not None else f"{'-':>12s}"
        print(f"{r.name:40s} {r.median_ms:10.1f} {r.edges_per_batch:12,.0f} {edges_per_s(r) / 1e6:9.2f} {ratio}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", type=int, default=21, help="R-MAT scale: 2^scale nodes (default 21)")
    p.add_argument("--batches", type=int, default=20, help="timed batches per sampler and phase (default 20)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanout", default="15,10,5")
    p.add_argument("--threads", type=int, default=2, help="torch threads of every sampler (default 2)")
    p.add_argument("--trainer-threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--quick", action="store_true", help="scale 18 and 8 batches")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR, help="where the graph is cached")
    p.add_argument("--ts-ops", type=Path, default=os.environ.get("BASELINE_TS_OPS"), help="torch-sparse's _*_cpu.so")
    p.add_argument("--dgl-python", default=os.environ.get("BASELINE_DGL_PYTHON"), help="python of a dgl 2.1 venv")
    p.add_argument("--json", help="also write the figures as JSON here")
    args = p.parse_args(argv)
    if args.quick:
        args.scale, args.batches = 18, 8
    try:
        args.fanouts = [int(x) for x in args.fanout.split(",")]
    except ValueError:
        p.error(f"--fanout {args.fanout!r} must be comma-separated integers, e.g. 15,10,5")
    if min(args.batches, args.batch_size, args.threads, args.trainer_threads, *args.fanouts) < 1:
        p.error("--batches, --batch-size, --threads, --trainer-threads and every fanout must be >= 1")
    args.rmat = RMatParams(scale=args.scale)
    try:
        args.rmat.check()
    except GraphtierError as exc:
        p.error(f"--scale: {exc}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    graph = load_or_build_rmat(args.rmat, args.cache_dir)
    batches = seed_batches(graph, args.batches + WARMUP, args.batch_size)
    machine = machine_summary()
    print(
        f"machine: {machine['cpu']}, {machine['logical_cores']} cores, torch {torch.__version__}; "
        f"graph: R-MAT scale {args.scale}, N={graph.num_nodes:,}, E={graph.num_edges:,}; fanout={args.fanouts} "
        f"batch={args.batch_size}; sampler threads={args.threads}, trainer threads={args.trainer_threads}; "
        f"{args.batches} timed batches per phase ({WARMUP} warm-up dropped); "
        f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}"
    )
    native = graphtier_step(graph, args.fanouts, "native")
    if isinstance(native, str):
        print(f"graphtier's native sampler is unavailable: {native}", file=sys.stderr)
        return 1
    why_not_pyg = load_pyg(args.ts_ops) if args.ts_ops else "no --ts-ops / BASELINE_TS_OPS given"
    if why_not_pyg:
        print(f"PyG baseline left out: {why_not_pyg}")
    worker: DglWorker | None = None
    if args.dgl_python:
        scratch = Path(tempfile.mkdtemp(prefix="graphtier-bench-dgl-"))
        saved = scratch / "batches.pt"
        payload = {"colptr": graph.colptr, "row": graph.row, "num_nodes": graph.num_nodes}
        payload |= {"fanouts": args.fanouts, "threads": args.threads, "batches": batches}
        torch.save(payload, saved)
        try:
            worker = DglWorker(args.dgl_python, saved)
        except (OSError, RuntimeError) as exc:
            print(f"DGL baseline left out: {exc}")
        finally:
            saved.unlink()
            scratch.rmdir()
    else:
        print("DGL baseline left out: no --dgl-python / BASELINE_DGL_PYTHON given")

    figures: list[dict[str, object]] = []
    met = True
    try:
        for phase in ("idle", "busy"):
            samplers = [Sampler(GRAPHTIER, native, len(batches))]
            if not why_not_pyg:
                samplers.append(pyg_samplers(graph, args.fanouts, batches)[0])
            dgl_inner = None
            if worker is not None:
                dgl, dgl_inner = dgl_sampler(worker, len(batches))
                samplers.append(dgl)
            trainer = start_trainer(args.trainer_threads) if phase == "busy" else None
            load_start = os.getloadavg()[0]
            try:
                results = run_phase(samplers, batches, dgl_inner)
            finally:
                steps = stop_trainer(trainer) if trainer is not None else None
            print_phase(phase, results, (load_start, os.getloadavg()[0]), steps)
            ours = results[0]
            figures.append(
                {
                    "name": f"graphtier sampler median batch, {phase}",
                    "value": round(ours.median_ms, 2),
                    "unit": "ms",
                    "load_average": round(load_start, 2),
                }
            )
            for r in results[1:]:
                ratio = edges_per_s(ours) / edges_per_s(r)
                target = TARGETS.get((phase, r.name))
                verdict = (
                    "" if target is None else f" (target >= {target:.0f}x: {'met' if ratio >= target else 'NOT met'})"
                )
                met &= target is None or ratio >= target
                print(f"{phase}: graphtier / {r.name}: {ratio:.1f}x sampled edges per second{verdict}")
                figures.append(
                    {
                        "name": f"sampler {phase}, per sampled edge",
                        "value": round(ratio, 1),
                        "unit": "x",
                        "baseline": r.name,
                        "target": target,
                        "load_average": round(load_start, 2),
                    }
                )
    finally:
        if worker is not None:
            worker.close()
    print(f"load average at the end (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    write_figures(
        args.json,
        "sampler beside a busy trainer",
        figures,
        command=f"python tests/bench/bench_sampler_contended.py --scale {args.scale} --batches {args.batches}",
        all_targets_met=met,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
