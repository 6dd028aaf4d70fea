"""End-to-end GraphSAGE: a real graphtier job against PyG with `trim_to_layer` on and off, interleaved.

Same prepared R-MAT dataset (128 float32 features, its synthetic labels; the train split sized so
that one epoch is `--steps` batches), fanout 15,10,5, batch 1024, GraphSAGE (mean, 3 layers,
hidden 256, dropout 0.5), Adam lr 0.003, seed 0. Each round runs, one after the other:

(a) graphtier: `graphtier job submit --dataset ... --epochs 2` to a real daemon (started by this
    bench, in its own runtime folder): its producer process samples and gathers into shared
    memory, one torchrun rank trains the built-in GraphSAGE, whose layers compute only the rows
    the next layer reads. Epoch 0 warms up; the figure is the rank's epoch-1 steps/s as the job
    reports it (`epoch 1 trained: ... batches/s`: optimizer steps over the epoch's wall time,
    waiting for batches included).
(b) PyG, `trim_to_layer` on: torch_geometric's `GraphSAGE` over NeighborLoader batches
    (torch-sparse sampling, x and y in memory, `--pyg-workers` loader processes), called as
    `model(x, edge_index, num_sampled_nodes_per_hop=..., num_sampled_edges_per_hop=...)` so each
    layer drops the hops the next one no longer needs (torch-sparse does not report the per-hop
    counts pyg-lib would; `hop_counts` derives them from its hop-ordered output, checked first);
(c) PyG, `trim_to_layer` off: the same model over the whole sampled subgraph, as PyG's examples do.
PyG trains `--warmup` steps, then the same number of steps as graphtier's timed epoch; its
figure is those steps over their wall time (loader `next()` + forward + backward + step).

Rounds interleave the three so that load from other processes falls on all of them alike; the
figures are medians over rounds, and the ratios are graphtier's steps/s over each PyG variant's
(target: >= 3x PyG with `trim_to_layer`). The load average is printed with every round.

Run: python tests/bench/bench_e2e_sage.py [--scale 19] [--steps 16] [--rounds 3] [--quick] [--json out.json]
(--quick: scale 14, batch 256, 4 steps, 1 round.)
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from bench_sampler import DEFAULT_TS_OPS, SETUP_HINT, load_pyg, machine_info
from machine import bench_cache, write_figures

from graphtier.service.prepared import PreparedDataset

TARGET_RATIO = 3.0
FEATURE_DIM = 128
EVAL_FRACTION = 0.01  # val and test: small, the job evaluates them after every epoch
EPOCH_RATE = re.compile(r"\] epoch 1 trained: .* ([\d.]+) batches/s")


def prepare(root: Path, scale: int, steps: int, batch_size: int) -> PreparedDataset:
    """R-MAT `scale` with a train split of `steps` batches (cached under `root`)."""
    from graphtier.service.hotness import ScoreSpec
    from graphtier.service.prepared import PrepareConfig, prepare_dataset

    num_nodes = 1 << scale
    train_fraction = (steps * batch_size - batch_size // 2) / num_nodes  # ceil(train / batch) == steps
    if train_fraction + 2 * EVAL_FRACTION >= 1:
        raise SystemExit(f"--steps {steps} x --batch-size {batch_size} needs more nodes than scale {scale} has")
    name = f"e2e-rmat{scale}-{steps}x{batch_size}"
    if not (root / name / "manifest.json").exists():
        print(f"preparing {name} under {root}", flush=True)
        prepare_dataset(
            PrepareConfig(
                source="synthetic:rmat",
                name=name,
                undirected=True,
                score=ScoreSpec(kind="wrpr"),
                source_options={
                    "scale": scale,
                    "feature_dim": FEATURE_DIM,
                    "train_fraction": train_fraction,
                    "val_fraction": EVAL_FRACTION,
                    "test_fraction": EVAL_FRACTION,
                },
                root=root,
            )
        )
    return PreparedDataset.open(name, root)


class GraphtierJobs:
    """A daemon in a runtime folder of its own, and jobs submitted to it through the CLI."""

    def __init__(self, dataset_root: Path, work: Path) -> None:
        from graphtier.service.daemon.config import DaemonConfig
        from graphtier.service.daemon.server import Daemon

        self.runtime_dir = work / "run"
        self.daemon = Daemon(DaemonConfig(runtime_dir=self.runtime_dir, dataset_root=dataset_root))
        self.daemon.start()

    def run(self, dataset: str, a: argparse.Namespace) -> tuple[float, float | None, str]:
        """One job of 2 epochs: (its epoch-1 steps/s, its test accuracy, its id)."""
        from graphtier.launcher.client import DaemonClient

        command = [
            sys.executable, "-m", "graphtier.launcher.cli", "job", "submit",
            "--runtime-dir", str(self.runtime_dir), "--json",
            "--dataset", dataset, "--model", "sage", "--fanout", a.fanouts, "--batch-size", str(a.batch_size),
            "--hidden", str(a.hidden), "--epochs", "2", "--lr", str(a.lr), "--dropout", str(a.dropout),
            "--nproc-per-node", "1", "--seed", str(a.seed), "--name", "bench-e2e-sage",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise SystemExit(f"graphtier {' '.join(command[3:])}: exit {done.returncode}\n{done.stdout}{done.stderr}")
        job_id = json.loads(done.stdout)["job_id"]
        with DaemonClient(runtime_dir=self.runtime_dir) as client:
            collections.deque(client.job_events(job_id, follow=True), maxlen=0)  # followed to the job's end
            job = client.get_job(job_id)
        log = Path(job.log_path).read_text()
        if job.state.value != "succeeded":
            raise SystemExit(f"job {job_id} {job.state.value}: {job.message}\n{log[-2000:]}")
        rates = EPOCH_RATE.findall(log)
        if not rates:
            raise SystemExit(f"job {job_id}: no 'epoch 1 trained: ... batches/s' line in {job.log_path}")
        accuracy = job.result.test_accuracy if job.result is not None else None
        return float(rates[0]), accuracy, job_id

    def close(self) -> None:
        self.daemon.stop()


def hop_counts(batch: object, layers: int) -> tuple[list[int], list[int]]:
    """Nodes and edges sampled per hop of a torch-sparse NeighborLoader batch, for `trim_to_layer`.

    pyg-lib reports them; torch-sparse's sampler (the only PyG backend on this machine class)
    does not, but its output is in hop order: nodes by the hop that found them, edges by
    destination (non-decreasing local ids), so hop h's edges are those whose destination is a
    node of hops < h, and its new nodes end at the largest source they reach. `check_trim`
    verifies this on a batch before any timing."""
    src, dst = batch.edge_index
    nodes, edges = [batch.batch_size], []
    frontier_end, edge_start = batch.batch_size, 0
    for _ in range(layers):
        edge_end = int(torch.searchsorted(dst, frontier_end))
        reached = int(src[edge_start:edge_end].max()) + 1 if edge_end > edge_start else 0
        nodes.append(max(frontier_end, reached) - frontier_end)
        edges.append(edge_end - edge_start)
        frontier_end, edge_start = frontier_end + nodes[-1], edge_end
    if frontier_end != batch.num_nodes or edge_start != batch.edge_index.size(1):
        raise SystemExit(f"torch-sparse's batch is not in hop order: {nodes}, {edges} vs {batch}")
    return nodes, edges


def check_trim(data: object, train: torch.Tensor, a: argparse.Namespace) -> None:
    """The seeds' outputs with `trim_to_layer` (from `hop_counts`) equal those without, on one batch."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn.models import GraphSAGE

    batch = next(iter(NeighborLoader(data, num_neighbors=a.fanout_list, input_nodes=train, batch_size=a.batch_size)))
    model = GraphSAGE(FEATURE_DIM, a.hidden, num_layers=len(a.fanout_list), out_channels=4).eval()
    nodes, edges = hop_counts(batch, len(a.fanout_list))
    with torch.no_grad():
        whole = model(batch.x, batch.edge_index)[: batch.batch_size]
        trimmed = model(batch.x, batch.edge_index, num_sampled_nodes_per_hop=nodes, num_sampled_edges_per_hop=edges)
    if not torch.allclose(whole, trimmed[: batch.batch_size], atol=1e-5):
        raise SystemExit("trim_to_layer with the derived hop counts changes the seeds' outputs")


def pyg_round(data: object, train: torch.Tensor, a: argparse.Namespace, steps: int, trim: bool) -> float:
    """PyG's GraphSAGE through NeighborLoader: steps/s over `steps` steps after `a.warmup`."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn.models import GraphSAGE

    torch.manual_seed(a.seed)
    classes = int(data.y.max()) + 1
    model = GraphSAGE(FEATURE_DIM, a.hidden, num_layers=len(a.fanout_list), out_channels=classes, dropout=a.dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=a.lr)
    loader = NeighborLoader(
        data,
        num_neighbors=a.fanout_list,
        input_nodes=train,
        batch_size=a.batch_size,
        shuffle=True,
        replace=False,
        is_sorted=True,
        num_workers=a.pyg_workers,
    )
    batches = itertools.chain.from_iterable(itertools.repeat(loader))  # epochs back to back
    model.train()
    started = 0.0
    for step in range(a.warmup + steps):
        if step == a.warmup:
            started = time.perf_counter()
        b = next(batches)
        if trim:
            nodes, edges = hop_counts(b, len(a.fanout_list))
            out = model(b.x, b.edge_index, num_sampled_nodes_per_hop=nodes, num_sampled_edges_per_hop=edges)
        else:
            out = model(b.x, b.edge_index)
        loss = F.cross_entropy(out[: b.batch_size], b.y[: b.batch_size])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return steps / (time.perf_counter() - started)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, default=bench_cache("prepared"), help="prepared dataset root (a cache)")
    p.add_argument("--scale", type=int, default=19)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--steps", type=int, default=16, help="timed steps per round and system (one graphtier epoch)")
    p.add_argument("--warmup", type=int, default=2, help="PyG steps before timing (graphtier: its epoch 0)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="torch threads of the PyG runs")
    p.add_argument("--pyg-workers", type=int, default=1, help="NeighborLoader worker processes (graphtier: 1 producer)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ts-ops", type=Path, default=Path(os.environ.get("BASELINE_TS_OPS", DEFAULT_TS_OPS)))
    p.add_argument("--quick", action="store_true", help="scale 14, batch 256, 4 steps, 1 round: a smoke run")
    p.add_argument("--json", help="also write the figures as JSON here")
    a = p.parse_args(argv)
    if a.quick:
        a.scale, a.batch_size, a.steps, a.rounds = 14, 256, 4, 1
    try:
        a.fanout_list = [int(k) for k in a.fanouts.split(",")]
    except ValueError:
        p.error(f"--fanouts {a.fanouts!r} must be comma-separated integers, e.g. 15,10,5")
    if min(a.steps, a.rounds, a.batch_size, a.hidden, a.threads) < 1 or a.warmup < 0 or a.pyg_workers < 0:
        p.error("--steps, --rounds, --batch-size, --hidden and --threads must be >= 1; --warmup, --pyg-workers >= 0")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    why_not = load_pyg(a.ts_ops)
    if why_not is not None:
        print(f"PyG baseline unavailable: {why_not}; {SETUP_HINT}", file=sys.stderr)
        return 1
    warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation.*")
    torch.set_num_threads(a.threads)
    print(machine_info(a.threads))
    dataset = prepare(a.root, a.scale, a.steps, a.batch_size)
    m = dataset.manifest
    steps = -(-m.split_sizes["train"] // a.batch_size)
    print(
        f"dataset: {m.name}, N={m.num_nodes:,}, E={m.num_edges:,}, {m.feature_dim} float32 features, "
        f"{m.num_classes} classes, train {m.split_sizes['train']:,} = {steps} steps of {a.batch_size}; "
        f"GraphSAGE mean {len(a.fanout_list)}x{a.hidden}, fanout {a.fanouts}, dropout {a.dropout:g}, "
        f"Adam lr {a.lr:g}, seed {a.seed}; {a.rounds} rounds",
        flush=True,
    )
    from torch_geometric.data import Data

    assert dataset.features is not None and dataset.labels is not None
    graph = dataset.graph
    data = Data(
        x=dataset.features.clone(),
        y=dataset.labels.clone(),
        edge_index=torch.stack([graph.row, graph.dst_of_edges()]),
        num_nodes=m.num_nodes,
    )
    train = dataset.split("train")
    check_trim(data, train, a)
    names = ("graphtier job", "PyG trim_to_layer", "PyG no trim")
    rates: dict[str, list[float]] = {name: [] for name in names}
    loads: list[float] = []
    accuracies: list[float] = []
    work = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    jobs = None
    try:
        jobs = GraphtierJobs(a.root, work)
        for r in range(a.rounds):
            rate, accuracy, job_id = jobs.run(m.name, a)
            rates[names[0]].append(rate)
            if accuracy is not None:
                accuracies.append(accuracy)
            rates[names[1]].append(pyg_round(data, train, a, steps, trim=True))
            rates[names[2]].append(pyg_round(data, train, a, steps, trim=False))
            loads.append(round(os.getloadavg()[0], 2))
            print(
                f"round {r + 1}: "
                + ", ".join(f"{n} {rates[n][-1]:.3f} steps/s" for n in names)
                + f" (job {job_id}, test accuracy {accuracy}); load average {loads[-1]}",
                flush=True,
            )
    finally:
        if jobs is not None:
            jobs.close()
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"{'system':24s} {'steps/s (median)':>17s} {'rounds':>30s}")
    for n in names:
        print(f"{n:24s} {statistics.median(rates[n]):17.3f} {', '.join(f'{v:.3f}' for v in rates[n]):>30s}")
    gt = statistics.median(rates[names[0]])
    load = statistics.median(loads)
    figures: list[dict[str, object]] = []
    for baseline, target in ((names[1], TARGET_RATIO), (names[2], None)):
        ratio = gt / statistics.median(rates[baseline])
        verdict = f" (target >= {target:g}x: {'met' if ratio >= target else 'NOT met'})" if target else ""
        print(f"graphtier job / {baseline}: {ratio:.2f}x steps/s{verdict}")
        figures.append(
            {
                "name": f"GraphSAGE end to end, R-MAT scale {a.scale}, job steps/s (median of {a.rounds} rounds)",
                "value": round(ratio, 2),
                "unit": "x",
                "baseline": f"{baseline} ({a.pyg_workers} loader worker)",
                "target": target,
                "load_average": load,
            }
        )
    print(f"load average over the rounds: {', '.join(map(str, loads))}")
    write_figures(
        a.json,
        "GraphSAGE end to end",
        figures,
        command=f"python tests/bench/bench_e2e_sage.py --scale {a.scale} --steps {a.steps} --rounds {a.rounds}",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
