"""`Batch`: one mini-batch as zero-copy views into a producer's slot."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from graphtier.contract.traffic import TrafficCounts
from graphtier.service.sampling import Block, SampledSubgraph


@dataclass
class Batch:
    """A sampled batch; every tensor is a read-only view of slot `slot` (nothing was copied).

    The views are valid until `release()` (explicit, at the end of a `with` block, or when
    the reader is asked for the next batch with auto-release on): after that the producer
    may overwrite the slot, so clone anything that must outlive the step. The mappings are
    read-only: an in-place write into them faults (clone first, e.g. `features.clone()`).
    """

    slot: int
    batch: int  # running number over all epochs, from 0
    epoch: int
    step: int  # index within the epoch, from 0
    steps_per_epoch: int
    subgraph: SampledSubgraph  # node_ids, indptr, indices and hop sizes
    features: torch.Tensor | None  # [num_nodes, *row_shape], rows of subgraph.node_ids
    labels: torch.Tensor  # int64 [num_seeds]; -1 for unlabelled seeds
    sample_seed: int
    sample_s: float
    gather_s: float
    wait_s: float  # how long the consumer waited for this batch
    traffic: TrafficCounts
    _release: Callable[[Batch], None] = field(repr=False)
    released: bool = False

    @property
    def node_ids(self) -> torch.Tensor:
        return self.subgraph.node_ids

    @property
    def num_seeds(self) -> int:
        return self.subgraph.num_seeds

    @property
    def seeds(self) -> torch.Tensor:
        """Global ids of the seeds (the first `num_seeds` node ids)."""
        return self.subgraph.node_ids[: self.num_seeds]

    @property
    def is_last_in_epoch(self) -> bool:
        return self.step == self.steps_per_epoch - 1

    def blocks(self) -> list[Block]:
        """Per-layer blocks, input layer first; views into the slot."""
        return self.subgraph.blocks()

    def release(self) -> None:
        """Give the slot back to the producer; idempotent."""
        if not self.released:
            self._release(self)

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
