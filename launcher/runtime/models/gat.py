"""GAT (Velickovic et al. 2018) over sampled blocks: multi-head attention per destination.

Each destination attends over its sampled in-neighbours and itself (a self loop is added,
as PyG's GATConv does): e_uv = LeakyReLU(a_src . W h_u + a_dst . W h_v), softmax over v's
edges per head, then the attention-weighted sum of W h_u. Hidden layers concatenate the
heads, the output layer averages them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError
from graphtier.launcher.runtime.models.base import BlockGNN, dims
from graphtier.launcher.runtime.models.block_ops import attention_sum, destination_index, segment_softmax
from graphtier.service.sampling import Block


class GATConv(nn.Module):
    """One attention layer: [num_src, in] -> [num_dst, heads * out] (concat) or [num_dst, out] (mean)."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        *,
        heads: int,
        concat: bool,
        attn_dropout: float = 0.0,
        negative_slope: float = 0.2,
    ) -> None:
        super().__init__()
        self.heads, self.out_dim, self.concat = heads, out_dim, concat
        self.negative_slope = negative_slope
        self.lin = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_dim))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_dim))
        self.bias = nn.Parameter(torch.zeros(heads * out_dim if concat else out_dim))
        self.attn_dropout = nn.Dropout(attn_dropout)
        nn.init.xavier_uniform_(self.lin.weight)
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def forward(self, block: Block, x: Tensor) -> Tensor:
        n = block.num_dst
        src, dst = self.self_looped(block)
        h = self.lin(x).view(-1, self.heads, self.out_dim)  # [num_src, H, C]
        return self.attend(h, h[:n], src, dst)

    def bipartite(self, x_src: Tensor, x_dst: Tensor, src: Tensor, dst: Tensor) -> Tensor:
        """The layer over edges `src[e] -> dst[e]` (rows of `x_src` -> rows of `x_dst`), no self loops:
        [len(x_dst), heads * out] or [len(x_dst), out]. Both sides go through the same linear map, as
        PyG's `GATConv((x_src, x_dst), edge_index)` with an int `in_channels` maps them; R-GAT runs
        one per relation."""
        h_src = self.lin(x_src).view(-1, self.heads, self.out_dim)
        h_dst = self.lin(x_dst).view(-1, self.heads, self.out_dim)
        return self.attend(h_src, h_dst, src, dst)

    def attention(self, h_src: Tensor, h_dst: Tensor, src: Tensor, dst: Tensor) -> Tensor:
        """[E, H]: each edge's attention weight per head, soft-maxed over its destination's edges (no dropout)."""
        score_src = (h_src * self.att_src).sum(-1)  # [S, H]
        score_dst = (h_dst * self.att_dst).sum(-1)  # [D, H]
        scores = F.leaky_relu(score_src.index_select(0, src) + score_dst.index_select(0, dst), self.negative_slope)
        return segment_softmax(scores, dst, h_dst.shape[0])

    def self_looped(self, block: Block) -> tuple[Tensor, Tensor]:
        """(src, dst) of the block's edges and a self loop per destination, as `forward` attends over them."""
        loops = torch.arange(block.num_dst, dtype=torch.int64, device=block.indices.device)
        return torch.cat([block.indices, loops]), torch.cat([destination_index(block), loops])

    def attend(self, h_src: Tensor, h_dst: Tensor, src: Tensor, dst: Tensor) -> Tensor:
        """Attention over the edges of mapped rows `h_src` [S, H, C] -> `h_dst` [D, H, C], plus the bias."""
        n = h_dst.shape[0]
        alpha = self.attn_dropout(self.attention(h_src, h_dst, src, dst))
        out = attention_sum(h_src, src, dst, alpha, n)  # [D, H, C]
        out = out.reshape(n, -1) if self.concat else out.mean(dim=1)
        return out + self.bias


class GAT(BlockGNN):
    """`num_layers` GATConv layers with ELU between them; `hidden` is the concatenated width."""

    def __init__(
        self, in_dim: int, hidden: int, out_dim: int, num_layers: int, *, heads: int = 4, dropout: float = 0.5
    ) -> None:
        if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
            raise GraphtierError(f"heads must be an int >= 1, got {heads!r}")
        if hidden % heads:
            raise GraphtierError(f"hidden={hidden} must be divisible by heads={heads} (each head gets hidden // heads)")
        convs = []
        for layer, (i, o) in enumerate(dims(in_dim, hidden, out_dim, num_layers)):
            last = layer == num_layers - 1
            convs.append(GATConv(i, o if last else o // heads, heads=heads, concat=not last, attn_dropout=dropout))
        super().__init__(convs, dropout=dropout, activation=F.elu)
