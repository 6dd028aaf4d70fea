"""Link prediction on a heterogeneous graph's target relation: an R-GCN encoder and a pair decoder, by torchrun ranks.

    graphtier dataset prepare ogb:/data/ogb_hetero_acm --name acm-link \\
        --edge-split 0.85,0.05,0.10 --target-relation paper-written_by-author
    torchrun --nproc-per-node 2 examples/hetero_link.py --dataset acm-link --epochs 10

The daemon trains the same model as a built-in job, its producers sampling the batches from the
dataset's tiers (`graphtier job submit --dataset acm-link --task link --model rgcn --decoder mlp`);
this example does it all in the ranks' own processes, reading the prepared dataset from disk, and
is the place to start from for a loop of your own.

Each rank takes its shard of the relation's train edges, pairs every edge with `--negatives`
corrupted tails of the tail type, samples all endpoints with the heterogeneous sampler (`--fanout` as
for examples/hetero_gnn.py) and trains `HeteroLinkModel` (R-GCN, `--decoder dot|mlp`) under
DistributedDataParallel (gloo). Validation and test edges are not in the graph messages pass
over. Prints one JSON line: the val and test AUC, MRR and Hits@50 at the epoch of best
validation AUC (the last epoch's when the split has no validation edges), over all ranks (OGB's
protocol, `graphtier.launcher.runtime.link_eval`).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from graphtier.contract.hetero import split_fanout_hops
from graphtier.launcher.runtime.hetero_link import HeteroLinkBatches, HeteroLinkModel, evaluate_hetero_links, link_loss
from graphtier.service.prepared import PreparedDataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--root", type=Path, default=None, help="dataset root (default $GRAPHTIER_HOME/datasets)")
    parser.add_argument("--fanout", default="10;10")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--lr", type=float, default=0.005)
    parser.add_argument("--negatives", type=int, default=1, help="corrupted tails per train edge")
    parser.add_argument("--decoder", choices=("dot", "mlp"), default="mlp")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    dataset = PreparedDataset.open(args.dataset, args.root)
    hops = split_fanout_hops(args.fanout)
    loader = HeteroLinkBatches(
        dataset,
        hops,
        args.batch_size,
        rank,
        world,
        args.seed,
        negatives=args.negatives,
        eval_fanouts=["-1"] * len(hops),
    )
    model = HeteroLinkModel(dataset.manifest.hetero, args.hidden, len(hops), decoder=args.decoder, dropout=args.dropout)
    ddp = DistributedDataParallel(model, find_unused_parameters=True) if world > 1 else model
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    best: dict[str, float] = {}
    for epoch in range(args.epochs):
        ddp.train()
        for item in loader.pairs_epoch(epoch):
            loss = link_loss(ddp, item)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        metrics = evaluate_hetero_links(model, loader)
        if "val_auc" not in metrics or metrics["val_auc"] > best.get("val_auc", -1.0):
            best = {"epoch": epoch, **metrics}
    if rank == 0:
        relation = dataset.manifest.link_split["target_relation"]
        print(json.dumps({"dataset": args.dataset, "relation": relation, "ranks": world, **best}), flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
