"""PyG's loaders on graphtier's stores and sampler (needs torch_geometric; no pyg-lib or torch-sparse).

    from torch_geometric.loader import NeighborLoader
    from graphtier.loader import PreparedDataset
    from graphtier.pyg import GraphtierSampler, stores

    cora = PreparedDataset.open("cora")
    loader = NeighborLoader(stores(cora), num_neighbors=[25, 10], input_nodes=cora.split("train"),
                            neighbor_sampler=GraphtierSampler(cora, [25, 10]), batch_size=64)

`GraphtierNeighborLoader(data, num_neighbors, ...)` is the same loader in one call. A heterogeneous
dataset gives `HeteroData` batches: `hetero_stores(dataset)`, `num_neighbors` per edge type,
`input_nodes=hetero_input_nodes(dataset, "train")`; `to_hetero_data` turns graphtier's own heterogeneous
sample (a heterogeneous `Batch.subgraph`) into the same `HeteroData`.

The stores are read-only and their node ids graphtier's (`PreparedDataset.source_ids` maps them
to the source's); on a heterogeneous dataset each node type numbers its own nodes from 0 (`source_ids`
here maps them). Sampling is graphtier's uniform k-hop sampling without replacement, with
`NeighborLoader`'s hop semantics: seeds first in `n_id`, then each hop's new nodes. Sample seeds
come from torch's global RNG, so `torch.manual_seed` makes runs repeatable.
"""

from __future__ import annotations

from graphtier.launcher.runtime.pyg_hetero import (
    GraphtierHeteroFeatureStore,
    GraphtierHeteroGraphStore,
    hetero_input_nodes,
    hetero_stores,
    source_ids,
    to_hetero_data,
)
from graphtier.launcher.runtime.pyg_sampler import GraphtierNeighborLoader, GraphtierSampler
from graphtier.launcher.runtime.pyg_stores import GraphtierFeatureStore, GraphtierGraphStore, stores

# in reading order: the API reference lists them so
__all__ = [
    "GraphtierNeighborLoader",
    "GraphtierSampler",
    "stores",
    "GraphtierFeatureStore",
    "GraphtierGraphStore",
    "hetero_stores",
    "hetero_input_nodes",
    "source_ids",
    "to_hetero_data",
    "GraphtierHeteroFeatureStore",
    "GraphtierHeteroGraphStore",
]
