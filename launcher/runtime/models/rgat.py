"""R-GAT (relational graph attention) over heterogeneous sampled blocks, as MLPerf Training's GNN
benchmark defines it (R-GAT on IGBH).

A layer holds, per relation, what a `GATConv` holds and sums, for every destination, the outputs of the
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

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError
from graphtier.contract.hetero import HeteroSchema
from graphtier.launcher.runtime.models.block_ops import relation_attention
from graphtier.launcher.runtime.models.dropout import Dropout
from graphtier.launcher.runtime.models.featureless import FeaturelessOptions
from graphtier.launcher.runtime.models.rgcn import HeteroInput, check_layer_count
from graphtier.service.native_ops import Backend, resolve_backend
from graphtier.service.sampling import Block


class RGATConv(nn.Module):
    """One relational attention layer: [num_src, in] -> [num_dst, heads * out] (concat) or [num_dst, out].

    Per relation r it holds what a `GATConv` holds, stacked over the relations: `weight[r]` (the linear map,
    [heads * out, in]), `att_src[r]` and `att_dst[r]` ([heads, out]) and `bias[r]`; a checkpoint written
    with one `GATConv` per relation (`convs.{r}.lin.weight`, ...) loads into them. Every relation runs in
    one pass rather than one relation after another. The attention logits of both ends fold the attention
    vectors into the linear maps (`a . W x == (W^T a) . x`); the softmax runs over a destination's in-edges
    of one relation; each destination gets the sum over the relations ending at its type of their
    attention-weighted messages, plus their biases, as `HeteroConv(aggr="sum")` adds them.

    On CPU float32 where the native ops are built (`backend`), the layer is one native call and its
    backward (`native/cpu/rgat_conv.cpp`): since the map is linear, each destination's attention-weighted
    sum of raw input rows per relation and head is mapped once, rather than every source row through every
    relation leaving its type. Elsewhere, torch ops: each node type's source rows mapped once by the maps
    of all the relations leaving it (one matrix product per type), each edge reading its relation's row
    (`block_ops.relation_attention`); the native layer is tested against these.
    """

    # buffers, per relation: its first row in its head type's block of mapped rows and the rows per node
    # there (how many relations leave that type); per type: which relations end at it ([T, R], 1.0 where one does)
    slot: Tensor
    stride: Tensor
    ends_at: Tensor
    relation_types: Tensor  # int64 [R, 2]: each relation's (head, tail) node types
    backend: Backend = "auto"  # "auto": the native layer (`native/cpu/rgat_conv.cpp`) where built; "torch"

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        num_types: int,
        relation_types: Sequence[tuple[int, int]],
        *,
        heads: int,
        concat: bool,
        negative_slope: float = 0.2,
    ) -> None:
        """`relation_types`: per relation id, the (head, tail) node type indices it joins."""
        super().__init__()
        self.in_dim, self.out_dim, self.heads, self.concat = in_dim, out_dim, heads, concat
        self.num_types, self.negative_slope = num_types, negative_slope
        pairs = [(int(head), int(tail)) for head, tail in relation_types]
        count = len(pairs)
        width = heads * out_dim if concat else out_dim
        self.weight = nn.Parameter(torch.empty(count, heads * out_dim, in_dim))
        self.att_src = nn.Parameter(torch.empty(count, heads, out_dim))
        self.att_dst = nn.Parameter(torch.empty(count, heads, out_dim))
        self.bias = nn.Parameter(torch.zeros(count, width))
        for r in range(count):  # GATConv's initialisation, relation by relation, in its order of draws
            nn.init.kaiming_uniform_(self.weight.data[r], a=math.sqrt(5))  # nn.Linear's, then replaced
            nn.init.xavier_uniform_(self.weight.data[r])
            nn.init.xavier_uniform_(self.att_src.data[r : r + 1])
            nn.init.xavier_uniform_(self.att_dst.data[r : r + 1])
        # the relations leaving each type, in relation order: their maps are one product per type
        self.outgoing = [[r for r, (head, _) in enumerate(pairs) if head == t] for t in range(num_types)]
        self.heads_of = [head for head, _ in pairs]  # each relation's head type (the torch forward's table rows)
        slot, stride = [0] * count, [0] * count
        for relations in self.outgoing:
            for place, r in enumerate(relations):
                slot[r], stride[r] = place, len(relations)
        ends_at = torch.zeros(num_types, count)
        for r, (_, tail) in enumerate(pairs):
            ends_at[tail, r] = 1.0
        self.register_buffer("slot", torch.tensor(slot, dtype=torch.int64), persistent=False)
        self.register_buffer("stride", torch.tensor(stride, dtype=torch.int64), persistent=False)
        self.register_buffer("ends_at", ends_at, persistent=False)
        self.register_buffer("relation_types", torch.tensor(pairs, dtype=torch.int64).view(count, 2), persistent=False)
        self._register_load_state_dict_pre_hook(_stack_per_relation_convs)

    def forward(self, block: Block, edge_types: Tensor, node_types: Tensor, x: Tensor) -> Tensor:
        """`node_types`: the type of each of the block's sources (its destinations come first)."""
        n, heads, out_dim = block.num_dst, self.heads, self.out_dim
        num_relations = self.weight.shape[0]
        width = out_dim * heads if self.concat else out_dim
        if not num_relations:
            return x.new_zeros((n, width))
        if self._native(x):
            return _NativeRGATConv.apply(
                x.contiguous(), self.weight, self.att_src, self.att_dst, self.bias, block, edge_types, node_types, self
            )
        # the sources grouped by type (stable: block order within a type), and each one's place in its group
        order = torch.argsort(node_types, stable=True)
        before = torch.cumsum(F.one_hot(node_types.long(), self.num_types), 0)  # [S, T]: nodes of each type so far
        position = before.gather(1, node_types.unsqueeze(1)).squeeze(1) - 1
        counts = before[-1] if len(before) else before.new_zeros(self.num_types)  # the nodes of each type
        # per type, its rows through the maps of the relations leaving it: one table of mapped rows
        grouped = x.index_select(0, order)
        tables, first_row, start, begin = [], [0] * self.num_types, 0, 0
        for t, rows in enumerate(counts.tolist()):
            relations = self.outgoing[t]
            if rows and relations:
                maps = self.weight[relations[0]] if len(relations) == 1 else self.weight[relations]
                mapped = grouped[begin : begin + rows] @ maps.reshape(-1, self.in_dim).t()
                tables.append(mapped.view(rows * len(relations), heads, out_dim))
                first_row[t] = start
                start += rows * len(relations)
            begin += rows
        if not tables or block.num_edges == 0:
            messages = x.new_zeros((n, heads, out_dim))
        else:
            table = torch.cat(tables) if len(tables) > 1 else tables[0]
            rel = edge_types
            base = torch.tensor([first_row[head] for head in self.heads_of], device=x.device) + self.slot
            row = position[block.indices] * self.stride[rel] + base[rel]  # each edge's mapped source
            # a_dst . (W x_dst) == (W^T a_dst) . x_dst: the destinations' logits without mapping their rows
            folded = torch.einsum(
                "rhci,rhc->rhi", self.weight.view(num_relations, heads, out_dim, self.in_dim), self.att_dst
            )
            score_dst = (x[:n] @ folded.reshape(num_relations * heads, self.in_dim).t()).view(n, num_relations, heads)
            messages = relation_attention(block, table, row, rel, self.att_src, score_dst, self.negative_slope)
        out = messages.reshape(n, -1) if self.concat else messages.mean(dim=1)
        bias = self.ends_at @ self.bias  # [T, width]: the biases of the relations ending at a type
        return out + bias.index_select(0, node_types[:n])

    def _native(self, x: Tensor) -> bool:
        """Whether the layer runs as the native op: CPU float32 where the ops are built (`backend`)."""
        params = (x, self.weight, self.att_src, self.att_dst, self.bias)
        if any(t.device.type != "cpu" or t.dtype != torch.float32 for t in params):
            return False
        return resolve_backend(self.backend, "R-GAT layer") == "native"


class _NativeRGATConv(torch.autograd.Function):
    """`RGATConv`'s forward as one native call (`torch.ops.graphtier.rgat_conv`) and its backward as another;
    gradients for x, weight, att_src, att_dst and bias."""

    @staticmethod
    def forward(ctx, x, weight, att_src, att_dst, bias, block: Block, edge_types, node_types, conv: RGATConv):
        settings = (conv.num_types, conv.concat, conv.negative_slope)
        graph = (
            block.indptr.contiguous(),
            block.indices.contiguous(),
            edge_types.to(torch.int64).contiguous(),
            node_types.to(torch.int64).contiguous(),
            conv.relation_types,
        )
        out, *saved = torch.ops.graphtier.rgat_conv(x, weight, att_src, att_dst, bias, *graph, *settings)
        ctx.save_for_backward(x, weight, att_src, att_dst, *graph, *saved)
        ctx.settings = settings
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        x, weight, att_src, att_dst, *rest = ctx.saved_tensors
        graph, saved = rest[:5], rest[5:]
        grads = torch.ops.graphtier.rgat_conv_backward(
            grad_out.contiguous(), x, weight, att_src, att_dst, *graph, *ctx.settings, *saved
        )
        return (*grads, None, None, None, None)


_PER_RELATION = {"lin.weight": "weight", "att_src": "att_src", "att_dst": "att_dst", "bias": "bias"}


def _stack_per_relation_convs(state_dict: dict, prefix: str, *_args) -> None:
    """A checkpoint's per-relation `GATConv`s (`{prefix}convs.{r}.lin.weight`, ...), as earlier releases
    wrote them, stacked into this layer's parameters (`{prefix}weight`, ...), in place."""
    for old, new in _PER_RELATION.items():
        keys: list[str] = []
        while f"{prefix}convs.{len(keys)}.{old}" in state_dict:
            keys.append(f"{prefix}convs.{len(keys)}.{old}")
        if keys and f"{prefix}{new}" not in state_dict:
            rows = [state_dict.pop(key) for key in keys]
            state_dict[f"{prefix}{new}"] = torch.cat(rows) if old in ("att_src", "att_dst") else torch.stack(rows)


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
        self.dropout = Dropout(dropout, draw="bits")  # the faster draw (models/dropout.py)
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
