"""GraphSAGE with the mean aggregator (Hamilton et al. 2017) over sampled blocks.

h_v' = W_neigh * mean_{u in N(v)} h_u + W_root * h_v + b, computed for the block's
destinations only; the mean runs in whichever width (input or output) is cheaper.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from graphtier.launcher.runtime.models.base import BlockGNN, aggregate_first, dims
from graphtier.launcher.runtime.models.block_ops import mean_aggregate
from graphtier.service.sampling import Block


class SAGEConv(nn.Module):
    """One mean-aggregator GraphSAGE layer: [num_src, in] -> [num_dst, out]."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.lin_neigh = nn.Linear(in_dim, out_dim)
        self.lin_root = nn.Linear(in_dim, out_dim, bias=False)

    def forward(self, block: Block, x: Tensor) -> Tensor:
        if aggregate_first(block, self.in_dim, self.out_dim):
            neigh = self.lin_neigh(mean_aggregate(block, x))
        else:
            neigh = mean_aggregate(block, F.linear(x, self.lin_neigh.weight)) + self.lin_neigh.bias
        return neigh + self.lin_root(x[: block.num_dst])


class GraphSAGE(BlockGNN):
    """`num_layers` SAGEConv layers with ReLU and dropout between them."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, num_layers: int, *, dropout: float = 0.5) -> None:
        super().__init__(
            [SAGEConv(i, o) for i, o in dims(in_dim, hidden, out_dim, num_layers)], dropout=dropout, activation=F.relu
        )
