"""R-GCN or HGT (--model hgt) on a prepared typed dataset, trained by torchrun ranks with typed batches.

    graphtier dataset prepare ogb:/data/ogb_hetero_acm --name acm   # ACM (HAN, HeCo) in OGB's typed layout
    torchrun --nproc-per-node 2 examples/typed_gnn.py --dataset acm --epochs 60

Each rank samples its shard of the train ids with the typed sampler (per-relation fanouts,
`--fanout '10;10'` or `'author-rev_written_by-paper:10,...;...'`), reads each featured type's
input rows from the dataset, and trains `RGCN` under DistributedDataParallel (gloo). Featureless
types (ACM's authors and subjects) get learned embeddings. Prints one JSON line: the test accuracy
at the epoch of best validation accuracy, over all ranks.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from graphtier.contract.hetero import split_fanout_hops
from graphtier.launcher.runtime.models.hgt import HGT
from graphtier.launcher.runtime.models.rgcn import RGCN
from graphtier.launcher.runtime.typed_batches import TypedLocalBatches
from graphtier.service.prepared import PreparedDataset


def accuracy(model, batches) -> tuple[int, int]:
    correct = total = 0
    with torch.no_grad():
        for batch in batches:
            ids, types = batch.input_nodes
            out = model(batch.blocks, batch.edge_types, ids, types, batch.features)
            correct += int((out.argmax(1) == batch.labels).sum())
            total += batch.labels.numel()
    return correct, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--root", type=Path, default=None, help="dataset root (default $GRAPHTIER_HOME/datasets)")
    parser.add_argument("--fanout", default="10;10")
    parser.add_argument("--model", choices=("rgcn", "hgt"), default="rgcn")
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--dropout", type=float, default=0.7)
    parser.add_argument("--lr", type=float, default=0.005)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument(
        "--embedding-lr",
        type=float,
        default=None,
        help="learning rate of featureless types' embeddings (default --lr / 10: with few labels, as ACM's 60 "
        "train papers, embeddings learning at the full rate overfit)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    dataset = PreparedDataset.open(args.dataset, args.root)
    schema = dataset.manifest.hetero
    loader = TypedLocalBatches(
        dataset, split_fanout_hops(args.fanout), args.batch_size, rank, world, args.seed, eval_fanouts=["-1"] * 2
    )
    build = HGT if args.model == "hgt" else RGCN
    model = build(schema, args.hidden, dataset.manifest.num_classes, 2, dropout=args.dropout)
    ddp = DistributedDataParallel(model, find_unused_parameters=True) if world > 1 else model
    embeddings = list(model.input.embed.parameters())
    others = [p for p in model.parameters() if all(p is not e for e in embeddings)]
    embedding_lr = args.lr / 10 if args.embedding_lr is None else args.embedding_lr
    optimizer = torch.optim.Adam(
        [{"params": others}, {"params": embeddings, "lr": embedding_lr}], lr=args.lr, weight_decay=args.weight_decay
    )
    best = {"val_acc": -1.0}
    for epoch in range(args.epochs):
        ddp.train()
        for batch in loader.epoch(epoch):
            ids, types = batch.input_nodes
            loss = F.cross_entropy(ddp(batch.blocks, batch.edge_types, ids, types, batch.features), batch.labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        ddp.eval()
        counts = torch.tensor([*accuracy(model, loader.evaluate("val")), *accuracy(model, loader.evaluate("test"))])
        if world > 1:
            dist.all_reduce(counts)
        val, test = float(counts[0] / counts[1]), float(counts[2] / counts[3])
        if val > best["val_acc"]:
            best = {"epoch": epoch, "val_acc": val, "test_acc": test}
    if rank == 0:
        print(json.dumps({"dataset": args.dataset, "ranks": world, "model": args.model, **best}), flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
