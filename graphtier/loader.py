"""The training script's API, at its stable path: `graphtier.loader`.

    import graphtier
    with graphtier.connect(dataset="cora", fanout="25,10", batch_size=64, epochs=30) as job:
        ...                                  # job.batches(epoch): blocks, x, y on job.device

`connect` attaches the script to this machine's daemon, whether the daemon started it
(`graphtier job submit --script train.py`) or the user did (`torchrun --nproc-per-node 2 train.py`,
`python train.py`). `Job`, `DatasetInfo`, `Batch` (on a heterogeneous dataset: `x` per
node type, `edge_types`, `relation_blocks(layer)`) and `Block` are what it hands out; the
implementation and its full documentation are `graphtier.launcher.loader`. Outside any job,
`PreparedDataset.open("cora")` opens a prepared dataset (under $GRAPHTIER_HOME/datasets) for
reading: its graph, features, labels, splits and `new_to_old`.
"""

from __future__ import annotations

from graphtier.launcher.loader import Batch, Block, DatasetInfo, Job, connect
from graphtier.service.prepared import PreparedDataset

__all__ = ["Batch", "Block", "DatasetInfo", "Job", "PreparedDataset", "connect"]
