"""The output of neighbour sampling: one CSC over local ids whose layer blocks are prefixes.

Local ids number the sampled nodes in discovery order (seeds first, then each hop's new
nodes). Destinations of the CSC are the expanded nodes in local-id order and hop i's edges
follow hop i-1's, so the block a GNN layer needs is a prefix of `indptr`/`indices`: taking
it is a zero-copy view.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    """

    indptr: torch.Tensor  # int64 [num_dst + 1]
    indices: torch.Tensor  # int64 [num_edges], source local ids
    num_src: int
    num_dst: int

    @property
    def num_edges(self) -> int:
        return self.indices.numel()

    def edge_index(self) -> torch.Tensor:
        """[2, num_edges] int64: row 0 source local ids, row 1 destination (PyG convention)."""
        return _csc_edge_index(self.indptr, self.indices, self.num_dst)


@dataclass(frozen=True)
class SampledSubgraph:
    """A k-hop sample: global ids of its nodes and its edges over local ids.

    `node_ids[l]` is the global id of local node l (seeds are 0..B-1). `indptr` has one entry
    per expanded node plus one; `num_nodes_per_hop` is [B, new at hop 1, ...] (length L + 1)
    and `num_edges_per_hop` the sampled edges of each hop (length L).
    """

    node_ids: torch.Tensor  # int64 [num_nodes]
    indptr: torch.Tensor  # int64 [num_expanded + 1]
    indices: torch.Tensor  # int64 [num_edges]
    num_nodes_per_hop: list[int]
    num_edges_per_hop: list[int]

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

    def edge_index(self) -> torch.Tensor:
        """[2, num_edges] int64 of all sampled edges: row 0 source, row 1 destination local ids."""
        return _csc_edge_index(self.indptr, self.indices, self.indptr.numel() - 1)
