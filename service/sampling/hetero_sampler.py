"""Heterogeneous neighbour sampling: per-relation fanouts over a heterogeneous graph, native or pure torch.

The heterogeneous graph is the prepared form (`graphtier.contract.hetero`): one CSC over global ids
whose columns group their entries by relation, `edge_type` naming each entry's relation. Hop
semantics are the homogeneous sampler's (PyG's NeighborLoader, disjoint=False); expanding a
node of type t draws, for each relation r into t, min(k_r, d) of its d relation-r neighbours
(Floyd's algorithm under the counter-based key of (local id) * R + r), so both backends give
the same sample for the same seed. The result is a `SampledSubgraph` with its heterogeneous
parts: one CSC over local ids (layer blocks as prefixes) plus the relation of every sampled
edge, from which `relation_block(layer, relation)` gives one block per relation per hop.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch

from graphtier.contract.errors import SamplingError
from graphtier.contract.hetero import HeteroSchema
from graphtier.service.graph.csc import CSCGraph
from graphtier.service.native_ops import Backend, resolve_backend
from graphtier.service.sampling.counter_rng import node_keys
from graphtier.service.sampling.subgraph import SampledSubgraph
from graphtier.service.sampling.torch_sampler import _relabel, floyd_offsets


def node_types_of(ids: torch.Tensor, type_offsets: torch.Tensor) -> torch.Tensor:
    """int64 type index of each global id: how many type starts after the first it reaches.

    A comparison against the few type boundaries: `torch.searchsorted` is threaded, and on a
    loaded machine waking its threads cost many times the sampling itself."""
    return (ids.unsqueeze(1) >= type_offsets[1:-1].unsqueeze(0)).sum(dim=1)


def relation_colptr(graph: CSCGraph, edge_type: torch.Tensor, num_relations: int) -> torch.Tensor:
    """int64 [N * R + 1]: entries of (v, r) are [p[v * R + r], p[v * R + r + 1]) (the torch twin's index)."""
    key = graph.dst_of_edges() * num_relations + edge_type.to(torch.int64)
    out = torch.zeros(graph.num_nodes * num_relations + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(key, minlength=graph.num_nodes * num_relations), 0, out=out[1:])
    return out


def sample_hetero_neighbors_torch(
    rel_colptr: torch.Tensor,
    row: torch.Tensor,
    type_offsets: torch.Tensor,
    relation_dst_type: torch.Tensor,
    seeds: torch.Tensor,
    fanouts: torch.Tensor,
    seed: int,
    node_map: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """Same contract and output as `torch.ops.graphtier.sample_typed_neighbors` (fanouts [L, R])."""
    num_relations = relation_dst_type.numel()
    batch = seeds.numel()
    node_map[seeds] = torch.arange(batch, dtype=node_map.dtype)
    chunks, indptr_parts, index_parts, type_parts = [seeds], [torch.zeros(1, dtype=torch.int64)], [], []
    nodes_per_hop, edges_per_hop = [batch], []
    frontier, first_local, next_local, edge_base = seeds, 0, batch, 0
    try:
        for k_of in fanouts:
            node_type = node_types_of(frontier, type_offsets)
            wanted = (relation_dst_type.unsqueeze(0) == node_type.unsqueeze(1)) & (k_of != 0).unsqueeze(0)
            pair_node, pair_rel = wanted.nonzero(as_tuple=True)  # (node, relation) ascending
            column = frontier[pair_node] * num_relations + pair_rel
            start = rel_colptr[column]
            degree = rel_colptr[column + 1] - start
            k = k_of[pair_rel]
            take_all = (k < 0) | (degree <= k)
            count = torch.where(take_all, degree, k)
            ends = torch.cumsum(count, 0)
            total = int(ends[-1]) if ends.numel() else 0
            begin = ends - count
            owner = torch.repeat_interleave(torch.arange(count.numel()), count, output_size=total)
            offsets = start[owner] + torch.arange(total) - begin[owner]
            big = (~take_all).nonzero().squeeze(1)
            for fanout in torch.unique(k[big]).tolist():
                group = big[k[big] == fanout]
                keys = node_keys(seed, (pair_node[group] + first_local) * num_relations + pair_rel[group])
                chosen = floyd_offsets(keys, degree[group], fanout)
                slots = (begin[group].unsqueeze(1) + torch.arange(fanout)).reshape(-1)
                offsets[slots] = (start[group].unsqueeze(1) + chosen).reshape(-1)
            per_node = torch.bincount(pair_node, weights=count.to(torch.float64), minlength=frontier.numel())
            local, new_nodes = _relabel(row[offsets], node_map, next_local)
            index_parts.append(local)
            type_parts.append(pair_rel[owner])
            indptr_parts.append(torch.cumsum(per_node.to(torch.int64), 0) + edge_base)
            chunks.append(new_nodes)
            nodes_per_hop.append(new_nodes.numel())
            edges_per_hop.append(total)
            edge_base += total
            frontier, first_local = new_nodes, next_local
            next_local += new_nodes.numel()
        node_ids = torch.cat(chunks)
    finally:
        for chunk in chunks:
            node_map[chunk] = -1
    empty = torch.empty(0, dtype=torch.int64)
    return (
        node_ids,
        torch.cat(indptr_parts),
        torch.cat(index_parts) if index_parts else empty,
        torch.cat(type_parts) if type_parts else empty,
        torch.tensor(nodes_per_hop, dtype=torch.int64),
        torch.tensor(edges_per_hop, dtype=torch.int64),
    )


class HeteroNeighborSampler:
    """Samples heterogeneous k-hop subgraphs with per-relation fanouts (see module docstring).

    `fanouts`: one entry per hop, each an int for every relation or `head-rel-tail:k,...`
    (relations it does not name are not expanded at that hop). Like `NeighborSampler` it
    holds an N-entry node map: one instance per thread.
    """

    def __init__(
        self,
        graph: CSCGraph,
        edge_type: torch.Tensor,
        schema: HeteroSchema,
        fanouts: Sequence[str | int],
        *,
        backend: Backend = "auto",
    ) -> None:
        if not fanouts:
            raise SamplingError("fanouts must name at least one hop")
        if edge_type.dtype != torch.int16 or edge_type.numel() != graph.num_edges:
            raise SamplingError(
                f"edge_type must be int16 [{graph.num_edges}], got {edge_type.dtype} {tuple(edge_type.shape)}"
            )
        if schema.num_nodes != graph.num_nodes:
            raise SamplingError(f"the schema has {schema.num_nodes} nodes, the graph {graph.num_nodes}")
        self.schema = schema
        self._graph = CSCGraph(colptr=graph.colptr.contiguous(), row=graph.row.contiguous())
        self._edge_type = edge_type.contiguous()
        self._fanouts = torch.tensor(schema.relation_fanouts(fanouts), dtype=torch.int64)
        self._type_offsets = torch.tensor(schema.offsets(), dtype=torch.int64)
        self._dst_type = torch.tensor(schema.relation_dst_types(), dtype=torch.int64)
        self._backend = resolve_backend(backend, "HeteroNeighborSampler")
        self._rel_colptr = (
            relation_colptr(self._graph, self._edge_type, len(schema.relations)) if self._backend == "torch" else None
        )
        map_dtype = torch.int32 if graph.num_nodes < 2**31 - 1 else torch.int64
        self._node_map = torch.full((graph.num_nodes,), -1, dtype=map_dtype)

    @property
    def backend(self) -> str:
        return self._backend

    @property
    def fanouts(self) -> list[list[int]]:
        """Per hop, the fanout of each relation (relation-id order)."""
        return self._fanouts.tolist()

    def sample(self, seeds: torch.Tensor, *, seed: int) -> SampledSubgraph:
        """Sample around `seeds` (unique global ids, any types) with randomness fixed by `seed`."""
        if not isinstance(seeds, torch.Tensor) or seeds.dim() != 1 or seeds.dtype.is_floating_point:
            raise SamplingError(f"seeds must be a 1-D integer tensor, got {seeds!r:.80}")
        seeds = seeds.to(dtype=torch.int64).contiguous()
        n = self._graph.num_nodes
        if seeds.numel():
            bad = (seeds < 0) | (seeds >= n)
            if bool(bad.any()):
                pos = int(bad.nonzero()[0])
                raise SamplingError(f"seed {int(seeds[pos])} at position {pos} is out of range [0, {n})")
            ordered = seeds.sort().values
            repeated = ordered[1:][ordered[1:] == ordered[:-1]]
            if repeated.numel():
                raise SamplingError(f"seed {int(repeated[0])} appears more than once; seeds must be unique")
        try:
            word = operator.index(seed) & ((1 << 64) - 1)
        except TypeError:
            raise SamplingError(f"seed must be an int, got {seed!r}") from None
        g = self._graph
        if self._backend == "native":
            signed = word - (1 << 64) if word >= 1 << 63 else word
            out = torch.ops.graphtier.sample_typed_neighbors(
                g.colptr,
                g.row,
                self._edge_type,
                self._type_offsets,
                self._dst_type,
                seeds,
                self._fanouts.reshape(-1).tolist(),
                signed,
                self._node_map,
            )
        else:
            assert self._rel_colptr is not None  # made for the torch backend
            out = sample_hetero_neighbors_torch(
                self._rel_colptr, g.row, self._type_offsets, self._dst_type, seeds, self._fanouts, word, self._node_map
            )
        node_ids, indptr, indices, edge_types, nodes_per_hop, edges_per_hop = out
        return SampledSubgraph(
            node_ids=node_ids,
            indptr=indptr,
            indices=indices,
            num_nodes_per_hop=nodes_per_hop.tolist(),
            num_edges_per_hop=edges_per_hop.tolist(),
            edge_types=edge_types,
            node_types=node_types_of(node_ids, self._type_offsets),
            num_relations=len(self.schema.relations),
        )
