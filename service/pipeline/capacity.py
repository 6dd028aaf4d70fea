"""Slot capacities: estimated from a few sampled batches, bounded by the graph, grown on demand.

The worst case of a k-hop sample (B * (1 + f1 + f1*f2 + ...) nodes, 1024 * 916 ~ 0.94M at
fanout 15,10,5) is far more than batches really reach, because neighbourhoods overlap.
A producer samples its first `probes` batches, takes the largest of each size, adds a
margin, and caps it at what the graph can hold; a batch that still does not fit makes the
producer re-create that slot larger (`grow`), never truncate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from graphtier.service.pipeline.layout import SlotCapacity
from graphtier.service.sampling import SampledSubgraph


def needed(sub: SampledSubgraph) -> SlotCapacity:
    """The capacity one sample needs (at least 1 of each, as segments cannot be empty views)."""
    return SlotCapacity(
        nodes=max(sub.num_nodes, 1), edges=max(sub.num_edges, 1), expanded=max(sub.indptr.numel() - 1, 1)
    )


def upper_bound(*, batch_size: int, fanouts: Sequence[int], num_nodes: int, num_edges: int) -> SlotCapacity:
    """The most any batch can need: the k-hop tree bound, capped by the graph's size."""
    nodes, frontier, edges = batch_size, batch_size, 0
    expanded = 0
    unbounded = False
    for k in fanouts:
        expanded += frontier
        if k == -1:
            unbounded = True
            break
        frontier *= k
        edges += frontier
        nodes += frontier
    if unbounded:
        return SlotCapacity(nodes=max(num_nodes, 1), edges=max(num_edges, 1), expanded=max(num_nodes, 1))
    return SlotCapacity(
        nodes=max(min(nodes, num_nodes), 1),
        edges=max(min(edges, num_edges), 1),
        expanded=max(min(expanded, num_nodes), 1),
    )


def with_margin(largest: SlotCapacity, margin: float, limit: SlotCapacity) -> SlotCapacity:
    """`largest` times `margin`, capped at `limit`, and never below `largest`."""

    def one(seen: int, cap: int) -> int:
        return max(seen, min(math.ceil(seen * margin), cap))

    return SlotCapacity(
        nodes=one(largest.nodes, limit.nodes),
        edges=one(largest.edges, limit.edges),
        expanded=one(largest.expanded, limit.expanded),
    )


def largest(capacities: Sequence[SlotCapacity]) -> SlotCapacity:
    """Field-wise maximum."""
    return SlotCapacity(
        nodes=max(c.nodes for c in capacities),
        edges=max(c.edges for c in capacities),
        expanded=max(c.expanded for c in capacities),
    )


def grow(current: SlotCapacity, need: SlotCapacity, margin: float, limit: SlotCapacity) -> SlotCapacity:
    """A capacity that holds `need` with `margin` to spare (capped at `limit`) and never shrinks."""
    return largest([current, with_margin(need, margin, limit)])
