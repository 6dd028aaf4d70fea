"""The train loop's view of a mini-batch: `Batch` (graphtier.service.pipeline.batch), read out of
the producer channel or sampled in-process by `LocalBatchSource`; `on_device(batch, device)` has
it on the rank's device: a channel batch already is,
in its slot, and is never copied. `release()` is called once the optimizer step no longer needs
the batch's memory, so a producer may refill that slot.
"""

from __future__ import annotations

import torch
from torch import Tensor

from graphtier.contract.errors import GraphtierError
from graphtier.service.pipeline.batch import Batch, blocks_to

__all__ = ["Batch", "blocks_to", "on_device", "seed_logits"]


def on_device(batch: Batch, device: torch.device) -> Batch:
    """`batch` ready to train on `device`. A batch read out of a producer's slot is used where it
    lies, never copied: its slot is on the rank's device (a device slot for a cuda job, a host slot
    for a cpu job), and a batch elsewhere means the job's producer and rank disagree, which is an
    error, not a silent copy per step. A batch sampled in-process is moved."""
    if batch.slot is None:
        return batch.to(device)
    where = batch.y.device  # every region of a slot is on its device; labels always exist
    if where.type != device.type or (device.index is not None and where.index != device.index):
        raise GraphtierError(
            f"batch {batch.batch} lies in a slot on {where} but this rank trains on {device}: the producer must "
            "fill slots on the rank's device (a --device cuda job gets device slots on cuda:LOCAL_RANK)"
        )
    return batch


def seed_logits(logits: Tensor, num_seeds: int) -> Tensor:
    """The seeds' rows of a model's output: all of it from a block model, the first `num_seeds`
    rows from a model that computes every sampled node (PyG style)."""
    if logits.dim() != 2 or logits.shape[0] < num_seeds:
        raise GraphtierError(
            f"the model returned logits of shape {tuple(logits.shape)} for a batch of {num_seeds} seeds; "
            f"it must return [num_seeds or more, num_classes]"
        )
    return logits[:num_seeds]
