"""`build_model`: the built-in models by name, with the widths of a dataset and a sampler."""

from __future__ import annotations

from typing import Literal, get_args

from torch import nn

from graphtier.contract.errors import GraphtierError
from graphtier.contract.hetero import HeteroSchema
from graphtier.launcher.runtime.models.featureless import FeaturelessOptions
from graphtier.launcher.runtime.models.gat import GAT
from graphtier.launcher.runtime.models.gcn import GCN
from graphtier.launcher.runtime.models.sage import GraphSAGE

ModelName = Literal["sage", "gcn", "gat", "rgcn", "rgat", "hgt", "preagg"]
MODEL_NAMES: tuple[str, ...] = get_args(ModelName)
# built from a heterogeneous dataset's schema by `build_hetero_model`
HETERO_MODEL_NAMES = ("rgcn", "rgat", "hgt", "preagg")


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
    if name in HETERO_MODEL_NAMES:
        raise GraphtierError(f"model {name!r} is built from a heterogeneous dataset's schema: use build_hetero_model")
    raise GraphtierError(f"unknown model {name!r}; choose one of {', '.join(MODEL_NAMES)}")


def build_hetero_model(
    name: ModelName,
    schema: HeteroSchema,
    hidden: int,
    out_dim: int,
    num_layers: int,
    dropout: float = 0.5,
    heads: int = 4,
    featureless: FeaturelessOptions | None = None,
) -> nn.Module:
    """A built-in heterogeneous GNN (rgcn, rgat or hgt) whose forward is `(blocks, edge_types, node_ids, node_types,
    features) -> [num_seeds, out_dim]`; featureless types get a learned embedding per node (`featureless`: how).
    `preagg`'s forward is `(metapath features) -> [num_nodes, out_dim]` instead (`models.preagg`)."""
    from graphtier.launcher.runtime.models.hgt import HGT
    from graphtier.launcher.runtime.models.preagg import build_preaggregated
    from graphtier.launcher.runtime.models.rgat import RGAT
    from graphtier.launcher.runtime.models.rgcn import RGCN

    if name == "rgcn":
        return RGCN(schema, hidden, out_dim, num_layers, dropout=dropout, featureless=featureless)
    if name == "rgat":
        return RGAT(schema, hidden, out_dim, num_layers, heads=heads, dropout=dropout, featureless=featureless)
    if name == "hgt":
        return HGT(schema, hidden, out_dim, num_layers, heads=heads, dropout=dropout, featureless=featureless)
    if name == "preagg":
        return build_preaggregated(schema, hidden, out_dim, num_layers, dropout=dropout)
    raise GraphtierError(f"model {name!r} is not a heterogeneous model; choose one of {', '.join(HETERO_MODEL_NAMES)}")
