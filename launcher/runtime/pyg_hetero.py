"""PyG's `HeteroData` over a prepared heterogeneous dataset: heterogeneous stores, graphtier's heterogeneous sampler for
PyG's loaders, and a heterogeneous `SampledSubgraph` as a `HeteroData`.

    from torch_geometric.loader import NeighborLoader
    from graphtier.pyg import GraphtierSampler, hetero_stores, hetero_input_nodes

    acm = PreparedDataset.open("acm")
    fanouts = {("author", "rev_written_by", "paper"): [10, 0], ("subject", "rev_has_subject", "paper"): [5, 0],
               ("paper", "written_by", "author"): [0, 5]}        # hop 2 expands the authors hop 1 found
    loader = NeighborLoader(hetero_stores(acm), num_neighbors=fanouts, input_nodes=hetero_input_nodes(acm, "train"),
                            neighbor_sampler=GraphtierSampler(acm, fanouts), batch_size=32)
    for batch in loader:                                   # a torch_geometric.data.HeteroData
        out = model(batch.x_dict, batch.edge_index_dict)["paper"][: batch["paper"].batch_size]

Ids are PyG's: each node type numbers its own nodes `0..count-1`, in graphtier's prepared
order (each type's rows sorted by hotness); type t's node i is graphtier's global id
`offset_t + i`, and `source_ids(dataset, t, ids)` maps them back to the source's ids. The
feature store holds `x` of every featured type (read through the tiered gather, traffic
counted per type) and `y` of the target type; featureless types have no tensors (a model
embeds them by `batch[t].n_id`). The graph store holds one CSC per relation `(head, rel,
tail)`, rows head-local, columns tail-local, cut once from the dataset's heterogeneous CSC.

Sampling is graphtier's heterogeneous sampler (`HeteroNeighborSampler`, native when built): at every hop
each relation into a frontier node draws up to its fanout of that node's neighbours, as PyG's
hetero `NeighborLoader` does; a relation `num_neighbors` leaves out is not expanded. Seeds
come first in their type's `n_id`, then each hop's new nodes; `num_sampled_nodes` and
`num_sampled_edges` are per type (per relation) and hop.

Importing this module needs torch_geometric.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import EdgeAttr, FeatureStore, GraphStore, HeteroData, TensorAttr
from torch_geometric.data.graph_store import EdgeLayout
from torch_geometric.sampler import HeteroSamplerOutput, NodeSamplerInput

from graphtier.contract.errors import GraphtierError
from graphtier.contract.hetero import HeteroSchema, RelationInfo
from graphtier.service.gather import FeatureTiers, TrafficCounts, tiered_gather
from graphtier.service.prepared import PreparedDataset
from graphtier.service.sampling.hetero_sampler import HeteroNeighborSampler
from graphtier.service.sampling.subgraph import SampledSubgraph

FEATURES, LABELS = "x", "y"
EdgeType = tuple[str, str, str]
NumNeighbors = Sequence[int] | Mapping[EdgeType, Sequence[int]]  # PyG: one list for every relation, or per edge type


def hetero_schema(dataset: PreparedDataset) -> HeteroSchema:
    """The dataset's heterogeneous schema; GraphtierError when it is not a heterogeneous dataset."""
    if not isinstance(dataset, PreparedDataset):
        raise GraphtierError(f"expected a heterogeneous PreparedDataset, got {type(dataset).__name__}")
    schema = dataset.manifest.hetero
    if schema is None:
        raise GraphtierError(f"dataset {dataset.name!r} is not a heterogeneous graph; use graphtier.pyg.stores for it")
    return schema


def edge_type_of(relation: RelationInfo) -> EdgeType:
    """PyG's edge type of a relation: `(head, name, tail)`."""
    return (relation.head, relation.name, relation.tail)


def hetero_input_nodes(dataset: PreparedDataset, split: str) -> tuple[str, Tensor]:
    """A split's seeds as PyG's `input_nodes` takes them on a heterogeneous dataset.

    Args:
        dataset: A heterogeneous `PreparedDataset`.
        split: `train`, `val` or `test`.

    Returns:
        `(target type, the split's ids local to that type)`.

    Raises:
        GraphtierError: The dataset is not heterogeneous.
    """
    schema = hetero_schema(dataset)
    return schema.target_type, dataset.split(split) - schema.type_named(schema.target_type).offset


def source_ids(dataset: PreparedDataset, node_type: str, ids: Tensor) -> Tensor:
    """The source's ids of one type's nodes, for predictions compared with the source's files.

    Args:
        dataset: A heterogeneous `PreparedDataset`.
        node_type: The nodes' type.
        ids: Their ids local to that type, in the prepared order (as a `HeteroData` batch's `n_id`).

    Returns:
        Their ids local to that type in the source.

    Raises:
        GraphtierError: The dataset is not heterogeneous or has no such node type.
    """
    info = hetero_schema(dataset).type_named(node_type)
    return dataset.new_to_old.index_select(0, ids.to(torch.int64) + info.offset) - info.offset


def _local_ids(index: Any, count: int, node_type: str) -> Tensor:
    """The type-local ids an index selects: None for all, else a 1-D integer tensor, a slice or an int."""
    if index is None:
        return torch.arange(count)
    if isinstance(index, slice):
        return torch.arange(count)[index]
    if isinstance(index, int) and not isinstance(index, bool):
        index = torch.tensor([index])
    if not isinstance(index, Tensor) or index.dim() != 1 or index.dtype.is_floating_point or index.dtype == torch.bool:
        raise GraphtierError(f"index of node type {node_type!r} must be a 1-D integer tensor, slice or int")
    ids = index.to(torch.int64)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= count):
        raise GraphtierError(
            f"index of node type {node_type!r} holds ids outside [0, {count}): "
            f"min {int(ids.min())}, max {int(ids.max())}"
        )
    return ids


class GraphtierHeteroFeatureStore(FeatureStore):
    """PyG's `FeatureStore` over a heterogeneous dataset, read-only: `x` of each featured node type (read
    through the tiered gather) and `y` of the target type, in type-local ids. Featureless types
    have no tensors: a model embeds them by `batch[type].n_id`.

    Args:
        dataset: A heterogeneous `PreparedDataset`.

    Raises:
        GraphtierError: The dataset is not heterogeneous.

    Attributes:
        schema: The dataset's node types, relations and target type.
        traffic: Per node type, rows and bytes its feature reads took from each tier.
    """

    def __init__(self, dataset: PreparedDataset) -> None:
        super().__init__()
        self.schema = hetero_schema(dataset)
        self._tiers: dict[str, FeatureTiers] = {}
        for info in self.schema.node_types:
            if info.feature_array is not None:
                rows = dataset.array(info.feature_array)
                self._tiers[info.name] = FeatureTiers.from_table(
                    rows, replicated_end=0, interleaved_end=0, host_end=info.count
                )
        target = self.schema.type_named(self.schema.target_type)
        labels = dataset.labels
        self._labels = None if labels is None else labels[target.offset : target.offset + target.count]
        self.traffic = {name: TrafficCounts(simulated=tiers.simulated) for name, tiers in self._tiers.items()}

    def _check_attr(self, attr: TensorAttr) -> None:
        have = [(a.group_name, a.attr_name) for a in self.get_all_tensor_attrs()]
        if (attr.group_name, attr.attr_name) not in have:
            raise KeyError(f"no tensor {attr.attr_name!r} of node type {attr.group_name!r}; this store holds {have}")

    def _get_tensor(self, attr: TensorAttr) -> Tensor:
        self._check_attr(attr)
        count = self.schema.type_named(attr.group_name).count
        ids = _local_ids(attr.index, count, attr.group_name)
        if attr.attr_name == LABELS:
            assert self._labels is not None  # _check_attr refuses labels where there are none
            return self._labels.index_select(0, ids)
        tiers = self._tiers[attr.group_name]
        out = torch.empty((ids.numel(), *tiers.row_shape), dtype=tiers.dtype)
        self.traffic[attr.group_name] = self.traffic[attr.group_name] + tiered_gather(ids, tiers, out)
        return out

    def _get_tensor_size(self, attr: TensorAttr) -> tuple[int, ...]:
        self._check_attr(attr)
        info = self.schema.type_named(attr.group_name)
        rows = _local_ids(attr.index, info.count, info.name).numel() if attr.index is not None else info.count
        return (rows, info.feature_dim) if attr.attr_name == FEATURES else (rows,)

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        """The store's tensors: `x` of each featured type, `y` of the target type when labelled."""
        attrs = [TensorAttr(group_name=name, attr_name=FEATURES) for name in self._tiers]
        if self._labels is not None:
            attrs.append(TensorAttr(group_name=self.schema.target_type, attr_name=LABELS))
        return attrs

    def _put_tensor(self, tensor: Any, attr: TensorAttr) -> bool:
        raise GraphtierError("graphtier's feature store is read-only; prepare a dataset to change its features")

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        raise GraphtierError("graphtier's feature store is read-only; prepare a dataset to change its features")


class GraphtierHeteroGraphStore(GraphStore):
    """PyG's `GraphStore` over a heterogeneous dataset, read-only: one CSC per relation `(head, rel, tail)`,
    rows local to the head type and columns to the tail type, cut from the dataset's heterogeneous CSC on
    first use.

    Args:
        dataset: A heterogeneous `PreparedDataset`; kept, so that `GraphtierSampler` samples the heterogeneous CSC
            it came from.

    Raises:
        GraphtierError: The dataset is not heterogeneous.
    """

    def __init__(self, dataset: PreparedDataset) -> None:
        super().__init__()
        self.schema = hetero_schema(dataset)
        self.dataset = dataset
        self._csc: dict[EdgeType, tuple[Tensor, Tensor]] = {}

    def _relation_csc(self, relation_id: int) -> tuple[Tensor, Tensor]:
        """(row head-local, colptr over tail-local ids) of one relation, in the heterogeneous CSC's entry order."""
        relation = self.schema.relations[relation_id]
        key = edge_type_of(relation)
        if key not in self._csc:
            graph = self.dataset.graph
            keep = self.dataset.array("edge_type") == relation_id
            head = self.schema.type_named(relation.head)
            tail = self.schema.type_named(relation.tail)
            columns = graph.dst_of_edges()[keep] - tail.offset
            colptr = torch.zeros(tail.count + 1, dtype=torch.int64)
            torch.cumsum(torch.bincount(columns, minlength=tail.count), 0, out=colptr[1:])
            self._csc[key] = (graph.row[keep] - head.offset, colptr)
        return self._csc[key]

    def _get_edge_index(self, edge_attr: EdgeAttr) -> tuple[Tensor, Tensor] | None:
        keys = [edge_type_of(r) for r in self.schema.relations]
        if edge_attr.edge_type not in keys:
            return None
        row, colptr = self._relation_csc(keys.index(edge_attr.edge_type))
        if edge_attr.layout == EdgeLayout.CSC:
            return row, colptr
        if edge_attr.layout == EdgeLayout.COO:
            col = torch.repeat_interleave(torch.arange(colptr.numel() - 1), colptr.diff(), output_size=row.numel())
            return row, col
        return None

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        """The store's edge types, one per relation, in CSC layout."""
        attrs = []
        for relation in self.schema.relations:
            size = (self.schema.type_named(relation.head).count, self.schema.type_named(relation.tail).count)
            attrs.append(EdgeAttr(edge_type=edge_type_of(relation), layout=EdgeLayout.CSC, is_sorted=True, size=size))
        return attrs

    def _put_edge_index(self, edge_index: Any, edge_attr: EdgeAttr) -> bool:
        raise GraphtierError("graphtier's graph store is read-only; prepare a dataset to change its edges")

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        raise GraphtierError("graphtier's graph store is read-only; prepare a dataset to change its edges")


def hetero_stores(dataset: PreparedDataset) -> tuple[GraphtierHeteroFeatureStore, GraphtierHeteroGraphStore]:
    """The stores of a heterogeneous dataset, as PyG's loaders take them for `data` (batches of `HeteroData`).

    Args:
        dataset: A heterogeneous `PreparedDataset`.

    Returns:
        `(GraphtierHeteroFeatureStore(dataset), GraphtierHeteroGraphStore(dataset))`.

    Raises:
        GraphtierError: The dataset is not heterogeneous.
    """
    return GraphtierHeteroFeatureStore(dataset), GraphtierHeteroGraphStore(dataset)


def hetero_dataset_of(data: Any) -> PreparedDataset | None:
    """The heterogeneous dataset behind `data` (a PreparedDataset or a `hetero_stores` pair), else None."""
    if isinstance(data, PreparedDataset) and data.manifest.hetero is not None:
        return data
    if isinstance(data, tuple) and len(data) == 2 and isinstance(data[1], GraphtierHeteroGraphStore):
        return data[1].dataset
    return None


def relation_fanouts(schema: HeteroSchema, num_neighbors: NumNeighbors) -> list[str]:
    """PyG's `num_neighbors` (a list for every relation, or per edge type a list per hop) as the heterogeneous
    sampler's hops (`head-rel-tail:k,...`); relations a dict leaves out are not expanded."""
    if not isinstance(num_neighbors, Mapping):
        return [str(int(k)) for k in num_neighbors]
    keys: dict[tuple[str, ...], str] = {edge_type_of(r): r.key for r in schema.relations}
    unknown = [key for key in num_neighbors if tuple(key) not in keys]
    if unknown:
        raise GraphtierError(f"num_neighbors names edge types {unknown} the dataset does not have; it has {list(keys)}")
    hops = {len(list(v)) for v in num_neighbors.values()}
    if len(hops) != 1 or 0 in hops:
        raise GraphtierError(f"num_neighbors must give every edge type the same number (>= 1) of hops, got {hops}")
    return [
        ",".join(f"{keys[tuple(key)]}:{int(list(ks)[hop])}" for key, ks in num_neighbors.items())
        for hop in range(hops.pop())
    ]


def _node_types(sub: SampledSubgraph) -> Tensor:
    """The type index of every node of a heterogeneous sample; GraphtierError for a sample of any other."""
    if sub.node_types is None:
        raise GraphtierError("the sample is of a graph with one node type: it has no node types to split it by")
    return sub.node_types


def hetero_parts(sub: SampledSubgraph, schema: HeteroSchema) -> dict[str, Any]:
    """A heterogeneous sample in PyG's hetero terms: `node` (type-local ids per type, in the sample's order,
    so seeds first), `row`/`col` (per edge type, indices into its head's and tail's `node`),
    `num_sampled_nodes` (per type and hop) and `num_sampled_edges` (per edge type and hop)."""
    node_types = _node_types(sub)
    position = torch.empty_like(sub.node_ids)
    node: dict[str, Tensor] = {}
    hop_of_node = torch.repeat_interleave(
        torch.arange(len(sub.num_nodes_per_hop)), torch.tensor(sub.num_nodes_per_hop), output_size=sub.num_nodes
    )
    num_sampled_nodes: dict[str, list[int]] = {}
    for index, info in enumerate(schema.node_types):
        where = (node_types == index).nonzero().squeeze(1)
        position[where] = torch.arange(where.numel())
        node[info.name] = sub.node_ids[where] - info.offset
        num_sampled_nodes[info.name] = torch.bincount(hop_of_node[where], minlength=len(sub.num_nodes_per_hop)).tolist()
    src, dst = sub.edge_index()
    hop_of_edge = torch.repeat_interleave(
        torch.arange(len(sub.num_edges_per_hop)), torch.tensor(sub.num_edges_per_hop), output_size=src.numel()
    )
    row, col, num_sampled_edges = {}, {}, {}
    for relation_id, relation in enumerate(schema.relations):
        keep = sub.edge_types == relation_id
        key = edge_type_of(relation)
        row[key], col[key] = position[src[keep]], position[dst[keep]]
        num_sampled_edges[key] = torch.bincount(hop_of_edge[keep], minlength=len(sub.num_edges_per_hop)).tolist()
    return {
        "node": node,
        "row": row,
        "col": col,
        "num_sampled_nodes": num_sampled_nodes,
        "num_sampled_edges": num_sampled_edges,
    }


class HeteroPyGSampling:
    """The heterogeneous half of `GraphtierSampler`: PyG node inputs of one type -> `HeteroSamplerOutput`."""

    def __init__(self, dataset: PreparedDataset, num_neighbors: NumNeighbors) -> None:
        self.schema = hetero_schema(dataset)
        self.sampler = HeteroNeighborSampler(
            dataset.graph, dataset.array("edge_type"), self.schema, relation_fanouts(self.schema, num_neighbors)
        )

    def sample(self, index: NodeSamplerInput, seed: int) -> HeteroSamplerOutput:
        names = [t.name for t in self.schema.node_types]
        if index.input_type not in names:
            raise GraphtierError(
                f"a heterogeneous graph's input nodes are (node type, ids), one of {names}; "
                f"got type {index.input_type!r}"
            )
        info = self.schema.type_named(index.input_type)
        local = index.node.to(torch.int64)
        if local.numel() and (int(local.min()) < 0 or int(local.max()) >= info.count):
            raise GraphtierError(f"input nodes of type {info.name!r} must lie in [0, {info.count})")
        values, counts = local.unique(return_counts=True)
        if bool((counts > 1).any()):
            twice = int(values[counts > 1][0])
            raise GraphtierError(
                f"input node {twice} of type {info.name!r} appears more than once in a batch; seeds must be unique"
            )
        sub = self.sampler.sample(local + info.offset, seed=seed)
        parts = hetero_parts(sub, self.schema)
        return HeteroSamplerOutput(edge=None, metadata=(index.input_id, index.time), **parts)


def to_hetero_data(
    sub: SampledSubgraph,
    schema: HeteroSchema,
    features: Mapping[str, Tensor] | None = None,
    labels: Tensor | None = None,
) -> HeteroData:
    """A heterogeneous sample as the `HeteroData` PyG's hetero `NeighborLoader` yields, for a PyG model
    trained on graphtier's heterogeneous batches.

    Args:
        sub: A heterogeneous sample, such as a heterogeneous `Batch`'s `subgraph`.
        schema: The dataset's node types and relations (`job.dataset.hetero`).
        features: Node type -> its rows in the sample's order, as a heterogeneous `Batch.x` holds them.
        labels: The seeds' labels, one per seed (`batch.y`).

    Returns:
        Per node type `n_id` (type-local ids, seeds first), `x` where `features` gives it and the
            per-hop counts; per relation `edge_index`; the seeds' type's `batch_size` and `y`.

    Raises:
        GraphtierError: `features` of a type the graph lacks or with the wrong number of rows,
            or `labels` that are not one per seed of one type.
    """
    parts = hetero_parts(sub, schema)
    unknown = sorted(set(features or {}) - set(parts["node"]))
    if unknown:
        have = list(parts["node"])
        raise GraphtierError(f"features name node types {unknown} the graph does not have; it has {have}")
    seed_types = _node_types(sub)[: sub.num_seeds].unique()
    if labels is not None and (seed_types.numel() != 1 or labels.shape[0] != sub.num_seeds):
        raise GraphtierError(
            f"labels must hold one label per seed of one node type: got {labels.shape[0]} labels for "
            f"{sub.num_seeds} seeds of {seed_types.numel()} type(s)"
        )
    data = HeteroData()
    for name, ids in parts["node"].items():
        data[name].n_id = ids
        data[name].num_nodes = ids.numel()
        data[name].num_sampled_nodes = parts["num_sampled_nodes"][name]
        rows = (features or {}).get(name)
        if rows is not None:
            if rows.shape[0] != ids.numel():
                raise GraphtierError(
                    f"features of node type {name!r} have {rows.shape[0]} rows for {ids.numel()} nodes"
                )
            data[name].x = rows
    for key in parts["row"]:
        data[key].edge_index = torch.stack([parts["row"][key], parts["col"][key]])
        data[key].num_sampled_edges = parts["num_sampled_edges"][key]
    if seed_types.numel() == 1:
        seed_type = schema.node_types[int(seed_types)].name
        data[seed_type].batch_size = sub.num_seeds
        if labels is not None:
            data[seed_type].y = labels
    return data
