"""A PyG GraphSAGE (torch_geometric.nn.SAGEConv) trained on graphtier's batches.

    pip install "graphtier[pyg]"     # torch_geometric: pure Python; no pyg-lib or torch-sparse needed
    graphtier job submit --dataset cora --script examples/pyg_sage.py --wait
    torchrun --standalone --nproc-per-node 2 examples/pyg_sage.py --dataset cora   # or python ...

`JOB_DEFAULTS` are this script's hyper-parameters (GraphSAGE's usual ones on Cora), taken
by `job submit --script` for every field its flags leave unset, and by `graphtier.connect` for a
launch of your own.

Each batch is a sampled subgraph in PyG's convention: `x` for every sampled node, `edge_index`
over local ids (row 0 source, row 1 destination), the seeds first (`batch.num_seeds` of them,
labels in `batch.y`) -- what `model(x, edge_index)[:batch_size]` expects after a NeighborLoader.
PyG is imported here, inside the script: the daemon does not need it, only this job's ranks.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

import graphtier

JOB_DEFAULTS = {"fanouts": [25, 10], "batch_size": 64, "epochs": 30, "lr": 0.003, "weight_decay": 5e-4}


def build(in_dim: int, hidden: int, classes: int, layers: int, dropout: float) -> nn.Module:
    try:
        from torch_geometric.nn import GraphSAGE
    except ImportError as exc:
        raise SystemExit(
            f"this example needs torch_geometric in the job's Python ({exc}); pip install 'graphtier[pyg]'"
        ) from exc
    return GraphSAGE(in_dim, hidden, num_layers=layers, out_channels=classes, dropout=dropout)


def forward(model: nn.Module, batch) -> torch.Tensor:
    return model(batch.x, batch.edge_index)[: batch.num_seeds]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", help="register a job on this prepared dataset (a launch of your own)")
    args = parser.parse_args()

    with graphtier.connect(args.dataset, **JOB_DEFAULTS) as job:
        spec, data = job.spec, job.dataset
        model = build(data.feature_dim, spec.hidden, data.num_classes, len(data.fanouts), spec.dropout)
        optimizer = torch.optim.Adam(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
        model = job.prepare(model, optimizer)
        for epoch in job.epochs():
            for batch in job.batches(epoch):
                logits = forward(model, batch)
                labelled = batch.y >= 0
                loss = F.cross_entropy(logits[labelled], batch.y[labelled])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                job.step(loss, logits)
        accuracy = job.evaluate(model, forward=forward)
        if job.rank == 0:
            print(f"final accuracy: {accuracy}")


if __name__ == "__main__":
    main()
