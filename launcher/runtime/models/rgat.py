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
from graphtier.launcher.runtime.models.block_ops import relation_attention
from graphtier.launcher.runtime.models.dropout import Dropout
from graphtier.launcher.runtime.models.featureless import FeaturelessOptions
from graphtier.launcher.runtime.models.gat import GATConv
from graphtier.launcher.runtime.models.rgcn import HeteroInput, check_layer_count
from graphtier.service.native_ops import Backend
from graphtier.service.sampling import Block


class RGATConv(nn.Module):
    """One relational attention layer: [num_src, in] -> [num_dst, heads * out] (concat) or [num_dst, out].

    Its parameters are one `GATConv` per relation (`convs[r]`); the forward runs every relation in one
    pass rather than one relation after another. Each node type's source rows are mapped once by the
    linear maps of all the relations leaving that type (one matrix product per type, [rows, k * heads *
    out]), and each edge reads the row of its own relation. The attention logits of both ends fold the
    attention vectors into the linear maps (`a . W x == (W^T a) . x`), so no destination row is mapped.
    The softmax runs over a destination's in-edges of one relation (the groups `dst * R + relation`), the
    weighted messages of all relations are summed into the destination at once, and each destination
    gets the biases of the relations ending at its type, as `HeteroConv(aggr="sum")` adds them.
    """

    # buffers, per relation: its head type, its place among the relations leaving that type; per type: how
    # many relations leave it, and which relations end at it ([T, R], 1.0 where one does)
    head_of: Tensor
    slot: Tensor
    leaving: Tensor
    ends_at: Tensor
    backend: Backend = "auto"  # the attention's: native where built (`block_ops.relation_attention`)

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
        # the relations leaving each type, in relation order: their maps are one product per type
        self.outgoing = [[r for r, (head, _) in enumerate(self.relation_types) if head == t] for t in range(num_types)]
        slot = [0] * len(self.relation_types)
        for relations in self.outgoing:
            for place, r in enumerate(relations):
                slot[r] = place
        ends_at = torch.zeros(num_types, len(self.relation_types))
        for r, (_, tail) in enumerate(self.relation_types):
            ends_at[tail, r] = 1.0
        head_of = torch.tensor([head for head, _ in self.relation_types], dtype=torch.int64)
        self.register_buffer("head_of", head_of, persistent=False)
        leaving = torch.tensor([len(relations) for relations in self.outgoing], dtype=torch.int64)
        self.register_buffer("leaving", leaving, persistent=False)
        self.register_buffer("slot", torch.tensor(slot, dtype=torch.int64), persistent=False)
        self.register_buffer("ends_at", ends_at, persistent=False)

    def _parameters_of(self, name: str) -> Tensor:
        """The relations' parameter `name` stacked: [R, *shape]."""
        return torch.stack([conv.get_parameter(name) for conv in self.convs])

    def forward(self, block: Block, edge_types: Tensor, node_types: Tensor, x: Tensor) -> Tensor:
        """`node_types`: the type of each of the block's sources (its destinations come first)."""
        n, heads, out_dim = block.num_dst, self.heads, self.out_dim
        num_relations = len(self.relation_types)
        width = out_dim * heads if self.concat else out_dim
        if not num_relations:
            return x.new_zeros((n, width))
        first: GATConv = self.convs[0]  # type: ignore[assignment]  # every relation's conv has the same slope
        weight = self._parameters_of("lin.weight")  # [R, H * C, in]
        # the sources grouped by type (stable: block order within a type), and each one's place in its group
        counts = torch.bincount(node_types, minlength=self.num_types)
        order = torch.argsort(node_types, stable=True)
        starts = torch.cumsum(counts, 0) - counts
        position = torch.empty_like(node_types)
        position[order] = torch.arange(node_types.numel(), device=x.device) - starts[node_types[order]]
        # per type, its rows through the maps of the relations leaving it: one table of mapped rows
        grouped = x.index_select(0, order)
        tables, sizes = [], []
        for t, relations in enumerate(self.outgoing):
            rows = int(counts[t]) if relations else 0
            if rows:
                begin = int(starts[t])
                maps = weight[relations].reshape(len(relations) * heads * out_dim, self.in_dim)
                tables.append((grouped[begin : begin + rows] @ maps.t()).view(rows * len(relations), heads, out_dim))
            sizes.append(rows * len(relations))
        src, rel = block.indices, edge_types
        if not tables or src.numel() == 0:
            messages = x.new_zeros((n, heads, out_dim))
        else:
            table = torch.cat(tables) if len(tables) > 1 else tables[0]
            sizes_t = torch.tensor(sizes, dtype=torch.int64, device=x.device)
            base = torch.cumsum(sizes_t, 0) - sizes_t
            head = self.head_of[rel]
            row = base[head] + position[src] * self.leaving[head] + self.slot[rel]  # each edge's mapped source
            # a_dst . (W x_dst) == (W^T a_dst) . x_dst: the destinations' logits without mapping their rows
            folded = torch.einsum(
                "rhci,rhc->rhi",
                weight.view(num_relations, heads, out_dim, self.in_dim),
                self._parameters_of("att_dst")[:, 0],
            )
            score_dst = (x[:n] @ folded.reshape(num_relations * heads, self.in_dim).t()).view(n, num_relations, heads)
            att_src = self._parameters_of("att_src").squeeze(1)  # [R, H, C]
            messages = relation_attention(
                block, table, row, rel, att_src, score_dst, first.negative_slope, backend=self.backend
            )
        out = messages.reshape(n, -1) if self.concat else messages.mean(dim=1)
        bias = self.ends_at @ self._parameters_of("bias")  # [T, width]: the biases of the relations ending at a type
        return out + bias.index_select(0, node_types[:n])


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
