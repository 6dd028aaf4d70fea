"""R-GCN (Schlichtkrull et al. 2018) over heterogeneous sampled blocks, with learned embeddings for featureless types.

h_v' = W_0 h_v + b + sum_r mean_{u in N_r(v)} W_r h_u: one weight per relation, the mean taken
over v's sampled neighbours of that relation. All relations run in one pass: the sources are
projected by every W_r at once ([num_src, R, out]) and each edge reads its own relation's row.
The input layer turns each node type into `hidden` columns: a linear map of its features, or
a learned embedding per node where the type has none (said in the dataset's manifest), optionally
over its neighbours' mean features (`featureless.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError
from graphtier.contract.hetero import HeteroSchema, check_neighbour_means, starts_from_neighbour_means
from graphtier.launcher.runtime.models.block_ops import destination_index
from graphtier.launcher.runtime.models.dropout import Dropout
from graphtier.launcher.runtime.models.featureless import (
    FeaturelessOptions,
    NeighbourMeanInput,
    SparseEmbedding,
)
from graphtier.launcher.runtime.models.sparse_input import SparseInputLinear
from graphtier.service.native_ops import Backend, resolve_backend
from graphtier.service.sampling import Block


class RGCNConv(nn.Module):
    """One relational graph convolution: [num_src, in] -> [num_dst, out]."""

    def __init__(self, in_dim: int, out_dim: int, num_relations: int) -> None:
        super().__init__()
        self.in_dim, self.out_dim, self.num_relations = in_dim, out_dim, num_relations
        self.relation_weight = nn.Parameter(torch.empty(in_dim, num_relations * out_dim))
        self.root = nn.Linear(in_dim, out_dim)
        nn.init.xavier_uniform_(self.relation_weight.view(in_dim, num_relations, out_dim).transpose(0, 1))

    def forward(self, block: Block, edge_types: Tensor, x: Tensor) -> Tensor:
        dst = destination_index(block)
        src = block.indices
        projected = (x @ self.relation_weight).view(-1, self.num_relations, self.out_dim)
        messages = projected[src, edge_types]  # [E, out]: each edge through its relation's weight
        key = dst * self.num_relations + edge_types
        per_relation = torch.bincount(key, minlength=block.num_dst * self.num_relations).clamp(min=1)
        messages = messages / per_relation[key].to(x.dtype).unsqueeze(1)
        out = x.new_zeros((block.num_dst, self.out_dim)).index_add_(0, dst, messages)
        return out + self.root(x[: block.num_dst])


EMBEDDING_LR_SCALE = 0.1  # featureless types' embeddings learn at this share of the learning rate unless told


def hetero_param_groups(module: nn.Module, lr: float, embedding_lr: float | None = None) -> list[dict[str, object]]:
    """Adam parameter groups of a model: the learned embeddings of featureless types (inside a
    `HeteroInput`) at `embedding_lr` (default `EMBEDDING_LR_SCALE` x `lr`), everything else at `lr`.
    With few labels (ACM's 60 train papers) embeddings learning at the full rate overfit: 0.815 test
    accuracy against 0.885. Embeddings in row mode are left out: their own row-wise Adam trains them
    (`launcher/runtime/embedding_optimizer.py`)."""
    tables = [m for m in module.modules() if isinstance(m, SparseEmbedding)]
    embeddings = [m.weight for m in tables if not m.row_mode]
    own = [m.weight for m in tables if m.row_mode]
    others = [p for p in module.parameters() if all(p is not e for e in embeddings + own)]
    groups: list[dict[str, object]] = [{"params": others}]
    if embeddings:
        groups.append({"params": embeddings, "lr": embedding_lr or lr * EMBEDDING_LR_SCALE})
    return groups


def check_layer_count(num_layers: int, blocks: Sequence[Block], edge_types: Sequence[Tensor]) -> None:
    """A heterogeneous model takes one block and one edge-type vector per layer; anything else is refused."""
    if len(blocks) != num_layers or len(edge_types) != num_layers:
        raise GraphtierError(f"the model has {num_layers} layers but got {len(blocks)} blocks")


def group_by_type(
    node_ids: Tensor, node_types: Tensor, offsets: Tensor, backend: Backend = "auto"
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """A sample's nodes grouped by type: `order` (their positions, type after type, ascending within a
    type), `inverse` (`order[inverse[i]] == i`), the type-local ids in that order and the nodes of each
    type. `offsets` [T + 1]: type t owns ids [offsets[t], offsets[t + 1]) (`HeteroSchema.offsets`); a
    node outside its type's range is refused. One native pass on the CPU where the ops are built
    (`native/cpu/group_by_type.cpp`), these torch ops elsewhere."""
    node_ids, node_types = node_ids.to(torch.int64), node_types.to(torch.int64)
    if node_ids.device.type == "cpu" and resolve_backend(backend, "group by type") == "native":
        return torch.ops.graphtier.group_by_type(node_ids.contiguous(), node_types.contiguous(), offsets.contiguous())
    types = offsets.numel() - 1
    if node_types.numel() and (int(node_types.min()) < 0 or int(node_types.max()) >= types):
        raise GraphtierError(f"node types must be in [0, {types}), got {node_types.unique().tolist()}")
    if bool(((node_ids < offsets[node_types]) | (node_ids >= offsets[node_types + 1])).any()):
        raise GraphtierError("group_by_type: a node id is not in the id range of its type")
    order = torch.argsort(node_types, stable=True)
    inverse = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=order.device))
    local = node_ids[order] - offsets[node_types[order]]
    return order, inverse, local, torch.bincount(node_types, minlength=types)


class _InNodeOrder(torch.autograd.Function):
    """Rows grouped by type back in node order, `out[i] = grouped[inverse[i]]`; a permutation, so the
    backward gathers the gradient by `order` (no scatter)."""

    @staticmethod
    def forward(ctx, grouped: Tensor, inverse: Tensor, order: Tensor) -> Tensor:
        ctx.save_for_backward(order)
        return grouped.index_select(0, inverse)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (order,) = ctx.saved_tensors
        return grad.index_select(0, order), None, None


class HeteroInput(nn.Module):
    """Input rows of every node type in one width: Linear(features), or for a featureless type a learned
    per-node embedding (dropout on its rows), plus its neighbours' mean features through a linear map
    when `featureless.init` is neighbour-mean (`models/featureless.py`).

    With `normalise`, each linear map of features is followed by a per-type LayerNorm and a ReLU, so
    that featured types enter at unit scale whatever their features' scale (row-normalised
    bag-of-words rows are ~1/30 per column): attention over tiny rows is uniform and its gradients
    vanish. With `normalise_embeddings` too, a learned embedding that is a type's whole input gets a
    per-type LayerNorm, then its dropout, without a ReLU (the rows start at zero, where a ReLU would
    stop their gradients; a lazy Adam moves them by ~lr a step, far below the layers' biases, until
    the LayerNorm rescales them). HGT takes it: on Freebase, every type featureless, it stayed under
    label propagation without it. R-GAT does not: with it, it overfits Freebase within a few epochs.
    A residual embedding beside neighbour means is never normalised: the means bring the scale."""

    offsets: Tensor  # a buffer: the first global id of each node type

    def __init__(
        self,
        schema: HeteroSchema,
        hidden: int,
        featureless: FeaturelessOptions | None = None,
        *,
        normalise: bool = False,
        normalise_embeddings: bool = False,
    ) -> None:
        super().__init__()
        featureless = featureless or FeaturelessOptions()
        self.schema = schema
        self.hidden = hidden
        self.project = nn.ModuleDict()
        self.embed = nn.ModuleDict()
        self.neighbour = nn.ModuleDict()
        if featureless.init == "neighbour-mean":
            check_neighbour_means(schema)
        for info in schema.node_types:
            if info.featureless:
                self.embed[info.name] = SparseEmbedding(info.count, hidden)
                if starts_from_neighbour_means(featureless.init, info):
                    self.neighbour[info.name] = NeighbourMeanInput(info, hidden)
            else:
                self.project[info.name] = SparseInputLinear(info.feature_dim, hidden)
        self.embedding_dropout = Dropout(featureless.dropout)
        self.norm = nn.ModuleDict()  # per type with a linear map of features, when normalising
        self.embed_norm = nn.ModuleDict()  # per type whose whole input is a learned embedding, when asked
        if normalise:
            for name in (*self.project.keys(), *self.neighbour.keys()):
                self.norm[name] = nn.LayerNorm(hidden)
        if normalise_embeddings:
            for name in self.embed:  # in the schema's order: every rank's parameters in one order
                if name not in self.neighbour:  # with means, those rows bring the scale
                    self.embed_norm[name] = nn.LayerNorm(hidden)
        self.register_buffer("offsets", torch.tensor(schema.offsets(), dtype=torch.int64), persistent=False)

    def load_neighbour_means(self, arrays: Mapping[str, Tensor]) -> None:
        """The prepared neighbour means of every type that has them (array name -> rows)."""
        for module in self.neighbour.values():
            assert isinstance(module, NeighbourMeanInput)
            module.load_means(arrays)

    def neighbour_mean_arrays(self) -> list[str]:
        """The prepared arrays `load_neighbour_means` needs."""
        return [name for module in self.neighbour.values() for name in getattr(module, "arrays", [])]

    def forward(self, node_ids: Tensor, node_types: Tensor, features: dict[str, Tensor]) -> Tensor:
        """[len(node_ids), hidden]. `features[t]` holds the rows of type t's nodes, in their order in node_ids.
        Each type's rows are computed from its nodes (grouped once, `group_by_type`) and put back in node
        order by one permutation."""
        order, inverse, local, counts = group_by_type(node_ids, node_types, self.offsets)
        rows_by_type, start = [], 0
        for info, count in zip(self.schema.node_types, counts.tolist(), strict=True):
            if count == 0:
                continue
            if info.featureless:
                ids = local[start : start + count]
                rows = self.embed[info.name](ids)
                if info.name in self.embed_norm:
                    rows = self.embed_norm[info.name](rows)
                rows = self.embedding_dropout(rows)
                if info.name in self.neighbour:
                    rows = rows + self._normalised(info.name, self.neighbour[info.name](ids))
            else:
                rows = features.get(info.name)
                if rows is None or rows.shape != (count, info.feature_dim):
                    got = None if rows is None else tuple(rows.shape)
                    raise GraphtierError(
                        f"features of node type {info.name!r} must be [{count}, {info.feature_dim}], got {got}"
                    )
                rows = self._normalised(info.name, self.project[info.name](rows))
            rows_by_type.append(rows.to(torch.float32))
            start += count
        if not rows_by_type:
            return torch.zeros((node_ids.numel(), self.hidden), dtype=torch.float32, device=node_ids.device)
        grouped = torch.cat(rows_by_type) if len(rows_by_type) > 1 else rows_by_type[0]
        return _InNodeOrder.apply(grouped, inverse, order)

    def _normalised(self, name: str, rows: Tensor) -> Tensor:
        """A type's linear input rows, normalised when the model asked for it (class docstring)."""
        return F.relu(self.norm[name](rows)) if name in self.norm else rows


class RGCN(nn.Module):
    """`num_layers` R-GCN layers over a heterogeneous sample, ReLU and dropout between them."""

    def __init__(
        self,
        schema: HeteroSchema,
        hidden: int,
        out_dim: int,
        num_layers: int,
        *,
        dropout: float = 0.5,
        featureless: FeaturelessOptions | None = None,
    ) -> None:
        super().__init__()
        if num_layers < 1:
            raise GraphtierError(f"an R-GCN needs at least one layer, got {num_layers}")
        self.input = HeteroInput(schema, hidden, featureless)
        num_relations = len(schema.relations)
        widths = [hidden] * num_layers + [out_dim]
        self.convs = nn.ModuleList(RGCNConv(i, o, num_relations) for i, o in zip(widths[:-1], widths[1:], strict=True))
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
        """Logits [num_seeds, out_dim]. `blocks`/`edge_types`: per layer, input layer first
        (`SampledSubgraph.blocks()` and the matching prefixes of its `edge_types`);
        `node_ids`/`node_types`: the first block's sources."""
        check_layer_count(self.num_layers, blocks, edge_types)
        h = self.input(node_ids, node_types, features)  # no ReLU here: zero embeddings must get gradients
        for layer, (conv, block, types) in enumerate(zip(self.convs, blocks, edge_types, strict=True)):
            h = conv(block, types, self.dropout(h))
            if layer < self.num_layers - 1:
                h = F.relu(h)
        return h
