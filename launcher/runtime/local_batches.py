"""`LocalBatchSource`: mini-batches sampled and gathered in the trainer's own process.

For tests and for users without the daemon: the same `NeighborSampler` and `tiered_gather`
the producers run, over a `PreparedDataset` (features memory-mapped, accounted as host
rows) or an `AttachedDataset` (the daemon's shared tiers). Its epochs follow the job's
`EpochPlan` (graphtier.service.pipeline.epoch_plan), the rule the producers follow: for the
same seed, epoch, rank and step it draws the batch a producer draws. Evaluation shards are
exact (every world_size-th id of a split).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from functools import cached_property

import torch
from torch import Tensor

from graphtier.contract.errors import GraphtierError, PreparedDatasetError, SamplingError
from graphtier.contract.fanouts import validate_fanouts
from graphtier.service.gather import FeatureTiers, TrafficCounts, tiered_gather
from graphtier.service.graph.csc import CSCGraph
from graphtier.service.pipeline.batch import Batch
from graphtier.service.pipeline.epoch_plan import (
    EpochPlan,
    SeedBatch,
    check_batch_size,
    check_rank,
    eval_batches,
    eval_shard,
)
from graphtier.service.prepared import PreparedDataset
from graphtier.service.sampling import NeighborSampler
from graphtier.service.store import AttachedDataset


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
        check_batch_size(batch_size)
        check_rank(rank, world_size)
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

    @cached_property
    def plan(self) -> EpochPlan:
        """This rank's epoch plan over the train ids (made when first needed: evaluation needs none)."""
        train = self.split_ids("train").numel()
        try:
            return EpochPlan(train, self.batch_size, self.seed, self.rank, self.world_size, unit="train ids")
        except SamplingError as exc:
            raise SamplingError(f"dataset {self.name!r}: {exc}") from None

    def train_shard(self, epoch: int) -> Tensor:
        """This rank's train ids for `epoch`, in batch order (equal length on every rank)."""
        return self.plan.shard(self.split_ids("train"), epoch)

    def eval_shard(self, split: str) -> Tensor:
        """This rank's ids of `split`: every world_size-th id, so the shards partition the split."""
        return eval_shard(self.split_ids(split), rank=self.rank, world_size=self.world_size)

    def num_train_batches(self) -> int:
        """Batches per epoch on this rank (the same on every rank)."""
        return self.plan.steps_per_epoch

    def epoch_batches(self, epoch: int) -> Iterator[Batch]:
        """The mini-batches of `epoch` for this rank (pass `epoch_batches` to `run_training`)."""
        steps = self.plan.steps_per_epoch
        for planned in self.plan.batches(self.split_ids("train"), epoch):
            yield self._batch(self._sampler, planned, batch=epoch * steps + planned.step, epoch=epoch, steps=steps)

    def eval_batches(self, split: str) -> Iterator[Batch]:
        """Mini-batches over this rank's shard of `split`, sampled with `eval_fanouts`."""
        ids = self.split_ids(split)
        planned = list(eval_batches(ids, self.batch_size, seed=self.seed, rank=self.rank, world_size=self.world_size))
        for one in planned:
            yield self._batch(self._eval_sampler, one, batch=one.step, epoch=0, steps=len(planned))

    def _batch(self, sampler: NeighborSampler, planned: SeedBatch, *, batch: int, epoch: int, steps: int) -> Batch:
        seeds, sample_seed = planned.seeds, planned.sample_seed
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
            step=planned.step,
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
