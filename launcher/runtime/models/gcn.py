"""GCN (Kipf & Welling 2017) over sampled blocks, symmetric normalisation with self loops.

On a block, destination v aggregates its sampled in-neighbours and itself:
h_v' = sum_{u in N(v) + {v}} h_u W / sqrt(d_out(u) * d_in(v)) + b, where d_in(v) is v's
sampled in-degree + 1 and d_out(u) counts u's sampled out-edges + 1 when u is also a
destination (its self loop) -- the block's own degrees, as DGL's GraphConv(norm='both').
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphtier.launcher.runtime.models.base import BlockGNN, aggregate_first, dims
from graphtier.launcher.runtime.models.block_ops import in_degree, out_degree, weighted_sum
from graphtier.service.sampling import Block


def gcn_norms(block: Block, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """(edge weights [num_edges], self-loop weights [num_dst]) of the symmetric normalisation."""
    deg = in_degree(block)
    inv_in = (deg + 1).to(dtype).rsqrt()
    d_out = out_degree(block)
    d_out[: block.num_dst] += 1
    inv_out = d_out.clamp(min=1).to(dtype).rsqrt()
    edge = inv_out.index_select(0, block.indices) * inv_in.repeat_interleave(deg, output_size=block.num_edges)
    return edge, inv_out[: block.num_dst] * inv_in


class GCNConv(nn.Module):
    """One GCN layer over a block: [num_src, in] -> [num_dst, out]."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim))

    def forward(self, block: Block, x: Tensor) -> Tensor:
        edge_w, self_w = gcn_norms(block, x.dtype)

        def propagate(h: Tensor) -> Tensor:
            return weighted_sum(block, h, edge_w) + h[: block.num_dst] * self_w.unsqueeze(1)

        out = self.lin(propagate(x)) if aggregate_first(block, self.in_dim, self.out_dim) else propagate(self.lin(x))
        return out + self.bias


class GCN(BlockGNN):
    """`num_layers` GCNConv layers with ReLU and dropout between them."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, num_layers: int, *, dropout: float = 0.5) -> None:
        super().__init__(
            [GCNConv(i, o) for i, o in dims(in_dim, hidden, out_dim, num_layers)], dropout=dropout, activation=F.relu
        )
