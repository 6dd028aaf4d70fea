"""`TrainBatch`: what the train loop needs from a mini-batch, whoever produced it.

The daemon's producer channel (zero-copy views of a ping-pong slot) and the in-process
`LocalBatchSource` both satisfy it. `release()` is called once the optimizer step no
longer needs the batch's memory, so a producer may refill that slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from graphtier.contract.errors import GraphtierError
from graphtier.service.sampling import Block


@runtime_checkable
class TrainBatch(Protocol):
    """Blocks (input layer first), input features [blocks[0].num_src, F], seed labels [num_seeds]."""

    @property
    def blocks(self) -> list[Block]: ...

    @property
    def x(self) -> Tensor: ...

    @property
    def y(self) -> Tensor: ...

    def release(self) -> None: ...


def blocks_to(blocks: list[Block], device: torch.device) -> list[Block]:
    """The blocks with their index tensors on `device` (the same objects when already there)."""
    if all(b.indptr.device == device for b in blocks):
        return blocks
    return [
        Block(indptr=b.indptr.to(device, non_blocking=True), indices=b.indices.to(device, non_blocking=True),
              num_src=b.num_src, num_dst=b.num_dst)
        for b in blocks
    ]


@dataclass
class DeviceBatch:
    """A `TrainBatch` on the rank's device: what a training script's step reads.

    `blocks` (input layer first) and `x` [blocks[0].num_src, F] feed a block model
    `model(blocks, x)`; `edge_index` [2, E] over local ids feeds a PyG-style model
    `model(x, edge_index)[:num_seeds]`; `y` [num_seeds] holds the seeds' labels (-1 =
    unlabelled). On CPU these are zero-copy views of the producer's slot, valid until `release()`.
    """

    blocks: list[Block]
    x: Tensor
    y: Tensor
    source: TrainBatch

    @property
    def num_seeds(self) -> int:
        return self.y.numel()

    @property
    def edge_index(self) -> Tensor:
        """[2, E] int64 of every sampled edge: row 0 source, row 1 destination local ids (PyG convention)."""
        return self.blocks[0].edge_index()

    def release(self) -> None:
        self.source.release()


def to_device(batch: TrainBatch, device: torch.device) -> DeviceBatch:
    """`batch` with its blocks, features and labels on `device` (no copy when already there)."""
    return DeviceBatch(
        blocks=blocks_to(batch.blocks, device), x=batch.x.to(device, non_blocking=True),
        y=batch.y.to(device, non_blocking=True), source=batch,
    )  # fmt: skip


def seed_logits(logits: Tensor, num_seeds: int) -> Tensor:
    """The seeds' rows of a model's output: all of it from a block model, the first `num_seeds`
    rows from a model that computes every sampled node (PyG style)."""
    if logits.dim() != 2 or logits.shape[0] < num_seeds:
        raise GraphtierError(
            f"the model returned logits of shape {tuple(logits.shape)} for a batch of {num_seeds} seeds; "
            f"it must return [num_seeds or more, num_classes]"
        )
    return logits[:num_seeds]
