"""A whole mini-batch made on one GPU stream: sample, then gather, no host round trip between.

`DeviceBatchMaker(sampler, gather).make(seeds, seed=..., out=...)` enqueues the GPU sampler's hops
and then the tiered gather of the sampled nodes' rows on one stream (the maker's own, or the
caller's current one), so the gather waits for the sampler by stream order alone and the sampled
ids stay on the device: they are the gather's input (`CudaGather.gather_device`) as the sampler
left them. What reaches the host: the sampler's two sizes per hop (its outputs are sized by them)
and, only when the plan has a storage tier, the storage rows' ids (they are staged from a file).
The per-source counts stay on the device until `CudaGather.take_counts`.

The producer of a `--sampler gpu` job calls it with its device slot's feature rows as `out`; the
CPU test suite runs it with the sampler's and the gather's kernels emulated on the CPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Protocol

import torch

from graphtier.contract.errors import GraphtierError
from graphtier.service.gpu.gather import CudaGather
from graphtier.service.sampling.subgraph import SampledSubgraph


class DeviceSampler(Protocol):
    """A sampler whose subgraphs are on the device it runs on (`CudaNeighborSampler`)."""

    def sample(self, seeds: torch.Tensor, *, seed: int) -> SampledSubgraph: ...


class DeviceBatchMaker:
    """Samples and gathers batches on one stream of the gather's device; one per producer thread.

    `stream`: where both run (None: the caller's current stream, e.g. a slot's stream)."""

    def __init__(self, sampler: DeviceSampler, gather: CudaGather, *, stream: torch.cuda.Stream | None = None) -> None:
        self.sampler = sampler
        self.gather = gather
        self.device = gather.tiers.device
        if stream is not None and self.device.type == "cuda" and stream.device != self.device:
            raise GraphtierError(f"the batch stream is on {stream.device}, the gather's tiers on {self.device}")
        self.stream = stream

    @contextlib.contextmanager
    def _on_stream(self) -> Iterator[None]:
        if self.stream is None or self.device.type != "cuda":
            yield
            return
        with torch.cuda.stream(self.stream):
            yield

    def make(
        self, seeds: torch.Tensor, *, seed: int, out: torch.Tensor | Callable[[SampledSubgraph], torch.Tensor]
    ) -> SampledSubgraph:
        """Sample around `seeds` and gather the sampled nodes' rows into out[:num_nodes], both
        enqueued on the one stream; the subgraph's tensors are on the device. `out` may be a
        function of the sampled subgraph returning the rows to fill, called on the stream between
        the sampling and the gather (a producer takes, sizes and orders its slot there, once the
        batch's sizes are known). GraphtierError when `out` cannot hold the batch's rows."""
        with self._on_stream():
            sub = self.sampler.sample(seeds, seed=seed)
            if sub.node_ids.device != self.device:
                raise GraphtierError(
                    f"the sampler left its node ids on {sub.node_ids.device}, not on the gather's {self.device}"
                )
            if callable(out):
                out = out(sub)
            if out.shape[0] < sub.node_ids.numel():
                raise GraphtierError(
                    f"the batch has {sub.node_ids.numel()} nodes but out holds {out.shape[0]} rows; "
                    "size it for the sampler's largest batch"
                )
            self.gather.gather_device(sub.node_ids, out)
        return sub
