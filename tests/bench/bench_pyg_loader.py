"""PyG's stock `NeighborLoader` on graphtier's stores against PyG's NeighborLoader on a `Data`, same run.

Speed, on a prepared R-MAT dataset (128 float32 features, its labels), fanout 15,10,5, batch
1024, 2 torch threads, the same seed batches in the same order (nodes with in-degree > 0), one
`next()` of each loader in turn so that load from other processes falls on both alike, 3
warm-up batches dropped:
  (a) `torch_geometric.loader.NeighborLoader((feature_store, graph_store), ...,
      neighbor_sampler=GraphtierSampler(dataset, fanouts))` over `graphtier.pyg.stores(dataset)`:
      PyG's own loader, its own batch assembly (`filter_fn`), features and labels through the
      feature store;
  (b) `NeighborLoader(Data(x, y, edge_index), ..., replace=False, is_sorted=True)` on
      torch-sparse's sampling op (the baseline: tests/bench/baselines/README.md), x and y in memory.
Both batches hold the same things (x, y, edge_index, n_id, batch_size). Reported: batches/s
from the median batch time of each, and their ratio (target >= 10x).

Accuracy, on Cora (Planetoid's raw files, --cora): the same GraphSAGE (2 layers, hidden 64,
dropout 0.5, Adam lr 0.01, weight decay 5e-4), fanout 10,10, batch 64, the same epochs and the
same torch seeds, trained (a) through PyG's NeighborLoader on graphtier's stores of the dataset
graphtier prepared from those files and (b) through PyG's NeighborLoader on
`torch_geometric.datasets.Planetoid` read from the same files; test accuracy of a full-graph
forward on the public split (1,000 test nodes). "The same accuracy" means the difference of the
means is within twice its standard error from the spread over the seeds.

Run: python tests/bench/bench_pyg_loader.py [--scale 20] [--batches 20] [--seeds 3] [--quick] [--json out.json]
(--quick: scale 16, 8 batches, 2 seeds of 20 epochs.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from bench_pipeline_overhead import ensure_dataset
from bench_sampler import DEFAULT_TS_OPS, SETUP_HINT, load_pyg, machine_info, seed_batches
from machine import bench_cache, write_figures

from graphtier.service.prepared import PreparedDataset

WARMUP = 3
TARGET_RATIO = 10.0
DEFAULT_CORA = Path(os.environ.get("GRAPHTIER_DATASETS", "/work/shared/datasets")) / "planetoid_cora"
CORA_FANOUTS = [10, 10]


@dataclass
class Timed:
    """Per-batch times (warm-up dropped) and batch sizes of one loader."""

    name: str
    times: list[float] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)
    edges: list[int] = field(default_factory=list)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times) * 1e3

    @property
    def batches_per_s(self) -> float:
        """From the median batch: one slow batch (another process's burst) does not move it."""
        return 1e3 / self.median_ms


def speed(dataset: PreparedDataset, a: argparse.Namespace) -> tuple[Timed, Timed]:
    """Both loaders over the same seed batches, one batch of each in turn."""
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    from graphtier.pyg import GraphtierSampler, stores

    graph = dataset.graph
    batches = seed_batches(graph, a.batches + WARMUP, a.batch_size)
    seeds = torch.cat(batches)
    torch.manual_seed(a.seed)
    t0 = time.perf_counter()
    ours = NeighborLoader(
        stores(dataset),
        num_neighbors=a.fanouts,
        input_nodes=seeds,
        batch_size=a.batch_size,
        shuffle=False,
        neighbor_sampler=GraphtierSampler(dataset, a.fanouts),
    )
    ours_setup = time.perf_counter() - t0
    assert dataset.features is not None and dataset.labels is not None
    t0 = time.perf_counter()
    x, y = dataset.features.clone(), dataset.labels.clone()  # PyG's Data holds its tensors in memory
    data = Data(x=x, y=y, edge_index=torch.stack([graph.row, graph.dst_of_edges()]), num_nodes=graph.num_nodes)
    theirs = NeighborLoader(
        data,
        num_neighbors=a.fanouts,
        input_nodes=seeds,
        batch_size=a.batch_size,
        shuffle=False,
        replace=False,
        is_sorted=True,
    )
    theirs_setup = time.perf_counter() - t0
    print(
        f"set-up: stores + GraphtierSampler {ours_setup:.2f} s; "
        f"Data (x, y copied) + NeighborLoader {theirs_setup:.2f} s"
    )
    runs = (Timed("NeighborLoader on graphtier's stores"), Timed("NeighborLoader on Data (torch-sparse)"))
    iterators = (iter(ours), iter(theirs))
    for i in range(len(batches)):
        for run, it in zip(runs, iterators, strict=True):
            t0 = time.perf_counter()
            batch = next(it)
            elapsed = time.perf_counter() - t0
            if batch.x.shape != (batch.num_nodes, x.shape[1]) or batch.y.numel() != batch.num_nodes:
                raise SystemExit(f"{run.name}: batch {i} lacks its features or labels: {batch}")
            if i >= WARMUP:
                run.times.append(elapsed)
                run.nodes.append(batch.num_nodes)
                run.edges.append(batch.edge_index.size(1))
    return runs


def planetoid_cora(raw: Path, root: Path) -> object:
    """PyG's own Cora: `Planetoid` processing the raw `ind.cora.*` files (linked, never downloaded)."""
    from torch_geometric.datasets import Planetoid

    (root / "Cora" / "raw").mkdir(parents=True)
    for path in sorted(raw.glob("ind.cora.*")):
        (root / "Cora" / "raw" / path.name).symlink_to(path)
    return Planetoid(str(root), "Cora")[0]


def train_and_test(
    loader_data: object, sampler: object, train_ids: torch.Tensor, full: tuple, a: argparse.Namespace, seed: int
) -> float:
    """Train the GraphSAGE through PyG's NeighborLoader; the test accuracy of a full-graph forward.

    `full` is (x, edge_index, y, test ids) of the whole graph, `sampler` None for PyG's own."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GraphSAGE

    x, edge_index, y, test_ids = full
    torch.manual_seed(seed)
    model = GraphSAGE(x.shape[1], 64, num_layers=len(CORA_FANOUTS), out_channels=int(y.max()) + 1, dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    extra = {} if sampler is None else {"neighbor_sampler": sampler}
    loader = NeighborLoader(
        loader_data, num_neighbors=CORA_FANOUTS, input_nodes=train_ids, batch_size=64, shuffle=True, **extra
    )
    for _ in range(a.epochs):
        model.train()
        for batch in loader:
            out = model(batch.x, batch.edge_index)[: batch.batch_size]
            loss = F.cross_entropy(out, batch.y[: batch.batch_size])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        predicted = model(x, edge_index).argmax(1)
    return float((predicted[test_ids] == y[test_ids]).float().mean())


def accuracy(a: argparse.Namespace) -> tuple[list[float], list[float]]:
    """Cora test accuracies per seed: (graphtier's stores, PyG's own files)."""
    from graphtier.pyg import GraphtierSampler, stores
    from graphtier.service.hotness import ScoreSpec
    from graphtier.service.prepared import PrepareConfig, prepare_dataset

    ours, theirs = [], []
    with tempfile.TemporaryDirectory(prefix="bench-pyg-cora-") as tmp:
        pyg = planetoid_cora(a.cora, Path(tmp) / "pyg")
        prepare_dataset(
            PrepareConfig(
                source=f"planetoid:{a.cora}", name="cora", root=Path(tmp) / "gt", score=ScoreSpec(kind="wrpr")
            )
        )
        cora = PreparedDataset.open("cora", Path(tmp) / "gt")
        feature_store, graph_store = stores(cora)
        # The whole graph for the test forward, read back through the stores themselves.
        row, col = graph_store.get_edge_index(edge_type=None, layout="coo")
        ours_full = (
            feature_store.get_tensor(group_name=None, attr_name="x", index=None),
            torch.stack([row, col]),
            feature_store.get_tensor(group_name=None, attr_name="y", index=None),
            cora.split("test"),
        )
        theirs_full = (pyg.x, pyg.edge_index, pyg.y, pyg.test_mask.nonzero().view(-1))
        for seed in range(a.seeds):
            sampler = GraphtierSampler(cora, CORA_FANOUTS)
            ours.append(train_and_test((feature_store, graph_store), sampler, cora.split("train"), ours_full, a, seed))
            theirs.append(train_and_test(pyg, None, pyg.train_mask.nonzero().view(-1), theirs_full, a, seed))
            print(f"seed {seed}: test accuracy on graphtier's stores {ours[-1]:.4f}, on PyG's files {theirs[-1]:.4f}")
        if len(ours_full[3]) != len(theirs_full[3]):
            raise SystemExit(f"test splits differ: {len(ours_full[3])} vs {len(theirs_full[3])} nodes")
    return ours, theirs


def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, default=bench_cache("prepared"), help="prepared dataset root (a cache)")
    p.add_argument("--scale", type=int, default=20, help="R-MAT scale of the speed run (default 20)")
    p.add_argument("--batches", type=int, default=20, help="timed batches per loader (default 20)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanout", default="15,10,5")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cora", type=Path, default=DEFAULT_CORA, help="folder of Planetoid's raw ind.cora.* files")
    p.add_argument("--seeds", type=int, default=3, help="training seeds of the accuracy run (0 skips it)")
    p.add_argument("--epochs", type=int, default=30, help="epochs of the accuracy run")
    p.add_argument("--ts-ops", type=Path, default=Path(os.environ.get("BASELINE_TS_OPS", DEFAULT_TS_OPS)))
    p.add_argument("--quick", action="store_true", help="scale 16, 8 batches, 2 seeds of 20 epochs")
    p.add_argument("--json", help="also write the figures as JSON here")
    a = p.parse_args(argv)
    if a.quick:
        a.scale, a.batches, a.seeds, a.epochs = 16, 8, 2, 20
    try:
        a.fanouts = [int(k) for k in a.fanout.split(",")]
    except ValueError:
        p.error(f"--fanout {a.fanout!r} must be comma-separated integers, e.g. 15,10,5")
    if a.batches < 1 or a.batch_size < 1 or a.threads < 1 or a.seeds < 0 or a.epochs < 1:
        p.error("--batches, --batch-size, --threads and --epochs must be >= 1, --seeds >= 0")
    if a.seeds and not (a.cora / "ind.cora.graph").exists():
        p.error(f"--cora {a.cora}: no Planetoid files (ind.cora.*) there; give their folder or --seeds 0")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    why_not = load_pyg(a.ts_ops)
    if why_not is not None:
        print(f"PyG baseline unavailable: {why_not}; {SETUP_HINT}", file=sys.stderr)
        return 1
    warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation.*")
    print(machine_info(a.threads))
    dataset = ensure_dataset(a.root, f"rmat{a.scale}", a.scale)
    m = dataset.manifest
    print(
        f"graph: {m.name} (R-MAT scale {a.scale}), N={m.num_nodes:,}, E={m.num_edges:,}, {m.feature_dim} float32 "
        f"features; fanout {a.fanout}, batch {a.batch_size}, {a.batches} timed batches each ({WARMUP} warm-up "
        f"dropped), taking turns"
    )
    runs = speed(dataset, a)
    head = (
        f"{'loader':40s} {'batches/s':>10s} {'median ms':>10s} {'min ms':>8s} {'nodes/batch':>12s} {'edges/batch':>12s}"
    )
    print(head)
    print("-" * len(head))
    for r in runs:
        print(
            f"{r.name:40s} {r.batches_per_s:10.2f} {r.median_ms:10.1f} {min(r.times) * 1e3:8.1f} "
            f"{statistics.mean(r.nodes):12,.0f} {statistics.mean(r.edges):12,.0f}"
        )
    load = round(os.getloadavg()[0], 2)
    ratio = runs[0].batches_per_s / runs[1].batches_per_s
    print(
        f"graphtier's stores / PyG on a Data: {ratio:.1f}x batches/s (target >= {TARGET_RATIO:g}x: "
        f"{'met' if ratio >= TARGET_RATIO else 'NOT met'}); load average {load}"
    )
    figures: list[dict[str, object]] = [
        {
            "name": f"PyG NeighborLoader on graphtier's stores, R-MAT scale {a.scale}, batches/s (medians)",
            "value": round(ratio, 1),
            "unit": "x",
            "baseline": "PyG NeighborLoader on a Data, torch-sparse",
            "target": TARGET_RATIO,
            "load_average": load,
        }
    ]
    if a.seeds:
        ours, theirs = accuracy(a)
        (m_ours, sd_ours), (m_theirs, sd_theirs) = mean_sd(ours), mean_sd(theirs)
        se = ((sd_ours**2 + sd_theirs**2) / a.seeds) ** 0.5
        same = abs(m_ours - m_theirs) <= 2 * se if a.seeds > 1 else None
        verdict = "not judged with one seed" if same is None else ("within noise" if same else "NOT within noise")
        print(
            f"Cora test accuracy over {a.seeds} seeds, {a.epochs} epochs: graphtier's stores {m_ours:.4f} "
            f"(sd {sd_ours:.4f}), PyG's files {m_theirs:.4f} (sd {sd_theirs:.4f}); difference "
            f"{m_ours - m_theirs:+.4f}, 2 s.e. {2 * se:.4f}: {verdict}"
        )
        load = round(os.getloadavg()[0], 2)
        figures.append(
            {
                "name": f"Cora test accuracy, NeighborLoader on graphtier's stores (mean of {a.seeds} seeds, "
                f"sd {sd_ours:.3f}; difference {m_ours - m_theirs:+.3f}, 2 s.e. {2 * se:.3f})",
                "value": round(m_ours, 4),
                "unit": "",
                "baseline": f"NeighborLoader on PyG's Planetoid files (sd {sd_theirs:.3f})",
                "baseline_value": round(m_theirs, 4),
                "load_average": load,
            }
        )
    write_figures(
        a.json,
        "PyG NeighborLoader on graphtier's stores",
        figures,
        command=f"python tests/bench/bench_pyg_loader.py --scale {a.scale} --batches {a.batches} --seeds {a.seeds}",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
