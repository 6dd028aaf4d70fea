"""Pure-torch neighbour sampling with exactly the native op's output (the fallback and oracle).

Vectorised per hop: CSC ranges of the whole frontier at once, Robert Floyd's algorithm run
as k rounds of tensor ops across all frontier nodes with more than k in-neighbours, and a
first-occurrence relabel through the node map. Same counter-based draws as the C++ op, so
outputs are identical for the same seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from graphtier.service.sampling.counter_rng import node_keys, uniform_below

SampleTensors = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def floyd_offsets(keys: torch.Tensor, degrees: torch.Tensor, k: int) -> torch.Tensor:
    """k distinct offsets in [0, degree) per row (Floyd's algorithm), sorted: int64 [M, k].

    Round i draws t in [0, j + 1) with j = degree - k + i and keeps t unless already chosen,
    in which case it keeps j; every k-subset comes out with equal probability.
    """
    chosen = torch.empty(keys.numel(), k, dtype=torch.int64)
    for i in range(k):
        j = degrees - k + i
        t = uniform_below(keys, i, j + 1)
        if i:
            t = torch.where((chosen[:, :i] == t.unsqueeze(1)).any(dim=1), j, t)
        chosen[:, i] = t
    return chosen.sort(dim=1).values


def _relabel(nbr: torch.Tensor, node_map: torch.Tensor, next_local: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Local ids of `nbr`, giving unseen nodes ids from `next_local` in first-occurrence order."""
    local = node_map[nbr].to(torch.int64)
    unseen = local < 0
    cand = nbr[unseen]
    if cand.numel() == 0:
        return local, cand
    uniq, inverse = torch.unique(cand, return_inverse=True)
    first = torch.full((uniq.numel(),), cand.numel(), dtype=torch.int64)
    first.scatter_reduce_(0, inverse, torch.arange(cand.numel()), reduce="amin")
    new_nodes = uniq[torch.argsort(first)]
    node_map[new_nodes] = torch.arange(next_local, next_local + new_nodes.numel(), dtype=node_map.dtype)
    local[unseen] = node_map[cand].to(torch.int64)
    return local, new_nodes


def sample_neighbors_torch(
    colptr: torch.Tensor,
    row: torch.Tensor,
    seeds: torch.Tensor,
    fanouts: Sequence[int],
    seed: int,
    node_map: torch.Tensor,
) -> SampleTensors:
    """Same contract as `torch.ops.graphtier.sample_neighbors`; seeds must be unique and in range.

    Returns (node_ids, indptr, indices, num_nodes_per_hop, num_edges_per_hop) and leaves
    `node_map` all -1 again, also on error.
    """
    batch = seeds.numel()
    node_map[seeds] = torch.arange(batch, dtype=node_map.dtype)
    chunks, indptr_parts, index_parts = [seeds], [torch.zeros(1, dtype=torch.int64)], []
    nodes_per_hop, edges_per_hop = [batch], []
    frontier, first_local, next_local, edge_base = seeds, 0, batch, 0
    try:
        for k in fanouts:
            start = colptr[frontier]
            degree = colptr[frontier + 1] - start
            count = degree if k < 0 else degree.clamp(max=k)
            ends = torch.cumsum(count, 0)
            total = int(ends[-1]) if ends.numel() else 0
            begin = ends - count
            owner = torch.repeat_interleave(torch.arange(frontier.numel()), count, output_size=total)
            offsets = start[owner] + torch.arange(total) - begin[owner]
            if k > 0:
                big = (degree > k).nonzero().squeeze(1)
                if big.numel():
                    chosen = floyd_offsets(node_keys(seed, big + first_local), degree[big], k)
                    slots = (begin[big].unsqueeze(1) + torch.arange(k)).reshape(-1)
                    offsets[slots] = (start[big].unsqueeze(1) + chosen).reshape(-1)
            local, new_nodes = _relabel(row[offsets], node_map, next_local)
            index_parts.append(local)
            indptr_parts.append(ends + edge_base)
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
    indices = torch.cat(index_parts) if index_parts else torch.empty(0, dtype=torch.int64)
    return (
        node_ids,
        torch.cat(indptr_parts),
        indices,
        torch.tensor(nodes_per_hop, dtype=torch.int64),
        torch.tensor(edges_per_hop, dtype=torch.int64),
    )
