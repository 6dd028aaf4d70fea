"""What a model's last layer's linear maps read: the rows of which its logits are a linear function.

A GNN's last layer mixes a node's row with its neighbours' before its weights apply, so a linear
classifier of the node's own last hidden row cannot see what the logits see. `LastInput` is the
layer split at its weights -- the analogue of a CNN's penultimate features -- for each built-in conv:

- `SAGEConv`: [h_v || mean_u h_u], read by [W_root | W_neigh];
- `GCNConv`: the normalised aggregate over the neighbours and the self loop, read by W;
- `GATConv` (heads averaged): per head the attention-weighted sum of the sources' rows (self loop
  included), heads concatenated, read by each head's W over the number of heads;
- `RGCNConv`: [h_v || mean over each relation's neighbours], relations in id order, read by
  [W_root | W_1 | ... | W_R].

`rows(block, x, edge_types)` gives the destinations' [num_dst, width] rows; `logits(rows)` applies the
layer's weights and bias, reproducing the conv's output to float tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError
from graphtier.launcher.runtime.models.block_ops import destination_index, mean_aggregate, weighted_sum
from graphtier.launcher.runtime.models.gat import GATConv
from graphtier.launcher.runtime.models.gcn import GCNConv, gcn_norms
from graphtier.launcher.runtime.models.rgcn import RGCNConv
from graphtier.launcher.runtime.models.sage import SAGEConv
from graphtier.service.sampling import Block


@dataclass(frozen=True)
class LastInput:
    """A last layer split at its weights (module docstring)."""

    width: int
    rows: Callable[[Block, Tensor, Tensor | None], Tensor]  # (block, input rows, edge types) -> [num_dst, width]
    weight: Tensor  # [out, width]
    bias: Tensor | None  # [out]

    def logits(self, rows: Tensor) -> Tensor:
        return F.linear(rows, self.weight.to(rows.dtype), None if self.bias is None else self.bias.to(rows.dtype))


def _sage(conv: SAGEConv) -> LastInput:
    def rows(block: Block, x: Tensor, _: Tensor | None) -> Tensor:
        return torch.cat([x[: block.num_dst], mean_aggregate(block, x)], dim=1)

    weight = torch.cat([conv.lin_root.weight, conv.lin_neigh.weight], dim=1).detach()
    return LastInput(2 * conv.in_dim, rows, weight, conv.lin_neigh.bias.detach())


def _gcn(conv: GCNConv) -> LastInput:
    def rows(block: Block, x: Tensor, _: Tensor | None) -> Tensor:
        edge_w, self_w = gcn_norms(block, x.dtype)
        return weighted_sum(block, x, edge_w) + x[: block.num_dst] * self_w.unsqueeze(1)

    return LastInput(conv.in_dim, rows, conv.lin.weight.detach(), conv.bias.detach())


def _gat(conv: GATConv) -> LastInput:
    heads, out_dim = conv.heads, conv.out_dim
    in_dim = conv.lin.in_features

    def rows(block: Block, x: Tensor, _: Tensor | None) -> Tensor:
        n = block.num_dst
        src, dst = conv.self_looped(block)
        h = conv.lin(x).view(-1, heads, out_dim)
        alpha = conv.attention(h, h[:n], src, dst)  # [E, H]
        sources = x.index_select(0, src)
        per_head = [
            x.new_zeros((n, in_dim)).index_add_(0, dst, sources * alpha[:, head].unsqueeze(1)) for head in range(heads)
        ]
        return torch.cat(per_head, dim=1)

    # logits = mean over heads of W_h z_h + b: one [out, heads * in] map over the concatenated heads
    weight = conv.lin.weight.detach().view(heads, out_dim, in_dim).permute(1, 0, 2).reshape(out_dim, -1) / heads
    return LastInput(heads * in_dim, rows, weight, conv.bias.detach())


def _rgcn(conv: RGCNConv) -> LastInput:
    relations, in_dim = conv.num_relations, conv.in_dim

    def rows(block: Block, x: Tensor, edge_types: Tensor | None) -> Tensor:
        assert edge_types is not None, "R-GCN's last layer reads each edge's relation"
        n = block.num_dst
        key = destination_index(block) * relations + edge_types
        sums = x.new_zeros((n * relations, in_dim)).index_add_(0, key, x.index_select(0, block.indices))
        count = torch.bincount(key, minlength=n * relations).clamp(min=1).to(x.dtype)
        means = (sums / count.unsqueeze(1)).view(n, relations * in_dim)
        return torch.cat([x[:n], means], dim=1)

    per_relation = conv.relation_weight.detach().view(in_dim, relations, -1)  # [in, R, out]
    weight = torch.cat([conv.root.weight.detach(), *(per_relation[:, r, :].T for r in range(relations))], dim=1)
    return LastInput((relations + 1) * in_dim, rows, weight, conv.root.bias.detach())


def last_input(conv: nn.Module, model: str) -> LastInput:
    """`conv` (the last layer of model `model`) split at its weights; GraphtierError for a layer without a split."""
    if isinstance(conv, SAGEConv):
        return _sage(conv)
    if isinstance(conv, GCNConv):
        return _gcn(conv)
    if isinstance(conv, GATConv):
        if conv.concat:
            raise GraphtierError(f"{model}: embeddings 'last-input' reads a GAT last layer that averages its heads")
        return _gat(conv)
    if isinstance(conv, RGCNConv):
        return _rgcn(conv)
    raise GraphtierError(
        f"{model}: embeddings 'last-input' does not know what its last layer ({type(conv).__name__}) reads; "
        "use embeddings 'hidden' (the last hidden layer)"
    )
