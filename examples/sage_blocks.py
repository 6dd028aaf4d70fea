"""Your own GraphSAGE in plain PyTorch, trained through graphtier's loader.

    graphtier job submit --dataset cora --script examples/sage_blocks.py --wait
    torchrun --standalone --nproc-per-node 2 examples/sage_blocks.py --dataset cora   # or python ...

`JOB_DEFAULTS` are this script's hyper-parameters (GraphSAGE's usual ones on Cora): `job
submit --script` takes them for every field its flags leave unset, and a launch of your own
(torchrun or python) registers its job with them through `graphtier.connect` (`--fanout`,
`--batch-size`, `--epochs` here override them). Either way the job's producers sample and gather
into shared memory, one per rank. Each batch brings `blocks` (one bipartite CSC graph per layer, input layer first) and
the input features `x`, already on the rank's device. `--script-args '--eval-every 5'` reaches this
script's own argparse under `job submit`.

`--predict` ends with layer-wise inference of the trained model (`job.layerwise`): every layer for
every node over its full neighbourhood, each rank a shard, written as npy shards in the source's ids
(the last hidden layer as `embeddings`, the last as `logits`) to `predictions/` in the job's directory.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

import graphtier
from graphtier.nn import Dropout  # torch.nn.Dropout's result, faster on the CPU

JOB_DEFAULTS = {"fanouts": [25, 10], "batch_size": 64, "epochs": 30, "lr": 0.003, "weight_decay": 5e-4}


class SAGELayer(nn.Module):
    """h_v' = W_neigh * mean(h_u for u in N(v)) + W_root * h_v, for the block's destinations."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.lin_neigh = nn.Linear(in_dim, out_dim)
        self.lin_root = nn.Linear(in_dim, out_dim, bias=False)

    def forward(self, block, x: torch.Tensor) -> torch.Tensor:
        degree = (block.indptr[1:] - block.indptr[:-1]).clamp(min=1).to(x.dtype)
        weights = (1.0 / degree).repeat_interleave(block.indptr[1:] - block.indptr[:-1], output_size=block.num_edges)
        mean = torch.sparse_csr_tensor(block.indptr, block.indices, weights, size=(block.num_dst, block.num_src))
        return self.lin_neigh(mean @ x) + self.lin_root(x[: block.num_dst])


class GraphSAGE(nn.Module):
    def __init__(self, in_dim: int, hidden: int, classes: int, layers: int, dropout: float) -> None:
        super().__init__()
        widths = [in_dim] + [hidden] * (layers - 1) + [classes]
        self.layers = nn.ModuleList(SAGELayer(i, o) for i, o in zip(widths[:-1], widths[1:], strict=True))
        self.dropout = Dropout(dropout)

    def forward(self, blocks, x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks, strict=True)):
            h = layer(block, self.dropout(h))
            if i < len(self.layers) - 1:
                h = F.relu(h)
        return h  # one row per seed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--eval-every", type=int, default=0, help="evaluate every N epochs (0: only at the end)")
    parser.add_argument("--dataset", help="register a job on this prepared dataset (a launch of your own)")
    parser.add_argument("--fanout", help="neighbours per hop, e.g. 10,5 (a launch of your own)")
    parser.add_argument("--batch-size", type=int, help="seed nodes per batch per rank (a launch of your own)")
    parser.add_argument("--epochs", type=int, help="passes over the train ids (a launch of your own)")
    parser.add_argument("--predict", action="store_true", help="end with layer-wise inference of every node")
    args = parser.parse_args()

    spec = dict(JOB_DEFAULTS)
    if args.fanout:
        spec["fanouts"] = [int(k) for k in args.fanout.split(",")]
    spec.update({k: v for k, v in (("batch_size", args.batch_size), ("epochs", args.epochs)) if v is not None})
    with graphtier.connect(args.dataset, **spec) as job:
        spec, data = job.spec, job.dataset
        model = GraphSAGE(data.feature_dim, spec.hidden, data.num_classes, len(data.fanouts), spec.dropout)
        optimizer = torch.optim.Adam(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
        model = job.prepare(model, optimizer)
        for epoch in job.epochs():
            for batch in job.batches(epoch):
                logits = model(batch.blocks, batch.x)
                labelled = batch.y >= 0
                loss = F.cross_entropy(logits[labelled], batch.y[labelled])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                job.step(loss, logits)
            if args.eval_every and (epoch + 1) % args.eval_every == 0 and epoch + 1 < spec.epochs:
                print(f"epoch {epoch}: {job.evaluate(model)}")
        accuracy = job.evaluate(model)
        if job.rank == 0:
            print(f"final accuracy: {accuracy}")
        if args.predict:
            predict(job, getattr(model, "module", model))


@torch.no_grad()
def predict(job: graphtier.loader.Job, model: GraphSAGE) -> None:
    """Every node's embeddings (the last hidden layer) and logits, layer by layer over full neighbourhoods."""
    model.eval()
    run = job.layerwise([layer.lin_neigh.out_features for layer in model.layers])
    for chunk in run:  # this rank's destinations of one layer, their whole in-neighbourhood, the layer's input
        h = model.layers[chunk.layer](chunk.block, chunk.x)
        chunk.write(F.relu(h) if chunk.layer < len(model.layers) - 1 else h)
    last = len(model.layers) - 1
    out = run.save({"embeddings": last - 1, "logits": last} if last else {"logits": last})
    test = job.split_ids("test")
    predicted = run.rows(last).index_select(0, test).argmax(dim=1)
    labels = job.data.labels.index_select(0, test)
    if job.rank == 0:
        print(f"layer-wise predictions: test accuracy {float((predicted == labels).double().mean()):.4f}; in {out}")
    run.close()


if __name__ == "__main__":
    main()
