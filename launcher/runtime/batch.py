"""`TrainBatch`: what the train loop needs from a mini-batch, whoever produced it.

The daemon's producer channel (zero-copy views of a ping-pong slot) and the in-process
`LocalBatchSource` both satisfy it. `release()` is called once the optimizer step no
longer needs the batch's memory, so a producer may refill that slot.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

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
