"""The output of neighbour sampling: one CSC over local ids whose layer blocks are prefixes.

Local ids number the sampled nodes in discovery order (seeds first, then each hop's new
nodes). Destinations of the CSC are the expanded nodes in local-id order and hop i's edges
follow hop i-1's, so the block a GNN layer needs is a prefix of `indptr`/`indices`: taking
it is a zero-copy view.

One `SampledSubgraph` serves every kind of sample: a heterogeneous graph's also names the
relation of every edge and the type of every node (one id space, `edge_types`/`node_types`),
and a link-prediction sample carries the pairs to score over its seeds (`pairs`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

import torch


def _csc_edge_index(indptr: torch.Tensor, indices: torch.Tensor, num_dst: int) -> torch.Tensor:
    dst = torch.repeat_interleave(
        torch.arange(num_dst, dtype=torch.int64), indptr[1:] - indptr[:-1], output_size=indices.numel()
    )
    return torch.stack([indices, dst])


@dataclass(frozen=True)
class Block:
    """One layer's bipartite graph (DGL's message-flow-graph block) in CSC form.

    Destination nodes are local ids [0, num_dst), source nodes [0, num_src); the destination
    nodes are also the first sources, as layer-wise GNNs expect.

    Attributes:
        indptr: int64 [num_dst + 1]: destination d's edges are `indices[indptr[d]:indptr[d + 1]]`.
        indices: int64 [num_edges], the source local id of each edge.
        num_src: Source nodes of the layer.
        num_dst: Destination nodes of the layer: the first `num_dst` sources.
    """

    indptr: torch.Tensor
    indices: torch.Tensor
    num_src: int
    num_dst: int

    @property
    def num_edges(self) -> int:
        """Edges of the layer."""
        return self.indices.numel()

    def edge_index(self) -> torch.Tensor:
        """The layer's edges as PyG's `edge_index`: int64 [2, num_edges], row 0 source, row 1 destination."""
        return _csc_edge_index(self.indptr, self.indices, self.num_dst)


@dataclass(frozen=True)
class SampledSubgraph:
    """A k-hop sample: global ids of its nodes and its edges over local ids.

    `node_ids[l]` is the global id of local node l (seeds are 0..B-1). `indptr` has one entry
    per expanded node plus one; `num_nodes_per_hop` is [B, new at hop 1, ...] (length L + 1)
    and `num_edges_per_hop` the sampled edges of each hop (length L).

    Of a heterogeneous graph (`is_hetero`): `edge_types` holds the relation id of every edge and
    `node_types` the type index of every local node. Of a link-prediction batch: `pairs` holds
    the local ids of the pairs to score, its first `num_positive` rows the positive edges.
    """

    node_ids: torch.Tensor  # int64 [num_nodes]
    indptr: torch.Tensor  # int64 [num_expanded + 1]
    indices: torch.Tensor  # int64 [num_edges]
    num_nodes_per_hop: list[int]
    num_edges_per_hop: list[int]
    edge_types: torch.Tensor | None = None  # heterogeneous: int64 [num_edges], relation id of each edge
    node_types: torch.Tensor | None = None  # heterogeneous: int64 [num_nodes], type index of each node
    num_relations: int = 0  # heterogeneous: relations of the graph (relation-id order)
    pairs: torch.Tensor | None = None  # link prediction: int64 [P, 2] seeds' local ids, positives first
    num_positive: int = 0  # link prediction: rows of `pairs` that are edges (the rest are negatives)

    @property
    def is_hetero(self) -> bool:
        """Whether the sample is of a heterogeneous graph (relations and node types)."""
        return self.edge_types is not None

    @property
    def num_pairs(self) -> int:
        return 0 if self.pairs is None else int(self.pairs.shape[0])

    @property
    def num_seeds(self) -> int:
        return self.num_nodes_per_hop[0]

    @property
    def num_nodes(self) -> int:
        return self.node_ids.numel()

    @property
    def num_edges(self) -> int:
        return self.indices.numel()

    @property
    def num_layers(self) -> int:
        return len(self.num_edges_per_hop)

    def block(self, layer: int) -> Block:
        """The block of GNN layer `layer` (0 = input layer): the edges of hops 1..L-layer."""
        hops = self.num_layers - layer
        if not 0 <= layer < self.num_layers:
            raise IndexError(f"layer {layer} is out of range for a {self.num_layers}-layer sample")
        num_dst = sum(self.num_nodes_per_hop[:hops])
        num_src = num_dst + self.num_nodes_per_hop[hops]
        num_edges = sum(self.num_edges_per_hop[:hops])
        return Block(
            indptr=self.indptr[: num_dst + 1],
            indices=self.indices[:num_edges],
            num_src=num_src,
            num_dst=num_dst,
        )

    def blocks(self) -> list[Block]:
        """All layers' blocks, input layer first (DGL order); each a view into this sample."""
        return [self.block(layer) for layer in range(self.num_layers)]

    def _relations(self) -> torch.Tensor:
        if self.edge_types is None:
            raise ValueError("the sample is of a graph with one edge type: it has no relation blocks")
        return self.edge_types

    def relation_block(self, layer: int, relation: int) -> Block:
        """Layer `layer`'s edges of one relation (heterogeneous), as a block over the layer's local ids."""
        block = self.block(layer)
        keep = self._relations()[: block.num_edges] == relation
        dst = torch.repeat_interleave(
            torch.arange(block.num_dst), block.indptr[1:] - block.indptr[:-1], output_size=block.num_edges
        )[keep]
        indptr = torch.zeros(block.num_dst + 1, dtype=torch.int64)
        torch.cumsum(torch.bincount(dst, minlength=block.num_dst), 0, out=indptr[1:])
        return Block(indptr=indptr, indices=block.indices[keep], num_src=block.num_src, num_dst=block.num_dst)

    def relation_blocks(self, layer: int) -> list[Block]:
        """One block per relation (relation-id order) of layer `layer` (heterogeneous)."""
        self._relations()
        return [self.relation_block(layer, r) for r in range(self.num_relations)]

    def to(self, device: torch.device) -> SampledSubgraph:
        """This sample with its tensors on `device` (itself when already there)."""
        if self.indptr.device == device:
            return self
        moved = {
            name: getattr(self, name).to(device, non_blocking=True)
            for name in ("node_ids", "indptr", "indices", "edge_types", "node_types", "pairs")
            if getattr(self, name) is not None
        }
        return dataclasses.replace(self, **moved)

    def edge_index(self) -> torch.Tensor:
        """[2, num_edges] int64 of all sampled edges: row 0 source, row 1 destination local ids."""
        return _csc_edge_index(self.indptr, self.indices, self.indptr.numel() - 1)


class Sampler(Protocol):
    """What draws samples: a neighbour sampler (cpu, heterogeneous or gpu), or a link sampler over one."""

    def sample(self, seeds: torch.Tensor, /, *, seed: int) -> SampledSubgraph:
        """The sample around `seeds`, its randomness fixed by `seed`."""
        ...
