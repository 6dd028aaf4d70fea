"""Heterogeneous neighbour-sampling throughput: graphtier's `HeteroNeighborSampler` against PyG on `HeteroData`.

On ACM (OGB's heterogeneous layout, reverse relations added: 4 relations over papers, authors
and subjects), with the same seed batches of papers, the same fanout for every relation at each
hop (default 10,5), batch 64, sampling without replacement, 2 torch threads, 3 warm-up batches
dropped, it times batch by batch in turn (interleaved, so other load falls on both alike):
  - graphtier HeteroNeighborSampler, native backend (and the torch twin),
  - PyG NeighborLoader on HeteroData (replace=False; sampling + PyG's HeteroData assembly),
and prints the ratio of graphtier to PyG's loader (target >= 3x).

PyG runs on torch-sparse's ops only (pyg-lib cannot be installed on this machine class); see
bench_sampler.py and tests/bench/baselines/setup_pyg.sh. Without them the bench prints
graphtier's numbers alone.

Run: python tests/bench/bench_hetero_sampler.py --source DIR [--fanout 10,5] [--batches 60] [--ts-ops DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from pathlib import Path

import torch
from bench_sampler import (
    DEFAULT_TS_OPS,
    SETUP_HINT,
    Result,
    Sampler,
    load_pyg,
    machine_info,
    print_table,
    time_interleaved,
)

from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
from graphtier.service.sampling.hetero_sampler import HeteroNeighborSampler

TARGET_RATIO = 3.0
DEFAULT_SOURCE = Path(os.environ.get("GRAPHTIER_SHARED_DATASETS", "/work/shared/datasets")) / "ogb_hetero_acm"


def seed_batches(dataset: PreparedDataset, num_batches: int, batch_size: int) -> list[torch.Tensor]:
    """Disjoint batches of target-type ids (fixed RNG seed), wrapping around when they run out."""
    schema = dataset.manifest.hetero
    target = schema.type_named(schema.target_type)
    ids = torch.arange(target.offset, target.offset + target.count)
    order = ids[torch.randperm(ids.numel(), generator=torch.Generator().manual_seed(0))]
    need = num_batches * batch_size
    order = order.repeat(-(-need // order.numel()))[:need]
    return [b.unique() for b in order.split(batch_size)]


def graphtier_sampler(dataset: PreparedDataset, fanouts: list[str], backend: str) -> Sampler:
    sampler = HeteroNeighborSampler(
        dataset.graph, dataset.array("edge_type"), dataset.manifest.hetero, fanouts, backend=backend
    )

    def step(i: int, seeds: torch.Tensor) -> tuple[int, int]:
        out = sampler.sample(seeds, seed=i)
        return out.num_nodes, out.num_edges

    return Sampler(f"graphtier HeteroNeighborSampler ({backend})", step, 10**9 if backend == "native" else 15)


def pyg_sampler(dataset: PreparedDataset, fanouts: list[int], batches: list[torch.Tensor]) -> Sampler:
    """PyG's NeighborLoader on the same heterogeneous graph as HeteroData, the same seeds (type-local)."""
    from torch_geometric.data import HeteroData
    from torch_geometric.loader import NeighborLoader

    warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation.*")
    schema = dataset.manifest.hetero
    graph, edge_type = dataset.graph, dataset.array("edge_type").to(torch.int64)
    dst, src = graph.dst_of_edges(), graph.row
    data = HeteroData()
    for info in schema.node_types:
        data[info.name].num_nodes = info.count
    for r, rel in enumerate(schema.relations):
        keep = edge_type == r
        head, tail = schema.type_named(rel.head), schema.type_named(rel.tail)
        data[rel.head, rel.name, rel.tail].edge_index = torch.stack([src[keep] - head.offset, dst[keep] - tail.offset])
    target = schema.type_named(schema.target_type)
    loader = NeighborLoader(
        data,
        num_neighbors={(r.head, r.name, r.tail): fanouts for r in schema.relations},
        batch_size=batches[0].numel(),
        input_nodes=(target.name, torch.cat(batches) - target.offset),
        replace=False,
        shuffle=False,
        num_workers=0,
    )
    it = iter(loader)

    def step(i: int, seeds: torch.Tensor) -> tuple[int, int]:
        batch = next(it)
        return batch.num_nodes, sum(store.edge_index.size(1) for store in batch.edge_stores)

    return Sampler("PyG NeighborLoader (HeteroData)", step, len(batches))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="heterogeneous OGB dataset root (ACM)")
    parser.add_argument("--fanout", default="10,5", help="one fanout per hop, for every relation")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ts-ops", type=Path, default=Path(os.environ.get("BASELINE_TS_OPS", DEFAULT_TS_OPS)))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    fanouts = [int(k) for k in args.fanout.split(",")]
    with tempfile.TemporaryDirectory() as root:
        prepare_dataset(PrepareConfig(source=f"ogb:{args.source}", name="heterogeneous", root=Path(root)))
        dataset = PreparedDataset(Path(root) / "heterogeneous")
        batches = seed_batches(dataset, args.batches, args.batch_size)
        samplers = [graphtier_sampler(dataset, [str(k) for k in fanouts], b) for b in ("native", "torch")]
        why_not = load_pyg(args.ts_ops)
        if why_not is None:
            samplers.append(pyg_sampler(dataset, fanouts, batches))
        print(machine_info(args.threads))
        print(
            f"graph {args.source.name}: {dataset.manifest.num_nodes:,} nodes, {dataset.manifest.num_edges:,} edges, "
            f"{len(dataset.manifest.hetero.relations)} relations; fanout {fanouts} per relation, "
            f"batch {args.batch_size}, {args.batches} batches"
        )
        results: list[Result] = time_interleaved(samplers, batches)
        reference = next((r for r in results if r.name.startswith("PyG")), None)
        print_table(results, reference)
        if reference is None:
            print(f"PyG baseline not measured: {why_not}; {SETUP_HINT}")
            return 0
        ratio = results[0].batches_per_s / reference.batches_per_s
        print(f"graphtier native vs PyG NeighborLoader on HeteroData: {ratio:.1f}x (target >= {TARGET_RATIO:.0f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
