"""How a batch is written into its slot: the one step both kinds of producer share.

- `write_structure`: a sampled subgraph's node ids, indptr and indices and its seeds' labels into a
  slot, copied on the slot's device (host to host, host to device, or device to device).
- `DeviceSlotBatches`: a `--sampler gpu` producer's batches on one GPU stream. The GPU sampler's
  hops, then (once the batch's sizes are known) the slot taken, ordered after the rank's reads and
  sized, the subgraph copied into it device to device, the seeds' labels gathered from a device
  copy of the labels, and the tiered gather of the sampled node ids straight into the slot's
  feature rows (`DeviceBatchMaker`). The host reads only the sampler's sizes per hop; the rows per
  tier stay on the device until `take_traffic`, called at the reporting interval.

The CPU test suite drives `DeviceSlotBatches` with the sampler's and the gather's kernels emulated
over CPU tensors and host slots, and compares every region with the CPU producer's.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from graphtier.contract.traffic import TrafficCounts
from graphtier.service.gpu.batch_stream import DeviceBatchMaker, DeviceSampler
from graphtier.service.gpu.gather import CudaGather
from graphtier.service.pipeline.slots import SlotViews
from graphtier.service.sampling import SampledSubgraph


def write_structure(views: SlotViews, sub: SampledSubgraph, labels: torch.Tensor | None, num_seeds: int) -> None:
    """`sub`'s node ids, indptr and indices into slot `views`, and the labels of its seeds (its first
    `num_seeds` node ids) from `labels` (int64, on any device; None: -1)."""
    nodes, edges, expanded = sub.num_nodes, sub.num_edges, sub.indptr.numel() - 1
    views.node_ids[:nodes].copy_(sub.node_ids)
    views.indptr[: expanded + 1].copy_(sub.indptr)
    views.indices[:edges].copy_(sub.indices)
    out = views.labels[:num_seeds]
    if labels is None:
        out.fill_(-1)
    elif labels.device == out.device:
        torch.index_select(labels, 0, sub.node_ids[:num_seeds].to(labels.device), out=out)
    else:
        out.copy_(labels.index_select(0, sub.node_ids[:num_seeds].to(labels.device)))


class DeviceSlotBatches:
    """Samples and gathers each batch on one stream of the GPU straight into a device slot.

    `sampler` leaves its subgraphs on the GPU (`CudaNeighborSampler`); `gather` is the producer's
    tiered gather on the same GPU (None: the dataset has no features); `labels` the dataset's
    labels on that GPU (None: it has none). One per producer (the sampler's node map and the
    gather's buffers are its own)."""

    def __init__(self, sampler: DeviceSampler, gather: CudaGather | None, labels: torch.Tensor | None) -> None:
        self.sampler = sampler
        self.maker = DeviceBatchMaker(sampler, gather) if gather is not None else None
        self.labels = labels

    def make(
        self, seeds: torch.Tensor, *, seed: int, into: Callable[[SampledSubgraph], SlotViews]
    ) -> tuple[SampledSubgraph, SlotViews]:
        """Sample around `seeds` with `seed`, then write the batch into the slot `into(subgraph)`
        returns (called once the sizes are known, before anything is written: it takes, orders and
        sizes the slot). Everything is enqueued on the current stream; nothing waits for it."""
        placed: list[SlotViews] = []
        num_seeds = seeds.numel()

        def fill(sub: SampledSubgraph) -> torch.Tensor:
            views = into(sub)
            placed.append(views)
            write_structure(views, sub, self.labels, num_seeds)
            assert views.features is not None  # a slot has feature rows when the producer has a gather
            return views.features

        if self.maker is not None:
            sub = self.maker.make(seeds, seed=seed, out=fill)
        else:
            sub = self.sampler.sample(seeds, seed=seed)
            views = into(sub)
            placed.append(views)
            write_structure(views, sub, self.labels, num_seeds)
        return sub, placed[0]

    def take_traffic(self) -> TrafficCounts | None:
        """The rows per tier gathered since the last call, read back from the device once (it waits
        for the batches enqueued on the current stream); None without features."""
        return self.maker.gather.take_counts() if self.maker is not None else None
