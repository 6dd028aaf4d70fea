"""PyG at its stable path: graphtier's stores and sampler for PyG's loaders (needs torch_geometric;
no pyg-lib or torch-sparse).

    from torch_geometric.loader import NeighborLoader
    from graphtier.loader import PreparedDataset
    from graphtier.pyg import GraphtierSampler, stores

    cora = PreparedDataset.open("cora")
    loader = NeighborLoader(stores(cora), num_neighbors=[25, 10], input_nodes=cora.split("train"),
                            neighbor_sampler=GraphtierSampler(cora, [25, 10]), batch_size=64)

`GraphtierNeighborLoader(data, num_neighbors, ...)` is the same loader in one call. The
implementation and its documentation are `graphtier.launcher.runtime.pyg_sampler` and
`graphtier.launcher.runtime.pyg_stores`.
"""

from __future__ import annotations

from graphtier.launcher.runtime.pyg_sampler import GraphtierNeighborLoader, GraphtierSampler
from graphtier.launcher.runtime.pyg_stores import GraphtierFeatureStore, GraphtierGraphStore, stores

__all__ = ["GraphtierFeatureStore", "GraphtierGraphStore", "GraphtierNeighborLoader", "GraphtierSampler", "stores"]
