"""Small random graphs for the sampling tests (a plain module so tests can import it)."""

from __future__ import annotations

import torch

from graphtier.service.graph.csc import CSCGraph, build_csc


def random_graph(num_nodes: int, num_edges: int, seed: int, *, isolated: int = 0) -> CSCGraph:
    """Random directed multigraph (deduplicated); the last `isolated` nodes get no edges at all."""
    g = torch.Generator().manual_seed(seed)
    live = num_nodes - isolated
    # skewed sources so some nodes have large in-degree and some small
    src = (torch.rand(num_edges, generator=g) ** 2 * live).long()
    dst = torch.randint(0, live, (num_edges,), generator=g)
    hub = (torch.rand(num_edges, generator=g) ** 3 * live).long()
    dst = torch.where(torch.rand(num_edges, generator=g) < 0.3, hub, dst)
    return build_csc(num_nodes, src, dst)
