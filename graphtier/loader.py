"""A training script's API: its job's batches, dataset facts, progress, checkpoints and evaluation.

    import torch, torch.nn.functional as F
    import graphtier

    with graphtier.connect(dataset="cora", fanout="25,10", batch_size=64, epochs=30) as job:
        model = MyGNN(job.dataset.feature_dim, job.spec.hidden, job.dataset.num_classes)
        optimizer = torch.optim.Adam(model.parameters(), lr=job.spec.lr)
        model = job.prepare(model, optimizer)        # to job.device, resumed from a checkpoint, DDP
        for epoch in job.epochs():                   # from the resumed epoch; checkpoints at each end
            for batch in job.batches(epoch):         # blocks, x, y, edge_index on job.device
                logits = model(batch.blocks, batch.x)    # or model(batch.x, batch.edge_index)
                loss = F.cross_entropy(logits[: batch.num_seeds], batch.y)
                optimizer.zero_grad(); loss.backward(); optimizer.step()
                job.step(loss, logits)               # progress to the daemon; checkpoints when due
        print(job.evaluate(model))                   # accuracy per split, over all ranks

`connect` attaches the script to this machine's daemon, whether the daemon started it
(`graphtier job submit --script train.py`) or the user did (`torchrun --nproc-per-node 2 train.py`,
`python train.py`); either way the job's producers sample and gather into shared memory as for a
built-in model, and progress, the status page, `job status` and restarts work the same.
`job.fit(model)` runs the built-in loop instead of the script's own.

A `Batch` holds one `Block` per layer, the input rows `x` and the seeds' labels `y`; on a
heterogeneous dataset `x` is per node type, with each edge's relation and each node's type. On
the CPU its tensors are views of the producer's slot, handed back when the next batch is asked
for. `DatasetInfo` (`job.dataset`) sizes the model. Outside any job, `PreparedDataset.open(name)`
reads a prepared dataset: its graph, features, labels, splits and ids. `load_model(DIR)` rebuilds
the built-in model a job exported (`graphtier job export ID --out DIR`) with its best epoch's
weights, and `read_manifest(DIR)` says what it is (format: `graphtier.contract.jobs.artifact`).
`read_predictions(DIR)` reads an inference job's output (`graphtier job predict`) as whole arrays.
"""

from __future__ import annotations

from graphtier.contract.jobs.artifact import read_manifest
from graphtier.launcher.loader import Batch, Block, DatasetInfo, Job, connect, load_model
from graphtier.launcher.runtime.inference_output import read_output as read_predictions
from graphtier.service.prepared import PreparedDataset

# in reading order: the API reference lists them so
__all__ = [
    "connect",
    "Job",
    "DatasetInfo",
    "Batch",
    "Block",
    "PreparedDataset",
    "load_model",
    "read_manifest",
    "read_predictions",
]
