"""Compressed sparse column (CSC) structure: in-neighbour lists per destination node.

`colptr[v]:colptr[v+1]` indexes `row`, the sources u of edges u -> v. This is the layout
the sampler walks (it expands v by picking among its in-neighbours) and the one PyG's
`NeighborLoader` and DGL's blocks use.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CSCGraph:
    """In-neighbour lists of `num_nodes` nodes."""

    colptr: torch.Tensor  # int64 [num_nodes + 1]
    row: torch.Tensor  # int64 [num_edges]

    @property
    def num_nodes(self) -> int:
        return self.colptr.numel() - 1

    @property
    def num_edges(self) -> int:
        return self.row.numel()

    def in_degree(self) -> torch.Tensor:
        return self.colptr[1:] - self.colptr[:-1]

    def out_degree(self) -> torch.Tensor:
        return torch.bincount(self.row, minlength=self.num_nodes)

    def column_chunks(self, max_edges: int | None = None) -> Iterator[tuple[int, int, torch.Tensor]]:
        """(v0, v1, sources of columns v0..v1-1): here the whole graph at once; an on-disk CSC
        (`out_of_core.external_sort.DiskCSC`) yields column ranges that fit its memory budget."""
        yield 0, self.num_nodes, self.row

    def dst_of_edges(self) -> torch.Tensor:
        """The destination of every edge, aligned with `row` (O(E) memory)."""
        return torch.repeat_interleave(torch.arange(self.num_nodes), self.in_degree())


def build_csc(
    num_nodes: int,
    src: torch.Tensor,
    dst: torch.Tensor,
    *,
    undirected: bool = False,
    drop_self_loops: bool = False,
) -> CSCGraph:
    """Build a deduplicated CSC from an edge list in O(E log E) torch ops.

    `undirected` adds every reverse edge first. Duplicate edges collapse to one.
    """
    if undirected:
        src, dst = torch.cat([src, dst]), torch.cat([dst, src])
    if drop_self_loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    key = torch.unique(dst * num_nodes + src, sorted=True)
    dst_sorted = key // num_nodes
    row = key - dst_sorted * num_nodes
    colptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
    colptr[1:] = torch.cumsum(torch.bincount(dst_sorted, minlength=num_nodes), 0)
    return CSCGraph(colptr=colptr, row=row)
