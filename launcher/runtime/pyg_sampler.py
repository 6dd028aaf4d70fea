"""PyG's loaders on graphtier's sampler: `GraphtierSampler` (a PyG `BaseSampler`) and a
`NeighborLoader`-style `GraphtierNeighborLoader`, with no pyg-lib or torch-sparse needed.
Both are public as `graphtier.pyg`.

    from graphtier.pyg import GraphtierNeighborLoader
    loader = GraphtierNeighborLoader(data, num_neighbors=[25, 10], input_nodes=data.train_mask,
                                     batch_size=64, shuffle=True)
    for batch in loader:                               # a torch_geometric.data.Data, as from NeighborLoader
        out = model(batch.x, batch.edge_index)[: batch.batch_size]

PyG's own `NeighborLoader` and `NodeLoader` take the sampler as theirs, so code written for them
runs unchanged but for one argument (PyG's default sampler needs pyg-lib or torch-sparse):

    NeighborLoader(data, num_neighbors=[25, 10], neighbor_sampler=GraphtierSampler(data, [25, 10]), ...)
    NodeLoader(data, node_sampler=GraphtierSampler(data, [25, 10]), ...)

`data` is a PyG `Data` (its `edge_index` is turned into CSC once), a graphtier dataset
(`PreparedDataset`, or `AttachedDataset` inside a job: features through the tiered gather,
counted), or a `(FeatureStore, GraphStore)` pair such as `graphtier.pyg.stores(dataset)`. Sampling is
graphtier's k-hop uniform sampling without replacement (the native op when built), with
NeighborLoader's hop semantics: seeds first in `n_id`, then each hop's new nodes;
`num_sampled_nodes`/`num_sampled_edges` per hop. A heterogeneous dataset gives `HeteroData` batches
(`pyg_hetero`: its stores, per-edge-type `num_neighbors`, graphtier's heterogeneous sampler). Sample
seeds come from torch's global RNG, so `torch.manual_seed` (and DataLoader workers' seeding)
makes runs repeatable.

Importing this module needs torch_geometric.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import BaseSampler, HeteroSamplerOutput, NodeSamplerInput, SamplerOutput

from graphtier.contract.errors import GraphtierError
from graphtier.launcher.runtime.pyg_hetero import HeteroPyGSampling, hetero_dataset_of, hetero_stores
from graphtier.service.graph.csc import CSCGraph
from graphtier.service.prepared import PreparedDataset
from graphtier.service.sampling import NeighborSampler
from graphtier.service.store import AttachedDataset

_SEED_BOUND = 1 << 62


def csc_from_edge_index(edge_index: Tensor, num_nodes: int) -> CSCGraph:
    """The CSC (in-edges by destination) of a PyG `edge_index` [2, E] (row 0 source, row 1 destination)."""
    if edge_index.dim() != 2 or edge_index.shape[0] != 2 or edge_index.dtype.is_floating_point:
        raise GraphtierError(
            f"edge_index must be an integer tensor [2, E], got {edge_index.dtype} {tuple(edge_index.shape)}"
        )
    src, dst = edge_index.to(torch.int64).cpu()
    if src.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise GraphtierError(f"edge_index holds ids outside [0, num_nodes={num_nodes})")
    order = torch.argsort(dst, stable=True)
    colptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
    colptr[1:] = torch.cumsum(torch.bincount(dst, minlength=num_nodes), 0)
    return CSCGraph(colptr=colptr, row=src[order].contiguous())


def _destinations(indptr: Tensor, num_edges: int) -> Tensor:
    """Each sampled edge's destination (local id) from the sample's CSC `indptr`.

    numpy's one-threaded repeat rather than torch's `repeat_interleave`: this runs once per batch in
    the user's training process, where torch's intra-op pool spin-waits against every other busy
    process on the cores and turns a sub-millisecond op into tens of milliseconds."""
    counts = np.diff(indptr.numpy())
    col = torch.from_numpy(np.repeat(np.arange(counts.size, dtype=np.int64), counts))
    if col.numel() != num_edges:
        raise GraphtierError(f"sample's indptr covers {col.numel()} edges, its indices {num_edges}")
    return col


def graph_of(data: Any) -> CSCGraph:
    """The CSC graph of a PyG `Data`, a graphtier dataset, or a `(FeatureStore, GraphStore)` pair."""
    if isinstance(data, CSCGraph):
        return data
    if isinstance(data, (PreparedDataset, AttachedDataset)):
        return data.graph
    if isinstance(data, Data):
        if data.edge_index is None:
            raise GraphtierError("the PyG Data has no edge_index to sample from")
        return csc_from_edge_index(data.edge_index, data.num_nodes)
    if isinstance(data, tuple) and len(data) == 2:
        attrs = data[1].get_all_edge_attrs()
        if len(attrs) != 1 or attrs[0].edge_type is not None:
            raise GraphtierError(
                f"graphtier samples homogeneous graphs: one edge type, got {[a.edge_type for a in attrs]}"
            )
        row, colptr, _ = data[1].csc()  # homogeneous: (row, colptr, edge permutation) of the one edge type
        return CSCGraph(colptr=colptr.to(torch.int64).contiguous(), row=row.to(torch.int64).contiguous())
    raise GraphtierError(
        f"cannot sample from a {type(data).__name__}; give a PyG Data, a graphtier dataset, "
        "or a (FeatureStore, GraphStore) pair"
    )


class GraphtierSampler(BaseSampler):
    """PyG's `BaseSampler` over graphtier's samplers, for `NeighborLoader(neighbor_sampler=...)`
    and `NodeLoader(node_sampler=...)`: it samples from seed nodes only.

    A graph of one type is sampled into a `SamplerOutput`; a heterogeneous dataset into a
    `HeteroSamplerOutput`, as PyG's hetero `NeighborLoader` does. Sample seeds come from torch's
    global RNG, so `torch.manual_seed` makes runs repeatable.

    Args:
        data: What to sample: a PyG `Data` (its `edge_index` turned into a CSC once), a
            `PreparedDataset`, a `(FeatureStore, GraphStore)` pair such as `stores(dataset)`, or a
            heterogeneous `PreparedDataset` or its `hetero_stores` pair.
        num_neighbors: Neighbours per hop (-1 = all); on a heterogeneous dataset one list for every
            relation, or per edge type `{(head, rel, tail): [k1, k2]}` (an edge type left out is
            not expanded).

    Raises:
        GraphtierError: A `data` it cannot sample, or edge types the dataset does not have.
    """

    def __init__(self, data: Any, num_neighbors: list[int] | dict[tuple[str, str, str], list[int]]) -> None:
        hetero = hetero_dataset_of(data)
        self._hetero: HeteroPyGSampling | None = None
        self.num_neighbors: list[int] | dict[tuple[str, str, str], list[int]] = num_neighbors
        if hetero is not None:
            self._hetero = HeteroPyGSampling(hetero, num_neighbors)
            self.num_nodes = hetero.graph.num_nodes
            return
        graph = graph_of(data)
        if isinstance(num_neighbors, dict):
            raise GraphtierError(
                f"num_neighbors per edge type ({list(num_neighbors)}) needs a heterogeneous dataset; this one has "
                "one node type and edge type: give one list, the neighbours per hop"
            )
        self.num_neighbors = list(num_neighbors)
        self._sampler = NeighborSampler(graph, self.num_neighbors)
        self.num_nodes = graph.num_nodes

    def sample_from_nodes(self, index: NodeSamplerInput, **kwargs: Any) -> SamplerOutput | HeteroSamplerOutput:
        """Sample the k-hop neighbourhood of a batch of seed nodes (PyG's loaders call it).

        Args:
            index: The seeds (on a heterogeneous dataset, of one node type, `index.input_type`).
            **kwargs: Unused; PyG's interface.

        Returns:
            The sample with `NeighborLoader`'s hop semantics: seeds first in `node`, then each
                hop's new nodes; sampled nodes and edges counted per hop.

        Raises:
            GraphtierError: Temporal sampling, seeds that are not integer ids, or of an
                unknown type, out of range or repeated.
        """
        if index.time is not None:
            raise GraphtierError("graphtier's sampler is not temporal; sample without input_time/time_attr")
        if index.node.dtype.is_floating_point or index.node.dtype.is_complex or index.node.dtype == torch.bool:
            raise GraphtierError(f"input nodes must be integer ids (or a bool mask), got a {index.node.dtype} tensor")
        seed = int(torch.randint(_SEED_BOUND, ()))
        if self._hetero is not None:
            return self._hetero.sample(index, seed)
        if index.input_type is not None:
            raise GraphtierError(f"this graph is homogeneous; got input type {index.input_type!r}")
        sample = self._sampler.sample(index.node.to(torch.int64), seed=seed)
        return SamplerOutput(
            node=sample.node_ids,
            row=sample.indices,  # sources; PyG's batch assembly stacks them with the destinations
            col=_destinations(sample.indptr, sample.indices.numel()),
            edge=None,
            num_sampled_nodes=list(sample.num_nodes_per_hop),
            num_sampled_edges=list(sample.num_edges_per_hop),
            metadata=(index.input_id, index.time),
        )

    def sample_from_edges(self, index: Any, neg_sampling: Any = None) -> SamplerOutput:
        """Not supported: graphtier's sampler starts from nodes (a link job samples in its producers).

        Raises:
            GraphtierError: Always.
        """
        raise GraphtierError("graphtier's sampler starts from nodes only; link prediction loaders are not supported")


class GraphtierNeighborLoader(NodeLoader):
    """PyG's `NeighborLoader` on graphtier's sampler, in one call: batches of `Data` (a heterogeneous
    dataset: `HeteroData`), as `NeighborLoader` yields them.

    Args:
        data: A PyG `Data`, a `PreparedDataset` (read through `stores`), a `(FeatureStore,
            GraphStore)` pair, or a heterogeneous `PreparedDataset` or its `hetero_stores` pair.
        num_neighbors: As `GraphtierSampler` takes it.
        input_nodes: The seeds: ids or a mask; on a heterogeneous dataset `(node type, ids)`, such as
            `hetero_input_nodes(dataset, "train")`. None: every node (required on a heterogeneous dataset).
        **kwargs: `NodeLoader`'s and `torch.utils.data.DataLoader`'s: `batch_size`, `shuffle`, ...

    Raises:
        GraphtierError: A heterogeneous dataset without `input_nodes`, or what `GraphtierSampler` refuses.
    """

    def __init__(self, data: Any, num_neighbors: Any, input_nodes: Any = None, **kwargs: Any) -> None:
        hetero = hetero_dataset_of(data)
        if hetero is not None:
            if input_nodes is None:
                raise GraphtierError(
                    f"a heterogeneous dataset's loader needs input_nodes=(node type, ids), e.g. "
                    f"hetero_input_nodes(dataset, 'train') for {hetero.name!r}"
                )
            sampler = GraphtierSampler(hetero, num_neighbors)
            data = data if isinstance(data, tuple) else hetero_stores(hetero)
        elif isinstance(data, (PreparedDataset, AttachedDataset)):
            from graphtier.launcher.runtime.pyg_stores import GraphtierFeatureStore, GraphtierGraphStore

            sampler = GraphtierSampler(data.graph, num_neighbors)
            data = (GraphtierFeatureStore(data), GraphtierGraphStore(data))
        else:
            sampler = GraphtierSampler(data, num_neighbors)
        super().__init__(data, sampler, input_nodes=input_nodes, **kwargs)
