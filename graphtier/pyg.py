"""PyG at its stable path: graphtier's stores and sampler for PyG's loaders (needs torch_geometric;
no pyg-lib or torch-sparse).

    from torch_geometric.loader import NeighborLoader
    from graphtier.loader import PreparedDataset
    from graphtier.pyg import GraphtierSampler, stores

    cora = PreparedDataset.open("cora")
    loader = NeighborLoader(stores(cora), num_neighbors=[25, 10], input_nodes=cora.split("train"),
                            neighbor_sampler=GraphtierSampler(cora, [25, 10]), batch_size=64)

`GraphtierNeighborLoader(data, num_neighbors, ...)` is the same loader in one call. A typed
dataset gives `HeteroData` batches: `hetero_stores(dataset)`, `num_neighbors` per edge type,
`input_nodes=typed_input_nodes(dataset, "train")`; `to_hetero_data` turns graphtier's own typed
sample (a heterogeneous `Batch.subgraph`) into the same `HeteroData`. The
implementation and its documentation are `graphtier.launcher.runtime.pyg_sampler` and
`graphtier.launcher.runtime.pyg_stores` and `graphtier.launcher.runtime.pyg_hetero`.
"""

from __future__ import annotations

from graphtier.launcher.runtime.pyg_hetero import (
    GraphtierHeteroFeatureStore,
    GraphtierHeteroGraphStore,
    hetero_stores,
    source_ids,
    to_hetero_data,
    typed_input_nodes,
)
from graphtier.launcher.runtime.pyg_sampler import GraphtierNeighborLoader, GraphtierSampler
from graphtier.launcher.runtime.pyg_stores import GraphtierFeatureStore, GraphtierGraphStore, stores

__all__ = [
    "GraphtierFeatureStore",
    "GraphtierGraphStore",
    "GraphtierHeteroFeatureStore",
    "GraphtierHeteroGraphStore",
    "GraphtierNeighborLoader",
    "GraphtierSampler",
    "hetero_stores",
    "source_ids",
    "stores",
    "to_hetero_data",
    "typed_input_nodes",
]
