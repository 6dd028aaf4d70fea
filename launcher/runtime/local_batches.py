"""`LocalBatchSource`: mini-batches sampled and gathered in the trainer's own process.

For tests and for users without the daemon: the same `NeighborSampler` and `tiered_gather`
the producers run, over a `PreparedDataset` (features memory-mapped, accounted as host
rows) or an `AttachedDataset` (the daemon's shared tiers). Each epoch shuffles the train ids
identically on every rank (seeded by `seed` and the epoch) and gives rank r every
world_size-th id, padded by wrapping so all ranks run the same number of steps (as torch's
DistributedSampler does); evaluation shards are exact (no padding).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from graphtier.contract.errors import GraphtierError, PreparedDatasetError
from graphtier.service.gather import FeatureTiers, TrafficCounts, tiered_gather
from graphtier.service.graph.csc import CSCGraph
from graphtier.service.pipeline.batch import Batch
from graphtier.service.prepared import PreparedDataset
from graphtier.service.sampling import NeighborSampler, validate_fanouts
from graphtier.service.store import AttachedDataset

_MASK64 = (1 << 64) - 1
_EVAL_STREAM = 0x5EED_E7A1


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def batch_seed(seed: int, stream: int, rank: int, index: int) -> int:
    """A 64-bit sampling seed unique to (seed, epoch or eval stream, rank, batch index)."""
    word = (seed * 0x9E3779B97F4A7C15) ^ (stream * 0xBF58476D1CE4E5B9) ^ (rank * 0x94D049BB133111EB) ^ index
    return word & _MASK64


class LocalBatchSource:
    """Sampled, gathered mini-batches of one rank's shard of a dataset's splits."""

    def __init__(
        self,
        dataset: PreparedDataset | AttachedDataset,
        fanouts: Sequence[int],
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        *,
        eval_fanouts: Sequence[int] | None = None,
        device_index: int = 0,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise GraphtierError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if not (isinstance(world_size, int) and world_size >= 1 and isinstance(rank, int) and 0 <= rank < world_size):
            raise GraphtierError(
                f"need world_size >= 1 and 0 <= rank < world_size, got rank={rank!r}, world_size={world_size!r}"
            )
        self.fanouts = validate_fanouts(fanouts)
        self.eval_fanouts = validate_fanouts(eval_fanouts) if eval_fanouts is not None else list(self.fanouts)
        if len(self.eval_fanouts) != len(self.fanouts):
            raise GraphtierError(f"eval_fanouts {self.eval_fanouts} must have as many hops as fanouts {self.fanouts}")
        self.batch_size, self.rank, self.world_size, self.seed = batch_size, rank, world_size, seed
        graph, labels, self._splits, self._tiers, self.num_classes = _open(dataset, device_index)
        self.name = dataset.name if isinstance(dataset, PreparedDataset) else dataset.handle.dataset
        self._labels = labels
        self._sampler = NeighborSampler(graph, self.fanouts)
        self._eval_sampler = (
            self._sampler if self.eval_fanouts == self.fanouts else NeighborSampler(graph, self.eval_fanouts)
        )
        self.traffic = TrafficCounts(simulated=self._tiers.simulated)

    @property
    def feature_dim(self) -> int:
        return self._tiers.row_shape[0]

    def split_ids(self, split: str) -> Tensor:
        """All ids of `split` ('train', 'val' or 'test'), reordered id space."""
        if split not in self._splits:
            raise GraphtierError(f"dataset {self.name!r} has no {split!r} split; it has {sorted(self._splits)}")
        return self._splits[split]

    def train_shard(self, epoch: int) -> Tensor:
        """This rank's train ids for `epoch`, in batch order (equal length on every rank)."""
        ids = self.split_ids("train")
        n = ids.numel()
        if n == 0:
            raise GraphtierError(f"dataset {self.name!r} has no train ids to train on")
        gen = torch.Generator().manual_seed((self.seed * 1_000_003 + epoch) & (_MASK64 >> 1))
        perm = ids[torch.randperm(n, generator=gen)]
        per_rank = _ceil_div(n, self.world_size)
        positions = torch.arange(self.rank, per_rank * self.world_size, self.world_size) % n
        return perm[positions]

    def eval_shard(self, split: str) -> Tensor:
        """This rank's ids of `split`: every world_size-th id, so the shards partition the split."""
        return self.split_ids(split)[self.rank :: self.world_size]

    def num_train_batches(self) -> int:
        """Batches per epoch on this rank (the same on every rank)."""
        return _ceil_div(_ceil_div(self.split_ids("train").numel(), self.world_size), self.batch_size)

    def epoch_batches(self, epoch: int) -> Iterator[Batch]:
        """The mini-batches of `epoch` for this rank (pass `epoch_batches` to `run_training`)."""
        shard, steps = self.train_shard(epoch), self.num_train_batches()
        for index, start in enumerate(range(0, shard.numel(), self.batch_size)):
            seeds = shard[start : start + self.batch_size]
            yield self._batch(
                self._sampler,
                seeds,
                batch_seed(self.seed, epoch, self.rank, index),
                batch=epoch * steps + index,
                epoch=epoch,
                step=index,
                steps=steps,
            )

    def eval_batches(self, split: str) -> Iterator[Batch]:
        """Mini-batches over this rank's shard of `split`, sampled with `eval_fanouts`."""
        shard = self.eval_shard(split)
        steps = _ceil_div(shard.numel(), self.batch_size)
        for index, start in enumerate(range(0, shard.numel(), self.batch_size)):
            seeds = shard[start : start + self.batch_size]
            yield self._batch(
                self._eval_sampler,
                seeds,
                batch_seed(self.seed, _EVAL_STREAM, self.rank, index),
                batch=index,
                epoch=0,
                step=index,
                steps=steps,
            )

    def _batch(
        self,
        sampler: NeighborSampler,
        seeds: Tensor,
        sample_seed: int,
        *,
        batch: int,
        epoch: int,
        step: int,
        steps: int,
    ) -> Batch:
        t0 = time.perf_counter()
        sample = sampler.sample(seeds, seed=sample_seed)
        t1 = time.perf_counter()
        x = torch.empty((sample.num_nodes, *self._tiers.row_shape), dtype=self._tiers.dtype)
        traffic = tiered_gather(sample.node_ids, self._tiers, x)
        self.traffic = self.traffic + traffic
        return Batch(
            subgraph=sample,
            x=x,
            y=self._labels.index_select(0, seeds),
            traffic=traffic,
            batch=batch,
            epoch=epoch,
            step=step,
            steps_per_epoch=steps,
            sample_seed=sample_seed,
            sample_s=t1 - t0,
            gather_s=time.perf_counter() - t1,
        )


def _open(
    dataset: PreparedDataset | AttachedDataset, device_index: int
) -> tuple[CSCGraph, Tensor, dict[str, Tensor], FeatureTiers, int]:
    """(graph, labels, splits, feature tiers, num_classes) of either kind of dataset."""
    if isinstance(dataset, PreparedDataset):
        features, labels = dataset.features, dataset.labels
        if features is None or labels is None:
            raise PreparedDatasetError(
                f"dataset {dataset.name!r} needs node features and labels to train on "
                f"(features: {features is not None}, labels: {labels is not None})"
            )
        n = features.shape[0]
        tiers = FeatureTiers.from_table(features, replicated_end=0, interleaved_end=0, host_end=n, simulated=True)
        splits = {name: dataset.split(name) for name in ("train", "val", "test") if dataset.has(f"{name}_ids")}
        return dataset.graph, labels, splits, tiers, dataset.manifest.num_classes
    if isinstance(dataset, AttachedDataset):
        if dataset.labels is None or not dataset.has_features:
            raise GraphtierError(f"dataset {dataset.handle.dataset!r} needs node features and labels to train on")
        labels = dataset.labels
        num_classes = int(labels.max()) + 1 if labels.numel() else 0
        return dataset.graph, labels, dict(dataset.splits), dataset.feature_tiers(device_index), num_classes
    raise GraphtierError(f"expected a PreparedDataset or an AttachedDataset, got {type(dataset).__name__}")
