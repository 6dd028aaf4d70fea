"""End-to-end R-GAT training steps on ACM: graphtier's typed sampler, typed tiers and `--model rgat`
against PyG's `to_hetero(GATConv)` over `NeighborLoader`, interleaved.

ACM in OGB's heterogeneous layout, prepared as `graphtier dataset prepare` prepares it (reverse
relations added: 4 relations over papers, authors and subjects; papers have 1,902 features, authors
and subjects none). Both sides train the same model on the same seed batches of papers (by default
the training split, in the order graphtier's `EpochPlan` gives a rank; `--seeds papers` draws them from
every paper, for batches larger than the 60 training papers), the same fanout for every relation at
each hop (default 10;10, without replacement), 2 layers, hidden 128, 4 heads, dropout 0.5, Adam
lr 0.003 (the parameter counts are checked equal). Featured types enter through a linear map to
`hidden`, featureless types as learned per-node embeddings (zero-initialised) on both sides: trained
by graphtier's row-wise optimizer as a rank trains them (only the rows a batch touched), and by
PyG's `nn.Embedding` under the one Adam, dense, as PyG's examples train them.

One step, timed from its start to the end of Adam's update:
  - graphtier: `HeteroLocalBatches.batch` (what a rank's `epoch()` yields for those seeds): the native
    `HeteroNeighborSampler` over the typed CSC, then each featured type's input rows gathered from its
    tiers of a `SharedDatasetStore` attached as a rank attaches the daemon's (every row on the host tier,
    where the daemon places ACM without a budget); then the train loop's step: `NodeClassification.loss`
    (the built-in R-GAT, `build_hetero_model("rgat")`, called through `hetero_forward`; cross-entropy over
    the seeds), `zero_grad`, `backward`, the loop's optimizers (`build_optimizers`: Adam over the dense
    parameters, fused where it can be, and the embeddings' row-wise AdamW), and `batch.release()`. Not in
    it: the daemon and its producer processes (a job's rank receives the same batch from shared memory,
    sampled and gathered in another process while it trains), DDP (one rank), the session's non-finite
    checks, checkpoints and progress reports.
  - PyG: `next()` of a `NeighborLoader` on a `HeteroData` (torch-sparse sampling, `filter_data` slicing
    `data["paper"].x` held in memory, `n_id` per type), the input layer (Linear per featured type,
    `nn.Embedding` per featureless type looked up by `n_id`; the featured types' rows through a
    LayerNorm and ReLU, as graphtier's R-GAT takes them), `to_hetero(GAT, aggr="sum")` of two
    `GATConv(add_self_loops=False)` (dropout on each one's input, LeakyReLU between), cross-entropy over the seeds'
    rows, `zero_grad`, `backward`, Adam. As PyG's examples run it: every layer over the whole sampled
    subgraph (no `trim_to_layer`; torch-sparse does not report the per-hop counts it needs).

Steps alternate (graphtier, PyG, graphtier, ...) so that other load falls on both alike; the first
`WARMUP` steps of each are dropped. It prints steps/s of each, the ratio graphtier/PyG (target >= 3x)
and the same ratio of median step times, the parameter count and the load average before and after.
Where the native ops are built, a third contender runs graphtier's step with the model's R-GAT attention
and sparse input maps on their torch fallbacks (`RGATConv.backend` and `SparseInputLinear.backend`
"torch"), and the gain of the native ones is printed, from the same run.

PyG runs on torch-sparse's ops only (pyg-lib cannot be installed on this machine class); see
tests/bench/baselines/setup_pyg.sh. Without them the bench prints graphtier's numbers alone.

Run: python tests/bench/bench_rgat_e2e.py [--source DIR] [--fanout '10;10'] [--batch-size 32]
     [--seeds train|papers] [--steps 60] [--threads 2] [--ts-ops DIR] [--quick] [--json FILE]
     (e.g. --batch-size 1024 --seeds papers, MLPerf-style large batches)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from bench_sampler import DEFAULT_TS_OPS, SETUP_HINT, Result, Sampler, load_pyg, machine_info, time_interleaved
from machine import write_figures
from torch import nn

from graphtier.launcher.runtime.hetero_batches import HeteroLocalBatches, hetero_forward
from graphtier.launcher.runtime.models.factory import build_hetero_model
from graphtier.launcher.runtime.models.rgat import RGATConv
from graphtier.launcher.runtime.models.sparse_input import SparseInputLinear
from graphtier.launcher.runtime.objectives import NodeClassification
from graphtier.launcher.runtime.train_config import TrainConfig
from graphtier.launcher.runtime.train_loop import build_optimizers
from graphtier.service.native_ops import Backend, native_available
from graphtier.service.pipeline.epoch_plan import EpochPlan
from graphtier.service.placement import PlacementPlan, TierBudgets
from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
from graphtier.service.store import AttachedDataset, SharedDatasetStore, attach_dataset
from graphtier.service.tiering.hetero import hetero_plans

TARGET_RATIO = 3.0
DEFAULT_SOURCE = Path(os.environ.get("GRAPHTIER_SHARED_DATASETS", "/work/shared/datasets")) / "ogb_hetero_acm"
LR = 0.003
DROPOUT = 0.5
NEGATIVE_SLOPE = 0.2  # graphtier's R-GAT's LeakyReLU between layers, and GATConv's attention slope


def seed_batches(ids: torch.Tensor, batch_size: int, steps: int) -> list[tuple[torch.Tensor, int]]:
    """`steps` (seeds, sampling seed) pairs, epoch after epoch of graphtier's `EpochPlan` over `ids` (rank 0 of 1)."""
    plan = EpochPlan(ids.numel(), batch_size, seed=0)
    out: list[tuple[torch.Tensor, int]] = []
    epoch = 0
    while len(out) < steps:
        out.extend((seeds.clone(), sample_seed) for _, seeds, sample_seed in plan.batches(ids, epoch))
        epoch += 1
    return out[:steps]


def attach(dataset: PreparedDataset) -> tuple[SharedDatasetStore, AttachedDataset]:
    """The dataset in shared memory as the daemon loads it with no tier budget (every featured row on the
    host tier), attached as a rank attaches it."""
    schema = dataset.manifest.hetero
    assert schema is not None
    unbounded = TierBudgets(num_devices=0, host_bytes=None)
    structure = PlacementPlan.from_budgets(unbounded, num_nodes=dataset.manifest.num_nodes, row_bytes=0)
    store = SharedDatasetStore(dataset, structure, hetero_plans=hetero_plans(schema, dataset.scores, unbounded))
    return store, attach_dataset(store.handle)


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def graphtier_contender(
    attached: AttachedDataset,
    fanouts: list[str],
    batch_size: int,
    classes: int,
    hidden: int,
    heads: int,
    plan: list,
    model_ops: Backend = "auto",
) -> tuple[Sampler, nn.Module]:
    """graphtier's step (module docstring): a rank's batch of the seeds, then the train loop's step.
    `model_ops` "torch": the model's attention and input maps on their torch fallbacks, not the native ops."""
    schema = attached.handle.hetero
    assert schema is not None
    source = HeteroLocalBatches(attached, fanouts, batch_size)
    config = TrainConfig(
        model="rgat", in_dim=hidden, num_classes=classes, hidden=hidden, layers=len(fanouts), heads=heads, lr=LR
    )
    torch.manual_seed(config.seed)
    model = build_hetero_model("rgat", schema, hidden, classes, len(fanouts), dropout=config.dropout, heads=heads)
    model.train()
    for module in model.modules():
        if isinstance(module, RGATConv | SparseInputLinear):
            module.backend = model_ops
    optimizer, embeddings = build_optimizers(model, config)
    objective = NodeClassification(None, model, hetero_forward)
    device = torch.device("cpu")

    def step(i: int, seeds: torch.Tensor) -> tuple[int, int]:
        batch = source.batch(seeds, plan[i][1])
        try:  # the train loop's step, one rank
            loss = objective.loss(model, model, batch, device)
            float(loss.loss.detach())  # the loop reads the loss before backward
            optimizer.zero_grad(set_to_none=True)
            if embeddings is not None:
                embeddings.zero_grad()
            loss.loss.backward()
            optimizer.step()
            if embeddings is not None:
                embeddings.step()
            sub = batch.subgraph
            return sub.num_nodes, sub.num_edges
        finally:
            batch.release()

    name = "graphtier R-GAT (typed sampler + tiers)" if model_ops != "torch" else "graphtier R-GAT, torch model ops"
    return Sampler(name, step, 10**9), model


class _Gat(nn.Module):
    """The homogeneous model `to_hetero` turns into one GATConv per relation, summed per destination type."""

    def __init__(self, hidden: int, out_dim: int, heads: int) -> None:
        super().__init__()
        from torch_geometric.nn import GATConv

        self.conv1 = GATConv(hidden, hidden // heads, heads=heads, add_self_loops=False)
        self.conv2 = GATConv(hidden, out_dim, heads=heads, concat=False, add_self_loops=False)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        x = F.dropout(x, p=DROPOUT, training=self.training)  # dropout on every layer's input, as graphtier's
        x = self.conv1(x, edge_index)
        x = F.dropout(F.leaky_relu(x, NEGATIVE_SLOPE), p=DROPOUT, training=self.training)
        return self.conv2(x, edge_index)


class PygRGAT(nn.Module):
    """PyG's R-GAT: Linear, LayerNorm and ReLU per featured type (graphtier's normalised input), Embedding per
    featureless type, `to_hetero(_Gat, aggr="sum")`."""

    def __init__(self, data, hidden: int, out_dim: int, heads: int) -> None:
        super().__init__()
        from torch_geometric.nn import to_hetero

        self.project = nn.ModuleDict()
        self.norm = nn.ModuleDict()
        self.embed = nn.ModuleDict()
        for t in data.node_types:
            if "x" in data[t]:
                self.project[t] = nn.Linear(data[t].x.size(1), hidden)
                self.norm[t] = nn.LayerNorm(hidden)
            else:
                self.embed[t] = nn.Embedding(data[t].num_nodes, hidden)
                nn.init.zeros_(self.embed[t].weight)
        self.gnn = to_hetero(_Gat(hidden, out_dim, heads), data.metadata(), aggr="sum")

    def forward(self, batch) -> dict[str, torch.Tensor]:
        x = {
            t: F.relu(self.norm[t](self.project[t](batch[t].x))) if t in self.project else self.embed[t](batch[t].n_id)
            for t in batch.node_types
        }
        return self.gnn(x, batch.edge_index_dict)


def pyg_contender(
    dataset: PreparedDataset, fanouts: list[int], hidden: int, heads: int, plan: list
) -> tuple[Sampler, nn.Module]:
    """PyG's step (module docstring) over the same seed batches, in type-local ids."""
    from torch_geometric.data import HeteroData
    from torch_geometric.loader import NeighborLoader

    warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation.*")
    schema = dataset.manifest.hetero
    assert schema is not None and dataset.labels is not None
    graph, edge_type = dataset.graph, dataset.array("edge_type").to(torch.int64)
    dst, src = graph.dst_of_edges(), graph.row
    data = HeteroData()
    for info in schema.node_types:
        if info.featureless:
            data[info.name].num_nodes = info.count
        else:
            data[info.name].x = dataset.array(info.feature_array).clone()  # in memory, as PyG holds it
    for r, rel in enumerate(schema.relations):
        keep = edge_type == r
        head, tail = schema.type_named(rel.head), schema.type_named(rel.tail)
        data[rel.head, rel.name, rel.tail].edge_index = torch.stack([src[keep] - head.offset, dst[keep] - tail.offset])
    target = schema.type_named(schema.target_type)
    data[target.name].y = dataset.labels[target.offset : target.offset + target.count].clone()
    seeds = [s - target.offset for s, _ in plan]
    positions, start = [], 0
    for s in seeds:
        positions.append(list(range(start, start + s.numel())))
        start += s.numel()
    loader = NeighborLoader(
        data,
        num_neighbors={(r.head, r.name, r.tail): fanouts for r in schema.relations},
        input_nodes=(target.name, torch.cat(seeds)),
        batch_sampler=positions,  # the same batches as graphtier's, in the same order
        replace=False,
        num_workers=0,
    )
    torch.manual_seed(0)
    model = PygRGAT(data, hidden, dataset.manifest.num_classes, heads)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    it = iter(loader)

    def step(i: int, seeds: torch.Tensor) -> tuple[int, int]:
        batch = next(it)
        size = batch[target.name].batch_size
        logits = model(batch)[target.name][:size]
        loss = F.cross_entropy(logits, batch[target.name].y[:size])
        float(loss.detach())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return batch.num_nodes, sum(store.edge_index.size(1) for store in batch.edge_stores)

    return Sampler("PyG to_hetero(GATConv) + NeighborLoader", step, len(plan)), model


def print_results(results: list[Result]) -> None:
    head = f"{'step':42s} {'steps/s':>8s} {'median ms':>10s} {'min ms':>8s} {'nodes/step':>11s} {'edges/step':>11s}"
    print(head)
    print("-" * len(head))
    for r in results:
        print(
            f"{r.name:42s} {r.batches_per_s:8.2f} {r.median_ms:10.1f} {r.min_ms:8.1f} "
            f"{r.nodes_per_batch:11,.0f} {r.edges_per_batch:11,.0f}"
        )


def figures_of(results: list[Result], reference: Result | None) -> list[dict[str, object]]:
    """The records `python -m tests.bench.all` tabulates: graphtier's median step, and against PyG (when
    measured) and its own model ops' torch fallbacks (when built), ratios of steps/s from the same run."""
    ours = results[0]
    figures: list[dict[str, object]] = [{"name": "graphtier R-GAT median step", "value": ours.median_ms, "unit": "ms"}]
    if reference is not None:
        figures.append(
            {
                "name": "R-GAT training steps/s",
                "value": ours.batches_per_s / reference.batches_per_s,
                "unit": "x",
                "baseline": "PyG to_hetero(GATConv) + NeighborLoader",
                "target": TARGET_RATIO,
            }
        )
    if native_available():
        fallback = results[-1]
        figures.append(
            {
                "name": "R-GAT training steps/s",
                "value": ours.batches_per_s / fallback.batches_per_s,
                "unit": "x",
                "baseline": "its model ops' torch fallbacks",
            }
        )
    return figures


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="heterogeneous OGB dataset root (ACM)")
    p.add_argument("--fanout", default="10;10", help="fanout per hop, ';' between hops, for every relation")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument(
        "--seeds",
        choices=("train", "papers"),
        default="train",
        help="draw the seed batches from the training split or from every node of the target type",
    )
    p.add_argument("--steps", type=int, default=60, help="steps of each, warm-up included")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ts-ops", type=Path, default=Path(os.environ.get("BASELINE_TS_OPS", DEFAULT_TS_OPS)))
    p.add_argument("--quick", action="store_true", help="40 steps of each (python -m tests.bench.all)")
    p.add_argument("--json", help="also write the figures as JSON here (python -m tests.bench.all)")
    args = p.parse_args(argv)
    if args.quick:
        args.steps = min(args.steps, 40)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    hops = [h.strip() for h in args.fanout.split(";")]
    fanouts = [int(h) for h in hops]
    with tempfile.TemporaryDirectory() as root:
        prepare_dataset(PrepareConfig(source=f"ogb:{args.source}", name="heterogeneous", root=Path(root)))
        dataset = PreparedDataset(Path(root) / "heterogeneous")
        schema = dataset.manifest.hetero
        assert schema is not None
        target = schema.type_named(schema.target_type)
        ids = (
            dataset.split("train")
            if args.seeds == "train"
            else torch.arange(target.offset, target.offset + target.count, dtype=torch.int64)
        )
        if args.batch_size > ids.numel():
            raise SystemExit(
                f"--batch-size {args.batch_size} is larger than the {ids.numel()} {args.seeds} seeds: "
                "use --seeds papers for large batches"
            )
        plan = seed_batches(ids, args.batch_size, args.steps)
        store, attached = attach(dataset)
        try:
            ours, our_model = graphtier_contender(
                attached, hops, args.batch_size, dataset.manifest.num_classes, args.hidden, args.heads, plan
            )
            contenders = [ours]
            why_not = load_pyg(args.ts_ops)
            if why_not is None:
                theirs, their_model = pyg_contender(dataset, fanouts, args.hidden, args.heads, plan)
                if count_parameters(our_model) != count_parameters(their_model):
                    raise SystemExit(
                        f"the models differ: graphtier {count_parameters(our_model):,} parameters, "
                        f"PyG {count_parameters(their_model):,}"
                    )
                contenders.append(theirs)
            if native_available():  # what the native model ops bring, in the same run
                fallback, _ = graphtier_contender(
                    attached, hops, args.batch_size, dataset.manifest.num_classes, args.hidden, args.heads, plan,
                    model_ops="torch",
                )  # fmt: skip
                contenders.append(fallback)
            print(machine_info(args.threads))
            print(
                f"graph {args.source.name}: {dataset.manifest.num_nodes:,} nodes, {dataset.manifest.num_edges:,} "
                f"edges, {len(schema.relations)} relations; fanout {fanouts} per relation, batch {args.batch_size} "
                f"({args.seeds} seeds, {ids.numel()}), {args.steps} steps each; R-GAT {len(fanouts)} layers, "
                f"hidden {args.hidden}, {args.heads} heads, {count_parameters(our_model):,} parameters"
            )
            results = time_interleaved(contenders, [s for s, _ in plan])
        finally:
            attached.detach()
            store.close()
        reference = results[1] if why_not is None else None
        print_results(results)
        write_figures(args.json, "R-GAT end to end", figures_of(results, reference), batch_size=args.batch_size)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        if native_available():
            fallback_result = results[-1]
            print(
                f"graphtier's native model ops vs their torch fallbacks: "
                f"{fallback_result.median_ms / results[0].median_ms:.2f}x by median step time"
            )
        if reference is None:
            print(f"PyG baseline not measured: {why_not}; {SETUP_HINT}")
            return 0
        ratio = results[0].batches_per_s / reference.batches_per_s
        print(f"graphtier R-GAT vs PyG to_hetero(GATConv): {ratio:.2f}x steps/s (target >= {TARGET_RATIO:.0f}x)")
        by_median = reference.median_ms / results[0].median_ms
        print(f"  by median step time: {by_median:.2f}x (less swayed by other load than the mean)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
