"""`build_model`: the built-in models by name, with the widths of a dataset and a sampler."""

from __future__ import annotations

from typing import Literal, get_args

from torch import nn

from graphtier.contract.errors import GraphtierError
from graphtier.launcher.runtime.models.gat import GAT
from graphtier.launcher.runtime.models.gcn import GCN
from graphtier.launcher.runtime.models.sage import GraphSAGE

ModelName = Literal["sage", "gcn", "gat"]
MODEL_NAMES: tuple[str, ...] = get_args(ModelName)


def build_model(
    name: ModelName,
    in_dim: int,
    hidden: int,
    out_dim: int,
    num_layers: int,
    dropout: float = 0.5,
    heads: int = 4,
) -> nn.Module:
    """A built-in GNN whose forward is `(blocks, x) -> [num_seeds, out_dim]`.

    `num_layers` must equal the number of sampled hops (len(fanouts)); `heads` is used by GAT only.
    """
    if name == "sage":
        return GraphSAGE(in_dim, hidden, out_dim, num_layers, dropout=dropout)
    if name == "gcn":
        return GCN(in_dim, hidden, out_dim, num_layers, dropout=dropout)
    if name == "gat":
        return GAT(in_dim, hidden, out_dim, num_layers, heads=heads, dropout=dropout)
    raise GraphtierError(f"unknown model {name!r}; choose one of {', '.join(MODEL_NAMES)}")
