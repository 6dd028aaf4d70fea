"""R-GAT (relational graph attention) over heterogeneous sampled blocks, as MLPerf Training's GNN
benchmark defines it (R-GAT on IGBH).

A layer holds one `GATConv` per relation and sums, for every destination, the outputs of the
relations ending at its type: PyG's `HeteroConv({relation: GATConv(..., add_self_loops=False)},
aggr="sum")`, computed on the typed sampler's blocks (checked with the same weights against PyG).
Each relation's attention is soft-maxed over a destination's sampled in-edges of that relation only;
its linear map applies to the relation's source rows and destination rows alike. Hidden layers
concatenate the heads, the last averages them into the logits; dropout runs on every layer's input
and LeakyReLU between layers. Node types without features enter through `HeteroInput`'s learned
embeddings, as in `RGCN`; featured types enter normalised (LayerNorm, ReLU), as in `HGT`: the
attention scores are linear in the rows, and rows of row-normalised features (ACM's are ~1/30 per
column) would leave every score near zero and the attention uniform.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError
from graphtier.contract.hetero import HeteroSchema
from graphtier.launcher.runtime.models.block_ops import destination_index
from graphtier.launcher.runtime.models.dropout import Dropout
from graphtier.launcher.runtime.models.featureless import FeaturelessOptions
from graphtier.launcher.runtime.models.gat import GATConv
from graphtier.launcher.runtime.models.rgcn import HeteroInput, check_layer_count
from graphtier.service.sampling import Block


class RGATConv(nn.Module):
    """One relational attention layer: [num_src, in] -> [num_dst, heads * out] (concat) or [num_dst, out]."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        num_types: int,
        relation_types: Sequence[tuple[int, int]],
        *,
        heads: int,
        concat: bool,
    ) -> None:
        """`relation_types`: per relation id, the (head, tail) node type indices it joins."""
        super().__init__()
        self.in_dim, self.out_dim, self.heads, self.concat = in_dim, out_dim, heads, concat
        self.num_types = num_types
        self.relation_types = [(int(head), int(tail)) for head, tail in relation_types]
        self.convs = nn.ModuleList(GATConv(in_dim, out_dim, heads=heads, concat=concat) for _ in self.relation_types)

    def forward(self, block: Block, edge_types: Tensor, node_types: Tensor, x: Tensor) -> Tensor:
        """`node_types`: the type of each of the block's sources (its destinations come first)."""
        n = block.num_dst
        # a node's position among the sources of its type; destinations come first, so a destination's
        # position among its type's destinations is the same
        position = torch.empty_like(node_types)
        rows = []
        for t in range(self.num_types):
            where = (node_types == t).nonzero().squeeze(1)
            position[where] = torch.arange(where.numel(), device=where.device)
            rows.append(where)
        dst_types = node_types[:n]
        src, dst = block.indices, destination_index(block)
        width = self.out_dim * self.heads if self.concat else self.out_dim
        out = x.new_zeros((n, width))
        for r, ((head, tail), conv) in enumerate(zip(self.relation_types, self.convs, strict=True)):
            assert isinstance(conv, GATConv)
            targets = rows[tail][: int((dst_types == tail).sum())]  # the destinations of the tail type
            if targets.numel() == 0:
                continue
            edges = (edge_types == r).nonzero().squeeze(1)
            found = conv.bipartite(
                x.index_select(0, rows[head]), x.index_select(0, targets), position[src[edges]], position[dst[edges]]
            )
            out.index_add_(0, targets, found)
        return out


class RGAT(nn.Module):
    """`num_layers` R-GAT layers over a heterogeneous sample; `hidden` is the concatenated width."""

    def __init__(
        self,
        schema: HeteroSchema,
        hidden: int,
        out_dim: int,
        num_layers: int,
        *,
        heads: int = 4,
        dropout: float = 0.5,
        negative_slope: float = 0.2,
        featureless: FeaturelessOptions | None = None,
    ) -> None:
        super().__init__()
        if num_layers < 1:
            raise GraphtierError(f"an R-GAT needs at least one layer, got {num_layers}")
        if hidden % heads:
            raise GraphtierError(f"hidden={hidden} must be divisible by heads={heads} (each head gets hidden // heads)")
        self.input = HeteroInput(schema, hidden, featureless, normalise=True)
        types = len(schema.node_types)
        relation_types = [(schema.type_index(r.head), schema.type_index(r.tail)) for r in schema.relations]
        self.convs = nn.ModuleList(
            RGATConv(hidden, out_dim, types, relation_types, heads=heads, concat=False)
            if layer == num_layers - 1
            else RGATConv(hidden, hidden // heads, types, relation_types, heads=heads, concat=True)
            for layer in range(num_layers)
        )
        self.dropout = Dropout(dropout)
        self.negative_slope = negative_slope

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def activation(self, h: Tensor) -> Tensor:
        """What follows every layer but the last."""
        return F.leaky_relu(h, self.negative_slope)

    def forward(
        self,
        blocks: Sequence[Block],
        edge_types: Sequence[Tensor],
        node_ids: Tensor,
        node_types: Tensor,
        features: dict[str, Tensor],
    ) -> Tensor:
        """Logits [num_seeds, out_dim]; the arguments as `RGCN.forward` takes them."""
        check_layer_count(self.num_layers, blocks, edge_types)
        h = self.input(node_ids, node_types, features)
        for layer, (conv, block, types) in enumerate(zip(self.convs, blocks, edge_types, strict=True)):
            h = conv(block, types, node_types[: block.num_src], self.dropout(h))
            if layer < self.num_layers - 1:
                h = self.activation(h)
        return h
