"""Reorder a graph by descending score in O(E) torch ops (Min et al., KDD'22, section 3.2).

New id i is old node `new_to_old[i]`. Steps, all vectorised: a stable sort of the scores
gives the permutation (ties keep source order, so results are deterministic); a cumulative
sum of the permuted in-degrees gives the new `colptr`; one gather copies every neighbour
list to its new place; one more relabels the ids inside the lists.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graphtier.service.graph.csc import CSCGraph


@dataclass(frozen=True)
class Reordering:
    """A reordered graph and the permutation both ways."""

    graph: CSCGraph
    new_to_old: torch.Tensor  # int64 [N]: old id of new node i
    old_to_new: torch.Tensor  # int64 [N]: new id of old node j

    def to_new(self, old_ids: torch.Tensor) -> torch.Tensor:
        return self.old_to_new[old_ids]

    def to_old(self, new_ids: torch.Tensor) -> torch.Tensor:
        return self.new_to_old[new_ids]


def hotness_permutation(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(new_to_old, old_to_new) ordering nodes by descending score, ties by ascending old id."""
    new_to_old = torch.sort(scores, descending=True, stable=True).indices
    old_to_new = torch.empty_like(new_to_old)
    old_to_new[new_to_old] = torch.arange(new_to_old.numel())
    return new_to_old, old_to_new


def permute_csc(graph: CSCGraph, new_to_old: torch.Tensor, old_to_new: torch.Tensor) -> CSCGraph:
    """The same graph with node i of the result being node `new_to_old[i]` of `graph`."""
    old_colptr = graph.colptr
    new_in_degree = graph.in_degree()[new_to_old]
    colptr = torch.zeros_like(old_colptr)
    torch.cumsum(new_in_degree, 0, out=colptr[1:])
    row = gather_new_rows(
        graph.row, old_to_new, old_colptr[:-1][new_to_old] - colptr[:-1], new_in_degree, 0, graph.num_edges
    )
    return CSCGraph(colptr=colptr, row=row)


def gather_new_rows(
    old_row: torch.Tensor,
    old_to_new: torch.Tensor,
    start_shift: torch.Tensor,
    new_degree: torch.Tensor,
    first: int,
    last: int,
) -> torch.Tensor:
    """Entries [first, last) of the reordered `row`, for the new columns that hold exactly them:
    edge e of new column i comes from old position e + start_shift[i] (old start - new start),
    and its source is relabelled. `permute_csc` gathers every column at once; the out-of-core
    reorder gathers range after range."""
    positions = start_shift.repeat_interleave(new_degree, output_size=last - first)
    positions += torch.arange(first, last)
    # index_select rather than t[idx]: the same values, several times faster on large index arrays
    return torch.index_select(old_to_new, 0, torch.index_select(old_row, 0, positions))


def reorder_by_score(graph: CSCGraph, scores: torch.Tensor) -> Reordering:
    """Reorder `graph` so that node 0 has the highest score."""
    new_to_old, old_to_new = hotness_permutation(scores)
    return Reordering(graph=permute_csc(graph, new_to_old, old_to_new), new_to_old=new_to_old, old_to_new=old_to_new)
