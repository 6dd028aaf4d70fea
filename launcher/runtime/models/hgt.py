"""An HGT-style model (Hu et al., WWW 2020) over heterogeneous sampled blocks.

Per node type: key, query and value maps and an output map; per relation: an attention matrix,
a message matrix and a prior per head. An edge s -> t of relation r scores
(K_type(s) h_s W_att_r) . (Q_type(t) h_t) * prior_r / sqrt(d); the scores are soft-maxed over all
of t's sampled in-edges (every relation together), the messages V_type(s) h_s W_msg_r summed
with those weights, and the result mapped by t's output map and mixed with h_t by a learned
gate (the skip connection). Every type enters normalised (`HeteroInput` with `normalise` and
`normalise_embeddings`): features through a linear map, LayerNorm and ReLU; a featureless type's
learned embeddings through a LayerNorm (a residual beside neighbour means as it is).

The layer computes what PyG's `HGTConv` computes, the reference implementation (checked with the
same weights on the same typed blocks), except that a destination no relation reaches keeps a row:
the gate's mix of its output bias and its input, where PyG drops the type.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError
from graphtier.contract.hetero import HeteroSchema
from graphtier.launcher.runtime.models.block_ops import destination_index, segment_softmax
from graphtier.launcher.runtime.models.dropout import Dropout
from graphtier.launcher.runtime.models.featureless import FeaturelessOptions
from graphtier.launcher.runtime.models.rgcn import HeteroInput, check_layer_count
from graphtier.service.sampling import Block


class HGTConv(nn.Module):
    """One heterogeneous attention layer: [num_src, dim] -> [num_dst, dim]."""

    def __init__(self, dim: int, num_types: int, num_relations: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise GraphtierError(f"width {dim} is not divisible by {heads} heads")
        self.dim, self.heads, self.head_dim = dim, heads, dim // heads
        self.num_types, self.num_relations = num_types, num_relations
        self.kqv = nn.ModuleList(nn.Linear(dim, 3 * dim) for _ in range(num_types))
        self.out = nn.ModuleList(nn.Linear(dim, dim) for _ in range(num_types))
        self.attention = nn.Parameter(torch.empty(num_relations, heads, self.head_dim, self.head_dim))
        self.message = nn.Parameter(torch.empty(num_relations, heads, self.head_dim, self.head_dim))
        self.prior = nn.Parameter(torch.ones(num_relations, heads))
        self.skip = nn.Parameter(torch.ones(num_types))
        nn.init.xavier_uniform_(self.attention.view(-1, self.head_dim, self.head_dim))
        nn.init.xavier_uniform_(self.message.view(-1, self.head_dim, self.head_dim))

    def forward(self, block: Block, edge_types: Tensor, node_types: Tensor, x: Tensor) -> Tensor:
        """`node_types`: the type of each of the block's sources (its destinations come first)."""
        kqv = x.new_empty((x.shape[0], 3 * self.dim))
        for t in range(self.num_types):
            rows = (node_types == t).nonzero().squeeze(1)
            if rows.numel():
                kqv[rows] = self.kqv[t](x[rows])
        shape = (x.shape[0], self.heads, self.head_dim)
        key, query, value = (part.reshape(shape) for part in kqv.split(self.dim, dim=1))
        src, dst = block.indices, destination_index(block)
        keys = key.new_empty((src.numel(), self.heads, self.head_dim))
        messages = torch.empty_like(keys)
        for r in range(self.num_relations):
            edges = (edge_types == r).nonzero().squeeze(1)
            if edges.numel():
                keys[edges] = torch.einsum("ehd,hdf->ehf", key[src[edges]], self.attention[r])
                messages[edges] = torch.einsum("ehd,hdf->ehf", value[src[edges]], self.message[r])
        scores = (keys * query[dst]).sum(-1) * self.prior[edge_types] / math.sqrt(self.head_dim)
        alpha = segment_softmax(scores, dst, block.num_dst)
        summed = x.new_zeros((block.num_dst, self.heads, self.head_dim)).index_add_(
            0, dst, messages * alpha.unsqueeze(-1)
        )
        summed = F.gelu(summed.reshape(block.num_dst, self.dim))
        out = torch.empty_like(summed)
        dst_types = node_types[: block.num_dst]
        for t in range(self.num_types):
            rows = (dst_types == t).nonzero().squeeze(1)
            if rows.numel():
                gate = torch.sigmoid(self.skip[t])
                out[rows] = gate * self.out[t](summed[rows]) + (1 - gate) * x[rows]
        return out


class HGT(nn.Module):
    """`num_layers` HGT layers of width `hidden` and a linear classifier of the seeds."""

    def __init__(
        self,
        schema: HeteroSchema,
        hidden: int,
        out_dim: int,
        num_layers: int,
        *,
        heads: int = 4,
        dropout: float = 0.5,
        featureless: FeaturelessOptions | None = None,
    ) -> None:
        super().__init__()
        self.input = HeteroInput(schema, hidden, featureless, normalise=True, normalise_embeddings=True)
        self.convs = nn.ModuleList(
            HGTConv(hidden, len(schema.node_types), len(schema.relations), heads) for _ in range(num_layers)
        )
        self.classify = nn.Linear(hidden, out_dim)
        self.dropout = Dropout(dropout)

    @property
    def num_layers(self) -> int:
        return len(self.convs)

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
        for conv, block, types in zip(self.convs, blocks, edge_types, strict=True):
            h = conv(block, types, node_types[: block.num_src], self.dropout(h))
        return self.classify(h)
