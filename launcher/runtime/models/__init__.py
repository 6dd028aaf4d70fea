"""Built-in GNNs over sampled blocks: GraphSAGE (mean), GCN and GAT.

Each is an `nn.Module` with `forward(blocks, x) -> [num_seeds, classes]` where `blocks` come
from `SampledSubgraph.blocks()` (input layer first) and `x` holds the input features of the
first block's sources. Layer l computes only block l's destination rows.
"""

from graphtier.launcher.runtime.models.base import BlockGNN, check_blocks
from graphtier.launcher.runtime.models.factory import MODEL_NAMES, ModelName, build_hetero_model, build_model
from graphtier.launcher.runtime.models.gat import GAT, GATConv
from graphtier.launcher.runtime.models.gcn import GCN, GCNConv
from graphtier.launcher.runtime.models.sage import GraphSAGE, SAGEConv

__all__ = [
    "GAT",
    "GCN",
    "MODEL_NAMES",
    "BlockGNN",
    "GATConv",
    "GCNConv",
    "GraphSAGE",
    "ModelName",
    "SAGEConv",
    "build_model",
    "build_hetero_model",
    "check_blocks",
]
