"""Neighbour means of featureless node types, computed once when a heterogeneous dataset is prepared.

For a node type without features and each relation joining it to a featured type (either direction;
a reverse relation prepare added is the same edges, so only the relation as the source gives it
counts), the mean of the featured neighbours' feature rows over that relation's edges: one
`[count, feature_dim]` float32 array per (type, relation), rows in the type's prepared order. A node
no edge of the relation reaches gets a zero row. A job with `featureless_init neighbour-mean` starts
the type's input from them (`launcher/runtime/models/featureless.py`). With an edge split, the means
are taken over the training graph only: validation and test edges have left it before.
"""

from __future__ import annotations

import torch

from graphtier.contract.hetero import NeighbourMean
from graphtier.service.graph.hetero_data import HeteroGraphData


def neighbour_mean_array_name(node_type: str, relation_key: str) -> str:
    """The array of `node_type`'s means over the relation `relation_key`."""
    return f"neighbour_mean.{node_type}.{relation_key}"


def compute_neighbour_means(data: HeteroGraphData) -> dict[str, list[tuple[NeighbourMean, torch.Tensor]]]:
    """Per featureless type, (what, rows in the source's order) for each relation to a featured type."""
    means: dict[str, list[tuple[NeighbourMean, torch.Tensor]]] = {}
    for rel in data.relations:
        if rel.reverse_of is not None or rel.head == rel.tail:
            continue
        for own, other, own_ids, other_ids in (
            (rel.tail, rel.head, rel.dst, rel.src),
            (rel.head, rel.tail, rel.src, rel.dst),
        ):
            if own in data.features or other not in data.features:
                continue
            features = data.features[other]
            count = data.num_nodes[own]
            sums = torch.zeros(count, features.shape[1], dtype=torch.float64)
            sums.index_add_(0, own_ids, features.index_select(0, other_ids).to(torch.float64))
            degree = torch.bincount(own_ids, minlength=count).clamp(min=1).to(torch.float64)
            rows = (sums / degree.unsqueeze(1)).to(torch.float32)
            info = NeighbourMean(
                relation=rel.key,
                source_type=other,
                feature_dim=int(features.shape[1]),
                array=neighbour_mean_array_name(own, rel.key),
            )
            means.setdefault(own, []).append((info, rows))
    return means
