"""Your own GraphSAGE in plain PyTorch, trained through graphtier's loader.

    graphtier job submit --dataset cora --script examples/sage_blocks.py --fanout 25,10 \
        --batch-size 64 --epochs 30 --lr 0.003 --weight-decay 5e-4 --wait

The daemon runs this file under torchrun, one process per rank, with the job's producers
sampling and gathering into shared memory. Each batch brings `blocks` (one bipartite CSC
graph per layer, input layer first) and the input features `x`, already on the rank's
device. Hyper-parameters come from the job spec (`--hidden`, `--lr`, `--dropout`, ...);
`--script-args '--eval-every 5'` reaches this script's own argparse.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

from graphtier.launcher import loader


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
        self.dropout = nn.Dropout(dropout)

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
    args = parser.parse_args()

    with loader.connect() as job:
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


if __name__ == "__main__":
    main()
